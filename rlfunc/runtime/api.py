"""The Python entry points behind ``rlfunc.load``, ``rlfunc.evaluate`` and ``rlfunc export``."""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.runtime.checkpoint import CheckpointError, check_structure, load_checkpoint, resolve_checkpoint, save_checkpoint
from rlfunc.runtime.config import ConfigError, build_config
from rlfunc.runtime.policy import Policy

__all__ = ["load", "evaluate", "export", "is_weights_only", "check_device"]

_EXPORT_META_KEYS = (
    "algo", "config", "obs_shape", "action_low", "action_high", "num_actions", "dataset",
    "env_step", "updates", "gradient_steps", "evals",
)
"""What an export keeps of its checkpoint's meta.json: what :func:`load` needs, and provenance."""


def check_device(device: str | torch.device) -> torch.device:
    """``device`` parsed and available here, else one ``ValueError`` sentence
    (:func:`rlfunc.algos._inputs.check_device_arg`, without ``meta``)."""
    from rlfunc.algos._inputs import check_device_arg

    return check_device_arg(device, allow_meta=False)


def as_path(value, what: str) -> Path:
    """``value`` (a ``str``, ``pathlib.Path``/``os.PathLike`` or ``bytes`` path) as a :class:`Path`; anything else
    (``None``, a number, a list) is one ``TypeError`` sentence naming the argument, not pathlib's."""
    if isinstance(value, bytes):
        value = os.fsdecode(value)
    if isinstance(value, (str, os.PathLike)):
        path = os.fspath(value)
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        if isinstance(path, str) and path:
            return Path(path)
    raise TypeError(f"{what} must be a file-system path (a str or pathlib.Path), got {value!r}.")


def _load_parts(path: str | Path):
    """Read and verify a checkpoint or export -> ``(ckpt, meta, run_config, spaces, params)``."""
    path = as_path(path, "path")
    tensors, meta = load_checkpoint(path)
    ckpt = resolve_checkpoint(path)
    if "population" in meta:
        raise CheckpointError(
            f"{str(ckpt)!r} is a population's checkpoint, which holds every member; pass one member's run "
            f"directory instead (load, eval and export take it as an ordinary run), e.g. {str(ckpt.parent.parent / 'member-0')!r}."
        )
    config = _stored_config(ckpt, meta)
    spaces = _stored_spaces(ckpt, meta)
    state = tensors.get("state") if "state" in tensors.keys() else None
    params = state.get("params") if isinstance(state, TensorDict) and "params" in state.keys() else None
    if not isinstance(params, TensorDict):
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} has no parameter tensors (state/params); use a checkpoint `rlfunc train` wrote.")
    stored = sum(t.numel() for t in params.values(True, True) if isinstance(t, torch.Tensor))
    if math.prod(spaces[0]) > max(stored, _OBS_ELEMENTS_MIN_BOUND):
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} has an obs_shape of {math.prod(spaces[0])} elements in meta.json, more than the "
            f"{stored} parameters it holds could take in; use a checkpoint `rlfunc train` wrote."
        )
    try:
        expected = _expected_params(config, *spaces)
    except ValueError as exc:  # the algorithm cannot take these spaces (e.g. a 3-D obs_shape for REDQ)
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} does not fit its config: {exc}") from None
    check_structure(ckpt, TensorDict({"params": params}, []), expected, "params")
    return ckpt, meta, config, spaces, params


def load(path: str | Path, device: str = "cpu") -> Policy:
    """The policy of a run directory, checkpoint or export (:func:`export`).

    ``rlfunc.load("runs/redq-...").predict(obs)`` gives ``(action, state)``
    as Stable-Baselines3 does, ``.act(obs)`` the evaluation action; actions are
    in the env's own action space (:class:`~rlfunc.runtime.policy.Policy`).
    The checkpoint is verified (see :mod:`rlfunc.runtime.checkpoint`: nothing in
    it is ever executed) and its parameters must be exactly those its config
    builds; anything else is a :class:`~rlfunc.runtime.checkpoint.CheckpointError`
    naming the file. ``device``: where the parameters live and the network runs
    (``cpu``, ``cuda``, ``cuda:1``); one that is not available here is a
    ``ValueError`` before anything is read.
    """
    path = as_path(path, "path")
    check_device(device)
    _, _, config, (obs_shape, low, high, _), params = _load_parts(path)
    policy = Policy(config.algo, params, config.agent, low, high, obs_shape, device)
    policy.run_config = config
    return policy


def _stored_config(ckpt: Path, meta: dict[str, Any]):
    raw = meta.get("config")
    if not isinstance(raw, dict):
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} holds no run config; it was not written by `rlfunc train`.")
    try:
        return build_config(raw, resolved=True)  # a config rlfunc wrote, possibly an older version's
    except ConfigError as exc:
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} holds a config this rlfunc rejects: {exc}") from None


def _stored_spaces(ckpt: Path, meta: dict[str, Any]):
    """``(obs_shape, action_low, action_high, num_actions)`` from meta.json, checked."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"Checkpoint {str(ckpt)!r} has an invalid {what} in meta.json; use a checkpoint `rlfunc train` wrote.")

    obs_shape = meta.get("obs_shape")
    if not (isinstance(obs_shape, list) and obs_shape and all(isinstance(d, int) and d > 0 for d in obs_shape)):
        raise bad("obs_shape")
    low, high = meta.get("action_low"), meta.get("action_high")
    if (low is None) != (high is None):
        raise bad("action bounds")
    if low is not None:
        try:
            exact = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
            with np.errstate(over="ignore"):  # beyond float32's range is inf, refused below
                low, high = exact[0].astype(np.float32), exact[1].astype(np.float32)
        except (TypeError, ValueError):
            raise bad("action bounds") from None
        if (low.ndim != 1 or low.shape != high.shape or low.size == 0 or not np.all(low < high)
                or not (np.isfinite(low).all() and np.isfinite(high).all())):  # training refuses infinite bounds too
            raise bad("action bounds")
        if not (np.array_equal(exact[0], low) and np.array_equal(exact[1], high)):
            low, high = exact  # a float64 space's bounds (-0.1): the policy clips to them exactly, in float64
    num_actions = meta.get("num_actions")
    if num_actions is not None and not (isinstance(num_actions, int) and num_actions > 0):
        raise bad("num_actions")
    if low is None and num_actions is None:
        raise bad("action space (neither action bounds nor num_actions)")
    return tuple(obs_shape), low, high, num_actions


_OBS_ELEMENTS_MIN_BOUND = 2**22
"""An ``obs_shape`` of up to this many elements (4 x 1024 x 1024) is always built; a larger one must not
exceed the checkpoint's parameter count. Every network here takes an observation in through weights
that grow with its size (an MLP's first layer, the linear or LSTM layer after a conv torso's flattened
output: measured, at least 1.7 parameters per observation element, for DrQ-v2 with feature and hidden
sizes of 1, and over 100 at the algorithms' defaults), so a genuine
checkpoint passes; the bound stops a crafted meta.json ``obs_shape`` from allocating gigabytes (the
``gym.spaces.Box`` bounds) before the parameter shapes are compared (review of the checkpoint loader)."""


def _expected_params(config, obs_shape, low, high, num_actions) -> TensorDict:
    """The parameter structure ``config``'s algorithm builds for these spaces, as ``{"params": ...}``."""
    import gymnasium as gym

    from rlfunc.runtime.registry import get_algo

    obs_space = gym.spaces.Box(-np.inf, np.inf, shape=obs_shape, dtype=np.float32)
    if low is not None:
        act_space = gym.spaces.Box(-1.0, 1.0, shape=low.shape, dtype=np.float32)
    else:
        act_space = gym.spaces.Discrete(num_actions)
    # on the meta device (also the default of tensors made without a device): shapes and dtypes only, so a
    # crafted config (hidden sizes, action count) allocates nothing
    with torch.device("meta"):
        state = get_algo(config.algo).algo.init(config.agent, obs_space, act_space, seed=0, device="meta")
    return TensorDict({"params": state["params"]}, batch_size=[])


# -- export ---------------------------------------------------------------------------------


def export(path: str | Path, out: str | Path) -> Path:
    """Write the policy of a run or checkpoint to ``out`` as a weights-only export.

    The export is a checkpoint in the same safe, verified format
    (:mod:`rlfunc.runtime.checkpoint`: raw tensor files + a manifest, never a
    pickle) holding only the parameters (``state/params``) and the meta.json
    entries :func:`load` needs (algo, config, observation shape, action bounds
    or count) plus the training counters for provenance, marked
    ``weights_only: true`` as the trainer marks ``train.keep_best``'s ``best/``
    policy. No targets, optimizer state, replay or generator
    states: it is a fraction of a training checkpoint's size, readable by
    :func:`load`, ``rlfunc eval`` and ``rlfunc dataset collect --checkpoint``,
    and ``rlfunc resume`` refuses it. ``out`` must be new or empty; returns the
    checkpoint directory written (``out/step_<N>``).
    """
    path = as_path(path, "path")
    out = as_path(out, "out")
    if out.exists() and not out.is_dir():
        what = "a file" if out.is_file() else "not a directory"
        raise ValueError(f"Export directory {str(out)!r} is {what}; pass a new directory.")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"Export directory {str(out)!r} already exists and is not empty; pass a new directory.")
    ckpt, meta, config, _, params = _load_parts(path)
    exported = {k: meta[k] for k in _EXPORT_META_KEYS if k in meta}
    exported["algo"] = config.algo
    exported["weights_only"] = True
    exported["exported_from"] = ckpt.name
    step = meta.get("env_step")
    step = step if isinstance(step, int) and 0 <= step < 10**9 else 0
    tensors = TensorDict({"state": TensorDict({"params": params}, batch_size=[])}, batch_size=[])
    return save_checkpoint(out, f"step_{step:09d}", tensors, exported)


_EXPORT_META_MAX = 16 * 2**20


def is_weights_only(path: str | Path) -> bool:
    """True when the checkpoint ``path`` resolves to holds a policy's weights only (an
    :func:`export`, or a run's ``best/`` policy), not a training state. Reads meta.json as
    JSON only (nothing else is read or verified); False for anything else."""
    try:
        ckpt = resolve_checkpoint(path)
        with open(ckpt / "meta.json", "rb") as f:
            raw = f.read(_EXPORT_META_MAX + 1)
        if len(raw) > _EXPORT_META_MAX:
            return False
        meta = json.loads(raw.decode("utf-8"))
    except (CheckpointError, OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(meta, dict) and meta.get("weights_only") is True


def check_resume_packages(run_dir: str | Path, address: str | None = None, trust_wandb_settings: bool = False) -> None:
    """The packages resuming the run in ``run_dir`` needs for its loggers (TensorBoard, tqdm, W&B:
    :func:`~rlfunc.runtime.config.check_train_packages`), checked from its newest checkpoint's meta.json
    read as JSON only, before any checkpoint's tensors are read or verified: one sentence naming the
    install command; the resume of a single run and of a population call it before taking the run's lock.
    So is what the stored config may not do without the user's consent (a ``distributed.address`` to join,
    ``train.wandb`` keys that redirect W&B: :func:`rlfunc.runtime.resume_checks.consent_to_loaded`, with the
    resume's ``address`` and ``trust_wandb_settings``; the resume checks the checkpoint it loads again).
    Anything this cannot read (no checkpoints there, a damaged meta.json, a config that does not build) is
    left to the resume itself, which says it in its own words."""
    from rlfunc.runtime.checkpoint import _read_meta
    from rlfunc.runtime.config import check_train_packages

    try:
        run_dir = Path(os.fsdecode(run_dir))
        if not (run_dir / "checkpoints").is_dir():
            return
        raw = _read_meta(resolve_checkpoint(run_dir)).get("config")
        config = build_config(raw, resolved=True) if isinstance(raw, dict) else None
    except Exception:  # the resume reads the same files and names what is wrong with them
        return
    if config is not None:
        from rlfunc.runtime.resume_checks import consent_to_loaded

        check_train_packages(config.train, resuming=True)
        consent_to_loaded(config, address, trust_wandb_settings)


# -- evaluation -----------------------------------------------------------------------------


def _render_modes(env_id: str) -> list[str] | None:
    """The render modes ``env_id``'s registered class declares (``None`` if that cannot be told)."""
    import gymnasium as gym

    try:
        entry = gym.spec(env_id).entry_point
        creator = entry if callable(entry) else gym.envs.registration.load_env_creator(entry)
    except Exception:  # an id gymnasium resolves otherwise: make_env says what is wrong with it
        return None
    modes = (getattr(creator, "metadata", None) or {}).get("render_modes")
    return None if modes is None else list(modes)


def _video_env_kwargs(env_id: str, kwargs: dict[str, Any] | None) -> dict[str, Any]:
    """Env kwargs that make ``env_id`` render rgb_array frames for RecordVideo (checked first)."""
    try:
        import moviepy  # noqa: F401
    except ImportError:
        raise ValueError('Recording video needs moviepy, which is not installed; run pip install -e ".[video]".') from None
    modes = _render_modes(env_id)
    if modes is not None and "rgb_array" not in modes:
        raise ValueError(f"Environment {env_id!r} cannot render rgb_array frames, so its episodes cannot be recorded.")
    kwargs = dict(kwargs or {})
    mode = kwargs.setdefault("render_mode", "rgb_array")
    if mode != "rgb_array":
        raise ValueError(
            f"Recording video needs render_mode='rgb_array', but the run's env.kwargs set render_mode={mode!r}."
        )
    import os

    from rlfunc.envs.dmc import select_gl_backend

    if not os.environ.get("DISPLAY") and not os.environ.get("WAYLAND_DISPLAY"):
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")  # pygame (classic control) renders off-screen, quietly
        try:  # MuJoCo (gymnasium's and DMC) renders headless through EGL or OSMesa
            select_gl_backend()
        except RuntimeError:
            pass  # classic-control envs render without GL; a MuJoCo env then says what is missing
    return kwargs


def _video_prefix(algo: str, env_id: str) -> str:
    """The ``name_prefix`` of an evaluation's videos: files ``<prefix>-episode-<i>.mp4``."""
    return f"{algo}-{re.sub(r'[^A-Za-z0-9_.-]+', '_', env_id)}"


def _refuse_old_videos(video_dir: Path, prefix: str, episodes: int) -> None:
    """Refuse a ``video_dir`` already holding a video this evaluation would write over (RecordVideo
    names episode ``i`` ``<prefix>-episode-<i>.mp4`` and replaces such a file with a warning only)."""
    if not video_dir.is_dir():
        return
    pattern = re.compile(re.escape(prefix) + r"-episode-(0|[1-9][0-9]*)\.mp4")
    taken = sorted(
        (int(m.group(1)), name)
        for name in os.listdir(video_dir)
        if (m := pattern.fullmatch(name)) and int(m.group(1)) < episodes
    )
    if taken:
        raise ValueError(
            f"Video directory {str(video_dir)!r} already holds videos this evaluation would overwrite "
            f"(the first: {taken[0][1]!r}); pass a new directory or remove them."
        )


def _refuse_other_env(policy: Policy, env, env_id: str, env_cfg) -> None:
    """An env whose observations (or continuous actions) the policy cannot take (``env_id=`` another env's
    id): one ``ValueError`` sentence naming the env the policy was trained on, before any episode (the
    policy's own sentence came at the first step and asked for observations the caller never passed)."""
    import gymnasium as gym

    obs_space, act_space = env.observation_space, env.action_space
    problem = None
    if isinstance(obs_space, gym.spaces.Box) and tuple(obs_space.shape) != tuple(policy.obs_shape):
        problem = f"observations of shape {tuple(obs_space.shape)}, but this {policy.algo_name} policy takes {tuple(policy.obs_shape)}"
    elif policy.action_low is not None and (
        not isinstance(act_space, gym.spaces.Box) or tuple(act_space.shape) != tuple(policy.action_low.shape)
    ):
        problem = f"actions {act_space}, but this {policy.algo_name} policy acts in a Box of shape {tuple(policy.action_low.shape)}"
    if problem is not None:
        env.close()
        trained = f" ({env_cfg.id!r}, with its wrappers)" if env_cfg is not None else ""
        raise ValueError(f"Environment {env_id!r} has {problem}; evaluate it on the env it was trained on{trained}.")


def evaluate(
    path_or_policy: str | Path | Policy,
    episodes: int = 10,
    seed: int = 10_000,
    env_id: str | None = None,
    *,
    stochastic: bool = False,
    device: str = "cpu",
    video_dir: str | Path | None = None,
    allow_import: Sequence[str] = (),
    max_episode_steps: int | None = None,
) -> dict[str, Any]:
    """Run ``episodes`` episodes; returns ``{"mean", "std", "returns", "videos"}``.

    The env defaults to the one the agent was trained on (same kwargs and
    wrappers). Actions are the evaluation action
    (:meth:`~rlfunc.runtime.policy.Policy.act`), or with ``stochastic=True``
    the algorithm's own exploration, seeded by ``seed``
    (:class:`~rlfunc.runtime.policy.Policy`). ``device``: where a loaded
    policy runs (checked when given a Policy too, which keeps its own). ``video_dir``: record every episode there as
    ``<algo>-<env>-episode-<i>.mp4`` with gymnasium's ``RecordVideo`` (needs
    moviepy: ``pip install -e ".[video]"``; MuJoCo and DMC envs render
    headless through EGL); ``videos`` lists the files. A ``video_dir`` already holding a file
    of that name for one of these episodes (an earlier evaluation's video) is refused with a
    ``ValueError`` sentence before the env is made, never written over; other files are fine.
    ``max_episode_steps``: end (truncate) each episode after at most this many steps, with
    gymnasium's ``TimeLimit`` around the env; by default an episode lasts as long as the env lets it
    (its own time limit, or until it terminates for an env without one).

    The env and wrappers of a loaded policy's stored config are made under
    :func:`rlfunc.envs.factory.from_loaded_file`, since the file may be someone else's: a module
    it names (``env.id`` ``module:Env-v0``, a ``module:ClassName`` wrapper) is imported only if it
    is already imported or listed in ``allow_import`` (a package allows its submodules), and a
    gymnasium wrapper that may render or write files (``RecordVideo``) only if listed there as
    ``gymnasium.wrappers.ClassName``; otherwise a ``ValueError`` sentence, before the env is made.
    The module of an ``env_id`` passed here is the caller's own, so it is allowed.
    """
    import contextlib

    import gymnasium as gym

    from rlfunc.envs import build_wrappers, check_env_id, make_env, split_env_id
    from rlfunc.envs.factory import from_loaded_file
    from rlfunc.runtime.evaluate import run_episodes

    from rlfunc.runtime.policy import _check_int  # the one integer check of the Python API

    episodes = _check_int(episodes, "episodes", 1)  # True is not one episode, 2.0 not two
    seed = _check_int(seed, "seed", 0)
    if max_episode_steps is not None:
        max_episode_steps = _check_int(max_episode_steps, "max_episode_steps", 1)
    if not isinstance(stochastic, (bool, np.bool_)):
        raise ValueError(f"stochastic must be True or False, got {stochastic!r}.")
    stochastic = bool(stochastic)
    check_device(device)  # also when given a Policy (which keeps its own device): "gpu" is a sentence, not ignored
    if env_id is not None and (not isinstance(env_id, str) or not env_id):
        raise ValueError(f"env_id must be a gymnasium environment id such as 'Pendulum-v1' (or None), got {env_id!r}.")
    if not isinstance(allow_import, str) and not (
        isinstance(allow_import, (list, tuple, set, frozenset)) and all(isinstance(m, str) for m in allow_import)
    ):
        raise ValueError(f"allow_import must be a module name or a list of them, got {allow_import!r}.")
    if not isinstance(path_or_policy, Policy):
        if hasattr(path_or_policy, "predict") or hasattr(path_or_policy, "act_normalized"):
            raise TypeError(
                f"path_or_policy must be a run directory, checkpoint or an rlfunc Policy (rlfunc.load), got "
                f"{type(path_or_policy).__name__}."
            )
        path_or_policy = as_path(path_or_policy, "path_or_policy")
    video_dir = as_path(video_dir, "video_dir") if video_dir is not None else None
    if video_dir is not None and video_dir.exists() and not video_dir.is_dir():
        raise ValueError(f"Video directory {str(video_dir)!r} is a file; pass a directory.")
    policy = path_or_policy if isinstance(path_or_policy, Policy) else load(path_or_policy, device=device)
    run_config = getattr(policy, "run_config", None)
    if env_id is None and run_config is None:
        raise ValueError("This policy does not know its env; pass env_id=...")
    env_cfg = run_config.env if run_config is not None else None
    the_id = env_id or env_cfg.id
    kwargs = env_cfg.kwargs if env_cfg and (env_id is None or env_id == env_cfg.id) else None
    allowed = [allow_import] if isinstance(allow_import, str) else list(allow_import)
    if env_id is not None and split_env_id(env_id)[0] is not None:
        allowed.append(split_env_id(env_id)[0])  # the caller wrote it
    prefix = None
    if video_dir is not None:
        prefix = _video_prefix(policy.algo_name, the_id)
        _refuse_old_videos(video_dir, prefix, episodes)  # before the env is made or any episode runs
    with from_loaded_file(allowed) if env_cfg is not None else contextlib.nullcontext():
        wrappers = build_wrappers(env_cfg.wrappers) if env_cfg else None
        check_env_id(the_id)  # before _render_modes, whose gym.spec would import a module:Env-v0's module
        if video_dir is not None:
            kwargs = _video_env_kwargs(the_id, kwargs)
        env = make_env(the_id, kwargs=kwargs, wrappers=wrappers)
    _refuse_other_env(policy, env, the_id, env_cfg)
    if max_episode_steps is not None:
        env = gym.wrappers.TimeLimit(env, max_episode_steps)
    if video_dir is not None:
        if "rgb_array" not in (env.metadata.get("render_modes") or []):
            env.close()
            raise ValueError(f"Environment {the_id!r} cannot render rgb_array frames, so its episodes cannot be recorded.")
        with warnings.catch_warnings():  # it warns of any existing directory: nothing is overwritten (refused above)
            warnings.filterwarnings("ignore", message=".*Overwriting existing videos")
            env = gym.wrappers.RecordVideo(
                env, str(video_dir), episode_trigger=lambda _: True, name_prefix=prefix, disable_logger=True
            )
    try:
        returns = run_episodes(policy, env, episodes, seed, stochastic=stochastic)
    finally:
        env.close()
    videos = []
    if video_dir is not None:
        videos = [str(p) for i in range(episodes) if (p := video_dir / f"{prefix}-episode-{i}.mp4").is_file()]
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns, "videos": videos}
