"""Run configuration: YAML files + ``--set key=value`` overrides, validated early.

A run config has four sections::

    algo: redq                 # a name from rlfunc.runtime.registry.ALGOS
    env:   {id, num_envs, kwargs, wrappers}
    train: {total_steps, random_steps, replay_size, eval_every, ...}
    agent: {...}               # the algorithm's Config fields (paper defaults)
    data:  {path, format, offline_ratio, pretrain_steps}   # prior data (RLPD only)

Every key is checked against the dataclasses below (and the algorithm's
``Config``) before anything is built: an unknown key names the closest valid
one, a wrong type or value says what to change.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
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
    "RunConfig",
    "load_config",
    "parse_overrides",
    "apply_overrides",
    "build_config",
    "to_dict",
    "DEFAULT_CONFIG",
]


class ConfigError(ValueError):
    """A configuration is invalid; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class EnvSection:
    """Environment: a gymnasium id, how many copies, ``gym.make`` kwargs, wrappers.

    ``wrappers`` is a list of names (or ``{name: {kwargs}}``) from
    :data:`rlfunc.envs.WRAPPERS`, applied in order.
    """

    id: str = "Pendulum-v1"
    num_envs: int = 1
    kwargs: dict = dataclasses.field(default_factory=dict)
    wrappers: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class TrainSection:
    """The training loop. Steps are environment steps (transitions collected)."""

    total_steps: int = 3000
    random_steps: int = 5000
    replay_size: int = 1_000_000
    eval_every: int = 1000
    eval_episodes: int = 10
    checkpoint_every: int = 1000
    log_every: int = 250
    seed: int = 0
    device: str = "cpu"
    compile: bool = False
    compile_mode: str = "step"  # "step" (per critic/policy step) or "full" (whole update)
    cuda_graph: bool = False  # record the update as a CUDA graph (rlfunc.runtime.graphs); needs device cuda
    threads: int = 0  # 0: leave torch's default
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
    # Logging beside metrics.csv / eval.csv
    tensorboard: bool = True  # TensorBoard event files in the run directory
    wandb: dict | None = None  # keyword arguments of wandb.init, e.g. {project: rl, mode: offline}; needs the wandb extra


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
        if self.wandb is not None:
            import importlib.util

            if importlib.util.find_spec("wandb") is None:
                raise ConfigError('train.wandb is set but wandb is not installed; pip install -e ".[wandb]" or remove train.wandb.')
            if any(not isinstance(k, str) for k in self.wandb):
                raise ConfigError(f"train.wandb must map wandb.init keyword names to values, got {self.wandb!r}.")
        if self.on_checkpoint_error not in ("stop", "continue"):
            raise ConfigError(
                f"train.on_checkpoint_error must be 'stop' or 'continue', got {self.on_checkpoint_error!r}."
            )
        positive = ("total_steps", "replay_size", "eval_every", "eval_episodes", "checkpoint_every", "log_every")
        for name in positive:
            if getattr(self, name) < 1:
                raise ConfigError(f"train.{name} must be a positive integer, got {getattr(self, name)}.")
        if self.random_steps < 0:
            raise ConfigError(f"train.random_steps must be >= 0, got {self.random_steps}.")
        if self.compile_mode not in ("step", "full"):
            raise ConfigError(f"train.compile_mode must be 'step' or 'full', got {self.compile_mode!r}.")
        if self.threads < 0:
            raise ConfigError(f"train.threads must be >= 0 (0 keeps torch's default), got {self.threads}.")
        if not (self.device == "cpu" or self.device.startswith("cuda") or self.device == "mps"):
            raise ConfigError(f"train.device must be 'cpu' or 'cuda[:N]', got {self.device!r}.")
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
        if self.format not in ("auto", "npz", "minari"):
            raise ConfigError(f"data.format must be 'auto', 'npz' or 'minari', got {self.format!r}.")
        if not 0.0 <= self.offline_ratio <= 1.0:
            raise ConfigError(f"data.offline_ratio must be in [0, 1], got {self.offline_ratio}.")
        if self.pretrain_steps < 0:
            raise ConfigError(f"data.pretrain_steps must be >= 0, got {self.pretrain_steps}.")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    algo: str
    env: EnvSection
    train: TrainSection
    agent: Any  # the algorithm's Config instance
    data: DataSection = DataSection()


DEFAULT_CONFIG: dict[str, Any] = {
    "algo": "redq",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 3000,
        "random_steps": 1000,
        "eval_every": 500,
        "eval_episodes": 5,
        "checkpoint_every": 1000,
        "threads": 1,
    },
    "agent": {},
}
"""The embedded default: REDQ with the paper's agent settings on Pendulum-v1.

``random_steps`` is 1000 instead of the paper's 5000 so that the default run
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


def _coerce(value: Any, tp: Any, where: str) -> Any:
    optional, inner = _is_optional(tp)
    if value is None:
        if optional:
            return None
        raise ConfigError(f"{where} must not be empty (null).")
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
            if isinstance(value, int):
                return value
            raise TypeError
        if tp is float:
            if isinstance(value, bool):
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
        return value
    except (TypeError, ValueError):
        name = getattr(tp, "__name__", str(tp))
        raise ConfigError(f"{where} must be of type {name}, got {value!r}.") from None


def _build_dataclass(cls, values: dict[str, Any], section: str):
    if not isinstance(values, dict):
        raise ConfigError(f"Section {section!r} must be a mapping of keys to values, got {values!r}.")
    hints = typing.get_type_hints(cls)
    names = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {}
    for key, value in values.items():
        if key not in names:
            raise ConfigError(f"Unknown config key '{section}.{key}'" + _close(str(key), names))
        kwargs[key] = _coerce(value, hints[key], f"{section}.{key}")
    try:
        return cls(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"Invalid '{section}' settings: {exc}") from None


def load_config(path: str | Path | None) -> dict[str, Any]:
    """Raw config mapping from a YAML file (``None``: the embedded default)."""
    if path is None:
        return yaml.safe_load(yaml.safe_dump(DEFAULT_CONFIG))
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"Config file {str(path)!r} does not exist; pass a path such as configs/redq/pendulum.yaml.")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"Config file {str(path)!r} is not valid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"Config file {str(path)!r} must hold a mapping with keys algo, env, train, agent.")
    return raw


def parse_overrides(items: list[str] | None) -> dict[str, Any]:
    """``["train.seed=3", "agent.hidden_sizes=[64,64]"]`` -> ``{"train.seed": 3, ...}``."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise ConfigError(f"Override {item!r} must look like section.key=value, e.g. train.seed=3.")
        key, value = item.split("=", 1)
        out[key.strip()] = yaml.safe_load(value) if value.strip() else None
    return out


def apply_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``raw`` with dotted-key ``overrides`` applied."""
    raw = yaml.safe_load(yaml.safe_dump(raw))
    for dotted, value in overrides.items():
        parts = dotted.split(".")
        node = raw
        for p in parts[:-1]:
            if node.get(p) is None:
                node[p] = {}
            node = node[p]
            if not isinstance(node, dict):
                raise ConfigError(f"Cannot set {dotted!r}: {p!r} is not a section.")
        node[parts[-1]] = value
    return raw


def build_config(raw: dict[str, Any]) -> RunConfig:
    """Validate a raw mapping into a :class:`RunConfig` (raises :class:`ConfigError`)."""
    from rlfunc.runtime.registry import ALGOS, get_algo

    top = ["algo", "env", "train", "agent", "data"]
    for key in raw:
        if key not in top:
            raise ConfigError(f"Unknown config key {key!r}" + _close(str(key), top))
    algo_name = raw.get("algo", "redq")
    if algo_name not in ALGOS:
        raise ConfigError(f"Unknown algo {algo_name!r}" + _close(str(algo_name), list(ALGOS)))
    entry = get_algo(algo_name)
    env = _build_dataclass(EnvSection, raw.get("env") or {}, "env")
    train = _build_dataclass(TrainSection, raw.get("train") or {}, "train")
    agent_values = dict(entry.config_defaults)
    agent_raw = raw.get("agent") or {}
    if not isinstance(agent_raw, dict):
        raise ConfigError(f"Section 'agent' must be a mapping, got {agent_raw!r}.")
    agent_values.update(agent_raw)
    agent = _build_dataclass(entry.config_cls, agent_values, "agent")
    data = _build_dataclass(DataSection, raw.get("data") or {}, "data")
    uses_data = getattr(entry, "uses_data", False)
    if data.path and not uses_data:
        raise ConfigError(f"data.path is set, but algo {algo_name!r} does not learn from prior data; use algo rlpd.")
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
    return RunConfig(algo=algo_name, env=env, train=train, agent=agent, data=data)


def to_dict(config: RunConfig) -> dict[str, Any]:
    """Plain (YAML-safe) mapping of a resolved config."""

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

    out = {"algo": config.algo, "env": plain(config.env), "train": plain(config.train), "agent": plain(config.agent)}
    if config.data != DataSection():
        out["data"] = plain(config.data)
    return out
