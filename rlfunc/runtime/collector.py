"""Environment stepping that stores only valid transitions.

Two rules from DESIGN.md are enforced here:

* *terminated is not truncated*: each stored transition carries
  ``terminated`` (no bootstrap) and ``truncated`` (time limit: bootstrap from
  ``next_obs``) separately;
* gymnasium vector envs autoreset on the *next* ``step`` call by default
  (``AutoresetMode.NEXT_STEP``): the step after an episode ended returns the
  first observation of a new episode and ignores the action. That step is not
  a transition and is never stored.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["Collector"]


def _own(obs: Any) -> np.ndarray:
    """A copy of one env's observation with a leading env axis ``[1, ...]``.

    Gymnasium lets an env return the same array every step, updated in place;
    without a copy ``obs`` and ``next_obs`` of a stored row would be one buffer
    (``SyncVectorEnv`` copies for the same reason: its ``copy=True`` default).
    """
    return np.array(obs, copy=True)[None]


def _vector_copies(env: gym.vector.VectorEnv) -> bool:
    """Whether ``env`` hands out a fresh observation array at every ``reset``/``step``.

    Gymnasium's vector envs do with their default ``copy=True``; with ``copy=False`` they return
    one buffer that the next ``step`` overwrites in place, so the observation a row was stepped
    from would read the next one (the collector then copies). A vector env that does not say
    (no ``copy`` attribute) is copied too.
    """
    return getattr(env.unwrapped, "copy", False) is True


def _as_tensor(x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    t = torch.as_tensor(np.asarray(x))
    if dtype is not None:
        t = t.to(dtype)
    elif t.dtype == torch.float64:
        t = t.to(torch.float32)
    return t


class Collector:
    """Steps a single env or a gymnasium vector env and returns stored rows.

    ``step(actions)`` takes actions for every env (``[num_envs, ...]``) and
    returns ``(rows, finished)``: ``rows`` a TensorDict ``[k]`` of valid
    transitions (``obs, action, reward, next_obs, terminated, truncated,
    env_id``), ``finished`` a list of ``(env_index, episode_return,
    episode_length)`` for episodes that ended in this step.
    """

    def __init__(self, env: gym.Env | gym.vector.VectorEnv, seed: int = 0) -> None:
        self.env = env
        self.vector = isinstance(env, gym.vector.VectorEnv)
        self.num_envs = env.num_envs if self.vector else 1
        if self.vector:
            mode = env.metadata.get("autoreset_mode", gym.vector.AutoresetMode.NEXT_STEP)
            if mode not in (gym.vector.AutoresetMode.NEXT_STEP, "NextStep"):
                raise ValueError(
                    f"Collector supports vector envs with next-step autoreset only, got {mode}; "
                    "create the vector env with gymnasium's default autoreset mode."
                )
        # A vector env that reuses its observation buffer (copy=False) is copied here, as _own copies
        # a single env's observation.
        self._copy_obs = self.vector and not _vector_copies(env)
        self.seed = int(seed)
        self._obs: np.ndarray | None = None
        self._pending_reset = False
        self._needs_reset_step = np.zeros(self.num_envs, dtype=bool)
        self._episode_start = np.ones(self.num_envs, dtype=bool)
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)
        self.episodes = 0

    @property
    def obs(self) -> np.ndarray | None:
        """Current observations ``[num_envs, ...]``.

        A single env that finished an episode is reset lazily, here, so a
        checkpoint written between two steps holds the env RNG *before* that
        reset and a resumed run draws the same next episode.
        """
        if self._pending_reset:
            self._pending_reset = False
            self._obs = _own(self.env.reset()[0])
            self._episode_start[:] = True
        return self._obs

    @property
    def episode_start(self) -> np.ndarray:
        """``[num_envs]`` bool: the current observation is the first of an episode.

        Recurrent learners reset their carry there. For a vector env this is
        the observation returned by the autoreset step.
        """
        obs = self.obs  # a pending single-env reset happens here
        del obs
        return self._episode_start.copy()

    @obs.setter
    def obs(self, value: np.ndarray | None) -> None:
        self._obs = value

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Start fresh episodes in every env (``seed`` seeds the env RNGs)."""
        if self.vector:
            seeds = None if seed is None else [seed + i for i in range(self.num_envs)]
            obs, _ = self.env.reset(seed=seeds)
            obs = np.array(obs, copy=True) if self._copy_obs else obs
        else:
            obs = _own(self.env.reset(seed=seed)[0])
        self.obs = np.asarray(obs)
        self._pending_reset = False
        self._episode_start[:] = True
        self._needs_reset_step[:] = False
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self.obs

    def step(self, actions: np.ndarray) -> tuple[TensorDict, list[tuple[int, float, int]]]:
        if self.obs is None:
            self.reset(self.seed)
        actions = np.asarray(actions)
        prev_obs = self.obs
        if self.vector:
            next_obs, reward, terminated, truncated, _ = self.env.step(actions)
            valid = ~self._needs_reset_step
            self._episode_start = self._needs_reset_step.copy()
            self._needs_reset_step = np.logical_or(terminated, truncated)
            next_obs = np.array(next_obs, copy=True) if self._copy_obs else np.asarray(next_obs)
            self.obs = next_obs
        else:
            ob, r, term, trunc, _ = self.env.step(actions[0])
            next_obs = _own(ob)
            reward = np.asarray([r], dtype=np.float64)
            terminated = np.asarray([term])
            truncated = np.asarray([trunc])
            valid = np.ones(1, dtype=bool)
            self.obs = next_obs
            self._episode_start[:] = False
            self._pending_reset = bool(term or trunc)
        reward = np.asarray(reward, dtype=np.float64)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        finished: list[tuple[int, float, int]] = []
        self._ep_return[valid] += reward[valid]
        self._ep_length[valid] += 1
        done = valid & (terminated | truncated)
        for i in np.flatnonzero(done):
            finished.append((int(i), float(self._ep_return[i]), int(self._ep_length[i])))
            self._ep_return[i] = 0.0
            self._ep_length[i] = 0
            self.episodes += 1
        idx = np.flatnonzero(valid)
        rows = TensorDict(
            {
                "obs": _as_tensor(prev_obs[idx]),
                "action": _as_tensor(actions[idx]),
                "reward": _as_tensor(reward[idx], torch.float32),
                "next_obs": _as_tensor(next_obs[idx]),
                "terminated": _as_tensor(terminated[idx]),
                "truncated": _as_tensor(truncated[idx]),
                "env_id": torch.as_tensor(idx, dtype=torch.int64),
            },
            batch_size=[len(idx)],
        )
        return rows, finished

    # -- checkpoint support -------------------------------------------------
    def _sub_envs(self) -> list[gym.Env]:
        if self.vector:
            return list(getattr(self.env, "envs", []))
        return [self.env]

    def rng_state(self) -> list[dict]:
        """JSON-serialisable RNG states of every sub-env (numpy bit generators)."""
        states = []
        for e in self._sub_envs():
            states.append(e.unwrapped.np_random.bit_generator.state)
        return states

    def restore(self, rng_states: list[dict]) -> None:
        """Restore env RNGs and start new episodes from them.

        An episode in progress when the checkpoint was written cannot be
        restored in general (simulator state is not saved), so every env starts
        a new episode, drawn from the restored RNG. Checkpoints taken at an
        episode boundary therefore continue exactly: a single env resets at the
        next observation read, a vector env at its next step, the autoreset
        step (acted on and not stored, as after every episode end).
        """
        envs = self._sub_envs()
        if len(envs) != len(rng_states):
            raise ValueError(
                f"Checkpoint has RNG states for {len(rng_states)} envs but this run has {len(envs)}; "
                "resume with the run's original env.num_envs."
            )
        for e, st in zip(envs, rng_states):
            e.unwrapped.np_random.bit_generator.state = st
        self._pending_reset = False
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        space = getattr(self.env, "single_observation_space", None)
        if self.vector and hasattr(self.env, "_autoreset_envs") and getattr(space, "shape", None) is not None:
            # As the uninterrupted run continues from an episode boundary: its next step is the autoreset
            # step, which acts on the old observations (the actions are ignored; the policy's draws are
            # spent all the same), resets every sub-env from its RNG and stores no row. Resetting here
            # instead skipped that act, so the policy's generator drifted from the uninterrupted run's.
            self.obs = np.zeros((self.num_envs, *space.shape), dtype=space.dtype)  # acted on, never stored
            self.env._autoreset_envs[:] = True
            self._episode_start[:] = False
            self._needs_reset_step[:] = True
            return
        if self.vector:
            obs = np.stack([np.asarray(e.reset()[0]) for e in envs])
            if hasattr(self.env, "_autoreset_envs"):
                self.env._autoreset_envs[:] = False
        else:
            obs = _own(self.env.reset()[0])
        self.obs = obs
        self._episode_start[:] = True
        self._needs_reset_step[:] = False
