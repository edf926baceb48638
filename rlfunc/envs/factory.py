"""Gymnasium environment factory with clear errors for bad ids."""

from __future__ import annotations

import difflib
from typing import Any, Callable

import gymnasium as gym
import numpy as np

__all__ = ["make_env", "make_vector_env", "check_env_id", "env_spaces", "build_wrappers", "WRAPPERS"]

_MUJOCO_HINT = "install MuJoCo with `pip install -e '.[mujoco]'` (mujoco==3.17.0)"


def check_env_id(env_id: str) -> None:
    """Raise one clear ValueError if ``env_id`` is not a registered gymnasium id."""
    import rlfunc.envs  # noqa: F401  (registers rlfunc's own envs)

    if env_id in gym.registry:
        return
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else "; see gymnasium.pprint_registry() for valid ids."
    raise ValueError(f"Unknown environment id {env_id!r}{hint}")


def _make_one(env_id: str, kwargs: dict[str, Any], wrappers: list[Callable], rescale_actions: bool):
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        raise RuntimeError(f"Environment {env_id!r} needs a missing dependency: {_MUJOCO_HINT} ({exc}).") from exc
    except TypeError as exc:
        raise ValueError(f"Bad env.kwargs for {env_id!r}: {exc}; remove or rename that keyword.") from exc
    for wrap in wrappers:
        env = wrap(env)
    if rescale_actions and isinstance(env.action_space, gym.spaces.Box):
        low, high = env.action_space.low, env.action_space.high
        if not (np.all(low == -1.0) and np.all(high == 1.0)):
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
                raise ValueError(f"Environment {env_id!r} has unbounded actions; rlfunc's policies need a bounded Box.")
            ones = np.ones(env.action_space.shape, dtype=np.float32)
            env = gym.wrappers.RescaleAction(env, -ones, ones)
    return env


def make_env(
    env_id: str,
    *,
    seed: int | None = None,
    kwargs: dict[str, Any] | None = None,
    wrappers: list[Callable] | None = None,
    rescale_actions: bool = True,
) -> gym.Env:
    """One environment; continuous actions rescaled to ``[-1, 1]``.

    ``wrappers`` are applied in order after ``gym.make`` (e.g. the masked-velocity
    or flicker wrappers). ``seed`` seeds the first reset and the action space.
    """
    check_env_id(env_id)
    env = _make_one(env_id, dict(kwargs or {}), list(wrappers or []), rescale_actions)
    if seed is not None:
        env.action_space.seed(seed)
    return env


def make_vector_env(
    env_id: str,
    num_envs: int,
    *,
    kwargs: dict[str, Any] | None = None,
    wrappers: list[Callable] | None = None,
    rescale_actions: bool = True,
) -> gym.vector.SyncVectorEnv:
    """``num_envs`` copies in a ``SyncVectorEnv`` (next-step autoreset, gymnasium's default).

    Sync, not Async: on the 2-core machines here ``AsyncVectorEnv`` measured
    2-10x slower (MACHINE-FACTS.md).
    """
    check_env_id(env_id)
    if num_envs < 1:
        raise ValueError(f"env.num_envs must be at least 1, got {num_envs}.")
    fns = [
        (lambda: _make_one(env_id, dict(kwargs or {}), list(wrappers or []), rescale_actions))
        for _ in range(num_envs)
    ]
    return gym.vector.SyncVectorEnv(fns)


def env_spaces(env) -> tuple[gym.Space, gym.Space]:
    """Single-env observation and action spaces of an env or a vector env."""
    if isinstance(env, gym.vector.VectorEnv):
        return env.single_observation_space, env.single_action_space
    return env.observation_space, env.action_space


WRAPPERS: dict[str, str] = {
    "mask_velocity": "rlfunc.envs.wrappers:MaskVelocity",
    "flicker": "rlfunc.envs.wrappers:FlickerObservation",
    "scale_obs": "rlfunc.envs.wrappers:ScaleObservation",
    "pixels": "rlfunc.envs.pixels:PixelObservation",
}
"""Names usable in a config's ``env.wrappers`` list -> ``module:class``."""


def build_wrappers(spec: list) -> list[Callable]:
    """``["mask_velocity", {"flicker": {"p": 0.5}}]`` -> wrapper callables, validated."""
    import functools
    import importlib

    out = []
    for item in spec or []:
        if isinstance(item, str):
            name, kwargs = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, kwargs = next(iter(item.items()))
            kwargs = dict(kwargs or {})
        else:
            raise ValueError(f"env.wrappers entries must be a name or {{name: {{kwargs}}}}, got {item!r}.")
        if name not in WRAPPERS:
            close = difflib.get_close_matches(str(name), list(WRAPPERS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid names are {sorted(WRAPPERS)}."
            raise ValueError(f"Unknown env wrapper {name!r}{hint}")
        mod, _, cls = WRAPPERS[name].partition(":")
        out.append(functools.partial(getattr(importlib.import_module(mod), cls), **kwargs))
    return out
