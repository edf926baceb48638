"""A population's members: ``train.population`` read and checked, each member's resolved config (every
seed for every grid combination), and whether one vmapped update or a loop of the members' own updates
trains them (``train.population.vectorize``).

Everything here runs before a run directory is made: :func:`member_specs` is what ``rlfunc train --seeds
--grid``, ``rlfunc sweep`` and ``benchmarks/run.py learn`` ask first. The training itself is
:mod:`rlfunc.runtime.population`."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
import yaml
from tensordict import TensorDict

from rlfunc.runtime.config import MAX_SEED, POPULATION_AND_DISTRIBUTED, ConfigError
from rlfunc.runtime.specs import MAX_SEEDS, grid_value, same_value

__all__ = ["SUPPORTED", "VECTORIZE", "CPU_VMAP", "MemberSpec", "resolve_vectorize", "check_spec", "supports",
           "member_specs", "plain_spec", "refuse_given_twice", "refuse_dropped_grid_keys", "refuse_set_and_grid",
           "refuse_resolved_twins"]


SUPPORTED = ("redq", "sac", "rlpd", "drqn", "dqn", "r2d2", "drqv2")
"""Algorithms a population trains in this version (every algorithm of the registry)."""


VECTORIZE = ("auto", "vmap", "loop")
"""``train.population.vectorize``: ``vmap`` (one vmapped update and act over the stacked state), ``loop``
(each member's own update and act, one after the other: its single run's calls, bit for bit) or
``auto`` (:func:`resolve_vectorize`)."""


CPU_VMAP = ("redq", "sac", "drqn", "dqn")
"""Algorithms whose vmapped update is at least as fast as their members' separate updates on one CPU
thread (benchmarks/results/population_<algo>*.json, P=2-8: REDQ 0.99-1.09x, SAC 0.99-1.31x, DRQN
1.06-2.20x eager and 1.15-1.29x compiled, DQN 1.02-3.39x eager and 1.44-3.50x compiled; on MinAtar's
frames DQN 1.04-1.95x eager and 1.06-1.28x compiled). Exceptions, :func:`resolve_vectorize`:
DRQN with a conv torso, compiled (0.80-0.86x on MinAtar's frames, eager 1.01-1.16x), and DRQN
and DQN with a conv torso below 4 members (whole DQN runs on MinAtar: 0.92x at P=2). Those measured
slower batched on a CPU -- R2D2 at paper width (0.96x / 0.88x at P=4 / 8: each batched product is as
compute-bound as P separate ones, and vmap's batching adds its own work), DrQ-v2 (0.84-0.91x) and
RLPD (0.95x at P=8) -- loop over members there (``auto``)."""


def resolve_vectorize(choice: str, algo: str, device: str, encoder: str = "mlp", compiled: bool = False,
                      members: int | None = None) -> str:
    """``vmap`` or ``loop`` for ``train.population.vectorize=choice``: ``auto`` is ``vmap`` on a GPU (where
    one member's update leaves the card latency-bound, #24) and on a CPU for :data:`CPU_VMAP`, else
    ``loop``; except, on a CPU, DRQN and DQN with a conv torso (``agent.encoder`` not ``mlp``), which
    loop for compiled DRQN (0.80-0.86x vmapped at P=2-8:
    benchmarks/results/population_drqn_minatar_update_only.json) and below 4 members (whole DQN runs
    on MinAtar frames: 0.92x vmapped at P=2, 1.22x at P=4:
    benchmarks/results/population_dqn_minatar_breakout_flicker_runs_vmap.json, every P vmapped)."""
    if choice != "auto":
        return choice
    if str(device).startswith("cuda"):
        return "vmap"
    if algo in ("drqn", "dqn") and encoder != "mlp":
        if (algo == "drqn" and compiled) or (members is not None and members < 4):
            return "loop"
    return "vmap" if algo in CPU_VMAP else "loop"


def check_spec(spec: Any, seed: int = 0) -> None:
    """``train.population`` is ``{seeds: [int, ...], grid: {agent.NAME: [value, ...]}}`` (each
    optional; no seeds means ``[train.seed]``); anything else is one :class:`ConfigError` sentence.
    Grid values are read as ``--grid`` reads them (:func:`~rlfunc.runtime.specs.grid_value`: a
    config file's ``1e-3`` is a number), and a value given twice (``1e-3`` and ``0.001``, ``1`` and
    ``1.0``: equal once read) is refused, as is a population of more than
    :data:`~rlfunc.runtime.specs.MAX_SEEDS` members. Whether a grid key is a setting the algorithm
    takes as data is checked with the algorithm (:func:`member_specs`)."""
    if not isinstance(spec, dict):
        raise ConfigError(f"train.population must be a mapping with keys seeds and grid, got {spec!r}.")
    extra = [k for k in spec if k not in ("seeds", "grid", "vectorize")]
    if extra:
        raise ConfigError(f"train.population has unknown key {extra[0]!r}; it takes seeds, grid and vectorize.")
    if spec.get("vectorize", "auto") not in VECTORIZE:
        raise ConfigError(
            f"train.population.vectorize must be one of {', '.join(VECTORIZE)}, got {spec['vectorize']!r}."
        )
    _refuse_unstorable(spec)
    seeds = spec.get("seeds")
    if seeds is not None:
        if (
            not isinstance(seeds, list)
            or not seeds
            or any(isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= MAX_SEED for s in seeds)
        ):
            raise ConfigError(f"train.population.seeds must be a non-empty list of integers in [0, 2**32 - 1], got {seeds!r}.")
        if len(set(seeds)) != len(seeds):
            raise ConfigError(f"train.population.seeds lists a seed twice ({seeds!r}); each member needs its own seed.")
    grid = spec.get("grid")
    members = len(seeds) if seeds else 1
    if grid is not None:
        if not isinstance(grid, dict):
            raise ConfigError(f"train.population.grid must map agent.NAME to a list of values, got {grid!r}.")
        for key, values in grid.items():
            if not isinstance(key, str) or not key.startswith("agent.") or key.count(".") != 1:
                raise ConfigError(
                    f"train.population.grid key {key!r} must name an agent setting, e.g. agent.critic_lr; only "
                    "settings the algorithm takes as data may differ within a population."
                )
            if not isinstance(values, list) or not values:
                raise ConfigError(f"train.population.grid.{key} must be a non-empty list of values, got {values!r}.")
            for i, value in enumerate(values):
                twin = next((v for v in values[:i] if same_value(v, value)), _NO_TWIN)
                if twin is not _NO_TWIN:
                    raise ConfigError(
                        f"train.population.grid.{key} gives one value twice ({twin!r} and {value!r} are equal); "
                        "list each value once."
                    )
            members *= len(values)
    if members > MAX_SEEDS:
        raise ConfigError(
            f"train.population has {members} members (seeds times grid values), more than the {MAX_SEEDS} one "
            "population takes; train fewer seeds or grid values per population."
        )


_NO_TWIN = object()


def _refuse_unstorable(spec: dict) -> None:
    """A seed or grid value that YAML cannot store (a numpy or torch scalar, e.g. from ``np.logspace`` or
    ``np.arange``, in a mapping or :class:`RunConfig` given to ``rlfunc.train``) is refused in one sentence:
    it reached the run's ``config.yaml`` only once the run directory was made, and stopped the run there
    with a ``RepresenterError`` traceback. (:func:`train`'s ``seeds`` and ``grid`` arguments and its
    mappings are converted to plain numbers first, :func:`plain_spec`.)"""
    grid = spec.get("grid")
    parts = [("seeds", spec.get("seeds"))] + (
        [(f"grid.{key}", values) for key, values in grid.items()] if isinstance(grid, dict) else []
    )
    for where, values in parts:
        for value in values if isinstance(values, list) else [values]:
            if value is None or type(value) in (int, float, str, bool):
                continue
            try:
                yaml.safe_dump(value)
            except yaml.YAMLError:
                raise ConfigError(
                    f"train.population.{where} holds {value!r}, a {type(value).__module__}.{type(value).__name__} that "
                    "the run's config.yaml cannot store; give plain Python numbers (int(v) or float(v))."
                ) from None


def _plain_scalar(value: Any) -> Any:
    """A numpy or torch scalar as the Python number it holds (``np.float64(1e-3)`` -> ``0.001``); anything
    else as it is."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, torch.Tensor) and value.dim() == 0:
        return value.item()
    return value


def _plain_values(values: Any) -> Any:
    """Seeds or one grid key's values given as a tuple, range, numpy array or tensor: a list of plain
    Python scalars (what YAML stores and :func:`check_spec` reads); anything else as it is."""
    if isinstance(values, (tuple, range, np.ndarray, torch.Tensor)):
        return [_plain_scalar(v) for v in values]
    if isinstance(values, list):
        return [_plain_scalar(v) for v in values]
    return values


def plain_spec(spec: Any) -> Any:
    """``train.population`` with its seeds and grid values as plain lists of Python scalars: a researcher's
    ``seeds=np.arange(4)`` or ``grid={"agent.critic_lr": np.logspace(-4, -3, 3)}`` trains what the same
    numbers written in YAML train."""
    if not isinstance(spec, Mapping):
        return spec
    out = dict(spec)
    if "seeds" in out:
        out["seeds"] = _plain_values(out["seeds"])
    if isinstance(out.get("grid"), Mapping):
        out["grid"] = {key: _plain_values(values) for key, values in out["grid"].items()}
    return out


def refuse_resolved_twins(members: list[MemberSpec], state: TensorDict) -> None:
    """Refuse two members with one seed whose grid values differ as written but resolve to the same
    member on this env (REDQ's ``target_entropy`` ``auto`` and ``-1`` for one action, ``mbpo`` and
    ``auto`` off the MBPO table): their initial states (parameters, settings as data, ``target_entropy``)
    are equal, so they would train the same member twice. Only grid values that are not numbers can
    resolve (numbers equal once read are refused by :func:`check_spec` and :func:`member_specs`)."""
    resolving = {key for m in members for key, v in m.settings.items() if not isinstance(v, (int, float))}
    if not resolving:
        return
    leaves = list(state.exclude("config").values(True, True))
    by_seed: dict[int, list[MemberSpec]] = {}
    for m in members:
        by_seed.setdefault(m.seed, []).append(m)
    for group in by_seed.values():
        for i, a in enumerate(group):
            for b in group[:i]:
                if all(torch.equal(t[a.index], t[b.index]) for t in leaves):
                    key = next((k for k in resolving if not same_value(a.settings.get(k), b.settings.get(k))), min(resolving))
                    raise ConfigError(
                        f"train.population.grid.{key} gives one member twice ({b.settings[key]!r} and "
                        f"{a.settings[key]!r} are the same setting on {a.config.env.id}); list each value once."
                    )


def _check_float32(key: str, value: Any) -> None:
    """A grid value of a setting held as data is a float32 tensor in the members' state (``hparams``,
    REDQ's ``target_entropy``): refuse one that float32 cannot hold (``1e39`` overflows to ``inf``,
    ``1e-60`` underflows to ``0``), where the member's single run would compute with the Python float."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return  # build_config says what is wrong with it
    as32 = float(np.float32(value)) if abs(value) < 3.5e38 else math.inf
    if not math.isfinite(as32) or (as32 == 0.0) != (value == 0):
        raise ConfigError(
            f"train.population.grid.{key} value {value!r} is outside what a float32 setting holds "
            "(about 1.4e-45 to 3.4e38); pick a value in that range."
        )


@dataclasses.dataclass(frozen=True)
class MemberSpec:
    """One member: its index, seed, grid values and resolved single-run config."""

    index: int
    seed: int
    settings: dict
    config: Any  # RunConfig


def supports(run_config) -> str | None:
    """Whether this version trains ``run_config`` (its algorithm and train settings; the
    ``train.population`` spec aside) as a population: ``None`` if it does, else the one sentence
    :func:`member_specs` refuses it with. ``benchmarks/run.py learn`` asks this before running
    seeds as one population."""
    train = run_config.train
    algo = run_config.algo
    if algo not in SUPPORTED:
        return (
            f"train.population: {algo} is not batched over members; populations train "
            f"{', '.join(SUPPORTED[:-1])} and {SUPPORTED[-1]}, so run {algo}'s seeds as separate runs."
        )
    refusals = {
        "stop_at_return": "stopping rules (train.stop_at_return)",
        "patience_evals": "stopping rules (train.patience_evals)",
        "max_updates": "stopping rules (train.max_updates)",
        "max_wall_s": "stopping rules (train.max_wall_s)",
    }
    for name, what in refusals.items():
        value = getattr(train, name)
        if (value is not None) if name == "stop_at_return" else bool(value):
            return f"train.population does not support {what} yet; unset train.{name} for a population."
    if getattr(run_config.data, "pretrain_steps", 0):
        return "train.population does not support data.pretrain_steps yet; set data.pretrain_steps=0 for a population."
    if run_config.distributed is not None:
        return POPULATION_AND_DISTRIBUTED
    if train.wandb is not None:
        return "train.population does not support train.wandb yet; remove it for a population (TensorBoard works)."
    if not train.checkpoint_replay:
        return "train.population does not support train.checkpoint_replay=false yet; remove it for a population."
    return None


def member_specs(run_config) -> list[MemberSpec]:
    """The members of ``run_config``'s ``train.population``: for each grid combination (in the
    grid's order, last key fastest), each seed; member ``k``'s config is the population's with
    ``train.population`` removed, ``train.seed`` its seed and its grid values set (each checked
    by :func:`~rlfunc.runtime.config.build_config`). Refuses, in one sentence, an algorithm not
    batched yet, a grid key that is not a setting the algorithm takes as data, and what this
    stage does not do yet (module doc)."""
    from rlfunc.core import population
    from rlfunc.runtime.config import build_config, to_dict

    spec, train = run_config.train.population, run_config.train
    check_spec(spec, train.seed)
    why = supports(run_config)
    if why is not None:
        raise ConfigError(why)
    algo = run_config.algo
    data = population.hparam_names(run_config.agent) + tuple(
        n for n in population._init_settings(run_config.agent) if n not in population.hparam_names(run_config.agent)
    )
    # a config file's values read as --grid reads them (PyYAML's "1e-3" is a string; --grid's a number)
    grid = {key: [grid_value(v) for v in values] for key, values in (spec.get("grid") or {}).items()}
    for key in grid:
        name = key.split(".", 1)[1]
        if name not in data:
            those = f"those are: {', '.join('agent.' + n for n in data)}" if data else f"{algo} takes none"
            raise ConfigError(
                f"train.population.grid: {key} is not a setting {algo} takes as data ({those}); members that "
                "differ in it are separate populations."
            )
    for key, values in grid.items():  # settings as data are float32 tensors in the state
        for value in values:
            _check_float32(key, value)
    seeds = list(spec.get("seeds") or [train.seed])
    if spec.get("vectorize") == "loop" and train.cuda_graph and len(seeds) * math.prod(map(len, grid.values())) > 1:
        raise ConfigError(
            "train.cuda_graph captures the vmapped population update; set train.population.vectorize to vmap or "
            "auto with it."
        )
    raw = to_dict(run_config)
    raw["train"].pop("population", None)
    members = []
    built: dict[str, dict[int, Any]] = {key: {} for key in grid}  # each grid value as its members' configs hold it
    for combo in itertools.product(*(range(len(values)) for values in grid.values())):
        settings = {key: grid[key][i] for key, i in zip(grid, combo)}
        for seed in seeds:
            member = {**raw, "train": {**raw["train"], "seed": seed}, "agent": dict(raw["agent"])}
            for key, value in settings.items():
                member["agent"][key.split(".", 1)[1]] = value
            try:
                config = build_config(member)
            except ConfigError as exc:
                raise ConfigError(f"train.population member with seed {seed} and {settings}: {exc}") from None
            for key, i in zip(grid, combo):
                built[key].setdefault(i, getattr(config.agent, key.split(".", 1)[1]))
            members.append(MemberSpec(len(members), seed, settings, config))
    for key, held in built.items():  # equal once coerced to the field's type (check_spec compared them as read)
        for i in range(1, len(held)):
            twin = next((j for j in range(i) if same_value(held[j], held[i])), None)
            if twin is not None:
                raise ConfigError(
                    f"train.population.grid.{key} gives one value twice ({grid[key][twin]!r} and {grid[key][i]!r} "
                    f"are both {held[i]!r} as {key}); list each value once."
                )
    return members


def refuse_given_twice(overrides: dict | None, **flags: Any) -> None:
    """``seeds``/``grid``/``vectorize`` (``--seeds``/``--grid``/``--vectorize``) and an override of the same
    ``train.population`` key both given: refused, since the argument used to win silently over the override.
    So is an override of ``train.seed`` beside the population's seeds (``--seeds`` or ``--set
    train.population.seeds``), which the members take instead of it (``rlfunc sweep`` refuses it too)."""
    from rlfunc.runtime.config import apply_overrides

    if not overrides:
        return
    try:
        given = apply_overrides({}, overrides)
    except ConfigError:
        return  # train() says what is wrong with the overrides
    train_given = given.get("train") if isinstance(given.get("train"), dict) else {}
    spec = train_given.get("population")
    seeds_from = "--seeds" if flags.get("seeds") is not None else None
    if seeds_from is None and isinstance(spec, dict) and spec.get("seeds") is not None:
        seeds_from = "--set train.population.seeds"
    if seeds_from and "seed" in train_given:
        raise ConfigError(
            f"--set train.seed is not used beside {seeds_from}, which gives each member its seed; drop --set train.seed."
        )
    if all(v is None for v in flags.values()) or not isinstance(spec, dict):
        return
    for key, value in flags.items():
        if value is not None and key in spec:
            raise ConfigError(
                f"--{key} and --set train.population.{key} both set the population's {key}; give it once "
                f"(drop one of them)."
            )


def refuse_dropped_grid_keys(config_grid: Any, new_grid: Any) -> None:
    """``grid`` (``--grid``) replaces the config's ``train.population.grid``: a key of the config's grid
    that ``--grid`` does not give was dropped silently (fewer members than the user asked for); refused.
    A key both give takes ``--grid``'s values, as ``--set`` wins over the config file."""
    if not isinstance(config_grid, Mapping) or not isinstance(new_grid, Mapping):
        return
    dropped = [key for key in config_grid if key not in new_grid]
    if dropped:
        values = config_grid[dropped[0]]
        shown = ",".join(str(v) for v in values) if isinstance(values, list) else str(values)
        raise ConfigError(
            f"--grid replaces the config's train.population.grid, so its {dropped[0]} would be dropped; give it with "
            f"--grid too (--grid {dropped[0]}={shown}), or remove it from the config file."
        )


def refuse_set_and_grid(overrides: dict | None, spec: Any, from_flag: bool) -> None:
    """An override (``--set``) of a setting the population's grid also gives was dropped silently (each
    member takes its grid value): refused as ``rlfunc sweep`` refuses it. ``from_flag``: the grid is
    ``--grid``'s (else the config's ``train.population.grid``)."""
    from rlfunc.runtime.config import apply_overrides

    grid = spec.get("grid") if isinstance(spec, Mapping) else None
    if not isinstance(overrides, dict) or not overrides or not isinstance(grid, Mapping):
        return
    try:
        given = apply_overrides({}, {k: v for k, v in overrides.items() if k != "train.population"
                                     and not str(k).startswith("train.population.")})
    except ConfigError:
        return  # build_config says what is wrong with the overrides
    for key in grid:
        node: Any = given
        for part in str(key).split("."):
            node = node.get(part, _MISSING) if isinstance(node, dict) else _MISSING
        if node is not _MISSING:
            where = "--grid" if from_flag else "train.population.grid"
            raise ConfigError(f"{key} is in both --set and {where}; give it in one of them.")


_MISSING = object()
