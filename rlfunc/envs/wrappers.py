"""Observation wrappers: partial observability of fully observed tasks, and fixed input scaling.

* :class:`MaskVelocity` zeroes the velocity entries of a vector observation
  (CartPole's cart and pole velocities, indices 1 and 3: the "no velocity"
  POMDP of RL Zoo's ``MaskVelocityWrapper``, where PPO-LSTM solves
  ``CartPoleNoVel-v1``).
* :class:`FlickerObservation` blanks the whole observation with probability
  ``p`` at every step (Hausknecht & Stone 2015, "Flickering Pong": each frame
  fully revealed or fully obscured with p = 0.5).

Both work on any env with a ``Box`` observation space and are reproducible:
randomness comes from the env's own seeded ``np_random``. Also here:

* :class:`ScaleObservation` maps a vector observation to ``(obs - offset) * scale``
  with fixed, per-entry constants from the config: input preprocessing, as
  DQN's division of Atari pixels by 255, for tasks whose informative entries are
  tiny (balanced CartPole's pole angle has std ~0.005 rad). Fixed constants keep
  replayed observations and the evaluation env consistent, unlike running
  statistics (RL Zoo's ``VecNormalize``, which its PPO-LSTM uses on
  ``CartPoleNoVel-v1``).
"""

from __future__ import annotations

from typing import Sequence

import gymnasium as gym
import numpy as np

__all__ = ["MaskVelocity", "FlickerObservation", "ScaleObservation", "VELOCITY_INDICES"]

VELOCITY_INDICES: dict[str, tuple[int, ...]] = {
    "CartPole": (1, 3),
    "MountainCar": (1,),
    "MountainCarContinuous": (1,),
    "Pendulum": (2,),
    "Acrobot": (4, 5),
    "LunarLander": (2, 3, 5),
}
"""Velocity entries of classic-control / Box2D observations, by env name
(RL Zoo ``utils/wrappers.py`` ``MaskVelocityWrapper``; Acrobot: its two
angular velocities)."""


def _env_name(env: gym.Env) -> str | None:
    spec = env.unwrapped.spec if env.unwrapped is not None else None
    if spec is None:
        spec = getattr(env, "spec", None)
    return None if spec is None else spec.name


class MaskVelocity(gym.ObservationWrapper):
    """Zero the observation entries ``indices`` (default: the env's velocities).

    ``indices=None`` looks the env up in :data:`VELOCITY_INDICES` (CartPole:
    ``(1, 3)``); any other env needs explicit ``indices``. The observation
    space is unchanged (0 must lie inside its bounds at those entries).
    """

    @staticmethod
    def check_arguments(indices: Sequence[int] | None = None) -> None:
        """The checks that need no env (run by :func:`rlfunc.envs.build_wrappers` at config time)."""
        if indices is None:
            return
        if isinstance(indices, np.ndarray):
            indices = indices.tolist()
        if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence) or not indices or not all(
            isinstance(i, (int, np.integer)) and not isinstance(i, bool) for i in indices
        ):
            raise ValueError(f"The mask_velocity wrapper's indices must be a non-empty list of integers, got {indices!r}.")

    def __init__(self, env: gym.Env, indices: Sequence[int] | None = None) -> None:
        self.check_arguments(indices)
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"MaskVelocity needs a flat 1-D Box observation space, got {space}.")
        if indices is None:
            name = _env_name(env)
            if name not in VELOCITY_INDICES:
                raise ValueError(
                    f"MaskVelocity does not know the velocity entries of {name or 'this env'}; "
                    f"pass indices=... (known envs: {sorted(VELOCITY_INDICES)})."
                )
            indices = VELOCITY_INDICES[name]
        idx = np.asarray(list(indices), dtype=np.int64)
        dim = space.shape[0]
        if idx.size == 0 or idx.min() < -dim or idx.max() >= dim:
            raise ValueError(f"MaskVelocity indices {idx.tolist()} are out of range for a {dim}-dim observation.")
        if np.any(space.low[idx] > 0) or np.any(space.high[idx] < 0):
            raise ValueError(f"MaskVelocity: 0 is outside the observation bounds at indices {idx.tolist()}.")
        self.indices = tuple(int(i) for i in idx)
        self._mask = np.ones(dim, dtype=space.dtype)
        self._mask[idx] = 0

    def observation(self, observation):
        return (observation * self._mask).astype(self.observation_space.dtype, copy=False)


class FlickerObservation(gym.ObservationWrapper):
    """Replace the whole observation by ``fill`` (0) with probability ``p``.

    Applied to every observation, the first one after ``reset`` included.
    Draws use the env's ``np_random`` (seeded by ``reset(seed=...)``), so the
    same seed flickers the same steps. ``p = 0.5`` is Flickering Pong's.
    """

    @staticmethod
    def check_arguments(p: float = 0.5, fill: float = 0.0) -> None:
        """The checks that need no env (run by :func:`rlfunc.envs.build_wrappers` at config time)."""
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"The flicker wrapper's p must be a probability in [0, 1], got {p!r}.")
        if isinstance(fill, bool) or not isinstance(fill, (int, float)) or not np.isfinite(fill):
            raise ValueError(f"The flicker wrapper's fill must be a finite number, got {fill!r}.")

    def __init__(self, env: gym.Env, p: float = 0.5, fill: float = 0.0) -> None:
        self.check_arguments(p, fill)
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box):
            raise ValueError(f"FlickerObservation needs a Box observation space, got {space}.")
        if np.any(space.low > fill) or np.any(space.high < fill):
            raise ValueError(f"FlickerObservation fill={fill} is outside the observation bounds; pick another fill.")
        self.p = float(p)
        self.fill = fill

    def observation(self, observation):
        if self.np_random.random() < self.p:
            return np.full_like(observation, self.fill)
        return observation


class ScaleObservation(gym.ObservationWrapper):
    """Return ``(observation - offset) * scale`` with fixed per-entry constants.

    ``scale`` and ``offset`` are a number or one value per entry of a flat
    ``Box`` observation; ``scale`` must be positive (so bounds keep their order).
    The observation space's bounds are mapped the same way (infinite stay infinite).
    """

    @staticmethod
    def check_arguments(scale: float | Sequence[float] = 1.0, offset: float | Sequence[float] = 0.0) -> None:
        """The checks that need no env (run by :func:`rlfunc.envs.build_wrappers` at config time)."""
        for name, value in (("scale", scale), ("offset", offset)):
            try:
                arr = np.asarray(value, dtype=np.float64)
            except (TypeError, ValueError):
                raise ValueError(f"The scale_obs wrapper's {name} must be a number or a list of numbers, got {value!r}.") from None
            if arr.ndim > 1:
                raise ValueError(f"The scale_obs wrapper's {name} must be a number or a list of numbers, got {value!r}.")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"The scale_obs wrapper's {name} must be finite, got {value!r}.")
        if np.any(np.asarray(scale, dtype=np.float64) <= 0):
            raise ValueError(f"The scale_obs wrapper's scale must be positive in every entry, got {scale!r}.")

    def __init__(self, env: gym.Env, scale: float | Sequence[float] = 1.0, offset: float | Sequence[float] = 0.0) -> None:
        self.check_arguments(scale, offset)
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"ScaleObservation needs a flat 1-D Box observation space, got {space}.")
        dim = space.shape[0]
        consts = []
        for name, value in (("scale", scale), ("offset", offset)):
            arr = np.asarray(value, dtype=np.float64)
            if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != dim):
                raise ValueError(f"The scale_obs wrapper's {name} must be a number or a list of {dim} numbers, got {value!r}.")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"The scale_obs wrapper's {name} must be finite, got {value!r}.")
            with np.errstate(over="ignore"):
                const = np.broadcast_to(arr, (dim,)).astype(space.dtype)
            if not np.all(np.isfinite(const)):
                raise ValueError(
                    f"The scale_obs wrapper's {name} must fit in the observations' {space.dtype} numbers, got {value!r}."
                )
            consts.append(const)
        self.scale, self.offset = consts
        if np.any(self.scale <= 0):
            raise ValueError(f"The scale_obs wrapper's scale must be positive in every entry, got {scale!r}.")
        with np.errstate(invalid="ignore", over="ignore"):
            low = (space.low - self.offset) * self.scale
            high = (space.high - self.offset) * self.scale
        self.observation_space = gym.spaces.Box(low=low, high=high, shape=space.shape, dtype=space.dtype)

    def observation(self, observation):
        return ((observation - self.offset) * self.scale).astype(self.observation_space.dtype, copy=False)
