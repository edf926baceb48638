"""Gymnasium environment factory with clear errors for bad ids."""

from __future__ import annotations

import collections.abc
import difflib
import inspect
import types
import typing
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


def _arg_value(value: Any, tp: Any) -> Any:
    """``value`` checked (and YAML-1.1 number strings such as ``"1e-3"`` read) against annotation ``tp``;
    raises ``TypeError`` if it does not fit. Unknown annotations pass."""
    if tp is inspect.Parameter.empty or tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            try:
                return _arg_value(value, arg)
            except TypeError:
                continue
        raise TypeError
    if tp is type(None):
        if value is None:
            return None
        raise TypeError
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise TypeError
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise TypeError
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value)
            except ValueError:
                raise TypeError from None
        raise TypeError
    if tp is str:
        if isinstance(value, str):
            return value
        raise TypeError
    if origin in (list, tuple, collections.abc.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return [_arg_value(v, args[0]) if args else v for v in value]
    return value


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin in (list, tuple, collections.abc.Sequence):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        plural = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}
        return f"a list of {plural.get(args[0], 'values')}" if args else "a list"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def _wrapper_class(name: str):
    import importlib

    mod, _, cls = WRAPPERS[name].partition(":")
    return getattr(importlib.import_module(mod), cls)


def build_wrappers(spec: list) -> list[Callable]:
    """``["mask_velocity", {"flicker": {"p": 0.5}}]`` -> wrapper callables, validated.

    Names are checked against :data:`WRAPPERS`, argument names against the
    wrapper's signature and argument types against its annotations (YAML
    number strings such as ``1e-3`` are read as numbers), and values by the
    wrapper's ``check_arguments`` where it has one (what needs no env, e.g.
    flicker's ``p`` in [0, 1]); each fault is one ``ValueError`` sentence. The
    rest (e.g. mask_velocity's indices against the observation size) is
    checked by the wrapper when the env is made.
    """
    import functools

    if spec is None:
        return []
    if not isinstance(spec, (list, tuple)):
        raise ValueError(f"env.wrappers must be a list of names or {{name: {{arguments}}}}, got {spec!r}.")
    out = []
    for item in spec:
        if isinstance(item, str):
            name, kwargs = item, {}
        elif isinstance(item, dict) and len(item) == 1:
            name, kwargs = next(iter(item.items()))
            if kwargs is not None and not isinstance(kwargs, dict):
                raise ValueError(
                    f"env.wrappers entry {name!r} must map to its arguments ({{name: {{argument: value}}}}), got {kwargs!r}."
                )
            kwargs = dict(kwargs or {})
        else:
            raise ValueError(f"env.wrappers entries must be a name or {{name: {{arguments}}}}, got {item!r}.")
        if not isinstance(name, str) or name not in WRAPPERS:
            close = difflib.get_close_matches(str(name), list(WRAPPERS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f"; valid names are {sorted(WRAPPERS)}."
            raise ValueError(f"Unknown env wrapper {name!r} in env.wrappers{hint}")
        cls = _wrapper_class(name)
        params = dict(list(inspect.signature(cls).parameters.items())[1:])  # after the wrapped env
        try:
            hints = typing.get_type_hints(cls.__init__)
        except Exception:  # noqa: BLE001 -- unresolvable annotations: names are still checked
            hints = {}
        for key, value in kwargs.items():
            if key not in params or params[key].kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
                valid = ", ".join(p for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD))
                raise ValueError(
                    f"env.wrappers: {name!r} has no argument {key!r}; its arguments are {valid or 'none'}."
                )
            tp = hints.get(key, inspect.Parameter.empty)
            try:
                kwargs[key] = _arg_value(value, tp)
            except TypeError:
                raise ValueError(
                    f"env.wrappers: {name!r} argument {key!r} must be {_type_text(tp)}, got {value!r}."
                ) from None
        check = getattr(cls, "check_arguments", None)
        if check is not None:
            check(**kwargs)  # the wrapper's own checks that need no env (e.g. flicker p in [0, 1])
        out.append(functools.partial(cls, **kwargs))
    return out
