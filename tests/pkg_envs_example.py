"""A stand-in for a third-party gymnasium package: importing it registers ``PkgReach-v0`` (and
``PkgReachBox-v0``, the same task with a flat ``Box`` observation).

Used as ``env.id: pkg_envs_example:PkgReach-v0`` (gymnasium's ``module:env-id`` form) by
tests/test_env_packages.py, the way a user's own module or a package such as panda-gym is.
Its observation is a ``Dict`` with a ``Discrete`` part, so it needs the ``flatten`` wrapper, and
it has no time limit of its own (the ``time_limit`` wrapper gives it one).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

class PkgReach(gym.Env):
    """Move a point on [-1, 1] to one of three targets (-0.5, 0, 0.5) told as a ``Discrete`` index.

    ``obs = {"position": Box(1), "target": Discrete(3)}``; action ``Box([-2, 2], (1,))`` moves the
    point by ``0.1 * action``; reward ``-|position - target| * 10`` (clipped by the configs' ``clip_reward``);
    terminates when within 0.05 of the target.
    """

    metadata = {"render_modes": []}
    TARGETS = (-0.5, 0.0, 0.5)

    def __init__(self, flat: bool = False) -> None:
        self.flat = flat
        self.observation_space = gym.spaces.Dict(
            {"position": gym.spaces.Box(-1.0, 1.0, (1,), np.float32), "target": gym.spaces.Discrete(3)}
        )
        if flat:
            self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self._pos = np.zeros(1, np.float32)
        self._target = 0

    def _obs(self):
        if self.flat:
            return np.array([self._pos[0], self.TARGETS[self._target]], np.float32)
        return {"position": self._pos.copy(), "target": self._target}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self._pos = self.np_random.uniform(-1.0, 1.0, (1,)).astype(np.float32)
        self._target = int(self.np_random.integers(3))
        return self._obs(), {}

    def step(self, action):
        a = float(np.clip(np.asarray(action, dtype=np.float32).reshape(-1)[0], -2.0, 2.0))
        self._pos = np.clip(self._pos + 0.1 * a, -1.0, 1.0).astype(np.float32)
        dist = abs(float(self._pos[0]) - self.TARGETS[self._target])
        return self._obs(), -10.0 * dist, dist < 0.05, False, {}


if "PkgReach-v0" not in gym.registry:
    gym.register("PkgReach-v0", entry_point=PkgReach)
if "PkgReachBox-v0" not in gym.registry:
    gym.register("PkgReachBox-v0", entry_point=PkgReach, kwargs={"flat": True}, max_episode_steps=50)


class ScaleReward(gym.RewardWrapper):
    """A user's own wrapper, named in a config as ``pkg_envs_example:ScaleReward``."""

    def __init__(self, env: gym.Env, factor: float = 1.0, offset: float = 0.0) -> None:
        super().__init__(env)
        self.factor, self.offset = factor, offset

    def reward(self, reward):
        return self.factor * reward + self.offset
