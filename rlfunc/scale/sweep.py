"""``rlfunc sweep``: seeds x a grid of settings, each run one Ray task writing an ordinary run directory.

Ray core tasks, not Ray Tune. Tune would own the run directories: it puts each trial in
its own ``~/ray_results`` trial folder with its own ``params.json``/``result.json``/checkpoint
layout, restores through ``Tuner.restore`` and its experiment state, and wants the training
loop to report through ``tune.report`` with checkpoints handed over as Tune ``Checkpoint``s.
rlfunc's run directory (``config.yaml``, ``metrics.csv``, ``eval.csv``, ``checkpoints/``)
is already the unit that ``rlfunc plot``/``eval``/``resume`` read and that continues exactly
from its own checkpoints, and a grid x seeds sweep needs none of Tune's schedulers or
searchers. So each (grid point, seed) is one ``@ray.remote`` task that calls
:func:`rlfunc.train` (or :func:`rlfunc.resume`) into ``SWEEP_DIR/<run name>``; the sweep's
plan is ``SWEEP_DIR/sweep.json``, and what is finished is read back from the run
directories themselves.

* Resources: a task asks for ``train.threads`` CPUs (at least 1; ``--gpus`` a GPU fraction); a
  distributed config's task (:mod:`rlfunc.scale.distributed`) also reserves its actors
  (``distributed.actors`` x ``actor_cpus`` / ``actor_gpus``) in one Ray placement group, so that two
  runs never each hold half of what both need. A run that asks for more than the cluster has (in all,
  or on its largest node) is refused in one sentence before anything is written.
* Embedded by default: without ``--address`` a local Ray sized to the machine starts, its node
  address loopback (Ray's servers still listen on every interface, guarded by its token
  authentication) with the dashboard off, and is shut down at the end. ``--address auto`` or
  ``ray://host:port`` joins a running cluster (``ray start --head``); the sweep directory must
  then be on storage every node sees (the tasks write the run directories where they run). An
  address where no Ray answers (nothing listening, another kind of server, ``auto`` naming a
  stopped cluster) is one sentence at once, and joining is bounded (about 15 s) otherwise.
* Stopping: Ctrl-C or SIGTERM of the sweep cancels its running tasks as Ctrl-C stops ``rlfunc train``
  (each run saves at the step it reached; :func:`_stop_running`), then writes the results JSON and PNG
  of the runs that finished, naming the others under ``unfinished`` (:func:`run_sweep`), and Ray is shut
  down; ``--resume`` rewrites them once it has trained the rest.
* Faults: a task whose worker process dies (killed, out of memory, node lost) is retried by Ray
  (``max_retries``); the retry resumes the run from its newest checkpoint (a run directory left
  without a checkpoint is cleared and trained afresh), under the run directory's lock: a run another
  live process still trains is refused, never cleared. ``rlfunc sweep --resume SWEEP_DIR``
  continues a stopped sweep: finished runs (``eval.csv`` reached ``train.total_steps``, or a
  stopping rule ended them) are read back, not trained again.
* A plan entry may be a population (``"members": P`` and ``train.population`` in its overrides,
  :mod:`rlfunc.runtime.population`): one task trains its P members in one process, and its
  records are its ``member-<k>/`` directories, each an ordinary run. An entry may carry its own
  ``raw_config``/``config`` (``benchmarks/run.py learn`` puts several configs in one plan).
* Each attempt appends a line to ``SWEEP_DIR/attempts.jsonl`` (run, host, pid, fresh or resumed
  and from which step), so one can see which process trains which run and what was retried.

Ray is imported lazily, only here; nothing in ``core``, ``algos``, ``replay``, ``envs`` or
``runtime`` imports this package, and rlfunc works without Ray installed.
"""

from __future__ import annotations

import dataclasses
import json
import operator
import os
import platform
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from rlfunc.runtime.config import LOADED_WANDB_KEYS, ConfigError, check_ray_amount
# the run directory's log files are opened this way (O_NOFOLLOW, a regular file only): so are the sweep's
from rlfunc.runtime.run_log import _check_regular, _naming, _open
from rlfunc.scale.results import collected_run, run_finished, summary
from rlfunc.runtime.specs import describe_point, grid_points, parse_grid, parse_seeds

__all__ = ["plan_sweep", "write_plan", "load_plan", "run_sweep", "run_entries", "entry_finished", "entry_records",
           "train_or_continue", "sweep", "SweepStopped", "resume_command", "RAY_MISSING"]

PLAN_FILE = "sweep.json"
ATTEMPTS_FILE = "attempts.jsonl"
PLAN_VERSION = 1
RAY_MISSING = 'rlfunc sweep needs Ray, which is not installed; install it with pip install -e ".[ray]".'


class SweepStopped(KeyboardInterrupt):
    """The sweep was stopped (Ctrl-C or SIGTERM); ``str()`` says how to continue it. ``trained``, ``failed``,
    ``machine``: what :func:`run_entries` had when it stopped, as it returns them."""

    def __init__(self, message: str = "", trained: dict | None = None, failed: dict | None = None,
                 machine: dict | None = None):
        super().__init__(message)
        self.trained = dict(trained or {})
        self.failed = dict(failed or {})
        self.machine = dict(machine or {})


def resume_command(sweep_dir: str | Path, out: str | Path | None = None) -> str:
    """The command that continues the sweep in ``sweep_dir``; with ``--out`` when the sweep was given one, so
    that its results land where the stopped sweep wrote them."""
    import shlex

    again = f"rlfunc sweep --resume {shlex.quote(str(sweep_dir))}"
    return again if out is None else f"{again} --out {shlex.quote(str(out))}"


# ----------------------------------------------------------------------------- plan


def _write_json_atomic(path: Path, obj: Any) -> None:
    """``obj`` as JSON in ``path``, written to a temporary file beside it and renamed over ``path``
    (``os.replace`` replaces a symlink there, never writes through it). The temporary name is removed
    first and created exclusively, never following a symlink (:func:`rlfunc.runtime.run_log._open`), so a
    link planted there is not written through either."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        with _naming(tmp), _open(tmp, "x") as f:
            f.write(json.dumps(obj, indent=2) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _run_name(index: int, point: dict[str, Any], seed: int | None) -> str:
    """``g<index>-<grid values>-s<seed>``; ``...-pop`` for a population of the point's seeds."""
    desc = ",".join(f"{k.rsplit('.', 1)[-1]}={v}" for k, v in point.items())
    desc = re.sub(r"[^A-Za-z0-9_.=,+-]", "_", desc)[:60]
    return f"g{index}" + (f"-{desc}" if desc else "") + ("-pop" if seed is None else f"-s{seed}")


def results_path(sweep_dir: str | Path, out: str | Path | None, config: str | Path | None = None,
                 flag: str = "--sweep-dir") -> Path:
    """Where the learn JSON goes (``--out``, else ``SWEEP_DIR/results.json``), refused in one sentence
    where it cannot be written: a directory, the path of the PNG written beside it, or a place this
    process may not write; and where writing it would destroy something: the sweep's own plan
    (``--resume`` reads it), the ``config`` file the sweep reads, or any existing file that is not an
    earlier sweep's results JSON (a run's eval.csv, a user's file). Without ``out`` the sentences name
    ``flag``, the option that gave the sweep directory (``--sweep-dir``, or ``--resume``), not an ``--out``
    the user never passed (:func:`check_sweep_dir` has refused a new sweep's directory that is a file)."""
    path = Path(out) if out is not None else Path(sweep_dir) / "results.json"
    if out is None:  # SWEEP_DIR/results.json: what the user chose is the sweep directory, not --out
        shown = repr(str(sweep_dir))
        other = "pass --out" if flag == "--resume" else "pick another --sweep-dir, or pass --out"
        if path.is_dir():
            raise ConfigError(f"{flag} {shown} holds a directory results.json where the sweep writes its results "
                              f"JSON; {other}.")
        if config is not None and path.resolve() == Path(config).resolve():
            raise ConfigError(f"{flag} {shown} holds the config file the sweep reads as results.json, where the "
                              f"sweep writes its results JSON; {other}.")
        if path.is_file() and not _is_results_json(path):
            raise ConfigError(f"{flag} {shown} holds a results.json that is not the results JSON of an earlier "
                              f"`rlfunc sweep`; {other}.")
    if path.is_dir():
        raise ConfigError(f"--out {str(path)!r} is a directory; give the JSON's file name, e.g. {str(path / 'results.json')!r}.")
    if path.suffix.lower() == ".png":
        raise ConfigError(f"--out {str(path)!r} names the PNG the sweep writes beside its JSON; give the JSON a .json name, "
                          f"e.g. {str(path.with_suffix('.json'))!r}.")
    if path.resolve() == (Path(sweep_dir) / PLAN_FILE).resolve():
        raise ConfigError(
            f"--out {str(out)!r} is the sweep's plan {PLAN_FILE}, which `rlfunc sweep --resume` reads; give the results "
            f"another name, e.g. {str(Path(sweep_dir) / 'results.json')!r}."
        )
    if config is not None and path.resolve() == Path(config).resolve():
        raise ConfigError(f"--out {str(out)!r} is the config file the sweep reads; give the results another name.")
    if path.is_file() and not _is_results_json(path):
        raise ConfigError(
            f"--out {str(out)!r} already exists and is not a results JSON of an earlier `rlfunc sweep`; pick a new "
            "file name (nothing else is overwritten)."
        )
    from rlfunc.runtime.checkpoint import unwritable_parent

    parent = unwritable_parent(path)
    if parent is not None:
        if out is None:
            raise ConfigError(f"{flag} {str(sweep_dir)!r} cannot be written ({str(parent)!r} is not a writable "
                              f"directory); {'fix its permissions' if flag == '--resume' else 'pick another --sweep-dir'}.")
        raise ConfigError(f"--out {str(path)!r} cannot be written ({str(parent)!r} is not a writable directory); pick another --out.")
    return path


def _is_results_json(path: Path) -> bool:
    """Whether ``path`` holds a learn JSON an earlier sweep wrote (read as JSON only, size-bounded)."""
    try:
        if path.stat().st_size > 256 * 2**20:
            return False
        data = json.loads(path.read_text())
    except (OSError, ValueError, UnicodeDecodeError, RecursionError):
        return False
    return isinstance(data, dict) and {"runs", "summary", "settings"} <= set(data)


def plan_sweep(
    config: str | Path | dict | None,
    seeds: str | list[int],
    grid: list[str] | dict[str, list[Any]] | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    sweep_dir: str | Path | None = None,
    gpus: float | None = 0.0,
    population: bool = False,
) -> dict:
    """Check everything and return the sweep's plan (not yet written): one entry per (grid point,
    seed), each with its run directory name, seed, grid values and overrides; with ``population``, one
    entry per grid point that trains all its seeds as one population (``"members"``, one task, the
    members' ``member-<k>/`` directories as its runs). Every run's config is built here, so a bad key
    or value stops the sweep before any Ray or training starts."""
    from rlfunc.runtime import population_members
    from rlfunc.runtime.config import apply_overrides, build_config, load_config, parse_overrides
    from rlfunc.runtime.packaged import resolve_config

    gpus = 0.0 if gpus is None else gpus  # --gpus not given
    check_ray_amount("--gpus", float(gpus))
    if not isinstance(seeds, str):  # a list (Python): read as the --seeds text, so a seed named twice (two runs of
        # one name training one directory) or one that is not an integer is the same sentence
        seeds = ",".join(_seed_text(s) for s in seeds)
    seed_list = parse_seeds(seeds)
    if not seed_list:
        raise ConfigError("--seeds names no seed; pass e.g. --seeds 0-4.")
    grid_map = grid if isinstance(grid, dict) else parse_grid(grid)
    fixed = overrides if isinstance(overrides, dict) else parse_overrides(overrides or [])
    clash = sorted(set(fixed) & set(grid_map))
    if clash:
        raise ConfigError(f"{clash[0]} is in both --set and --grid; give it in one of them.")
    if "train.seed" in fixed or "train.seed" in grid_map:
        raise ConfigError("train.seed is set by --seeds in a sweep; remove it from --set/--grid.")
    if config is None:  # the embedded default, as rlfunc train
        raw, config_name = load_config(None), None
    elif isinstance(config, dict):
        raw, config_name = dict(config), None
    else:
        path = resolve_config(str(config))
        raw, config_name = load_config(path), str(Path(path).resolve())
    if "train.population" in fixed or any(k.startswith("train.population.") for k in [*fixed, *grid_map]) or (
            isinstance(raw.get("train"), dict) and raw["train"].get("population") is not None):
        raise ConfigError(
            "rlfunc sweep makes its runs from --seeds and --grid, so train.population is not used; drop it, and pass "
            "--population to train each grid point's seeds as one population."
        )
    points = grid_points(grid_map)
    runs = []
    built = None
    for index, point in enumerate(points):
        if population:
            base = {**fixed, **point, "train.progress": False}
            why = population_members.supports(build_config(apply_overrides(raw, {**base, "train.seed": seed_list[0]})))
            if why is not None:
                raise ConfigError(f"{why.rstrip('.')} (drop --population to train each seed as its own run).")
            over = {**base, "train.population": {"seeds": list(seed_list)}}
            built = build_config(apply_overrides(raw, over))
            population_members.member_specs(built)  # every member checked now
            runs.append({
                "name": _run_name(index, point, None),
                "label": " ".join(filter(None, [built.algo, describe_point(point)])),
                "seed": None,
                "seeds": list(seed_list),
                "members": len(seed_list),
                "grid": point,
                "overrides": over,
                "threads": int(built.train.threads),
                "total_steps": int(built.train.total_steps),
            })
            continue
        for seed in seed_list:
            run_overrides = {**fixed, **point, "train.seed": seed, "train.progress": False}
            built = build_config(apply_overrides(raw, run_overrides))  # every run checked before training
            label = " ".join(filter(None, [built.algo, describe_point(point)]))
            runs.append({
                "name": _run_name(index, point, seed),
                "label": label,
                "seed": seed,
                "grid": point,
                "overrides": run_overrides,
                "threads": int(built.train.threads),
                "total_steps": int(built.train.total_steps),
            })
    if sweep_dir is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        env_id = re.sub(r"[^A-Za-z0-9_.-]", "_", str(built.env.id))
        sweep_dir = Path(built.train.run_dir) / f"sweep-{built.algo}-{env_id}-{stamp}"
    return {
        "version": PLAN_VERSION,
        "sweep_dir": str(Path(sweep_dir).resolve()),
        "config": config_name,
        "raw_config": raw,
        "seeds": seed_list,
        "grid": grid_map,
        "overrides": fixed,
        "gpus": float(gpus),
        "runs": runs,
    }


def _seed_text(seed: Any) -> str:
    """One seed of a Python list as ``--seeds`` text: an integer (``np.int64`` and a 0-dim integer tensor too,
    as a population's ``seeds`` takes them) as its digits, anything else (``True``, ``1.5``) as its repr, which
    :func:`~rlfunc.runtime.specs.parse_seeds` refuses in its sentence."""
    if not isinstance(seed, bool):
        try:
            return str(operator.index(seed))
        except TypeError:
            pass
    return repr(seed)


def check_runs_here(plan: dict) -> None:
    """Each distinct run of ``plan`` (seeds aside) checked on this machine as its :class:`Trainer` would
    check it before training (:func:`rlfunc.runtime.trainer.check_env_and_agent`: device, env settings,
    the algorithm's space checks): for an embedded sweep, whose tasks run here, a run that cannot start is
    one sentence before Ray starts. Not for a cluster (``--address``), whose workers may have envs or
    devices this machine lacks: there such a run fails as its task, with the same sentence."""
    from rlfunc.runtime.config import apply_overrides, build_config
    from rlfunc.runtime.trainer import check_env_and_agent

    seen, spaces = set(), {}  # spaces: each distinct env made once, whatever the agent settings
    for entry in plan["runs"]:
        built = build_config(apply_overrides(plan["raw_config"], entry["overrides"]))
        key = json.dumps([built.algo, dataclasses.asdict(built.env), dataclasses.asdict(built.agent),
                          built.train.device], sort_keys=True, default=repr)
        if key in seen:
            continue
        seen.add(key)
        try:
            check_env_and_agent(built, spaces)
        except ValueError as exc:  # ConfigError, and make_env's sentences (an unknown id, a missing package)
            name = entry["name"] if len(plan["runs"]) > 1 else None
            raise ConfigError(f"run {name}: {exc}" if name else str(exc)) from None


def check_sweep_dir(sweep_dir: str | Path, flag: str = "--sweep-dir", names: list[str] | None = None) -> None:
    """Refuse, in one sentence, a directory a new sweep cannot be written to: a file (or a path under one),
    a directory that holds another sweep (``--resume`` continues that), and a training run's directory or
    one inside it (``config.yaml`` and the like, as ``rlfunc train`` tells a run directory: each of the
    sweep's runs would be refused inside it, and the sweep's files mixed with the run's). Reads only: called
    before Ray starts and before anything is written. ``flag`` names the directory in the sentences (the
    default one, under ``train.run_dir``, was not given as ``--sweep-dir``). ``names``: the new sweep's run
    directory names; one that exists already (the runs of an earlier sweep whose ``sweep.json`` was removed)
    is refused too: the sweep read such a run back as finished, or resumed it with its own stored config,
    instead of training the new settings, and reported its results as the new sweep's."""
    from rlfunc.runtime.run_dir import RUN_FILES, enclosing_run

    sweep_dir = Path(sweep_dir)
    shown = repr(str(sweep_dir))
    if sweep_dir.exists() and not sweep_dir.is_dir():
        raise ConfigError(f"{flag} {shown} is a file; pass a directory.")
    for parent in Path(os.path.abspath(sweep_dir)).parents:
        if parent.exists() and not parent.is_dir():
            raise ConfigError(f"{flag} {shown} is under {str(parent)!r}, which is a file; pass a directory.")
    if (sweep_dir / PLAN_FILE).exists():
        raise ConfigError(
            f"{str(sweep_dir)!r} already holds a sweep; continue it with `rlfunc sweep --resume {sweep_dir}` "
            "or pick another --sweep-dir."
        )
    held = [name for name in RUN_FILES if os.path.lexists(sweep_dir / name)] if sweep_dir.is_dir() else []
    if held:
        raise ConfigError(
            f"{flag} {shown} holds a training run ({', '.join(held)}), which the sweep's runs and files would "
            "mix with; pick another --sweep-dir."
        )
    outer = enclosing_run(sweep_dir / "run")  # the nearest run directory at or above sweep_dir
    if outer is not None:
        raise ConfigError(
            f"{flag} {shown} is inside the run directory {str(outer)!r}, whose own files and commands (resume, "
            "eval, checkpoint clean-up) the sweep's runs would mix with; pick a --sweep-dir outside it."
        )
    taken = [name for name in names or [] if os.path.lexists(sweep_dir / name)] if sweep_dir.is_dir() else []
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        raise ConfigError(
            f"{flag} {shown} already holds {taken[0]}{more}, a directory named as a run of this sweep (left by an "
            "earlier sweep?), which the sweep would read back or resume instead of training these settings; pick "
            "another --sweep-dir, or remove it."
        )


def write_plan(plan: dict) -> Path:
    """Create the sweep directory (refusing what :func:`check_sweep_dir` refuses: a file, a directory that
    holds another sweep or a training run) and write ``sweep.json``."""
    sweep_dir = Path(plan["sweep_dir"])
    # again: another sweep or run may have started there since
    check_sweep_dir(sweep_dir, names=[e["name"] for e in plan["runs"]])
    try:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        _write_json_atomic(sweep_dir / PLAN_FILE, plan)
    except OSError as exc:
        raise ConfigError(f"Cannot write the sweep directory {str(sweep_dir)!r} ({exc.strerror or exc}); pick another --sweep-dir.") from None
    return sweep_dir / PLAN_FILE


def _not_a_sweep(sweep_dir: Path) -> str:
    """Why ``--resume sweep_dir`` has no plan to read, in one sentence naming what to pass instead: a path
    that does not exist, a file, a run directory inside a sweep (its parent is the sweep), any other directory."""
    shown = repr(str(sweep_dir))
    what = "pass the directory an earlier `rlfunc sweep` wrote (its --sweep-dir, printed when it started)"
    if not sweep_dir.exists():
        return f"--resume {shown} does not exist; {what}."
    if not sweep_dir.is_dir():
        return f"--resume {shown} is a file, not a sweep directory; {what}."
    if (sweep_dir.parent / PLAN_FILE).is_file():
        return (f"--resume {shown} is a run inside a sweep, not the sweep directory; "
                f"pass its parent, `rlfunc sweep --resume {sweep_dir.parent}`.")
    return f"--resume {shown} is not a sweep directory (it holds no {PLAN_FILE}); {what}."


MAX_PLAN_BYTES = 256 * 2**20
# files of the sweep directory itself, which no run directory may be named as
_SWEEP_FILES = frozenset({PLAN_FILE, ATTEMPTS_FILE, "results.json", "results.png"})


def plain_run_name(name: Any) -> bool:
    """Whether ``name`` is one plain path component, as a run directory inside the sweep directory is named:
    a non-empty string, not ``.``/``..``, without a path separator (``/``, ``\\``), NUL or other control
    character (so neither absolute nor leading anywhere but into the sweep directory), and not one of the
    sweep directory's own files."""
    return (isinstance(name, str) and 0 < len(name.encode("utf-8", "surrogatepass")) <= 255
            and name not in (".", "..") and name not in _SWEEP_FILES
            and not any(c in "/\\" or ord(c) < 32 or ord(c) == 127 for c in name)
            and not os.path.isabs(name) and Path(name).name == name)


def _int(value: Any, low: int = 0) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def check_plan(plan: Any, path: Path) -> None:
    """Refuse, in one sentence naming ``path`` (a ``sweep.json``) and the entry, a plan ``rlfunc sweep
    --resume`` must not act on: a run name that is not one plain path component (:func:`plain_run_name`: an
    absolute name or one with ``..`` or a separator would put the run, and the clearing of a run left
    without a checkpoint, in any directory), two runs of one name, and fields of the wrong kind (the
    configs, overrides, thread counts, population sizes, seeds, grid and GPU amount the tasks are built
    from, the config path the results name). Nothing is run or written before this passes."""
    shown = repr(str(path))
    fix = "it was damaged or not written by `rlfunc sweep`; start a new sweep"
    if not isinstance(plan, dict) or plan.get("version") != PLAN_VERSION or not isinstance(plan.get("runs"), list):
        raise ConfigError(f"{shown} is not a sweep plan of this rlfunc version; start a new sweep.")

    def refuse(what: str) -> ConfigError:
        return ConfigError(f"{shown} {what}; {fix}.")

    if plan.get("config") is not None and not isinstance(plan["config"], str):
        raise refuse(f"has config {plan['config']!r}, which is not a config file's path")
    if not (isinstance(plan.get("seeds"), list) and all(_int(s) for s in plan["seeds"])):
        raise refuse(f"has seeds {plan.get('seeds')!r}, which is not a list of seeds")
    if not isinstance(plan.get("overrides"), dict):
        raise refuse(f"has overrides {plan.get('overrides')!r}, which is not a mapping of settings")
    grid = plan.get("grid")
    if not (isinstance(grid, dict) and all(isinstance(v, list) for v in grid.values())):
        raise refuse(f"has grid {grid!r}, which is not a mapping of settings to lists of values")
    points = 1
    for values in grid.values():
        points *= len(values)
    if points > max(1, len(plan["runs"])):
        raise refuse(f"has a grid of {points} settings for {len(plan['runs'])} runs")
    gpus = plan.get("gpus", 0.0)
    if isinstance(gpus, bool) or not isinstance(gpus, (int, float)):
        raise refuse(f"has gpus {gpus!r}, which is not a number of GPUs")
    try:
        check_ray_amount("gpus", float(gpus))
    except ConfigError as exc:
        raise refuse(f"has gpus {gpus!r}, which Ray cannot schedule ({str(exc).rstrip('.')})") from None
    seen: set[str] = set()
    for index, entry in enumerate(plan["runs"]):
        if not isinstance(entry, dict):
            raise refuse(f"has run entry {index} {entry!r}, which is not a mapping")
        name = entry.get("name")
        if not plain_run_name(name):
            raise refuse(
                f"has run entry {index} named {name!r}, which is not one plain directory name inside the sweep "
                "directory (no '/', '\\' or control character, not '.', '..' or an absolute path, not one of the "
                "sweep's own files); refused before anything was run or deleted"
            )
        if name in seen:
            raise refuse(f"has two run entries named {name!r}, which would train in one directory")
        seen.add(name)
        raw = entry.get("raw_config", plan.get("raw_config"))
        if not isinstance(raw, dict):
            raise refuse(f"has run entry {name!r} without a config (raw_config {raw!r} is not a mapping)")
        for key in ("overrides", "grid"):
            if not isinstance(entry.get(key), dict):
                raise refuse(f"has run entry {name!r} whose {key} {entry.get(key)!r} is not a mapping")
        if not isinstance(entry.get("label"), str):
            raise refuse(f"has run entry {name!r} whose label {entry.get('label')!r} is not a string")
        if "config" in entry and entry["config"] is not None and not isinstance(entry["config"], str):
            raise refuse(f"has run entry {name!r} whose config {entry['config']!r} is not a config file's path")
        if not _int(entry.get("threads")):  # 0: torch's default (train.threads)
            raise refuse(f"has run entry {name!r} whose threads {entry.get('threads')!r} is not a thread count")
        if entry.get("seed") is not None and not _int(entry["seed"]):
            raise refuse(f"has run entry {name!r} whose seed {entry['seed']!r} is not a seed")
        members = entry.get("members")
        if members is not None:
            seeds = entry.get("seeds")
            if not (_int(members, 1) and isinstance(seeds, list) and all(_int(s) for s in seeds)
                    and len(seeds) == members):
                raise refuse(f"has run entry {name!r} whose members {members!r} is not the number of its seeds")


def _check_sweep_files(plan: dict) -> None:
    """What ``--resume`` would write through, refused in one sentence: a run directory (or a population
    member's) that is a symbolic link (the run would train, and a run left without a checkpoint be cleared,
    wherever it points), and an ``attempts.jsonl`` that is not a regular file (run_log's check)."""
    sweep_dir = Path(plan["sweep_dir"])
    for entry in plan["runs"]:
        run_dir = sweep_dir / entry["name"]
        links = [run_dir] + [run_dir / f"member-{k}" for k in range(entry.get("members") or 0)]
        for link in links:
            if link.is_symlink():
                raise ConfigError(
                    f"{str(link)!r} is a symbolic link, not a run directory `rlfunc sweep` wrote; it was refused before "
                    "anything was run or deleted: remove the link (or move the run it points to there) and resume again."
                )
    _check_regular(sweep_dir / ATTEMPTS_FILE)


def load_plan(sweep_dir: str | Path) -> dict:
    """The plan ``rlfunc sweep`` stored in ``SWEEP_DIR/sweep.json``, refused in one sentence where it is
    not one (:func:`check_plan`) or where resuming it would write through a symlink planted in the sweep
    directory (:func:`_check_sweep_files`); before anything is run or written, and before Ray is imported."""
    path = Path(sweep_dir) / PLAN_FILE
    if not path.is_file():
        raise ConfigError(_not_a_sweep(Path(sweep_dir)))
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise ValueError(f"larger than {MAX_PLAN_BYTES // 2**20} MiB")
        plan = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise ConfigError(f"{str(path)!r} cannot be read ({exc}); it was not written by `rlfunc sweep`.") from None
    check_plan(plan, path)
    plan["sweep_dir"] = str(Path(sweep_dir).resolve())  # the directory may have moved (shared storage)
    _check_sweep_files(plan)
    return plan


def check_loaded_imports(plan: dict, allow_import: list[str] | tuple[str, ...] = (), trust_wandb_settings: bool = False) -> None:
    """A stored plan (``rlfunc sweep --resume``) is a loaded file, as a checkpoint is: its configs' modules
    (an ``env.id`` ``module:Env-v0``, ``module:ClassName`` wrappers) and gymnasium wrappers that may write
    files are refused in one sentence, as ``rlfunc resume`` refuses them
    (:func:`rlfunc.envs.factory.from_loaded_file`'s own checks), unless ``allow_import``
    (``--allow-import MODULE``) names them. The configs are built without importing anything; a config that
    does not build is refused too. So are ``train.wandb`` keys that redirect W&B (beyond
    :data:`~rlfunc.runtime.config.LOADED_WANDB_KEYS`), unless ``trust_wandb_settings``
    (``--trust-wandb-settings``), as ``rlfunc resume`` refuses them. Called before Ray is imported; nothing
    is imported here."""
    from rlfunc.envs.factory import _check_loaded_import, _check_loaded_wrapper, from_loaded_file

    for entry in plan["runs"]:
        raw = entry.get("raw_config", plan.get("raw_config"))
        where = f"{PLAN_FILE} run {entry['name']}"
        try:
            env = _stored_env(raw, entry)
        except ConfigError as exc:
            raise ConfigError(f"{where}: the stored config cannot be used ({str(exc).rstrip('.')}); start a new sweep.") from None
        wandb = _stored_wandb(raw, entry)
        others = [str(k) for k in wandb or {} if k not in LOADED_WANDB_KEYS]
        if others and not trust_wandb_settings:  # as rlfunc resume refuses them from a checkpoint (config.check_loaded_wandb)
            raise ConfigError(
                f"{where}: its config sets {', '.join(f'train.wandb.{k}' for k in others)}, which can make W&B write files "
                "elsewhere or send your data and W&B API key to another server, so `rlfunc sweep --resume` does not use it "
                "on its own; if you trust this sweep directory pass --trust-wandb-settings."
            )
        try:
            with from_loaded_file(allow_import):
                for module, what, wrapper in _named_imports(env):
                    if wrapper is not None:
                        _check_loaded_wrapper(wrapper)
                    if module is not None:
                        _check_loaded_import(module, what)
        except ValueError as exc:
            text = str(exc)
            raise ConfigError(f"{where}: {text[:1].lower()}{text[1:]}") from None


# ----------------------------------------------------------------------------- the task


def _newest_checkpoint_step(run_dir: Path) -> int | None:
    """The step of the checkpoint :func:`rlfunc.resume` of ``run_dir`` starts from, found as the checkpoint
    module finds it (:func:`~rlfunc.runtime.checkpoint.latest_checkpoint`: the one ``latest`` names, or one
    renamed into place by a write killed before ``latest`` was updated, as a run's first checkpoint always
    is); ``None`` when the run has no complete checkpoint."""
    from rlfunc.runtime.checkpoint import latest_checkpoint

    found = latest_checkpoint(run_dir / "checkpoints")
    return None if found is None else int(found.name[len("step_"):])


def _clear_run_dir(run_dir: Path) -> None:
    """Delete what an attempt that died before its first usable checkpoint left in ``run_dir`` (its
    ``config.yaml``, ``metrics.csv``, ``eval.csv``, ``checkpoints/``, ``best/``, logs, a population's
    ``member-<k>/``), keeping the lock file, which this process holds (deleting it would let another
    attempt lock a new file and train beside this one). A symlink is removed, never followed."""
    from rlfunc.runtime.checkpoint import LOCK_FILE

    for entry in run_dir.iterdir():
        if entry.name == LOCK_FILE:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()


def _stored_env(raw: Any, entry: dict):
    """The env section of the entry's config, built without importing a module it names."""
    from rlfunc.envs.factory import without_user_imports
    from rlfunc.runtime.config import apply_overrides, build_config

    with without_user_imports():
        return build_config(apply_overrides(raw or {}, dict(entry["overrides"]))).env


def _stored_wandb(raw: Any, entry: dict) -> dict | None:
    """The ``train.wandb`` mapping of the entry's stored config (overrides applied), as written."""
    from rlfunc.runtime.config import apply_overrides

    wandb = (apply_overrides(raw or {}, dict(entry["overrides"])).get("train") or {}).get("wandb")
    return wandb if isinstance(wandb, dict) else None


def _named_imports(env) -> list[tuple[str | None, str, str | None]]:
    """``(module, where it is named, wrapper entry)`` for what the env section ``env`` names to import or
    apply: the module of a ``module:Env-v0`` ``env.id``, each wrapper entry (``module:ClassName`` with its
    module, ``gymnasium.wrappers.ClassName``, rlfunc's own short names)."""
    from rlfunc.envs import split_env_id

    module = split_env_id(env.id)[0]
    out: list[tuple[str | None, str, str | None]] = [(module, f"env.id {env.id!r}", None)] if module else []
    for item in env.wrappers or []:
        name = item if isinstance(item, str) else next(iter(item), None) if isinstance(item, dict) and len(item) == 1 else None
        if isinstance(name, str):
            module = name.partition(":")[0] if ":" in name and not name.startswith("gymnasium.wrappers.") else None
            out.append((module, f"env.wrappers entry {name!r}", name))
    return out


def _config_imports(plan: dict, entry: dict) -> list[str]:
    """What the entry's own config (the user's, which the fresh attempt's :func:`rlfunc.train` imports
    anyway) names to import, as ``rlfunc.resume``'s ``allow_import``: the module of a ``module:Env-v0``
    ``env.id``, the module of each ``module:ClassName`` wrapper, and each ``gymnasium.wrappers.ClassName``
    wrapper. A retry of the run in a fresh process of a sweep started from the user's config may import
    them (and nothing else the checkpoint's config might name); ``rlfunc sweep --resume`` allows only what
    the user passes to ``--allow-import`` (:func:`check_loaded_imports`)."""
    try:
        env = _stored_env(entry.get("raw_config", plan.get("raw_config")), entry)
    except Exception:  # a config the task cannot build: rlfunc.resume says what is wrong, in its own words
        return []
    names = []
    for module, _, wrapper in _named_imports(env):
        if wrapper is not None and wrapper.startswith("gymnasium.wrappers."):
            names.append(wrapper)
        elif module:
            names.append(module)
    return list(dict.fromkeys(n for n in names if n))


def _log_attempt(sweep_dir: Path, **fields: Any) -> None:
    line = json.dumps({"time": round(time.time(), 3), "host": platform.node(), "pid": os.getpid(), **fields})
    path = sweep_dir / ATTEMPTS_FILE
    # one short O_APPEND write per line; as a run's logs, never through a symlink (O_NOFOLLOW), a regular file only
    with _naming(path), _open(path, "a") as f:
        f.write(line + "\n")


def _record_dirs(plan: dict, entry: dict) -> list[Path]:
    """The run directories an entry's records come from: its own, or a population's members'."""
    run_dir = Path(plan["sweep_dir"]) / entry["name"]
    members = entry.get("members")
    return [run_dir / f"member-{k}" for k in range(members)] if members else [run_dir]


def entry_finished(plan: dict, entry: dict) -> bool:
    """Whether the entry's run (every member of a population) is over (:func:`run_finished`)."""
    return all(run_finished(d) for d in _record_dirs(plan, entry))


def entry_records(plan: dict, entry: dict) -> list[dict]:
    """The entry's learn records (one per run; one per member of a population), read back."""
    records = []
    for d in _record_dirs(plan, entry):
        record = collected_run(d, entry["label"])
        record.update(config=entry.get("config", plan["config"]), overrides=entry["overrides"], grid=entry["grid"],
                      name=entry["name"] + (f"/{d.name}" if entry.get("members") else ""))
        records.append(record)
    return records


def train_or_continue(plan: dict, entry: dict, allow_import: list[str] | None = None,
                      trust_wandb_settings: bool = False) -> list[dict]:
    """Body of one sweep task (any process): bring the run ``entry`` to its end and return its learn
    records. A finished run is read back; a run with a usable checkpoint (as :func:`rlfunc.resume` finds
    it, :func:`_newest_checkpoint_step`) is resumed from it, allowed to import what the entry's own config
    names (:func:`_config_imports`); otherwise the run directory's files (if a crashed attempt left some)
    are cleared and the run trains from the start. An existing run directory is locked
    (:func:`~rlfunc.runtime.checkpoint.lock_run_dir`) before it is read for a checkpoint or cleared, and
    stays locked through the training: a run another live process trains (a second ``rlfunc sweep
    --resume``, an earlier attempt still running) is refused in one sentence, with nothing deleted.

    ``allow_import`` not ``None``: the plan was loaded from a ``sweep.json`` (``rlfunc sweep --resume``), a
    file that may be someone else's, so the run trains under :func:`rlfunc.envs.factory.from_loaded_file`
    and resumes allowed only these modules (``--allow-import``), as ``rlfunc resume`` does, and with the
    run's stored W&B keys that redirect W&B only if ``trust_wandb_settings`` (``--trust-wandb-settings``).
    A run name that is not one plain path component, or a run directory that is a symlink, is refused
    before anything."""
    import contextlib

    import rlfunc
    from rlfunc.envs.factory import from_loaded_file
    from rlfunc.runtime.checkpoint import CheckpointError, clean_leftovers, lock_run_dir, unlock_run_dir

    if not plain_run_name(entry.get("name")):
        raise ConfigError(f"Run name {entry.get('name')!r} is not one plain directory name inside the sweep directory; "
                          "refused before anything was run or deleted.")
    sweep_dir = Path(plan["sweep_dir"])
    run_dir = sweep_dir / entry["name"]
    if run_dir.is_symlink():
        raise ConfigError(f"{str(run_dir)!r} is a symbolic link, not a run directory `rlfunc sweep` wrote; refused "
                          "before anything was run or deleted.")
    raw = entry.get("raw_config", plan["raw_config"])
    loaded = allow_import is not None
    guard = (lambda: from_loaded_file(allow_import)) if loaded else contextlib.nullcontext
    if entry_finished(plan, entry):
        _log_attempt(sweep_dir, run=entry["name"], start="finished")
        return entry_records(plan, entry)
    if not run_dir.is_dir():  # nothing to resume or clear: rlfunc.train locks the new directory itself
        _log_attempt(sweep_dir, run=entry["name"], start="fresh")
        with guard():
            rlfunc.train(raw, overrides=dict(entry["overrides"]), run_dir=run_dir)
        return entry_records(plan, entry)
    lock_run_dir(run_dir)  # another process training this run: refused here, before anything is read or deleted
    try:
        if entry_finished(plan, entry):  # the process that held the lock until now finished it
            _log_attempt(sweep_dir, run=entry["name"], start="finished")
            return entry_records(plan, entry)
        for line in clean_leftovers(run_dir / "checkpoints"):  # as rlfunc.resume does (a replaced checkpoint put back)
            print(f"rlfunc sweep: {run_dir / 'checkpoints'}: {line}", file=sys.stderr)
        step = _newest_checkpoint_step(run_dir)
        if step is not None:
            _log_attempt(sweep_dir, run=entry["name"], start="resume", from_step=step)
            try:
                # resume takes this process's lock as its own (no second lock) and releases it when it ends
                # a new sweep's runs are the user's own config: W&B settings as given; a stored plan's, not
                # (check_loaded_imports refused them in the plan; a run's own checkpoint may still set them)
                rlfunc.resume(run_dir, allow_import=list(allow_import) if loaded else _config_imports(plan, entry),
                              trust_wandb_settings=trust_wandb_settings or not loaded)
                return entry_records(plan, entry)
            except CheckpointError as exc:  # every checkpoint damaged: start over
                print(f"rlfunc sweep: {run_dir}: {exc}; training it from the start", file=sys.stderr)
            lock_run_dir(run_dir)  # resume released the lock on its way out: hold it again before clearing
        _clear_run_dir(run_dir)  # an attempt that died before its first checkpoint; the lock file stays
        _log_attempt(sweep_dir, run=entry["name"], start="fresh")
        # rlfunc.train finds the lock held by this process and trains under it (it neither takes nor releases it)
        with guard():
            rlfunc.train(raw, overrides=dict(entry["overrides"]), run_dir=run_dir)
    finally:
        unlock_run_dir(run_dir)
    return entry_records(plan, entry)


# ----------------------------------------------------------------------------- Ray


def _token_mode_for(address: str | None) -> None:
    """Ray >= 2.5x clusters use token authentication, and a driver joining by host:port sends the
    token (``RAY_AUTH_TOKEN``, or ``~/.ray/auth_token`` as ``ray start`` writes it) only in token
    mode: turn that on where a token is at hand. Ray reads it when imported, so call this first."""
    if address is None or "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or (Path.home() / ".ray" / "auth_token").is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


def _import_ray():
    try:
        import ray
    except ImportError:
        raise ConfigError(RAY_MISSING) from None
    return ray


# Ray's own settings (read when Ray is imported) that bound how long joining an address where no Ray
# answers takes: each gRPC connect to the GCS (Ray's default 5 s) and the driver's GCS client (30 s).
JOIN_BOUNDS = {"RAY_gcs_rpc_server_connect_timeout_s": "3", "RAY_py_gcs_connect_timeout_s": "8"}
# ... and ray.init's attempts at that client (read by ray.init; Ray's default 20, each up to the above).
JOIN_ATTEMPTS = ("RAY_gcs_server_port_wait_time_s", "1")
# An HTTP/2 client preface and an empty SETTINGS frame: a gRPC server (Ray's GCS and its client server)
# answers with a SETTINGS frame of its own.
_HTTP2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def _prepare_join(address: str | None) -> None:
    """Before Ray is imported: token mode (:func:`_token_mode_for`) and, for an address, the bounds on
    Ray's connection attempts (:data:`JOIN_BOUNDS`, unless set already; they take effect only when Ray is
    not imported yet, so they are set only then)."""
    _token_mode_for(address)
    if address is None or "ray" in sys.modules:
        return
    for key, value in JOIN_BOUNDS.items():
        os.environ.setdefault(key, value)


def _ray_address_file() -> Path:
    """Where ``ray start`` writes the address that ``auto`` joins (Ray's temp dir: RAY_TMPDIR, TMPDIR, /tmp)."""
    try:
        from ray._common.utils import get_ray_address_file

        return Path(get_ray_address_file(None))
    except (ImportError, AttributeError):  # another Ray layout: its default
        base = os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp"
        return Path(base) / "ray" / "ray_current_cluster"


def _ray_dials(address: str) -> str:
    """The ``host:port`` that ``ray.init(address)`` dials for a GCS address or ``auto`` (Ray's own
    resolution: RAY_ADDRESS, then the address file of the newest ``ray start``, then a running local GCS;
    a loopback host becomes this node's address). ConnectionError when ``auto`` finds nothing."""
    try:
        from ray._private.services import canonicalize_bootstrap_address
    except ImportError:  # another Ray layout: dial what was given
        return address
    return canonicalize_bootstrap_address(address) or address


def _no_ray_answer(host: str, port: int, timeout_s: float) -> str | None:
    """``None`` when ``host:port`` answers as Ray does (its GCS and its client server are gRPC servers:
    HTTP/2, which answers a client's preface with a SETTINGS frame), else why not, in a few words."""
    try:
        sock = socket.create_connection((host.strip("[]"), port), timeout=timeout_s)
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__
    with sock:
        if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
            return None  # TLS first: the port is open, which is all one can see without the certificates
        head = b""
        deadline = time.monotonic() + timeout_s
        try:
            sock.sendall(_HTTP2_HELLO)
            while len(head) < 9:
                sock.settimeout(max(deadline - time.monotonic(), 0.001))
                part = sock.recv(9 - len(head))
                if not part:
                    return "something there closed the connection without a gRPC answer"
                head += part
        except OSError:  # timed out, reset
            return f"something there accepts connections but gave no gRPC answer within {timeout_s:g} s"
    return None if head[3] == 0x04 else "something there answers, but not as a gRPC server"


def _check_reachable(address: str, timeout_s: float = 3.0) -> None:
    """Whether a Ray cluster answers at ``address`` (``auto``, ``host:port`` or ``ray://host:port``), at
    the ``host:port`` Ray will dial (:func:`_ray_dials`): one TCP connect and one gRPC greeting, so an
    address where no Ray answers is one sentence at once instead of Ray's retries."""
    if address == "auto":
        _check_auto(timeout_s)
        return
    client = address.startswith("ray://")
    target = address.removeprefix("ray://")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(f"--address {address!r} is not auto, host:port or ray://host:port; pass e.g. --address ray://127.0.0.1:10001.")
    dial = target if client else _ray_dials(target)
    dial_host, _, dial_port = dial.rpartition(":")
    why = _no_ray_answer(dial_host, int(dial_port), timeout_s)
    if why is not None:
        if dial != target:
            why += f" at {dial}, the address Ray dials for it"
        raise ConfigError(
            f"Cannot reach a Ray cluster at {address!r} ({why}); start one with `ray start --head` "
            "or check --address."
        )


def _check_auto(timeout_s: float) -> None:
    """``--address auto``: the cluster Ray would join (:func:`_ray_dials`) answers, else one sentence
    naming where the address came from (RAY_ADDRESS or the address file a stopped cluster left)."""
    file = _ray_address_file()
    try:
        dial = _ray_dials("auto")
    except ConnectionError:
        raise ConfigError(
            f"--address auto finds no Ray cluster on this machine (no RAY_ADDRESS, no {file}, no running Ray); "
            "start one with `ray start --head` or pass --address host:port."
        ) from None
    source = "a running Ray process"  # Ray's fallback: a GCS process it finds on this machine
    if os.environ.get("RAY_ADDRESS"):
        source = "RAY_ADDRESS"
    else:
        try:
            if _ray_dials(file.read_text().strip()) == dial:
                source = str(file)
        except (OSError, ValueError):  # no file, or not an address
            pass
    host, sep, port = dial.rpartition(":")
    why = _no_ray_answer(host, int(port), timeout_s) if sep and port.isdigit() else "not host:port"
    if why is None:
        return
    if source == "RAY_ADDRESS":
        fix = "start that cluster with `ray start --head` or correct RAY_ADDRESS"
    elif source == str(file):
        fix = f"{file} is stale (its cluster stopped): start one with `ray start --head` or delete {file}"
    else:
        fix = "start a cluster with `ray start --head` or pass --address host:port"
    raise ConfigError(f"--address auto names {dial} (from {source}), where no Ray cluster answers ({why}); {fix}.")


def connect(address: str | None, num_cpus: int | None = None):
    """``ray.init`` for a sweep; returns ``(ray, initialized_here)`` (then ``ray.shutdown()`` is the
    caller's). No address: a local Ray on this machine only (node address loopback, no dashboard,
    usage stats off). An address: join that cluster, after :func:`_check_reachable`, with Ray's connection attempts
    bounded (:data:`JOIN_BOUNDS`, :data:`JOIN_ATTEMPTS`: about 15 s where no Ray answers). Already
    initialized: nothing to do."""
    _prepare_join(address)
    ray = _import_ray()
    if ray.is_initialized():
        return ray, False
    if address is None:
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        ray.init(
            address="local",  # a new Ray of its own, even where another cluster runs (None would join that)
            _node_ip_address="127.0.0.1",
            include_dashboard=False,
            num_cpus=num_cpus or os.cpu_count() or 1,
            log_to_driver=False,
            configure_logging=False,
        )
        return ray, True
    _check_reachable(address)
    key, value = JOIN_ATTEMPTS
    set_here = key not in os.environ
    if set_here:  # only around the join: a later local Ray's own start waits by the same setting
        os.environ[key] = value
    try:
        ray.init(address=address, log_to_driver=False, configure_logging=False)
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        raise ConfigError(
            f"Cannot join a Ray cluster at {address!r} ({' '.join(str(exc).split())[:200]}); start one with "
            "`ray start --head`, check --address, and give this machine the cluster's token (RAY_AUTH_TOKEN)."
        ) from None
    finally:
        if set_here:
            os.environ.pop(key, None)
    return ray, True


def _entry_bundles(plan: dict, entry: dict) -> list[dict[str, float]]:
    """The Ray resources one task of ``entry`` asks for: its own (``train.threads`` CPUs, at least 1, and
    ``--gpus``) first, then, for a distributed config, one bundle per actor (``distributed.actor_cpus`` /
    ``actor_gpus``); zero amounts left out."""
    bundles = [{"CPU": float(max(1, int(entry["threads"]))), "GPU": float(plan.get("gpus", 0.0) or 0.0)}]
    d = _distributed_of(plan, entry)
    if d is not None:
        bundles += [{"CPU": float(d.actor_cpus), "GPU": float(d.actor_gpus)} for _ in range(d.actors)]
    return [{k: v for k, v in b.items() if v > 0} for b in bundles]


def _distributed_of(plan: dict, entry: dict):
    """The entry's ``distributed`` section (None for a single-process config, or one its task will refuse)."""
    from rlfunc.runtime.config import apply_overrides, build_config

    try:
        raw = entry.get("raw_config", plan.get("raw_config")) or {}
        return build_config(apply_overrides(raw, dict(entry["overrides"]))).distributed
    except Exception:  # the task reports a config it cannot build, in its own words
        return None


def _check_fits(ray, plan: dict, entries: list[dict]) -> None:
    """One sentence, before any task starts, when a task of ``entries`` asks for more CPUs or GPUs than
    the cluster has in all (Ray would keep it pending forever) or than its largest node has for one
    bundle (:func:`_entry_bundles`)."""
    total = ray.cluster_resources()
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    for entry in entries:
        bundles = _entry_bundles(plan, entry)
        d = _distributed_of(plan, entry) if len(bundles) > 1 else None
        for what in ("CPU", "GPU"):
            need = sum(b.get(what, 0.0) for b in bundles)
            have = float(total.get(what, 0.0))
            biggest = max(b.get(what, 0.0) for b in bundles)
            node = max((float(n.get(what, 0.0)) for n in nodes), default=have)
            if need <= have + 1e-9 and biggest <= node + 1e-9:
                continue
            if what == "CPU":
                parts = [f"train.threads={entry['threads']}" + (" for its learner" if d is not None else "")]
                knobs = ["train.threads"]
                if d is not None:
                    parts.append(f"distributed.actors={d.actors} x distributed.actor_cpus={d.actor_cpus:g}")
                    knobs += ["distributed.actors", "distributed.actor_cpus"]
            else:
                parts, knobs = [], []
                if plan.get("gpus"):
                    parts.append(f"--gpus {plan['gpus']:g}")
                    knobs.append("--gpus")
                if d is not None and d.actor_gpus > 0:
                    parts.append(f"distributed.actors={d.actors} x distributed.actor_gpus={d.actor_gpus:g}")
                    knobs += ["distributed.actors", "distributed.actor_gpus"]
            lower = " or ".join(knobs) if len(knobs) < 3 else ", ".join(knobs[:-1]) + " or " + knobs[-1]
            if what == "GPU" and have == 0:
                drop = " and ".join(["drop --gpus" if k == "--gpus" else "set distributed.actor_gpus=0"
                                     for k in knobs if k != "distributed.actors"])
                raise ConfigError(
                    f"Run {entry['name']} asks Ray for {need:g} GPUs ({' plus '.join(parts)}) but the Ray cluster has "
                    f"no GPU; {drop}, or join a cluster with GPUs (--address)."
                )
            if need > have + 1e-9:
                raise ConfigError(
                    f"Run {entry['name']} asks Ray for {need:g} {what}s ({' plus '.join(parts)}) but the Ray cluster "
                    f"has {have:g}; lower {lower}, or join a cluster with more (--address)."
                )
            raise ConfigError(
                f"Run {entry['name']} asks Ray for {biggest:g} {what}s on one node ({' plus '.join(parts)}) but the "
                f"largest node of the Ray cluster has {node:g}; lower {lower}, or add a larger node."
            )


def _on_sigterm(signum, frame):  # pragma: no cover - exercised by a subprocess test
    raise KeyboardInterrupt("SIGTERM")


_NOT_CAUGHT = object()


def _catch_sigterm() -> Any:
    """From now on SIGTERM stops the sweep as Ctrl-C does (:func:`_on_sigterm`); returns the handler it
    replaced, for :func:`_restore_sigterm` (nothing is installed off the main thread)."""
    return signal.signal(signal.SIGTERM, _on_sigterm) if _main_thread() else _NOT_CAUGHT


def _restore_sigterm(previous: Any) -> None:
    """Put back the SIGTERM handler :func:`_catch_sigterm` replaced (the default one where it was not Python's)."""
    if previous is not _NOT_CAUGHT:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


# How long a stopped sweep waits for its running runs to save at the step they reached (a second Ctrl-C or
# SIGTERM stops at once): a checkpoint with a large replay takes a while to write.
STOP_WAIT_S = 120.0


def _stop_running(ray, refs: list, echo: Callable[[str], None], wait_s: float = STOP_WAIT_S) -> None:
    """A Ctrl-C or SIGTERM of the sweep: ask each running task to stop as Ctrl-C stops ``rlfunc train``
    (``ray.cancel`` raises KeyboardInterrupt in it, and its trainer saves the run at the step it reached), and
    wait up to ``wait_s`` for them. Before, Ray was shut down under the running tasks (or, on a cluster, their
    driver left): each run lost everything since its last periodic checkpoint (up to
    ``train.checkpoint_every`` env steps). Tasks not started yet are cancelled; a second signal stops at once."""
    if not refs:
        return
    echo("stopping: each run in training saves at the step it reached (Ctrl-C again to stop at once)")
    try:
        for ref in refs:
            ray.cancel(ref)
        ray.wait(refs, num_returns=len(refs), timeout=wait_s)
    except KeyboardInterrupt:  # a second Ctrl-C or SIGTERM: stop now
        pass
    except Exception as exc:  # noqa: BLE001 -- the cluster is going away: stopping goes on without the saves
        echo(f"could not wait for the running tasks to save ({type(exc).__name__}: {exc})")


def run_entries(
    plan: dict,
    todo: list[dict],
    address: str | None = None,
    max_concurrent: int | None = None,
    max_retries: int = 3,
    echo: Callable[[str], None] = print,
    of: int | None = None,
    allow_import: list[str] | None = None,
    trust_wandb_settings: bool = False,
) -> tuple[dict[str, list[dict]], dict[str, str], dict[str, Any]]:
    """Train the plan entries ``todo`` as Ray tasks (:func:`train_or_continue`), at most
    ``max_concurrent`` in flight (default: as many as the cluster's CPUs allow). A task Ray could
    never place is refused first (:func:`_check_fits`); a distributed config's task runs in a
    placement group that also holds its actors' bundles (removed when the task ends). Returns the
    records of each finished entry by name, the entries that failed (name -> one line: an error,
    or a worker that died more than ``max_retries`` times) and the cluster's description. Ctrl-C
    or SIGTERM stops the running tasks so that each saves its run where it is (:func:`_stop_running`), then
    raises :class:`SweepStopped`; Ray (when started here) is shut down either way.
    ``allow_import``, ``trust_wandb_settings``: each task's (:func:`train_or_continue`); ``allow_import`` is not
    ``None`` for a plan loaded from a file."""
    sweep_dir = Path(plan["sweep_dir"])
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be a positive integer, got {max_concurrent}.")
    done: dict[str, list[dict]] = {}
    failed: dict[str, str] = {}
    # every key a sweep's machine has, also where nothing is left to train (no Ray: its keys None)
    machine: dict[str, Any] = {"driver_host": platform.node(), "python": platform.python_version(),
                               "ray_version": None, "embedded": address is None, "address": address,
                               "cluster_cpus": None, "cluster_gpus": None, "nodes": None}
    if not todo:
        return done, failed, machine
    total = of if of is not None else len(todo)
    ray, started = connect(address)
    try:
        _check_fits(ray, plan, todo)  # a task Ray could never place is one sentence, not a sweep that waits forever
    except BaseException:
        if started:
            ray.shutdown()
        raise
    previous = _catch_sigterm()
    groups: dict[Any, Any] = {}  # task -> the placement group reserving a distributed run's actors with it
    try:
        machine.update(ray_version=ray.__version__, embedded=address is None, address=address,
                       cluster_cpus=ray.cluster_resources().get("CPU"),
                       cluster_gpus=ray.cluster_resources().get("GPU", 0.0),
                       nodes=len([n for n in ray.nodes() if n.get("Alive")]))
        task = ray.remote(train_or_continue)
        limit = max_concurrent or max(1, int(machine["cluster_cpus"] or 1))
        pending: dict[Any, dict] = {}
        queue = list(todo)
        finished_before = total - len(todo)
        while queue or pending:
            while queue and len(pending) < limit:
                entry = queue.pop(0)
                bundles = _entry_bundles(plan, entry)
                options: dict[str, Any] = {}
                if len(bundles) > 1:  # a distributed run: its learner (this task) and its actors reserved together
                    from ray.util.placement_group import placement_group
                    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

                    group = placement_group(bundles, strategy="PACK", name=f"rlfunc-sweep:{entry['name']}")
                    options["scheduling_strategy"] = PlacementGroupSchedulingStrategy(
                        group, placement_group_bundle_index=0, placement_group_capture_child_tasks=True)
                ref = task.options(
                    num_cpus=bundles[0].get("CPU", 1.0), num_gpus=bundles[0].get("GPU", 0.0),
                    max_retries=max_retries, retry_exceptions=False, name=f"rlfunc-sweep:{entry['name']}", **options,
                ).remote(plan, entry, allow_import, trust_wandb_settings)
                pending[ref] = entry
                if len(bundles) > 1:
                    groups[ref] = group
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)  # wakes for Ctrl-C/SIGTERM
            if not ready:
                continue
            entry = pending.pop(ready[0])
            if ready[0] in groups:
                from ray.util.placement_group import remove_placement_group

                remove_placement_group(groups.pop(ready[0]))
            try:
                records = ray.get(ready[0])
            except ray.exceptions.RayTaskError as exc:
                cause = exc.cause if getattr(exc, "cause", None) is not None else exc
                failed[entry["name"]] = f"{type(cause).__name__}: {' '.join(str(cause).split())[:300]}"
                echo(f"  {entry['name']}: failed: {failed[entry['name']]}")
                continue
            except ray.exceptions.RayError as exc:  # the worker died more than max_retries times
                failed[entry["name"]] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
                echo(f"  {entry['name']}: failed: {failed[entry['name']]}")
                continue
            done[entry["name"]] = records
            finals = ", ".join("n/a" if r["final_return"] is None else f"{r['final_return']:.1f}" for r in records)
            echo(f"  {entry['name']}: final {finals} after {records[0]['env_steps']} steps "
                 f"({finished_before + len(done)}/{total} done)")
    except KeyboardInterrupt:  # each running run saves where it is (as `rlfunc train` on Ctrl-C), then Ray ends
        _stop_running(ray, list(pending), echo)
        raise SweepStopped(
            f"sweep stopped; finished runs are kept and the others continue from their checkpoints with "
            f"`{resume_command(sweep_dir)}`", done, failed, machine,
        ) from None
    finally:
        _restore_sigterm(previous)
        if groups and not started:  # on a cluster that goes on: free what the stopped runs reserved
            from ray.util.placement_group import remove_placement_group

            for group in groups.values():
                try:
                    remove_placement_group(group)
                except Exception:  # the cluster is gone already
                    pass
        if started:
            ray.shutdown()
    return done, failed, machine


def split_finished(plan: dict) -> tuple[dict[str, list[dict]], list[dict]]:
    """``(records of the plan's finished entries by name, the entries still to train)``: what a
    resumed sweep (or ``benchmarks/run.py learn``) keeps and what it trains."""
    done: dict[str, list[dict]] = {}
    todo = []
    for entry in plan["runs"]:
        if entry_finished(plan, entry):
            done[entry["name"]] = entry_records(plan, entry)
        else:
            todo.append(entry)
    return done, todo


def run_sweep(
    plan: dict,
    address: str | None = None,
    max_concurrent: int | None = None,
    max_retries: int = 3,
    out: str | Path | None = None,
    echo: Callable[[str], None] = print,
    allow_import: list[str] | None = None,
    trust_wandb_settings: bool = False,
) -> dict:
    """Run (or continue) the plan's runs on Ray and write the learn JSON + PNG. Returns the result.

    Finished runs are read back from their directories, not trained again; the others are Ray
    tasks (:func:`run_entries`, with ``allow_import`` and ``trust_wandb_settings``). A run that fails with an error (not a dead
    worker) is listed under ``failed``; the others go on. A stopped sweep (Ctrl-C, SIGTERM) writes the JSON
    and PNG of the runs that finished (those that finished while the others were saving included), names
    the others under ``unfinished`` (empty when the sweep ran to its end), and raises :class:`SweepStopped`
    (:func:`_stopped`). The JSON and the PNG are written to temporary files beside them and renamed into
    place: a symlink at either is replaced, never written through.
    """
    sweep_dir = Path(plan["sweep_dir"])
    if max_concurrent is not None and max_concurrent < 1:
        raise ConfigError(f"--max-concurrent must be a positive integer, got {max_concurrent}.")
    t0 = time.perf_counter()
    done, todo = split_finished(plan)
    echo(f"sweep {sweep_dir}: {len(plan['runs'])} {_kind(plan)} "
         f"({len(grid_points(plan['grid']))} settings x {len(plan['seeds'])} seeds), {len(done)} finished already, "
         f"{len(todo)} to train")
    settings = {"max_concurrent": max_concurrent, "max_retries": max_retries, "t0": t0}
    try:
        trained, failed, machine = run_entries(plan, todo, address, max_concurrent, max_retries, echo,
                                               of=len(plan["runs"]), allow_import=allow_import,
                                               trust_wandb_settings=trust_wandb_settings)
    except SweepStopped as stop:
        done.update(stop.trained)
        raise _stopped(plan, done, stop, settings, out, echo) from None
    done.update(trained)
    return _write_result(_result(plan, done, failed, machine, **settings), out, echo)


def _kind(plan: dict) -> str:
    """What the plan's entries are, plural as their number asks: runs, or populations."""
    populations = any(e.get("members") for e in plan["runs"])
    return ("population" if populations else "run") + ("" if len(plan["runs"]) == 1 else "s")


def _result(plan: dict, done: dict[str, list[dict]], failed: dict[str, str], machine: dict,
            max_concurrent: int | None, max_retries: int, t0: float) -> dict:
    """The learn JSON of the plan's finished entries ``done``, in plan order; ``unfinished`` names the
    entries neither finished nor failed (a stopped sweep's; ``--resume`` continues them)."""
    runs = [r for e in plan["runs"] if e["name"] in done for r in done[e["name"]]]
    return {
        "machine": machine,
        "runs": runs,
        "summary": summary(runs),
        "settings": {
            "sweep_dir": str(Path(plan["sweep_dir"])),
            "config": plan["config"],
            "seeds": plan["seeds"],
            "grid": plan["grid"],
            "overrides": plan["overrides"],
            # each grid point's seeds trained as one population (--population)
            "population": any(e.get("members") for e in plan["runs"]),
            "max_concurrent": max_concurrent,
            "max_retries": max_retries,
            "final_return": "mean greedy return of the last evaluation (train.eval_episodes episodes)",
            "total_wall_s": time.perf_counter() - t0,
        },
        "failed": failed,
        "unfinished": [e["name"] for e in plan["runs"] if e["name"] not in done and e["name"] not in failed],
    }


def _finished_while_stopping(plan: dict, done: dict[str, list[dict]], failed: dict[str, str]) -> dict[str, list[dict]]:
    """Records of the entries that are not in ``done`` or ``failed`` but whose runs are over, read back as
    ``--resume`` reads them (:func:`split_finished`): a run that finished while the sweep stopped, or one
    whose task's answer the stop cut off."""
    found = {}
    for entry in plan["runs"]:
        if entry["name"] in done or entry["name"] in failed or not entry_finished(plan, entry):
            continue
        try:
            found[entry["name"]] = entry_records(plan, entry)
        except (OSError, ValueError, KeyError, TypeError):  # being written as it is read: --resume reads it later
            continue
    return found


def _stopped(plan: dict, done: dict[str, list[dict]], stop: SweepStopped, settings: dict,
             out: str | Path | None, echo: Callable[[str], None]) -> SweepStopped:
    """A stopped sweep's results written (:func:`_result`: its finished runs, the others ``unfinished``), and
    the :class:`SweepStopped` that says where they are and how to continue. A further Ctrl-C or SIGTERM while
    they are written (each file is renamed into place whole, or not at all) still says how to continue."""
    again = resume_command(plan["sweep_dir"], out)
    previous = _catch_sigterm()  # a second SIGTERM here is a second Ctrl-C, not Ray's driver exit
    try:
        done.update(_finished_while_stopping(plan, done, stop.failed))
        result = _write_result(_result(plan, done, stop.failed, stop.machine, **settings), out, echo)
    except KeyboardInterrupt:
        return SweepStopped(f"sweep stopped again before its results JSON and PNG were both written; finished runs "
                            f"are kept, and `{again}` writes them and continues the others from their checkpoints",
                            done, stop.failed, stop.machine)
    finally:
        _restore_sigterm(previous)
    return SweepStopped(_stop_message(plan, result, again), done, stop.failed, stop.machine)


def _stop_message(plan: dict, result: dict, again: str) -> str:
    """What a stopped sweep says: how many runs finished, where their results are, how to continue."""
    total, left, failed = len(plan["runs"]), len(result["unfinished"]), len(result["failed"])
    finished = total - left - failed
    failures = f" and {failed} failed" if failed else ""
    if not left and not failed:
        return f"sweep stopped after all {total} {_kind(plan)} finished; their results are in {result['json']}"
    if not finished:
        return (f"sweep stopped before any of its {total} {_kind(plan)} finished{failures}; {result['json']} names "
                f"them, and they continue from their checkpoints with `{again}`")
    return (f"sweep stopped with {finished} of {total} {_kind(plan)} finished{failures}, whose results are in "
            f"{result['json']}; the others continue from their checkpoints with `{again}`")


def _write_result(result: dict, out: str | Path | None, echo: Callable[[str], None]) -> dict:
    """Write ``result`` as the learn JSON (``out``, else ``SWEEP_DIR/results.json``) and, when it has runs,
    their curves as the PNG beside it; returns ``result`` with ``json`` (and ``png``) set."""
    sweep_dir = Path(result["settings"]["sweep_dir"])
    out = results_path(sweep_dir, out)
    out.parent.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(out, result)
    result["json"] = str(out)
    runs = result["runs"]
    if runs:
        png = out.with_suffix(".png")
        # rendered to a new file of a random name beside it (created exclusively, never through a link), then
        # renamed over the PNG: os.replace replaces a symlink planted there instead of writing through it
        fd, tmp = tempfile.mkstemp(prefix=f".{png.stem}.", suffix=".png", dir=png.parent)
        os.close(fd)
        try:
            from rlfunc.runtime.plot import plot_runs

            # one curve per label, as the JSON's summary: grid points that differ only in keys plot
            # does not count as settings (train.total_steps, train.max_updates) are not merged
            plot_runs([r["run_dir"] for r in runs], tmp, title=f"sweep {sweep_dir.name} (mean, min-max over seeds)",
                      labels=[r["algo"] for r in runs])
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would hide the figure from the others on shared storage
            os.replace(tmp, png)
            result["png"] = str(png)
        except RuntimeError as exc:  # no matplotlib
            echo(f"no PNG: {exc}")
        finally:
            Path(tmp).unlink(missing_ok=True)
    return result


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


def sweep(
    config: str | Path | dict | None = None,
    seeds: str | list[int] | None = None,
    grid: list[str] | dict[str, list[Any]] | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    sweep_dir: str | Path | None = None,
    resume: str | Path | None = None,
    address: str | None = None,
    max_concurrent: int | None = None,
    max_retries: int = 3,
    gpus: float | None = None,
    out: str | Path | None = None,
    echo: Callable[[str], None] = print,
    population: bool = False,
    allow_import: str | list[str] | tuple[str, ...] | None = None,
    trust_wandb_settings: bool = False,
) -> dict:
    """Plan (or, with ``resume``, reload) a sweep, write ``sweep.json``, run it; see :func:`run_sweep`.
    Everything that can be checked — the specs, every run's config, Ray's presence, the address, that
    the cluster can place each run (:func:`_check_fits`), where the JSON goes (:func:`results_path`) — is
    checked before anything is written.

    With ``resume`` the plan is a file that may be someone else's (:func:`load_plan` refuses a damaged or
    hostile one), so its configs are treated as ``rlfunc resume`` treats a checkpoint's: a module they name
    is imported only if ``allow_import`` (``--allow-import MODULE``) names it (:func:`check_loaded_imports`,
    before Ray is imported), and what follows, here and in the tasks, runs under
    :func:`rlfunc.envs.factory.from_loaded_file`; its ``train.wandb`` keys that redirect W&B are used only
    with ``trust_wandb_settings`` (``--trust-wandb-settings``). A new sweep's config is the user's own."""
    from rlfunc.envs.factory import allow_import_list, from_loaded_file

    try:
        allowed = allow_import_list(allow_import)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if resume is not None:
        if grid or overrides or config is not None or seeds is not None or sweep_dir is not None or population:
            raise ConfigError(
                "--resume continues the stored plan; drop CONFIG, --seeds, --grid, --set, --sweep-dir and --population."
            )
        plan = load_plan(resume)
        if gpus is not None:
            raise ConfigError(
                f"--resume continues the stored plan, whose runs each ask for {float(plan.get('gpus') or 0.0):g} GPUs; "
                "drop --gpus (a new amount needs a new sweep)."
            )
        if not isinstance(trust_wandb_settings, bool):
            raise ConfigError(f"trust_wandb_settings must be True or False, got {trust_wandb_settings!r}.")
        check_loaded_imports(plan, allowed, trust_wandb_settings)
        with from_loaded_file(allowed):
            return _run_planned(plan, True, address, max_concurrent, max_retries, out, echo, allowed, trust_wandb_settings)
    if allowed or trust_wandb_settings:
        flag = "--allow-import" if allowed else "--trust-wandb-settings"
        raise ConfigError(
            f"{flag} is for --resume, whose stored plan is a loaded file; a new sweep uses what its own "
            f"CONFIG names, so drop {flag}."
        )
    plan = plan_sweep(config, "0" if seeds is None else seeds, grid, overrides, sweep_dir,
                      0.0 if gpus is None else gpus, population)
    # a file, a sweep's or a run's directory: one sentence before Ray starts (and before anything is written)
    dir_flag = "--sweep-dir" if sweep_dir is not None else "The sweep directory"  # the default one: not a flag given
    check_sweep_dir(plan["sweep_dir"], dir_flag, [e["name"] for e in plan["runs"]])
    if address is None:  # Ray's workers are this machine: its envs, spaces and device are theirs
        check_runs_here(plan)
    return _run_planned(plan, False, address, max_concurrent, max_retries, out, echo, None, dir_flag=dir_flag)


def _run_planned(plan: dict, resumed: bool, address: str | None, max_concurrent: int | None, max_retries: int,
                 out: str | Path | None, echo: Callable[[str], None], allow_import: list[str] | None,
                 trust_wandb_settings: bool = False, dir_flag: str = "--sweep-dir") -> dict:
    """:func:`sweep` once its plan is made (or loaded and checked): the last checks, Ray, :func:`run_sweep`.
    ``dir_flag``: how a new sweep's directory is named in a sentence about it (``--resume`` for a resumed one)."""
    # an --out that cannot be written, or would destroy a file: one sentence now, not after training
    results_path(plan["sweep_dir"], out, plan.get("config"), "--resume" if resumed else dir_flag)
    _prepare_join(address)
    _import_ray()  # before writing anything: Ray missing is one sentence
    if resumed and not split_finished(plan)[1]:  # every run finished already: no Ray to start
        return run_sweep(plan, address=address, max_concurrent=max_concurrent, max_retries=max_retries, out=out,
                         echo=echo, allow_import=allow_import, trust_wandb_settings=trust_wandb_settings)
    # Start or join Ray before writing anything: an unreachable cluster, or a run asking for more than
    # the cluster has, is one sentence and leaves no sweep directory.
    ray, started = connect(address)
    try:
        _check_fits(ray, plan, plan["runs"])
        if not resumed:
            write_plan(plan)
        return run_sweep(plan, address=address, max_concurrent=max_concurrent, max_retries=max_retries, out=out,
                         echo=echo, allow_import=allow_import, trust_wandb_settings=trust_wandb_settings)
    finally:
        if started:
            ray.shutdown()  # stops a local Ray; disconnects from a cluster, which goes on
