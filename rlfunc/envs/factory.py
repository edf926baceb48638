"""Gymnasium environment factory with clear errors for bad ids."""

from __future__ import annotations

import collections.abc
import contextlib
import contextvars
import difflib
import inspect
import types
import typing
from typing import Any, Callable

import gymnasium as gym
import numpy as np

__all__ = [
    "make_env",
    "make_vector_env",
    "env_fns",
    "check_env_id",
    "split_env_id",
    "suggest_env_ids",
    "env_spaces",
    "build_wrappers",
    "WRAPPERS",
    "from_loaded_file",
    "LOADED_GYMNASIUM_WRAPPERS",
    "LOADED_ENV_MODULES",
]

_MUJOCO_HINT = 'install MuJoCo with `pip install -e ".[mujoco]"` (mujoco==3.17.0)'
_EXTRA_OF_MODULE = {"ale_py": "atari", "cv2": "atari", "minatar": "minatar", "dm_control": "dmc", "mujoco": "mujoco"}
"""Env packages rlfunc's configs name, by top-level module: the pyproject extra that installs each."""


_USER_IMPORTS = contextvars.ContextVar("rlfunc_user_imports", default=True)
_LOADED = contextvars.ContextVar("rlfunc_loaded_config", default=None)
"""``None``: envs are made from the user's own config. Otherwise a tuple of what the user allowed
(:func:`from_loaded_file`): the env and wrappers come from a file rlfunc read."""

LOADED_GYMNASIUM_WRAPPERS = frozenset({
    "AtariPreprocessing", "ClipAction", "ClipReward", "DelayObservation", "DiscretizeAction",
    "DiscretizeObservation", "DtypeObservation", "FilterObservation", "FlattenObservation",
    "FrameStackObservation", "GrayscaleObservation", "MaxAndSkipObservation", "NormalizeObservation",
    "NormalizeReward", "RecordEpisodeStatistics", "RepeatAction", "RescaleAction", "RescaleObservation",
    "ReshapeObservation", "ResizeObservation", "StickyAction", "TimeAwareObservation", "TimeLimit",
})
"""The ``gymnasium.wrappers`` classes an env made from a loaded file's config may use without
``--allow-import``: transforms of observations, actions and rewards, time limits, frame stacking and
Atari preprocessing, which read no file, write none and render nothing. Not here: ``RecordVideo``
(writes files where its arguments say), ``HumanRendering``, ``AddRenderObservation``,
``RenderCollection`` and the other render wrappers, ``Transform*`` (they need a function, which a
config cannot hold), and the array-conversion wrappers (they import jax or torch converters).
rlfunc's own :data:`WRAPPERS` are all allowed; they do no I/O either."""


LOADED_ENV_MODULES = frozenset({"ale_py"})
"""Modules an ``env.id`` of a loaded file's config may name (``ale_py:ALE/Pong-v5``, as the packaged
Atari configs do) without ``--allow-import``: installed env packages whose import only registers
their envs."""


@contextlib.contextmanager
def from_loaded_file(allow_import=()):
    """Within this block, envs are made from a config read from a file (a checkpoint's, a run's
    directory's, an export's): ``rlfunc eval``, ``rlfunc resume``, ``rlfunc dataset collect
    --checkpoint`` and :func:`rlfunc.evaluate` enter it.

    A downloaded checkpoint must not be able to run code or write files (docs/checkpoints.md), yet its
    config may name a module (``env.id`` ``module:Env-v0``, a ``module:ClassName`` wrapper), whose
    import runs it, or a gymnasium wrapper with I/O (``RecordVideo(video_folder=...)`` writes where the
    file says). So here a module is imported only if it is already imported in this process or the
    user named it (or a package above it) in ``allow_import`` (or it is one of
    :data:`LOADED_ENV_MODULES`); a wrapper must be rlfunc's own, one of
    :data:`LOADED_GYMNASIUM_WRAPPERS`, or be named (``gymnasium.wrappers.RecordVideo``, or its module)
    in ``allow_import``. Anything else is one ``ValueError`` sentence, raised before the env is made,
    naming what to pass. A config the user wrote (``rlfunc train``) is not affected.
    """
    allow_import = allow_import_list(allow_import)
    token = _LOADED.set(tuple(str(a).strip() for a in allow_import))
    try:
        yield
    finally:
        _LOADED.reset(token)


def allow_import_list(allow_import) -> list[str]:
    """``allow_import`` (a module name, a list of them, or ``None``) as a list; anything else (``3``, a list
    holding a number) is one ``ValueError`` sentence, not Python's "object is not iterable"."""
    if isinstance(allow_import, str):
        return [allow_import]
    if allow_import is None:
        return []
    if not (isinstance(allow_import, (list, tuple, set, frozenset)) and all(isinstance(m, str) for m in allow_import)):
        raise ValueError(f"allow_import must be a module name or a list of them, got {allow_import!r}.")
    return list(allow_import)


def _allowed(name: str) -> bool:
    """Whether the user allowed ``name`` (a module, or ``gymnasium.wrappers.ClassName``): it, or a
    package above it, is in :func:`from_loaded_file`'s ``allow_import``."""
    return any(name == a or name.startswith(a + ".") for a in _LOADED.get() or () if a)


def _refuse_loaded(what: str, name: str, why: str) -> ValueError:
    return ValueError(
        f"The loaded run's config names {what}, {why}; if you trust the file, pass --allow-import {name} "
        f"(allow_import=[{name!r}] in Python)."
    )


def _check_loaded_import(module: str, what: str) -> None:
    """Under :func:`from_loaded_file`: refuse to import ``module`` (named in ``what``) unless allowed."""
    import sys

    own = {target.partition(":")[0] for target in WRAPPERS.values()}  # rlfunc's wrapper modules, gymnasium's
    if _LOADED.get() is None or module in sys.modules or module in LOADED_ENV_MODULES or module in own:
        return
    if not _allowed(module):
        raise _refuse_loaded(
            f"module {module!r} in {what}", module, "and rlfunc does not import a module that a loaded file names"
        )


def _check_loaded_wrapper(name: str, cls: type | None = None) -> None:
    """Under :func:`from_loaded_file`: refuse the wrapper entry ``name`` (its class ``cls`` once known)
    unless it is rlfunc's own, an I/O-free gymnasium wrapper, or allowed."""
    if _LOADED.get() is None or name in WRAPPERS:
        return
    if name.startswith("gymnasium.wrappers."):
        attr = name[len("gymnasium.wrappers."):]
        if attr in LOADED_GYMNASIUM_WRAPPERS or _allowed(name):
            return
        raise _refuse_loaded(
            f"env.wrappers entry {name!r}", name,
            "which is not one of the wrappers rlfunc applies from a loaded file (those that read, write and render "
            "nothing)",
        )
    module = name.partition(":")[0]
    if cls is None or _allowed(module) or name in (_LOADED.get() or ()):
        return
    if cls not in _safe_wrapper_classes():
        raise _refuse_loaded(
            f"env.wrappers entry {name!r}", module,
            "a class that is not one of the wrappers rlfunc applies from a loaded file (rlfunc's own and gymnasium's "
            "that read, write and render nothing)",
        )


def _safe_wrapper_classes() -> set:
    """The classes of :data:`WRAPPERS` and :data:`LOADED_GYMNASIUM_WRAPPERS` (all imported already)."""
    import importlib

    import gymnasium.wrappers as gw

    out = {getattr(gw, n) for n in LOADED_GYMNASIUM_WRAPPERS}
    for target in WRAPPERS.values():
        mod, _, attr = target.partition(":")
        out.add(getattr(importlib.import_module(mod), attr))
    return out


@contextlib.contextmanager
def without_user_imports():
    """Within this block, env ids and wrappers naming a user's module (``module:Env-v0``,
    ``module:ClassName``) are checked for form only and their modules are not imported.

    Used when a config comes from a file rlfunc wrote (a checkpoint's or a run's config):
    reading or loading a checkpoint never imports a module it names. Making its env
    (``rlfunc eval``, ``resume``, ``dataset collect``) happens under :func:`from_loaded_file`,
    which imports such a module only if the user allowed it.
    """
    token = _USER_IMPORTS.set(False)
    try:
        yield
    finally:
        _USER_IMPORTS.reset(token)


def _import_named(module: str, what: str) -> types.ModuleType:
    """Import ``module`` (a dotted name the user wrote in ``what``); one ``ValueError`` sentence
    when it cannot be imported: not installed, one of its own imports missing, or an error it raises."""
    import importlib
    import os
    import sys

    if not module or not all(part.isidentifier() for part in module.split(".")):
        raise ValueError(f"{what} names module {module!r}, which is not a Python module name (e.g. my_package.envs).")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if missing and module != missing and not module.startswith(missing + "."):
            raise ValueError(
                f"{what} names module {module!r}, whose import needs {missing!r}, which is not installed; "
                f"pip install {missing.split('.')[0]!r} (or the package that provides it)."
            ) from None
        top = module.split(".")[0]
        here = next((f for f in (f"{top}.py", top) if os.path.exists(f)), None)
        on_path = {os.path.abspath(p or os.curdir) for p in sys.path}
        if here is not None and os.path.abspath(os.curdir) not in on_path:
            raise ValueError(
                f"{what} names module {module!r}, which is not on the Python path, though ./{here} is in the current "
                "directory; run with PYTHONPATH=. (or pip install the package it belongs to)."
            ) from None
        if top in _EXTRA_OF_MODULE:
            raise ValueError(
                f"{what} names module {module!r}, which is not installed; install it with "
                f'pip install -e ".[{_EXTRA_OF_MODULE[top]}]".'
            ) from None
        raise ValueError(
            f"{what} names module {module!r}, which is not installed; pip install the package that provides it, "
            "or fix the module name."
        ) from None
    except Exception as exc:  # noqa: BLE001 -- the user's module raised while being imported
        detail = " ".join(str(exc).split()) or "no message"
        raise ValueError(
            f"{what} names module {module!r}, and importing it failed with {type(exc).__name__}: {detail}."
        ) from None


def _typo_distance(a: str, b: str) -> int:
    """Edit distance of ``a`` and ``b`` ignoring case (insert, delete, substitute, swap two neighbours)."""
    a, b = a.lower(), b.lower()
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                cur[j] = min(cur[j], prev2[j - 2] + 1)
        prev2, prev = prev, cur
    return prev[-1]


def _same_task_spelling(typed: str, name: str) -> bool:
    """Whether ``typed`` reads as a misspelling of the registered env name ``name`` (namespace included).

    Case is ignored; at most one edit for names of up to 5 characters, two for longer ones; and the
    digits must be the same, in the same order, since a digit names another task (``Walker`` is not
    ``Walker2d``, ``GymV21Environment`` is not ``GymV26Environment``)."""
    digits = lambda s: "".join(c for c in s if c.isdigit())  # noqa: E731
    if digits(typed) != digits(name):
        return False
    return _typo_distance(typed, name) <= (1 if len(name) <= 5 else 2)


def suggest_env_ids(env_id: str) -> list[str]:
    """Registered ids that ``env_id`` (without a ``module:`` prefix) most likely meant; may be empty.

    The rule, so that a suggestion never points to a different task with a similar name:

    1. the same env (namespace and name, case ignored) registered at another version: its highest
       version (``HalfCheetah-v9`` -> ``HalfCheetah-v5``; ``Pendulum`` -> ``Pendulum-v1``);
    2. otherwise a misspelling of a registered env's namespace/name (:func:`_same_task_spelling`:
       one or two edits, case ignored, the same digits): that env at the version written if it is
       registered, else at its highest version (``Hoper-v5`` -> ``Hopper-v5``,
       ``walker2D-v5`` -> ``Walker2d-v5``); ties all listed;
    3. nothing else: ``Walker-v5`` suggests no ``Walker2d-v5``, ``dmc/reacher_easy`` no
       ``dmc/reacher_hard``.
    """
    from gymnasium.envs.registration import parse_env_id

    try:
        ns, name, version = parse_env_id(env_id)
    except gym.error.Error:
        return []
    full = lambda n, m: f"{n}/{m}" if n else m  # noqa: E731
    typed = full(ns, name)
    versions: dict[str, dict[int | None, str]] = {}
    for spec in gym.registry.values():
        versions.setdefault(full(spec.namespace, spec.name), {})[spec.version] = spec.id

    def pick(registered: str) -> str:
        ids = versions[registered]
        if version in ids and registered != typed:
            return ids[version]
        numbered = [v for v in ids if v is not None and v != version]
        return ids[max(numbered)] if numbered else next(iter(ids.values()))

    same = [n for n in versions if n.lower() == typed.lower() and (n != typed or set(versions[n]) - {version})]
    if same:
        return [pick(same[0])]
    close = [(n, _typo_distance(typed, n)) for n in versions if _same_task_spelling(typed, n)]
    if not close:
        return []
    best = min(d for _, d in close)
    return sorted(pick(n) for n, d in close if d == best)


def split_env_id(env_id: str) -> tuple[str | None, str]:
    """``"my_pkg.envs:MyEnv-v0"`` -> ``("my_pkg.envs", "MyEnv-v0")``; ``"Pendulum-v1"`` -> ``(None, "Pendulum-v1")``.

    gymnasium's own ``module:env-id`` form (``gym.make`` imports the module, which registers the
    id, then looks the id up); one ``:`` at most."""
    if ":" not in env_id:
        return None, env_id
    parts = env_id.split(":")
    if len(parts) != 2:
        raise ValueError(
            f"Environment id {env_id!r} has {len(parts) - 1} ':'; write it as module:Env-v0 (one ':', the module to "
            "import before the id is looked up) or Env-v0."
        )
    module, the_id = parts
    if not the_id:
        raise ValueError(f"Environment id {env_id!r} names no environment after ':'; write it as module:Env-v0.")
    return module, the_id


def check_env_id(env_id: str) -> None:
    """Raise one clear ValueError unless ``env_id`` names a registered gymnasium environment.

    ``module:Env-v0`` (gymnasium's form) imports ``module`` first, as ``gym.make`` does, so a package
    (or the user's own module) that calls ``gymnasium.register`` on import provides the id; a module
    that cannot be imported is one sentence naming it. An unknown id suggests only what
    :func:`suggest_env_ids` finds (the same env at another version, or a misspelling of it), never a
    different task with a similar name. Versions are required (gymnasium would pick the highest).
    """
    import rlfunc.envs  # noqa: F401  (registers rlfunc's own envs)

    if not isinstance(env_id, str) or not env_id.strip():
        raise ValueError(f"An environment id must be a gymnasium id such as 'Pendulum-v1', got {env_id!r}.")
    if env_id != env_id.strip():
        raise ValueError(f"Environment id {env_id!r} has spaces around it; write {env_id.strip()!r}.")
    module, the_id = split_env_id(env_id)
    if module is not None:
        if not _USER_IMPORTS.get():
            if not all(part.isidentifier() for part in module.split(".")):
                raise ValueError(f"Environment id {env_id!r} names module {module!r}, which is not a Python module name.")
            return  # checked when the env is made (without_user_imports)
        _check_loaded_import(module, f"env.id {env_id!r}")
        _import_named(module, f"Environment id {env_id!r}")
    if the_id in gym.registry:
        return
    prefix = f"{module}:" if module is not None else ""
    close = [prefix + s for s in suggest_env_ids(the_id)]
    if close:
        hint = "; did you mean " + " or ".join(repr(c) for c in close) + "?"
    elif module is not None:
        hint = f"; importing {module!r} registered no such id (it must call gymnasium.register({the_id!r}, ...))."
    else:
        hint = (
            f"; if a package registers it, write {'package:' + the_id!r} so that it is imported first "
            "(gymnasium.pprint_registry() lists the ids registered now)."
        )
    raise ValueError(f"Unknown environment id {env_id!r}{hint}")


def _make_one(env_id: str, kwargs: dict[str, Any], wrappers: list[Callable], rescale_actions: bool):
    try:
        env = gym.make(env_id, **kwargs)
    except gym.error.DependencyNotInstalled as exc:
        detail = " ".join(str(exc).split()).rstrip(".")
        own = "pip install -e" in detail or "apt-get" in detail  # rlfunc's own envs (dmc, MinAtar) name the fix
        hint = _MUJOCO_HINT if "mujoco" in detail.lower() and not own else "install what it names"
        raise ValueError(f"Environment {env_id!r} needs a package that is not installed ({detail}); {hint}.") from None
    except ImportError as exc:  # the entry point's module, or a package the env imports when made
        missing = getattr(exc, "name", None)
        what = f"{missing!r}, which is not installed" if missing else f"an import that failed ({exc})"
        raise ValueError(f"Environment {env_id!r} could not be made: it needs {what}; pip install it.") from None
    except TypeError as exc:
        raise ValueError(f"Bad env.kwargs for {env_id!r}: {exc}; remove or rename that keyword.") from exc
    _check_render_mode(env, env_id, kwargs.get("render_mode"))
    for wrap in wrappers:
        env = _apply_wrapper(wrap, env)
    _refuse_discrete_start(env, env_id)
    if rescale_actions and isinstance(env.action_space, gym.spaces.Box):
        low, high = env.action_space.low, env.action_space.high
        if not (np.all(low == -1.0) and np.all(high == 1.0)):
            if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
                raise ValueError(f"Environment {env_id!r} has unbounded actions; rlfunc's policies need a bounded Box.")
            ones = np.ones(env.action_space.shape, dtype=np.float32)
            env = _ClippedRescaleAction(env, -ones, ones)
    return env


def _refuse_discrete_start(env: gym.Env, env_id: str) -> None:
    """A ``Discrete(n, start=s)`` action space with ``s != 0``: one ``ValueError`` sentence when the env is
    made, before any step. rlfunc's discrete agents (DQN, DRQN, R2D2) act, store and return action indices
    ``0..n-1`` and never add ``start`` (the env refused index ``n-1``, or took it as another action, and
    ``Policy.predict`` returned actions outside the space), so training, ``rlfunc.evaluate`` and the
    distributed actors all refuse such an env here, where every env of theirs is made."""
    space = env.action_space
    if isinstance(space, gym.spaces.Discrete) and int(space.start) != 0:
        start, n = int(space.start), int(space.n)
        env.close()
        raise ValueError(
            f"Environment {env_id!r} has actions {space}, numbered from {start} to {start + n - 1}, but rlfunc's "
            f"discrete agents act with indices 0 to {n - 1}; give the env a Discrete({n}) action space (start=0), "
            f"e.g. with an env.wrappers entry that adds {start} to each action before the env's step."
        )


class _ClippedRescaleAction(gym.wrappers.RescaleAction):
    """gymnasium's ``RescaleAction`` from ``[-1, 1]``, its action clipped into the env's own bounds in the env's
    own dtype: gymnasium's inverse rescaling rounds a saturated action (+-1) one ulp outside many bounds (a sixth
    of random ones), e.g. ``[-2.11, 0.15]`` (float32) or ``[-4.8, 0.09]`` (float64), which an env that checks
    ``action_space.contains`` refuses (:meth:`Policy.predict <rlfunc.runtime.policy.Policy.predict>` clips the
    same way)."""

    def __init__(self, env: gym.Env, min_action: np.ndarray, max_action: np.ndarray) -> None:
        space = env.action_space
        super().__init__(env, min_action, max_action)
        self._native_low, self._native_high, self._native_dtype = space.low, space.high, space.dtype

    def action(self, action):
        action = super().action(action)
        if not np.issubdtype(self._native_dtype, np.floating):  # an integer Box: rescaled as gymnasium does
            return action
        return np.clip(np.asarray(action, dtype=self._native_dtype), self._native_low, self._native_high)


def _check_render_mode(env: gym.Env, env_id: str, mode: Any) -> None:
    """``env.kwargs.render_mode`` is one the env declares (gymnasium only warns, and the env never renders)."""
    modes = env.metadata.get("render_modes") if isinstance(env.metadata, dict) else None
    if mode is None or not isinstance(modes, (list, tuple)) or not modes or mode in modes:
        return
    env.close()
    raise ValueError(
        f"env.kwargs.render_mode {mode!r} is not a render mode of {env_id!r}; set one of "
        f"{', '.join(repr(m) for m in modes)} or remove it."
    )


def _sentence(exc: BaseException) -> str:
    """``exc``'s message as one clause: whitespace collapsed, inner sentence ends turned into semicolons."""
    import re

    text = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    return re.sub(r"\.\s+(?=[A-Z])", "; ", text)


def _apply_wrapper(wrap: Callable, env: gym.Env) -> gym.Env:
    """``wrap(env)``; a gymnasium or user wrapper that refuses its arguments (or the env) is one
    ``ValueError`` sentence naming its ``env.wrappers`` entry (rlfunc's own wrappers name themselves)."""
    cls = getattr(wrap, "func", None)
    entry = getattr(wrap, "entry", None)
    if entry is None or (isinstance(cls, type) and cls.__module__.startswith("rlfunc.")):
        return wrap(env)
    try:
        return wrap(env)
    except gym.error.DependencyNotInstalled as exc:  # AtariPreprocessing without OpenCV
        hint = 'install it with pip install -e ".[atari]"' if "opencv" in str(exc).lower() else "install what it names"
        raise ValueError(
            f"env.wrappers entry {entry!r} needs a package that is not installed ({_sentence(exc)}); {hint}."
        ) from None
    except (AssertionError, ValueError, TypeError, gym.error.Error) as exc:
        args = f" {dict(wrap.keywords)}" if getattr(wrap, "keywords", None) else ""
        raise ValueError(
            f"env.wrappers entry {entry!r}{args} refused the env or its arguments ({_sentence(exc)}); "
            "fix the arguments or remove the wrapper."
        ) from None


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
    or flicker wrappers). ``seed`` seeds the first reset (a first ``reset()`` without a
    seed of its own is ``reset(seed=seed)``; later ones continue from it) and the action
    space.
    """
    check_env_id(env_id)
    env = _make_one(env_id, dict(kwargs or {}), list(wrappers or []), rescale_actions)
    if seed is not None:
        env.action_space.seed(seed)
        env = _SeedFirstReset(env, seed)
    return env


class _SeedFirstReset(gym.Wrapper):
    """:func:`make_env`'s ``seed``: the env's first ``reset()`` without a seed of its own uses it.

    Before, ``make_env(..., seed=s)`` seeded only the action space, and the first episode
    (initial state, no-op count, flicker draws) came from an unseeded generator."""

    def __init__(self, env: gym.Env, seed: int) -> None:
        super().__init__(env)
        self._first_seed: int | None = int(seed)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if self._first_seed is not None:
            seed = self._first_seed if seed is None else seed
            self._first_seed = None
        return self.env.reset(seed=seed, options=options)


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
    return gym.vector.SyncVectorEnv(env_fns(env_id, num_envs, kwargs=kwargs, wrappers=wrappers, rescale_actions=rescale_actions))


def env_fns(
    env_id: str,
    num_envs: int,
    *,
    kwargs: dict[str, Any] | None = None,
    wrappers: list[Callable] | None = None,
    rescale_actions: bool = True,
) -> list[Callable[[], gym.Env]]:
    """The constructors of ``num_envs`` copies (each :func:`make_env`'s env): what a vector env takes."""
    check_env_id(env_id)
    if num_envs < 1:
        raise ValueError(f"env.num_envs must be at least 1, got {num_envs}.")
    return [
        (lambda: _make_one(env_id, dict(kwargs or {}), list(wrappers or []), rescale_actions))
        for _ in range(num_envs)
    ]


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
    # gymnasium's own, to adapt envs from other packages
    "flatten": "gymnasium.wrappers:FlattenObservation",  # Discrete one-hot, Dict/Tuple/MultiDiscrete -> one flat Box
    "clip_reward": "gymnasium.wrappers:ClipReward",  # min_reward, max_reward
    "normalize_reward": "gymnasium.wrappers:NormalizeReward",  # gamma, epsilon (running statistics, not checkpointed)
    "time_limit": "gymnasium.wrappers:TimeLimit",  # max_episode_steps: truncate episodes
}
"""Short names usable in a config's ``env.wrappers`` list -> ``module:class``. Besides these, an
entry may name any gymnasium wrapper class as ``gymnasium.wrappers.ClassName`` and a wrapper class
of the user's own as ``module:ClassName`` (see :func:`build_wrappers`)."""

def _arg_value(value: Any, tp: Any) -> Any:
    """``value`` checked (and YAML-1.1 number strings such as ``"1e-3"`` read) against annotation ``tp``;
    raises ``TypeError`` if it does not fit. Unknown annotations pass."""
    if tp is inspect.Parameter.empty or tp is Any:
        return value
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        # the annotations read here first, then one this function does not know (which passes the value
        # as it is): `np.floating | np.ndarray` reads a YAML list as the array, not as an unknown "np.floating"
        members = sorted(typing.get_args(tp), key=lambda a: not _known_annotation(a))
        for arg in members:
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
    if tp is np.ndarray:  # gymnasium's per-entry bounds (ClipReward's min_reward, ...): numbers from YAML
        try:
            arr = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError from None
        if arr.ndim == 0 or isinstance(value, bool):
            raise TypeError  # a single number is read by the annotation's float, where it has one
        return arr
    if origin in (list, tuple, collections.abc.Sequence) or tp in (list, tuple):
        if not isinstance(value, (list, tuple)):
            raise TypeError
        given = typing.get_args(tp)
        args = [a for a in given if a is not Ellipsis]
        if (origin is tuple or tp is tuple) and args and Ellipsis not in given:  # tuple[int, int]: that many entries
            if len(value) != len(args):
                raise TypeError
            return tuple(_arg_value(v, a) for v, a in zip(value, args))
        out = [_arg_value(v, args[0]) if args else v for v in value]
        # YAML has no tuples: a tuple-annotated argument (AtariPreprocessing's screen_size, ResizeObservation's
        # shape) gets a tuple, which those wrappers require
        return tuple(out) if origin is tuple or tp is tuple else out
    return value


def _known_annotation(tp: Any) -> bool:
    """Whether :func:`_arg_value` reads ``tp`` (else it passes any value)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return any(_known_annotation(a) for a in typing.get_args(tp))
    return tp in (type(None), bool, int, float, str, np.ndarray, list, tuple) or origin in (
        list, tuple, collections.abc.Sequence
    )


def _type_text(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    if origin in (list, tuple, collections.abc.Sequence):
        given = typing.get_args(tp)
        args = [a for a in given if a is not Ellipsis]
        plural = {int: "integers", float: "numbers", bool: "booleans", str: "strings"}
        if origin is tuple and len(args) > 1 and Ellipsis not in given and len(set(args)) == 1:
            return f"a list of {len(args)} {plural.get(args[0], 'values')}"
        return f"a list of {plural.get(args[0], 'values')}" if args else "a list"
    if tp is np.ndarray:
        return "a list of numbers"
    return {int: "an integer", float: "a number", bool: "true or false", str: "a string"}.get(tp, getattr(tp, "__name__", str(tp)))


def _gymnasium_wrapper_names() -> list[str]:
    """The class names gymnasium.wrappers exports (names only: some load optional packages lazily)."""
    import gymnasium.wrappers as gw

    return sorted(n for n in getattr(gw, "__all__", ()) if n[:1].isupper())


def _unknown_wrapper(name: Any) -> ValueError:
    text = str(name)
    gym_names = _gymnasium_wrapper_names()
    if text in gym_names:
        hint = f"; gymnasium's wrapper is named 'gymnasium.wrappers.{text}'."
    else:
        close = difflib.get_close_matches(text, list(WRAPPERS), n=1)
        if not close:
            close = [f"gymnasium.wrappers.{c}" for c in difflib.get_close_matches(text, gym_names, n=1, cutoff=0.7)]
        hint = (
            f"; did you mean {close[0]!r}?" if close
            else f"; valid names are {sorted(WRAPPERS)}, gymnasium.wrappers.ClassName or module:ClassName."
        )
    return ValueError(f"Unknown env wrapper {name!r} in env.wrappers{hint}")


def _wrapper_class(name: Any) -> type:
    """The wrapper class an ``env.wrappers`` entry names (one ``ValueError`` sentence if none).

    A short name of :data:`WRAPPERS`; ``gymnasium.wrappers.ClassName`` (only that module is
    looked in); or ``module:ClassName``, the user's own module, imported as an env id's module is.
    The class must be a ``gymnasium.Wrapper``."""
    import importlib

    if not isinstance(name, str):
        raise _unknown_wrapper(name)
    _check_loaded_wrapper(name)
    if name in WRAPPERS:
        mod, _, attr = WRAPPERS[name].partition(":")
        return getattr(importlib.import_module(mod), attr)
    if name.startswith("gymnasium.wrappers."):
        import gymnasium.wrappers as gw

        attr = name[len("gymnasium.wrappers."):]
        try:
            cls = getattr(gw, attr, None) if attr.isidentifier() else None
        except ImportError as exc:  # a wrapper gymnasium loads lazily, whose optional package is missing
            raise ValueError(
                f"env.wrappers entry {name!r} needs {exc.name or 'a package'!r}, which is not installed; pip install it."
            ) from None
        if not (isinstance(cls, type) and issubclass(cls, gym.Wrapper)):
            close = difflib.get_close_matches(attr, _gymnasium_wrapper_names(), n=1, cutoff=0.6)
            hint = f"; did you mean 'gymnasium.wrappers.{close[0]}'?" if close else "."
            raise ValueError(f"env.wrappers entry {name!r}: gymnasium.wrappers has no wrapper class {attr!r}{hint}")
        return cls
    if ":" in name:
        module, _, attr = name.partition(":")
        if not attr or not all(part.isidentifier() for part in attr.split(".")):
            raise ValueError(f"env.wrappers entry {name!r} must be module:ClassName, e.g. my_package.wrappers:MyWrapper.")
        _check_loaded_import(module, f"env.wrappers entry {name!r}")
        obj: Any = _import_named(module, f"env.wrappers entry {name!r}")
        # from a loaded file, a module's __getattr__ (which may import more, as gymnasium.wrappers' does)
        # is not called unless the user allowed the module
        static = _LOADED.get() is not None and not _allowed(module)
        for part in attr.split("."):
            found = inspect.getattr_static(obj, part, _MISSING) if static else getattr(obj, part, _MISSING)
            if found is _MISSING:
                raise ValueError(f"env.wrappers entry {name!r}: module {module!r} has no {attr!r}.")
            obj = found
        if not (isinstance(obj, type) and issubclass(obj, gym.Wrapper)):
            raise ValueError(
                f"env.wrappers entry {name!r} is not a gymnasium.Wrapper class; name a class whose __init__ takes the "
                "env first."
            )
        _check_loaded_wrapper(name, obj)
        return obj
    raise _unknown_wrapper(name)


_MISSING = object()


def _lazy_gymnasium_wrapper(name: str) -> bool:
    """Whether ``name`` is ``gymnasium.wrappers.ClassName`` of a wrapper gymnasium imports only when it
    is first used (a module of its own, e.g. the jax and torch converters)."""
    import gymnasium.wrappers as gw

    attr = name[len("gymnasium.wrappers."):] if name.startswith("gymnasium.wrappers.") else ""
    return attr in _gymnasium_wrapper_names() and attr not in vars(gw)


def _is_callable_type(tp: Any) -> bool:
    return tp is collections.abc.Callable or typing.get_origin(tp) is collections.abc.Callable


def _wrap_later(entry: dict, env):
    """Apply a ``module:ClassName`` wrapper whose checks were deferred by :func:`without_user_imports`."""
    return _apply_wrapper(build_wrappers([entry])[0], env)


def build_wrappers(spec: list) -> list[Callable]:
    """``["mask_velocity", {"flicker": {"p": 0.5}}]`` -> wrapper callables, validated.

    An entry is a name or ``{name: {argument: value}}``. A name is one of
    :data:`WRAPPERS` (rlfunc's own, and short names for gymnasium's
    ``flatten``, ``clip_reward``, ``normalize_reward``, ``time_limit``), any
    gymnasium wrapper class as ``gymnasium.wrappers.ClassName`` (e.g.
    ``{gymnasium.wrappers.NormalizeObservation: {epsilon: 1e-8}}``), or a
    ``gymnasium.Wrapper`` class of the user's own as ``module:ClassName``
    (the module is imported here, as an env id's module is). Nothing else is
    imported.

    Argument names are checked against the wrapper's signature (and required
    ones must be given), argument types against its annotations (YAML number
    strings such as ``1e-3`` are read as numbers; a function, e.g.
    ``TransformReward``'s ``func``, cannot come from a config), and values by
    the wrapper's ``check_arguments`` where it has one (what needs no env, e.g.
    flicker's ``p`` in [0, 1]); each fault is one ``ValueError`` sentence. The
    rest (e.g. mask_velocity's indices against the observation size) is
    checked by the wrapper when the env is made.

    Reward wrappers change the reward the agent learns from *and* the
    returns evaluation reports, since the evaluation env is wrapped the same
    way; ``normalize_reward``'s running statistics start afresh in every env
    (they are not checkpointed).
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
        if isinstance(name, str) and not _USER_IMPORTS.get() and (":" in name or _lazy_gymnasium_wrapper(name)):
            # a module to import (without_user_imports): imported and checked when the env is made
            out.append(functools.partial(_wrap_later, {name: kwargs}))
            continue
        cls = _wrapper_class(name)
        params = dict(list(inspect.signature(cls).parameters.items())[1:])  # after the wrapped env
        named = {p: v for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD, v.POSITIONAL_ONLY)}
        try:
            hints = typing.get_type_hints(cls.__init__)
        except Exception:  # noqa: BLE001 -- unresolvable annotations: names are still checked
            hints = {}
        for key, value in kwargs.items():
            if key not in named:
                raise ValueError(
                    f"env.wrappers: {name!r} has no argument {key!r}; its arguments are {', '.join(named) or 'none'}."
                )
            tp = hints.get(key, inspect.Parameter.empty)
            if _is_callable_type(tp):
                raise ValueError(
                    f"env.wrappers: {name!r} argument {key!r} must be a Python function, which a config cannot hold; "
                    "write a wrapper class in your own module and name it as module:ClassName."
                )
            try:
                kwargs[key] = _arg_value(value, tp)
            except TypeError:
                raise ValueError(
                    f"env.wrappers: {name!r} argument {key!r} must be {_type_text(tp)}, got {value!r}."
                ) from None
        missing = [p for p, v in named.items() if v.default is inspect.Parameter.empty and p not in kwargs]
        if missing:
            if any(_is_callable_type(hints.get(p)) for p in missing):
                raise ValueError(
                    f"env.wrappers: {name!r} needs a Python function ({', '.join(missing)}), which a config cannot "
                    "hold; write a wrapper class in your own module and name it as module:ClassName."
                )
            example = ", ".join(f"{p}: ..." for p in missing)
            raise ValueError(
                f"env.wrappers: {name!r} needs argument(s) {', '.join(missing)}; write it as {{{name}: {{{example}}}}}."
            )
        check = getattr(cls, "check_arguments", None)
        if check is not None:
            check(**kwargs)  # the wrapper's own checks that need no env (e.g. flicker p in [0, 1])
        wrap = functools.partial(cls, **kwargs)
        wrap.entry = name  # named in the sentence if the wrapper refuses the env (_apply_wrapper)
        out.append(wrap)
    return out
