"""A minimal memory task: recall a cue shown once, ``delay`` steps later.

``CueMemory`` (registered as ``rlfunc/CueMemory-v0`` on ``import rlfunc.envs``):

* on reset one of ``num_cues`` cues is drawn (from the env's seeded
  ``np_random``) and shown as a one-hot in the first observation only;
* the next ``delay`` observations are blank (the cue entries are 0);
* the observation after those, at step ``delay``, sets a "query" flag (last
  entry 1); the action taken there is judged: reward ``+1`` if it equals the
  cue, ``wrong_reward`` (default ``-1``) otherwise, and the episode terminates.
  Actions at earlier steps are ignored (reward 0).

An episode is ``delay + 1`` steps. A memory-less policy cannot beat chance
(expected return 0 with the default rewards); a recurrent one that keeps the
cue for ``delay`` steps gets +1. With ``delay = 0`` there is nothing to
remember (the cue and the query come together), a useful sanity check.
This is the cue-recall task of FIDELITY.md's DRQN notes (a T-maze without the
corridor, Bakker 2002).
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

__all__ = ["CueMemory", "ENV_ID"]

ENV_ID = "rlfunc/CueMemory-v0"


class CueMemory(gym.Env):
    """Cue at step 0, ``delay`` blank steps, then act on the cue (see module doc).

    Observation: ``Box(0, 1, (num_cues + 1,))`` = one-hot cue (step 0 only)
    plus the query flag (step ``delay`` only). Action: ``Discrete(num_cues)``.
    """

    metadata = {"render_modes": []}

    def __init__(self, delay: int = 5, num_cues: int = 2, wrong_reward: float = -1.0) -> None:
        if int(delay) != delay or delay < 0:
            raise ValueError(f"CueMemory delay must be a non-negative integer, got {delay}.")
        if int(num_cues) != num_cues or num_cues < 2:
            raise ValueError(f"CueMemory needs at least 2 cues, got num_cues={num_cues}.")
        self.delay = int(delay)
        self.num_cues = int(num_cues)
        self.wrong_reward = float(wrong_reward)
        self.observation_space = gym.spaces.Box(0.0, 1.0, (self.num_cues + 1,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.num_cues)
        self._cue = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 1, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
        if self._t == self.delay:
            obs[-1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.num_cues))
        self._t = 0
        return self._obs(), {"cue": self._cue}

    def step(self, action):
        if self._t > self.delay:
            raise RuntimeError("CueMemory episode is over; call reset() before step().")
        if self._t == self.delay:
            correct = int(action) == self._cue
            self._t += 1
            obs = np.zeros(self.num_cues + 1, dtype=np.float32)
            return obs, (1.0 if correct else self.wrong_reward), True, False, {"cue": self._cue, "correct": correct}
        self._t += 1
        return self._obs(), 0.0, False, False, {"cue": self._cue}


def register() -> None:
    """Register ``rlfunc/CueMemory-v0`` (idempotent)."""
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="rlfunc.envs.memory:CueMemory", kwargs={"delay": 5})


register()
