"""Every member's environments as one gymnasium vector env (issue #24 §5).

A population of ``P`` members with ``env.num_envs = n`` steps ``P x n`` env copies
in one :class:`gymnasium.vector.SyncVectorEnv`, member-major (member ``k``'s copies
are sub-envs ``k*n .. k*n + n - 1``), each member's copies seeded from its seed as
its single run seeds them (``seed + i``). One ``step`` call steps every member and
returns one TensorDict of every member's stored rows (and how many rows each
member stored), so the population builds its rows and writes its batched replay
once per env step instead of once per member.

Each member sees what :class:`~rlfunc.runtime.collector.Collector` gives its single run,
bit for bit (tests/test_population_collector.py):

* ``num_envs > 1``: the single run steps a vector env with gymnasium's default
  next-step autoreset, so this vector env uses it too: the step after an episode
  ended resets that copy, ignores its action and stores no row.
* ``num_envs == 1``: the single run steps one env and resets it when it next reads
  the observation, so every step stores a row and a checkpoint written between the
  two holds the env's RNG from before that reset. Here the vector env runs with
  autoreset disabled and the ended copies are reset the same way, lazily, with
  gymnasium's ``reset(options={"reset_mask": ...})``.

Stepping is all or nothing in a vector env: a member that has finished its steps
(with ``num_envs > 1`` members' counts can differ by a few autoreset steps at the
end) has its copies stepped with zero actions and its rows dropped, so its envs run
a few steps past its last stored row. Only a resume of a finished run to more steps
sees that, and with ``num_envs > 1`` a resumed member already continues from new
episodes (the vector env's episodes in progress are not saved).
"""

from __future__ import annotations

from typing import Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.runtime.collector import _as_tensor

__all__ = ["PopulationCollector"]


class PopulationCollector:
    """Steps ``P`` members' envs (``env_fns[k]``: member ``k``'s ``n`` env constructors) as one vector env.

    ``vector``: whether each member's single run steps a vector env (``num_envs > 1``, next-step
    autoreset) or one env (lazy reset). :meth:`obs` and :meth:`episode_start` are member ``k``'s
    ``[n, ...]`` arrays; :meth:`step` takes every member's actions (``None`` for a member that has
    finished) and returns ``(rows, counts, finished)``: the stored rows of every member, member-major
    (``obs, action, reward, next_obs, terminated, truncated, env_id``, ``env_id`` the member's own env
    index, as :class:`~rlfunc.runtime.collector.Collector` stores them), ``counts[k]`` the rows of member
    ``k``, ``finished[k]`` member ``k``'s ``(env_index, return, length)`` of episodes that ended.
    """

    def __init__(self, env_fns: Sequence[Sequence[Callable[[], gym.Env]]], vector: bool) -> None:
        sizes = {len(fns) for fns in env_fns}
        if len(env_fns) < 1 or len(sizes) != 1 or 0 in sizes:
            raise ValueError(f"A population collector needs the same number (>= 1) of envs for every member, got {sorted(sizes)}.")
        self.members = len(env_fns)
        self.num_envs = sizes.pop()
        if not vector and self.num_envs != 1:
            raise ValueError(f"Members that step one env each have num_envs=1, got {self.num_envs}.")
        self.vector = bool(vector)
        mode = gym.vector.AutoresetMode.NEXT_STEP if self.vector else gym.vector.AutoresetMode.DISABLED
        self.env = gym.vector.SyncVectorEnv([fn for fns in env_fns for fn in fns], autoreset_mode=mode)
        total = self.members * self.num_envs
        self._member_of = np.repeat(np.arange(self.members), self.num_envs)
        self._obs: np.ndarray | None = None
        self._pending_reset = np.zeros(total, dtype=bool)  # one-env members: ended, reset when next read
        self._any_pending = False
        self._needs_reset_step = np.zeros(total, dtype=bool)  # vector members: the next step is the autoreset one
        self._episode_start = np.ones(total, dtype=bool)
        self._ep_return = np.zeros(total, dtype=np.float64)
        self._ep_length = np.zeros(total, dtype=np.int64)
        self.episodes = [0] * self.members

    def _slice(self, k: int) -> slice:
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        return slice(k * self.num_envs, (k + 1) * self.num_envs)

    def _reset_ended(self) -> None:
        """The lazy resets of one-env members whose episode ended (gymnasium's masked reset)."""
        if self._any_pending:
            mask = self._pending_reset.copy()
            self._obs, _ = self.env.reset(options={"reset_mask": mask})
            self._episode_start[mask] = True
            self._pending_reset[:] = False
            self._any_pending = False

    def obs(self, k: int) -> np.ndarray:
        """Member ``k``'s current observations ``[num_envs, ...]``."""
        if self._obs is None:
            raise RuntimeError("The population's envs have not been reset; call reset(seeds) or restore(...) first.")
        self._reset_ended()
        return self._obs[self._slice(k)]

    def all_obs(self) -> np.ndarray:
        """Every member's current observations, ``[P, num_envs, ...]`` (row ``k``: :meth:`obs` of ``k``)."""
        self.obs(0)
        return self._obs.reshape(self.members, self.num_envs, *self._obs.shape[1:])

    def episode_start(self, k: int) -> np.ndarray:
        """Member ``k``'s ``[num_envs]`` flags: the current observation is the first of an episode."""
        self.obs(k)
        return self._episode_start[self._slice(k)].copy()

    def reset(self, seeds: Sequence[int]) -> None:
        """Start fresh episodes in every env, member ``k``'s copy ``i`` seeded ``seeds[k] + i``."""
        if len(seeds) != self.members:
            raise ValueError(f"reset needs one seed per member ({self.members}), got {len(seeds)}.")
        self._obs, _ = self.env.reset(seed=[int(s) + i for s in seeds for i in range(self.num_envs)])
        self._clear(np.ones(self.members * self.num_envs, dtype=bool))

    def _clear(self, mask: np.ndarray) -> None:
        self._pending_reset[mask] = False
        self._any_pending = bool(self._pending_reset.any())
        self._needs_reset_step[mask] = False
        self._episode_start[mask] = True
        self._ep_return[mask] = 0.0
        self._ep_length[mask] = 0

    def step(self, actions: Sequence[np.ndarray | None]) -> tuple[TensorDict, np.ndarray, list[list[tuple[int, float, int]]]]:
        if self._obs is None:
            raise RuntimeError("The population's envs have not been reset; call reset(seeds) or restore(...) first.")
        if len(actions) != self.members:
            raise ValueError(f"step needs every member's actions ({self.members}), got {len(actions)}.")
        active = np.asarray([a is not None for a in actions])
        if not active.any():
            raise ValueError("step needs the actions of at least one member.")
        given = next(np.asarray(a) for a in actions if a is not None)
        stacked = np.concatenate([np.asarray(a) if a is not None else np.zeros_like(given) for a in actions])
        self._reset_ended()
        prev_obs = self._obs
        next_obs, reward, terminated, truncated, _ = self.env.step(stacked)
        if self.vector:
            valid = ~self._needs_reset_step
            self._episode_start = self._needs_reset_step.copy()
            self._needs_reset_step = np.logical_or(terminated, truncated)
        else:
            valid = np.ones_like(self._pending_reset)
            self._episode_start[:] = False
            self._pending_reset = np.logical_or(terminated, truncated)
            self._any_pending = bool(self._pending_reset.any())
        self._obs = np.asarray(next_obs)
        reward = np.asarray(reward, dtype=np.float64)
        terminated = np.asarray(terminated, dtype=bool)
        truncated = np.asarray(truncated, dtype=bool)
        valid = valid & active[self._member_of]
        self._ep_return[valid] += reward[valid]
        self._ep_length[valid] += 1
        finished: list[list[tuple[int, float, int]]] = [[] for _ in range(self.members)]
        for i in np.flatnonzero(valid & (terminated | truncated)):
            k = int(self._member_of[i])
            finished[k].append((int(i % self.num_envs), float(self._ep_return[i]), int(self._ep_length[i])))
            self._ep_return[i] = 0.0
            self._ep_length[i] = 0
            self.episodes[k] += 1
        idx = np.flatnonzero(valid)
        rows = TensorDict(
            {
                "obs": _as_tensor(prev_obs[idx]),
                "action": _as_tensor(stacked[idx]),
                "reward": _as_tensor(reward[idx], torch.float32),
                "next_obs": _as_tensor(self._obs[idx]),
                "terminated": _as_tensor(terminated[idx]),
                "truncated": _as_tensor(truncated[idx]),
                "env_id": torch.as_tensor(idx % self.num_envs, dtype=torch.int64),
            },
            batch_size=[len(idx)],
        )
        return rows, np.bincount(self._member_of[idx], minlength=self.members), finished

    # -- checkpoint support -------------------------------------------------
    def rng_state(self, k: int) -> list[dict]:
        """Member ``k``'s sub-envs' RNG states, as its single run's :meth:`Collector.rng_state
        <rlfunc.runtime.collector.Collector.rng_state>` gives them (JSON-serialisable)."""
        return [e.unwrapped.np_random.bit_generator.state for e in self.env.envs[self._slice(k)]]

    def restore(self, rng_states: Sequence[Sequence[dict]]) -> None:
        """Every member's env RNGs (``rng_states[k]``: member ``k``'s), then new episodes drawn from
        them, as each single run's :meth:`Collector.restore <rlfunc.runtime.collector.Collector.restore>`
        (vector members: at the next step, the autoreset step)."""
        if len(rng_states) != self.members:
            raise ValueError(f"Checkpoint has env RNG states for {len(rng_states)} members but this population has {self.members}.")
        for k, states in enumerate(rng_states):
            if len(states) != self.num_envs:
                raise ValueError(
                    f"Checkpoint has RNG states for {len(states)} envs but this run has {self.num_envs}; "
                    "resume with the run's original env.num_envs."
                )
            for e, st in zip(self.env.envs[self._slice(k)], states):
                e.unwrapped.np_random.bit_generator.state = st
        everyone = np.ones(self.members * self.num_envs, dtype=bool)
        space = self.env.single_observation_space
        if self.vector and getattr(space, "shape", None) is not None:
            # Vector members, as the single Collector's restore: the next step is the autoreset step of
            # every copy (acted on, not stored, each copy reset from its restored RNG), as in the
            # uninterrupted run after an episode boundary.
            self._obs = np.zeros((len(everyone), *space.shape), dtype=space.dtype)
            self.env._autoreset_envs[:] = True
            self._clear(everyone)
            self._needs_reset_step[:] = True
            self._episode_start[:] = False
            return
        self._obs, _ = self.env.reset()  # every copy from its restored RNG (seed None)
        self._clear(everyone)

    def close(self) -> None:
        self.env.close()
