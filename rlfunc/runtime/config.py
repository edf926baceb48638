"""Run configuration: YAML files + ``--set key=value`` overrides, validated early.

A run config has four sections::

    algo: redq                 # a name from rlfunc.runtime.registry.ALGOS
    env:   {id, num_envs, kwargs, wrappers}
    train: {total_steps, learning_starts, replay_size, eval_every, ...}
    agent: {...}               # the algorithm's Config fields (paper defaults)
    data:  {path, format, offline_ratio, pretrain_steps}   # prior data (RLPD only)
    distributed: {actors, envs_per_actor, ...}   # R2D2 on Ray actors (optional)

Every key is checked against the dataclasses below (and the algorithm's
``Config``) before anything is built: an unknown key names the closest valid
one, a wrong type or value says what to change. :func:`build_config` also
checks what spans sections: ``algo`` and ``env.id`` are required; a ``train``
or ``data`` key the algorithm does not use is refused; a key of an earlier
version (:data:`RENAMED_KEYS`) names the key that took its place; the warm-up
fits ``train.total_steps`` and the replay (the learner's ``check_run_config``);
``env.wrappers`` name real wrappers and arguments. What needs the env's spaces (memory for the replay and the
networks, :mod:`rlfunc.runtime.memory`) is checked when the learner is made,
before anything is allocated and before any env step. Every error is one
:class:`ConfigError` sentence.
"""

from __future__ import annotations

import contextvars
import dataclasses
import difflib
import math
import numbers
import os
import re
import types
import typing
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "ConfigError",
    "EnvSection",
    "TrainSection",
    "DataSection",
    "DistributedSection",
    "RunConfig",
    "load_config",
    "load_yaml",
    "parse_overrides",
    "apply_overrides",
    "build_config",
    "to_dict",
    "DEFAULT_CONFIG",
    "RENAMED_KEYS",
]


class ConfigError(ValueError):
    """A configuration is invalid; the message says what to change."""


MAX_SEED = 2**32 - 1
"""The largest ``train.seed`` (numpy's and gymnasium's seeding range)."""

MAX_NUM_ENVS = 65_536
"""The most ``env.num_envs`` copies one run makes: they are stepped in turn in one process, so more is
a typo (``1e12`` would build its list of constructors for ever), refused before any env is made."""

MAX_TOTAL_STEPS = 10**12
"""The most ``train.total_steps``: a trillion env steps is weeks at a million steps per second, so more is a
typo (``2**63`` trained on with an ETA of millions of hours, and its counters would overflow int64)."""

MAX_THREADS = 1024
"""The largest ``train.threads``: more threads than any machine has cores is a typo (torch's
``set_num_threads`` overflows on the largest ones)."""


@dataclasses.dataclass(frozen=True)
class EnvSection:
    """Environment: a gymnasium id, how many copies, ``gym.make`` kwargs, wrappers.

    ``wrappers`` is a list of names (or ``{name: {kwargs}}``) from
    :data:`rlfunc.envs.WRAPPERS`, applied in order.
    """

    id: str  # required: a missing env.id is an error, not a fallback
    num_envs: int = 1
    kwargs: dict = dataclasses.field(default_factory=dict)
    wrappers: list = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.id.strip():
            raise ConfigError("env.id must name a gymnasium environment, e.g. Pendulum-v1, got an empty string.")
        if self.num_envs < 1:
            raise ConfigError(f"env.num_envs must be a positive integer, got {self.num_envs}.")
        if self.num_envs > MAX_NUM_ENVS:
            raise ConfigError(
                f"env.num_envs must be at most {MAX_NUM_ENVS} (one process steps every copy in turn), got {self.num_envs}."
            )
        for key in self.kwargs:
            if not isinstance(key, str) or not key.isidentifier():
                raise ConfigError(f"env.kwargs keys must be keyword names for gym.make, got {key!r}.")
        steps = _check_max_episode_steps(self.kwargs.get("max_episode_steps"))
        if steps is not None:  # gymnasium's TimeLimit takes an int only: 500.0 or "5e2" refused there
            object.__setattr__(self, "kwargs", {**self.kwargs, "max_episode_steps": steps})
        from rlfunc.envs import build_wrappers

        try:
            build_wrappers(self.wrappers)  # names and argument names/types; values are checked when the env is made
        except ValueError as exc:
            raise ConfigError(str(exc)) from None


def _check_max_episode_steps(value: Any) -> int | None:
    """``env.kwargs.max_episode_steps`` (gym.make's time limit): a positive integer or null (the env's own),
    returned as an ``int`` (a whole float such as ``500.0``, or YAML 1.1's text ``5e2``, is that integer)."""
    if value is None:
        return None
    number = _yaml11_number(value)
    if (isinstance(number, bool) or not isinstance(number, (int, float)) or not math.isfinite(number)
            or number != int(number) or number < 1):
        raise ConfigError(
            f"env.kwargs.max_episode_steps must be a positive integer (or null for the env's own limit), got {value!r}."
        )
    return int(number)


_STORED = contextvars.ContextVar("rlfunc_stored_config", default=False)
"""True while :func:`build_config` reads a config rlfunc wrote (``resolved=True``): evaluating, loading or
exporting a run needs none of the packages its training logged with (TensorBoard, tqdm, W&B)."""


def check_train_packages(train: TrainSection, resuming: bool = False) -> None:
    """The packages training with ``train``'s logging settings imports: TensorBoard's writer
    (``train.tensorboard``), tqdm (``train.progress``) and wandb (``train.wandb``). One sentence naming
    the install command when one is missing, before any run directory is made or env built."""
    import importlib
    import importlib.util

    to_resume = " to resume this run"
    if train.wandb is not None and importlib.util.find_spec("wandb") is None:
        raise ConfigError(
            'train.wandb is set but wandb is not installed; pip install -e ".[wandb]"'
            + (to_resume + "." if resuming else " or remove train.wandb.")
        )
    for on, key, module, package in ((train.tensorboard, "tensorboard", "torch.utils.tensorboard", "tensorboard"),
                                     (train.progress, "progress", "tqdm", "tqdm")):
        if not on:
            continue
        try:
            importlib.import_module(module)
        except ImportError as exc:
            missing = (exc.name or package).split(".")[0]
            raise ConfigError(
                f"train.{key} is on but {missing!r} is not installed; install rlfunc's dependencies with "
                f"pip install -e . (or pip install {package})"
                + (to_resume + "." if resuming else f", or set train.{key}=false.")
            ) from None


def _check_wandb_keys(settings: dict) -> None:
    """``train.wandb`` names only keyword arguments of ``wandb.init`` (imported only when it is set)."""
    import inspect

    import wandb

    params = inspect.signature(wandb.init).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for key in settings:
        if key not in params:
            raise ConfigError(f"train.wandb.{key} is not an argument of wandb.init" + _close(key, list(params)))


LOADED_WANDB_KEYS = ("project", "entity", "name", "group", "tags", "notes", "job_type", "mode", "id", "resume")
"""The ``train.wandb`` keys (``wandb.init`` arguments) a config read from a file (a checkpoint's, on
``rlfunc resume``) sets without the user's consent: which W&B project, entity and run the rows go to,
their labels, and ``mode`` (online, offline, disabled). Any other key (``dir``, ``settings`` with its
``base_url``, ``sync_tensorboard``, ``save_code``, ...) can make wandb write files elsewhere or send data,
the user's API key included, to another server: :func:`check_loaded_wandb` refuses it."""


def check_loaded_wandb(settings: dict | None, trusted: bool = False) -> None:
    """A stored ``train.wandb`` (``settings``, from a file rlfunc read) that sets keys other than
    :data:`LOADED_WANDB_KEYS` is one sentence naming them and the opt-in, before anything is done;
    ``trusted``: the user passed ``rlfunc resume --trust-wandb-settings`` (``trust_wandb_settings=True``)."""
    if not settings or trusted:
        return
    others = [str(k) for k in settings if k not in LOADED_WANDB_KEYS]
    if others:
        named = ", ".join(f"train.wandb.{k}" for k in others)
        raise ConfigError(
            f"this run's checkpoint sets {named}, which can make W&B write files elsewhere or send your data and "
            "W&B API key to another server, so a resume does not use it on its own; if you trust this run "
            "directory pass --trust-wandb-settings (trust_wandb_settings=True in rlfunc.resume)."
        )


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """The training loop. Steps are environment steps (transitions collected, summed over
    ``env.num_envs``; DrQ-v2: agent steps, each ``action_repeat`` env frames).

    Warm-up and replay size, one key each for every algorithm; unset (``None``) they are the
    algorithm's defaults (the paper's: ``AlgoEntry.train_defaults`` in
    :mod:`rlfunc.runtime.registry`), filled in by :func:`build_config`:

    * ``learning_starts``: env steps collected before the first update (DrQ-v2: agent
      steps). REDQ, SAC, RLPD and DrQ-v2 act uniformly at random until then; DRQN and
      DQN act epsilon-greedily from the first step. R2D2 counts windows stored instead
      (Acme's ``min_replay_size``, also the offset of its samples-per-insert rate
      limiter, so no env-step count could replace it exactly).
    * ``replay_size``: the replay's capacity in the items it stores: transitions (REDQ,
      SAC, RLPD's online replay), frames (DrQ-v2: one per agent step plus one per
      episode start) or windows (DRQN, DQN, R2D2: sequences of ``sequence_length``
      steps, R2D2 ``burn_in + sequence_length``, one every ``sequence_period`` steps).

    Each learner states its two units (``learning_starts_unit``, ``replay_size_unit``
    in :mod:`rlfunc.runtime.learners`); they are in every message about these keys.
    """

    total_steps: int = 3000
    learning_starts: int | None = None  # None: the algorithm's default (build_config fills it in)
    replay_size: int | None = None  # None: the algorithm's default (build_config fills it in)
    eval_every: int = 1000
    eval_episodes: int = 10
    checkpoint_every: int = 1000
    log_every: int = 250  # a metrics.csv row every this many env steps, and one at the last step
    seed: int = 0
    device: str = "cpu"
    compile: bool = False
    compile_mode: str = "step"  # "step" (per critic/policy step) or "full" (whole update)
    cuda_graph: bool = False  # record the update as a CUDA graph (rlfunc.runtime.graphs); needs device cuda
    threads: int = 0  # 0: leave torch's default
    matmul_precision: str | None = None  # float32 matmuls: null keeps torch's; "high": TF32 on Ampere+ GPUs, as JAX there
    run_dir: str = "runs"
    progress: bool = True
    on_checkpoint_error: str = "stop"  # a failed checkpoint write (full disk): "stop" the run, or "continue" without it
    # Stopping rules (rlfunc.runtime.callbacks); each ends the run with a final evaluation and checkpoint.
    stop_at_return: float | None = None  # stop when an evaluation's mean return reaches this
    patience_evals: int = 0  # stop after this many evaluations without a new best (0: off)
    max_updates: int = 0  # stop after this many gradient steps (REDQ/RLPD: G per env step; 0: off)
    max_wall_s: float = 0.0  # stop after this much training wall time in seconds, resumed parts included (0: off)
    # Checkpoints on disk
    keep_checkpoints: int = 2  # newest checkpoints kept in checkpoints/ (older ones are deleted)
    keep_best: bool = True  # keep the best evaluation's policy (weights only) in best/
    checkpoint_replay: bool = True  # false: parameters, optimizer and counters only (resume refills an empty replay)
    # Pixel DRQN/R2D2/DQN: frames in the replay's frame ring (each frame stored once). null: sized for episodes
    # of at least about sequence_length x (period + 1) - period^2 steps (rlfunc.replay.frame_sequence); raise it
    # for games with shorter episodes (the replay otherwise drops its oldest windows from sampling early;
    # the replay_windows metric counts the ones left)
    frame_capacity: int | None = None
    # Logging beside metrics.csv / eval.csv
    tensorboard: bool = True  # TensorBoard event files in the run directory
    wandb: dict | None = None  # keyword arguments of wandb.init, e.g. {project: rl, mode: offline}; needs the wandb extra
    # {seeds: [0, 1], grid: {agent.critic_lr: [3e-4, 1e-3]}}: train the product as one population (rlfunc.runtime.population)
    population: dict | None = None

    def __post_init__(self) -> None:
        if self.stop_at_return is not None and not math.isfinite(self.stop_at_return):
            raise ConfigError(f"train.stop_at_return must be a finite number or null (off), got {self.stop_at_return}.")
        for name in ("patience_evals", "max_updates"):
            if getattr(self, name) < 0:
                raise ConfigError(f"train.{name} must be >= 0 (0 turns it off), got {getattr(self, name)}.")
        if not (math.isfinite(self.max_wall_s) and self.max_wall_s >= 0):
            raise ConfigError(f"train.max_wall_s must be a number of seconds >= 0 (0 turns it off), got {self.max_wall_s}.")
        if self.keep_checkpoints < 1:
            raise ConfigError(f"train.keep_checkpoints must be at least 1, got {self.keep_checkpoints}.")
        if self.wandb is not None and any(not isinstance(k, str) for k in self.wandb):
            raise ConfigError(f"train.wandb must map wandb.init keyword names to values, got {self.wandb!r}.")
        if not _STORED.get():  # a stored run's config: evaluating or exporting it needs none of these
            check_train_packages(self)
            if self.wandb is not None:
                _check_wandb_keys(self.wandb)
        if self.on_checkpoint_error not in ("stop", "continue"):
            raise ConfigError(
                f"train.on_checkpoint_error must be 'stop' or 'continue', got {self.on_checkpoint_error!r}."
            )
        positive = ("total_steps", "replay_size", "eval_every", "eval_episodes", "checkpoint_every", "log_every",
                    "frame_capacity")
        for name in positive:
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {value}.")
        if self.population is not None:
            from rlfunc.runtime.population_members import check_spec

            check_spec(self.population, self.seed)
        if self.total_steps > MAX_TOTAL_STEPS:
            raise ConfigError(f"train.total_steps must be at most 10**12 (a trillion env steps), got {self.total_steps}.")
        if self.learning_starts is not None and self.learning_starts < 0:
            raise ConfigError(f"train.learning_starts must be >= 0, got {self.learning_starts}.")
        if not 0 <= self.seed <= MAX_SEED:
            raise ConfigError(f"train.seed must be an integer in [0, 2**32 - 1], got {self.seed}.")
        if self.compile_mode not in ("step", "full"):
            raise ConfigError(f"train.compile_mode must be 'step' or 'full', got {self.compile_mode!r}.")
        if self.threads < 0:
            raise ConfigError(f"train.threads must be >= 0 (0 keeps torch's default), got {self.threads}.")
        if self.threads > MAX_THREADS:
            raise ConfigError(f"train.threads must be at most {MAX_THREADS} (0 keeps torch's default), got {self.threads}.")
        if self.matmul_precision not in (None, "highest", "high", "medium"):
            raise ConfigError(
                f"train.matmul_precision must be 'highest', 'high', 'medium' or null (torch's setting), "
                f"got {self.matmul_precision!r}."
            )
        if not self.run_dir.strip():
            raise ConfigError("train.run_dir must be a directory path, got an empty string.")
        import torch

        try:
            device_type = torch.device(self.device).type
        except (RuntimeError, ValueError, TypeError):
            device_type = None
        if device_type not in ("cpu", "cuda", "mps"):
            raise ConfigError(f"train.device must be 'cpu' or 'cuda[:N]' (or 'mps'), got {self.device!r}.")
        if self.cuda_graph and not self.device.startswith("cuda"):
            raise ConfigError(
                f"train.cuda_graph needs train.device: cuda, got device {self.device!r}; set train.cuda_graph=false."
            )


@dataclasses.dataclass(frozen=True)
class DataSection:
    """Prior (offline) data for algorithms that learn from it (RLPD).

    ``path``: a D4RL-style ``.npz`` or a local Minari dataset directory
    (:mod:`rlfunc.replay.offline`); ``format``: ``auto``, ``npz`` or
    ``minari``; ``offline_ratio``: the share of every mini-batch drawn from
    the prior data (RLPD: 0.5); ``pretrain_steps``: updates on prior data
    only before the first env step's update (RLPD: 0, off).
    """

    path: str | None = None
    format: str = "auto"
    offline_ratio: float = 0.5
    pretrain_steps: int = 0

    def __post_init__(self) -> None:
        if self.path is not None and not self.path.strip():
            raise ConfigError("data.path must be a dataset file or directory (or null), got an empty string.")
        if self.format not in ("auto", "npz", "minari"):
            raise ConfigError(f"data.format must be 'auto', 'npz' or 'minari', got {self.format!r}.")
        if not 0.0 <= self.offline_ratio <= 1.0:
            raise ConfigError(f"data.offline_ratio must be in [0, 1], got {self.offline_ratio}.")
        if self.pretrain_steps < 0:
            raise ConfigError(f"data.pretrain_steps must be >= 0, got {self.pretrain_steps}.")


# Ray refuses a nonzero resource amount below 1/RESOURCE_UNIT_SCALING (ray._raylet: 10000).
RAY_SMALLEST_AMOUNT = 0.0001


def check_ray_amount(name: str, value: float, what: str = "GPUs") -> None:
    """One sentence for a resource amount Ray cannot schedule: negative, not finite, or nonzero but
    below :data:`RAY_SMALLEST_AMOUNT` (Ray raises its own error once it runs, after Ray started)."""
    if not (math.isfinite(value) and value >= 0):
        raise ConfigError(f"{name} must be a number of {what} >= 0, got {value}.")
    if 0 < value < RAY_SMALLEST_AMOUNT:
        zero = "" if what == "CPUs" else "0 or "  # an actor needs some CPU; a GPU amount may be 0
        raise ConfigError(
            f"{name}{' ' if name.startswith('--') else '='}{value:g} is below {RAY_SMALLEST_AMOUNT:g}, the smallest "
            f"amount Ray schedules; give {zero}at least {RAY_SMALLEST_AMOUNT:g}."
        )


@dataclasses.dataclass(frozen=True)
class DistributedSection:
    """R2D2 with its actors in Ray actor processes (:mod:`rlfunc.scale.distributed`; R2D2 paper, Ape-X).

    ``actors`` processes, each stepping ``envs_per_actor`` envs with its slice of the Ape-X
    epsilon ladder over all ``actors * envs_per_actor`` envs; an actor picks up the newest
    parameters every ``param_sync_steps`` of its env steps (the paper: 400) and sends the
    windows it cut then, with their priorities; the learner publishes its parameters every
    ``param_sync_updates`` updates and runs at most ``max_replay_ratio`` updates per inserted
    env step; with ``min_replay_ratio > 0`` no actor starts a new chunk while the learner is
    below that ratio (Acme's rate limiter blocks inserts the same way). ``address``: null starts Ray on this machine; ``auto`` or ``ray://host:port``
    joins a cluster. ``actor_cpus`` / ``actor_gpus``: Ray resources of one actor;
    ``max_restarts``: how often Ray restarts a dead actor.
    """

    actors: int = 2
    envs_per_actor: int = 4
    param_sync_steps: int = 400
    param_sync_updates: int = 10
    max_replay_ratio: float = 0.25
    min_replay_ratio: float = 0.0  # > 0: hold the actors back while the learner is below it (0: actors never wait)
    address: str | None = None
    actor_cpus: float = 1.0
    actor_gpus: float = 0.0
    max_restarts: int = 3

    def __post_init__(self) -> None:
        for name in ("actors", "envs_per_actor", "param_sync_steps", "param_sync_updates"):
            if getattr(self, name) < 1:
                raise ConfigError(f"distributed.{name} must be a positive integer, got {getattr(self, name)}.")
        if not (math.isfinite(self.max_replay_ratio) and self.max_replay_ratio > 0):
            raise ConfigError(
                f"distributed.max_replay_ratio must be a positive number of updates per env step, got {self.max_replay_ratio}."
            )
        if not (math.isfinite(self.min_replay_ratio) and 0 <= self.min_replay_ratio <= self.max_replay_ratio):
            raise ConfigError(
                f"distributed.min_replay_ratio must be between 0 (off) and distributed.max_replay_ratio="
                f"{self.max_replay_ratio}, got {self.min_replay_ratio}."
            )
        if not (math.isfinite(self.actor_cpus) and self.actor_cpus > 0):
            raise ConfigError(f"distributed.actor_cpus must be a positive number of CPUs, got {self.actor_cpus}.")
        check_ray_amount("distributed.actor_cpus", float(self.actor_cpus), "CPUs")
        check_ray_amount("distributed.actor_gpus", float(self.actor_gpus))
        if self.max_restarts < 0:
            raise ConfigError(f"distributed.max_restarts must be >= 0, got {self.max_restarts}.")
        if self.address is not None and not self.address.strip():
            raise ConfigError("distributed.address must be auto, host:port or ray://host:port (or null for a local Ray), got an empty string.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    algo: str
    env: EnvSection
    train: TrainSection
    agent: Any  # the algorithm's Config instance
    data: DataSection = DataSection()
    distributed: DistributedSection | None = None  # R2D2 on Ray actors (rlfunc.scale.distributed)


DEFAULT_CONFIG: dict[str, Any] = {
    "algo": "redq",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 3000,
        "learning_starts": 1000,
        "eval_every": 500,
        "eval_episodes": 5,
        "checkpoint_every": 1000,
        "threads": 1,
    },
    "agent": {},
}
"""The embedded default: REDQ with the paper's agent settings on Pendulum-v1.

``learning_starts`` is 1000 instead of the paper's 5000 so that the default run
finishes in minutes on a 2-core CPU (Pendulum's episodes are 200 steps)."""


def _close(name: str, valid: list[str]) -> str:
    match = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
    return f"; did you mean {match[0]!r}?" if match else f"; valid keys are {', '.join(sorted(valid))}."


def _is_optional(tp) -> tuple[bool, Any]:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) < len(typing.get_args(tp)) and len(args) == 1:
            return True, args[0]
    return False, tp


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) is tuple:
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        return f"list of {_type_name(args[0]) if args else 'values'}"
    return getattr(tp, "__name__", str(tp))


_FLOAT_TEXT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")
"""A number as text: what PyYAML (YAML 1.1) leaves a string when its exponent has no dot (``1e-3``)."""


def _yaml11_number(value: Any) -> Any:
    """``value``, or the float it spells when it is a string such as ``"1e-3"`` (see :data:`_FLOAT_TEXT`)."""
    if isinstance(value, str) and _FLOAT_TEXT.match(value.strip()):
        return float(value)
    return value


DEVICE_VALUES = "cpu, cuda, cuda:N (N a GPU index) or mps"
"""What ``train.device`` accepts, as the messages name it (any ``torch.device`` of those types)."""

_NULL_HINTS = {"train.device": f"{DEVICE_VALUES}, e.g. --set train.device=cpu"}
"""What to set a key to when it is given empty (null), where its type alone says too little."""


def _null_hint(where: str, tp: Any) -> str:
    """The tail of the sentence for a non-optional key given empty (null): its valid values and how to set them."""
    if where in _NULL_HINTS:
        return _NULL_HINTS[where]
    if "[" in where:  # an element of a list (train.hidden[0]): there is no --set for it alone
        return f"a value of type {_type_name(tp)}"
    return f"a value of type {_type_name(tp)}, e.g. --set {where}=VALUE"


def _coerce(value: Any, tp: Any, where: str) -> Any:
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where} must not be empty; set it to {_null_hint(where, inner)}.")
    tp = inner
    origin = typing.get_origin(tp)
    try:
        if tp is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
                return value.lower() in ("true", "yes", "on")
            raise TypeError
        if tp is int:
            if isinstance(value, bool):
                raise TypeError
            if isinstance(value, float) and value.is_integer():
                return int(value)
            if isinstance(value, str):
                f = float(value)
                if not f.is_integer():
                    raise TypeError
                return int(f)
            if isinstance(value, numbers.Integral):  # int, numpy integers (e.g. a seed from np.arange)
                return int(value)
            if isinstance(value, numbers.Real) and float(value).is_integer():  # numpy floats such as 25.0
                return int(value)
            raise TypeError
        if tp is float:
            if isinstance(value, bool) or not isinstance(value, (numbers.Real, str)):  # numpy bools are not Real
                raise TypeError
            return float(value)
        if tp is str:
            if not isinstance(value, str):
                raise TypeError
            return value
        if origin is tuple:
            if not isinstance(value, (list, tuple)):
                raise TypeError
            args = typing.get_args(tp)
            elem = args[0] if args else Any
            return tuple(_coerce(v, elem, f"{where}[{i}]") for i, v in enumerate(value))
        if tp is dict or origin is dict:
            if not isinstance(value, dict):
                raise TypeError
            return dict(value)
        if tp is list or origin is list:
            if not isinstance(value, (list, tuple)):
                raise TypeError
            return list(value)
        # A type of the algorithm's own (agent.target_entropy, agent.lr_schedule): its Config checks it,
        # after a number YAML 1.1 reads as text (1e-3, -1e1: no dot) is read as that number, as for float fields.
        if isinstance(value, dict):
            return {k: _yaml11_number(v) for k, v in value.items()}
        return _yaml11_number(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where} must be of type {_type_name(tp)}, got {value!r}.") from None


def _build_dataclass(cls, values: dict[str, Any], section: str):
    if not isinstance(values, dict):
        raise ConfigError(f"Section {section!r} must be a mapping of keys to values, got {values!r}.")
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"Unknown config key '{section}.{key}'" + _close(str(key), names))
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    for f in fields:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if required and f.name not in kwargs:
            raise ConfigError(f"{section}.{f.name} is missing; set it in the config or with --set {section}.{f.name}=VALUE.")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        # The algorithms' Config messages start with the field's name: name it as section.field.
        msg = str(exc)
        first = msg.split(" ", 1)[0]
        if first in names:
            raise ConfigError(f"{section}.{msg}") from None
        raise ConfigError(f"Invalid '{section}' settings: {msg}") from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """PyYAML's safe loader, except that a mapping naming a key twice is an error: ``safe_load`` keeps
    the last one silently (a second ``train:`` section dropped every key of the first)."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges, later keys override it
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    twice = key in seen
                except TypeError:  # an unhashable key: the base constructor says so
                    continue
                if twice:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"the key {key!r} is given twice in one mapping", key_node.start_mark
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str) -> Any:
    """``yaml.safe_load`` that refuses a key given twice in one mapping (:class:`_UniqueKeyLoader`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 -- a SafeLoader subclass


def load_config(path: str | Path | None) -> dict[str, Any]:
    """Raw config mapping from a YAML file (``None``: the embedded default) or a packaged config's name
    (``redq/hopper``, as ``rlfunc train NAME``: :func:`~rlfunc.runtime.packaged.resolve_config`)."""
    if path is None:
        return yaml.safe_load(yaml.safe_dump(DEFAULT_CONFIG))
    if isinstance(path, (bytes, os.PathLike)):
        path = os.fsdecode(path)
    if not isinstance(path, str) or not path:
        raise TypeError(
            f"config must be a YAML file's path (a str or pathlib.Path), a mapping, a RunConfig or None, got {path!r}."
        )
    from rlfunc.runtime.packaged import resolve_config

    path = resolve_config(path)  # a path that exists as it is; else a packaged name, from any directory
    if path.is_dir():
        raise ConfigError(f"Config file {str(path)!r} is a directory; pass a YAML file such as configs/redq/pendulum.yaml.")
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else "it is not UTF-8 text"
        raise ConfigError(f"Config file {str(path)!r} cannot be read ({reason}); pass a readable YAML file.") from None
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        at = f" at line {where.line + 1}, column {where.column + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML{at} ({problem}); fix the file.") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"Config file {str(path)!r} must hold a mapping with keys algo, env, train, agent.")
    if _too_big(raw):
        raise ConfigError(
            f"Config file {str(path)!r} holds more than {MAX_VALUES:,} values once its YAML aliases are expanded; "
            "write the values out instead of nesting aliases."
        )
    return raw


MAX_VALUES = 1_000_000
"""The most values (mapping entries and list items, counted through YAML aliases) a config file or a
``--set`` value may hold: a few kilobytes of nested aliases (a "billion laughs" file) would otherwise
make validation run for ever."""


def _too_big(value: Any, limit: int = MAX_VALUES) -> bool:
    """Whether ``value`` holds more than ``limit`` values, counting each alias again (stops early)."""
    count, stack = 0, [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            children = [*node.keys(), *node.values()]
        elif isinstance(node, (list, tuple)):
            children = list(node)
        else:
            continue
        count += len(children)
        if count > limit:
            return True
        stack.extend(children)
    return False


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["train.seed=3", "agent.hidden_sizes=[64,64]"]`` -> ``{"train.seed": 3, ...}``.

    Values are YAML (``[64, 64]``, ``true``, ``null``); a value YAML cannot read is one
    :class:`ConfigError` naming the override."""
    out: dict[str, Any] = {}
    for item in items or []:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(f"Override {item!r} must look like section.key=value, e.g. train.seed=3.")
        key, value = item.split("=", 1)
        key = key.strip()
        if not key or any(not part for part in key.split(".")):
            raise ConfigError(f"Override {item!r} must look like section.key=value, e.g. train.seed=3.")
        try:
            out[key] = load_yaml(value) if value.strip() else None
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or "not valid YAML"
            raise ConfigError(
                f"Override {item!r} has a value YAML cannot read ({problem}); quote it or write it as YAML, "
                "e.g. agent.hidden_sizes=[64,64]."
            ) from None
        if _too_big(out[key]):
            raise ConfigError(
                f"Override {key} holds more than {MAX_VALUES:,} values once its YAML aliases are expanded; write "
                "the values out instead of nesting aliases."
            )
    return out


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``raw`` with dotted-key ``overrides`` applied."""
    try:
        raw = yaml.safe_load(yaml.safe_dump(raw))
    except yaml.YAMLError as exc:
        what = type(exc.args[1]).__name__ if len(getattr(exc, "args", ())) > 1 else "unknown"
        raise ConfigError(
            f"The config holds a value of type {what} that YAML cannot represent; use numbers, strings, lists "
            "and mappings."
        ) from None
    overrides = {} if overrides is None else overrides
    if not isinstance(raw, dict):
        raise ConfigError(f"A config must be a mapping with keys algo, env, train, agent, got {raw!r}.")
    if not isinstance(overrides, dict):
        raise ConfigError(f"Overrides must be a mapping of section.key to value, got {overrides!r}.")
    for dotted, value in overrides.items():
        if not isinstance(dotted, str) or not dotted or any(not p for p in dotted.split(".")):
            raise ConfigError(f"Override key {dotted!r} must look like section.key, e.g. train.seed.")
        parts = dotted.split(".")
        if len(parts) == 1 and isinstance(value, dict) and isinstance(raw.get(dotted), dict):
            first = next(iter(value), "key")
            raise ConfigError(
                f"Override {dotted!r} with a mapping would replace the whole {dotted} section, dropping the config's "
                f"other {dotted} settings; give each key dotted, e.g. {{'{dotted}.{first}': ...}}."
            )
        node = raw
        for i, p in enumerate(parts[:-1]):
            if node.get(p) is None:
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                where = ".".join(parts[: i + 1])
                raise ConfigError(f"Cannot set {dotted!r}: {where!r} is not a section; set {where} itself or drop the override.")
        node[parts[-1]] = value
    return raw


RENAMED_KEYS: dict[str, str] = {
    "train.random_steps": "train.learning_starts",  # REDQ, SAC, RLPD, DrQ-v2
    "agent.learning_starts": "train.learning_starts",  # DRQN, DQN
    "agent.min_replay_size": "train.learning_starts",  # R2D2 (windows)
    "agent.buffer_windows": "train.replay_size",  # DRQN, DQN (windows)
    "agent.replay_capacity": "train.replay_size",  # R2D2 (windows)
}
"""Keys of earlier versions -> the key that took their place. A config that sets one is refused
with one sentence naming the new key; a resolved config (``build_config(resolved=True)``: a run's
``config.yaml``, a checkpoint's) is translated, each value keeping its unit."""


def _units(entry) -> dict[str, str]:
    """``{"learning_starts": unit, "replay_size": unit}`` of the algorithm's learner."""
    learner = entry.learner_cls
    return {"learning_starts": learner.learning_starts_unit, "replay_size": learner.replay_size_unit}


def _rename_old_keys(sections: dict[str, dict], entry, algo_name: str, resolved: bool) -> None:
    """Keys of :data:`RENAMED_KEYS` in ``sections`` (copied where changed): one :class:`ConfigError`
    naming the new key, or, for a resolved config, moved to it. In files earlier versions wrote, the
    agent keys were the ones DRQN, DQN and R2D2 read (their ``train.random_steps`` and
    ``train.replay_size`` were unused defaults), so an agent key wins over the train key."""
    current = {
        "train": {f.name for f in dataclasses.fields(TrainSection)},
        "agent": {f.name for f in dataclasses.fields(entry.config_cls)},
    }
    found = []
    for old, new in RENAMED_KEYS.items():
        section, key = old.split(".")
        if key in sections[section] and key not in current[section]:
            found.append((old, new))
    if not found:
        return
    if not resolved:
        old, new = found[0]
        section, key = old.split(".")
        value = sections[section][key]
        new_key = new.split(".")[1]
        raise ConfigError(
            f"{old} was renamed {new} ({algo_name} counts it in {_units(entry)[new_key]}); "
            f"set {new}={value} instead."
        )
    train, agent = dict(sections["train"]), dict(sections["agent"])
    for old, new in sorted(found, key=lambda pair: not pair[0].startswith("train.")):  # train keys first
        section, key = old.split(".")
        value = (train if section == "train" else agent).pop(key)
        new_key = new.split(".")[1]
        if section == "agent" or new_key not in train:
            train[new_key] = value
    sections["train"], sections["agent"] = train, agent


def _unused_train_keys(entry) -> dict[str, str]:
    """``train`` keys (without the section) the algorithm does not use -> the sentence's ending."""
    out = {}
    if not hasattr(entry.algo, "make_update"):
        out["compile_mode"] = "remove it (train.compile compiles the whole update)."
    if not hasattr(entry.algo, "initial_carry"):  # not a sequence learner: no frame ring
        out["frame_capacity"] = "remove it (it sizes the frame ring of pixel DRQN, R2D2 and DQN replays)."
    return out


def _check_sections(sections: dict[str, dict], entry) -> None:
    """A key set in the section where it does not belong names the one where it does."""
    names = {
        "env": {f.name for f in dataclasses.fields(EnvSection)},
        "train": {f.name for f in dataclasses.fields(TrainSection)},
        "agent": {f.name for f in dataclasses.fields(entry.config_cls)},
        "data": {f.name for f in dataclasses.fields(DataSection)},
    }
    for section, values in sections.items():
        for key in values:
            if key not in names[section]:
                other = next((s for s in names if s != section and key in names[s]), None)
                if other is not None:
                    raise ConfigError(
                        f"'{section}.{key}' is not in the {section} section; did you mean '{other}.{key}'?"
                    )


def build_config(raw: dict[str, Any], *, resolved: bool = False) -> RunConfig:
    """Validate a raw mapping into a :class:`RunConfig` (raises :class:`ConfigError`).

    A resolved config (read from a file rlfunc wrote) is validated without importing the
    modules its ``env.id`` or ``env.wrappers`` name (``module:...``): loading a checkpoint
    never imports code it names; making its env does (:func:`rlfunc.envs.factory.without_user_imports`).
    """
    if resolved:
        from rlfunc.envs.factory import without_user_imports

        token = _STORED.set(True)
        try:
            with without_user_imports():
                return _build_config(raw, resolved=True)
        finally:
            _STORED.reset(token)
    return _build_config(raw, resolved=False)


def _build_config(raw: dict[str, Any], *, resolved: bool = False) -> RunConfig:
    """:func:`build_config`'s checks.

    ``resolved=True`` reads a config rlfunc wrote (a run's ``config.yaml``, a
    checkpoint's meta): keys the algorithm does not use are dropped instead of
    refused, as files written before they were refused hold every key, and keys
    an earlier version named differently (:data:`RENAMED_KEYS`) are translated.

    ``train.learning_starts`` and ``train.replay_size`` left unset (or null) are
    the algorithm's defaults (its registry entry's ``train_defaults``).
    """
    from rlfunc.runtime.registry import ALGOS, get_algo

    if not isinstance(raw, dict):
        raise ConfigError(f"A config must be a mapping with keys algo, env, train, agent, got {raw!r}.")
    top = ["algo", "env", "train", "agent", "data", "distributed"]
    for key in raw:
        if key not in top:
            raise ConfigError(f"Unknown config key {key!r}" + _close(str(key), top))
    if raw.get("algo") is None:
        raise ConfigError(f"algo is missing; set it to one of {', '.join(sorted(ALGOS))}, e.g. algo: redq.")
    algo_name = raw["algo"]
    if not isinstance(algo_name, str) or algo_name not in ALGOS:
        match = difflib.get_close_matches(str(algo_name), list(ALGOS), n=1, cutoff=0.5)
        hint = f"; did you mean {match[0]!r}?" if match else f"; choose one of {', '.join(sorted(ALGOS))}."
        raise ConfigError(f"Unknown algo {algo_name!r}{hint}")
    entry = get_algo(algo_name)
    sections = {}
    for name in ("env", "train", "agent", "data"):
        value = raw.get(name)
        sections[name] = {} if value is None else value
        if not isinstance(sections[name], dict):
            raise ConfigError(f"Section {name!r} must be a mapping of keys to values, got {value!r}.")
    _rename_old_keys(sections, entry, algo_name, resolved)
    _check_sections(sections, entry)
    if "id" not in sections["env"]:
        raise ConfigError("env.id is missing; set the gymnasium environment, e.g. env: {id: Pendulum-v1} or --set env.id=Pendulum-v1.")
    unused = _unused_train_keys(entry)
    train_raw = dict(sections["train"])
    for key in list(train_raw):
        if key in unused:
            if resolved:
                del train_raw[key]
            else:
                raise ConfigError(f"train.{key} is not used by {algo_name}; {unused[key]}")
    for key in ("learning_starts", "replay_size"):
        if train_raw.get(key) is None:
            if key not in entry.train_defaults:
                raise ConfigError(f"train.{key} is not set and algo {algo_name!r} has no default for it; set train.{key}.")
            train_raw[key] = entry.train_defaults[key]
    uses_data = getattr(entry, "uses_data", False)
    data_raw = sections["data"]
    if data_raw and not uses_data and not resolved:
        key = "path" if "path" in data_raw else next(iter(data_raw))
        raise ConfigError(
            f"data.{key} is set, but algo {algo_name!r} does not learn from prior data; remove the data section "
            "or use algo rlpd."
        )
    env = _build_dataclass(EnvSection, sections["env"], "env")
    train = _build_dataclass(TrainSection, train_raw, "train")
    agent_values = dict(entry.config_defaults)
    agent_values.update(sections["agent"])
    agent = _build_dataclass(entry.config_cls, agent_values, "agent")
    data = _build_dataclass(DataSection, data_raw if uses_data else {}, "data")
    if not resolved and data.path and not os.path.isabs(data.path) and os.path.exists(data.path):
        # stored absolute, so a resume (which has no --set) or a Ray task started elsewhere reads the same file
        data = dataclasses.replace(data, path=os.path.abspath(data.path))
    if uses_data and not data.path and data.offline_ratio > 0:
        raise ConfigError(
            f"algo {algo_name!r} needs prior data: set data.path=FILE.npz (make one with `rlfunc dataset collect`), "
            "or data.offline_ratio=0 to train online only."
        )
    from rlfunc.envs import check_env_id

    try:
        check_env_id(env.id)
    except ValueError as exc:
        raise ConfigError(f"env.id: {exc}") from None
    distributed = _distributed_section(raw.get("distributed"), algo_name, env, train, agent)
    config = RunConfig(algo=algo_name, env=env, train=train, agent=agent, data=data, distributed=distributed)
    entry.learner_cls.check_run_config(config)
    if not resolved:  # a file rlfunc wrote loads as it was trained
        _check_agent_across(config, entry)
    return config


def _check_agent_across(config: RunConfig, entry) -> None:
    """Agent settings that must agree with ``train`` and ``env``: each a :class:`ConfigError` sentence."""
    agent, train = config.agent, config.train
    nstep = getattr(agent, "nstep", None)
    if nstep is not None and (nstep >= train.replay_size or nstep > train.total_steps):
        unit = _units(entry)["replay_size"]
        raise ConfigError(
            f"agent.nstep={nstep} leaves no complete n-step window: one needs nstep + 1 {unit} in the replay "
            f"(train.replay_size={train.replay_size}) and nstep steps of the run (train.total_steps={train.total_steps}); "
            "lower agent.nstep."
        )
    _check_some_update(agent, train)
    _check_frame_stack(agent, config.env)
    if getattr(entry, "uses_data", False):
        _check_prior_share(config.data, agent)


def _check_prior_share(data: DataSection, agent: Any) -> None:
    """``data.offline_ratio`` of ``agent.batch_size`` leaves each source some rows: a mini-batch holds
    ``round(batch_size * offline_ratio)`` prior rows (:class:`rlfunc.replay.offline.MixedSampler`), so a
    ratio strictly between 0 and 1 that rounds to none (or to all) would silently never sample the prior
    data (or the online replay)."""
    batch, ratio = getattr(agent, "batch_size", None), data.offline_ratio
    if not data.path or not isinstance(batch, int) or not 0 < ratio < 1:
        return
    rows = int(round(batch * ratio))
    if rows == 0:
        raise ConfigError(
            f"data.offline_ratio={ratio} of agent.batch_size={batch} rounds to 0 prior rows per mini-batch, so the "
            "prior data would never be sampled; raise data.offline_ratio or agent.batch_size (or set "
            "data.offline_ratio=0 to train online only)."
        )
    if rows == batch:
        raise ConfigError(
            f"data.offline_ratio={ratio} of agent.batch_size={batch} rounds to {batch} prior rows of {batch} per "
            "mini-batch, so the online replay would never be sampled; lower data.offline_ratio or raise "
            "agent.batch_size (or set data.offline_ratio=1 to learn from the prior data only)."
        )


def _check_some_update(agent: Any, train: TrainSection) -> None:
    """``agent.train_every`` / ``agent.update_every`` leave at least one update in the run (one comes at every
    multiple of it from ``train.learning_starts`` on)."""
    for name in ("train_every", "update_every"):
        every = getattr(agent, name, None)
        if not isinstance(every, int) or every < 1:
            continue
        first = -(-max(train.learning_starts, 1) // every) * every
        if first > train.total_steps:
            raise ConfigError(
                f"agent.{name}={every} leaves no update in the run (the first would come at step {first}, after "
                f"train.total_steps={train.total_steps}, with train.learning_starts={train.learning_starts}); lower "
                f"agent.{name} or raise train.total_steps."
            )


_SHAPE_KEEPING_WRAPPERS = frozenset({"flicker", "clip_reward", "normalize_reward", "time_limit"})
"""``env.wrappers`` names that keep the observation's shape (a frame stack before them stays as it is)."""


def _env_frame_stack(env: EnvSection) -> tuple[int, str] | None:
    """``(frames, key)`` of the stack the env's observations hold (the ``pixels`` wrapper's ``frame_stack``,
    a ``dmc/`` env's ``env.kwargs.frame_stack``), or ``None`` where it cannot be known without the env."""
    import inspect

    found = None
    if env.id.rsplit(":", 1)[-1].startswith("dmc/"):  # module:dmc/... too
        from rlfunc.envs.dmc import DMCPixels

        default = inspect.signature(DMCPixels).parameters["frame_stack"].default
        found = (env.kwargs.get("frame_stack", default), "env.kwargs.frame_stack")
    for item in env.wrappers:
        name, kwargs = (item, {}) if isinstance(item, str) else next(iter(item.items()))
        if name == "pixels":
            from rlfunc.envs.pixels import PixelObservation

            default = inspect.signature(PixelObservation).parameters["frame_stack"].default
            found = ((kwargs or {}).get("frame_stack", default), "the pixels wrapper's frame_stack")
        elif name not in _SHAPE_KEEPING_WRAPPERS:
            found = None
    if found is None or isinstance(found[0], bool) or not isinstance(found[0], int):
        return None
    return found


def _check_frame_stack(agent: Any, env: EnvSection) -> None:
    """An agent that unstacks frames (DrQ-v2's ``agent.frame_stack``) reads the stack the env makes."""
    frames = getattr(agent, "frame_stack", None)
    stack = _env_frame_stack(env) if frames is not None else None
    if stack is not None and stack[0] != frames:
        raise ConfigError(
            f"agent.frame_stack={frames} does not match the env's stack of {stack[0]} frames ({stack[1]}); "
            f"set agent.frame_stack={stack[0]}."
        )


POPULATION_AND_DISTRIBUTED = "train.population and the distributed section cannot be combined; remove one of them."


def _distributed_section(
    value: Any, algo_name: str, env: EnvSection, train: TrainSection, agent: Any
) -> DistributedSection | None:
    """The ``distributed`` section (null or absent: a single-process run), refused where it cannot run."""
    if value is None:
        return None
    if algo_name == "drqn":
        raise ConfigError(
            "The distributed section is not available for drqn (its epsilon schedule follows the global env step and "
            "its replay is uniform, so its actors would need a learner of their own); remove it or use algo r2d2."
        )
    if algo_name != "r2d2":
        raise ConfigError(f"The distributed section trains R2D2 on Ray actors; algo {algo_name!r} has no distributed path, remove the section.")
    section = _build_dataclass(DistributedSection, value, "distributed")
    if env.num_envs != 1:
        raise ConfigError(
            f"env.num_envs={env.num_envs} is not used by a distributed run; set distributed.envs_per_actor instead "
            "(each actor steps that many envs)."
        )
    if train.population is not None:
        raise ConfigError(POPULATION_AND_DISTRIBUTED)
    return section


def to_dict(config: RunConfig) -> dict[str, Any]:
    """Plain (YAML-safe) mapping of a resolved config: every value the algorithm uses
    (``train`` keys it does not use are left out, so the mapping builds again)."""
    from rlfunc.runtime.registry import get_algo

    def plain(x):
        if dataclasses.is_dataclass(x):
            return {f.name: plain(getattr(x, f.name)) for f in dataclasses.fields(x)}
        if isinstance(x, tuple):
            return [plain(v) for v in x]
        if isinstance(x, list):
            return [plain(v) for v in x]
        if isinstance(x, dict):
            return {k: plain(v) for k, v in x.items()}
        return x

    train = plain(config.train)
    for key in _unused_train_keys(get_algo(config.algo)):
        train.pop(key, None)
    if train.get("population") is None:  # a single run's files stay as they were
        train.pop("population", None)
    out = {"algo": config.algo, "env": plain(config.env), "train": train, "agent": plain(config.agent)}
    if config.data != DataSection():
        out["data"] = plain(config.data)
    if config.distributed is not None:
        out["distributed"] = plain(config.distributed)
    return out
