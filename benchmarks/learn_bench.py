"""``python benchmarks/run.py learn`` (and ``learn-merge``, ``learn-collect``): learning curves.

    python benchmarks/run.py learn --algo redq --seeds 3 [--steps N] [--jobs J] [--set key=value ...]
    python benchmarks/run.py learn-merge A.json B.json:drqn --out C.json
    python benchmarks/run.py learn-merge A.json B.json:r2d2=r2d2_single_process --out C.json   # relabel
    python benchmarks/run.py learn-collect RUN_DIR... --out D.json

``learn`` trains every config of an algorithm's table (:data:`LEARN_ALGOS`) once per seed, a
config's seeds as one population where the runtime allows it, as a client of the sweep
machinery (:mod:`rlfunc.scale.sweep`), and writes ``benchmarks/results/learn_<algo>.json`` and
its PNG; ``learn-merge`` combines the runs of several learn JSONs; ``learn-collect`` reads a
learn JSON back from run directories. The run records and summary are
:mod:`rlfunc.scale.results`'s, shared with ``rlfunc sweep``. Plug-ins add tables
(``benchmarks/r2d2_bench.py``, ``benchmarks/rlpd_bench.py``) through ``run.LEARN_ALGOS``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

from benchmarks.harness import ROOT, RESULTS_DIR, machine_info, print_table, write_json

# The learn JSON's run records and summary live in rlfunc.scale.results, shared with `rlfunc sweep`.
from rlfunc.scale.results import collected_run as _collected_run
from rlfunc.scale.results import summary as _summary


LEARN_ALGOS: dict[str, list[tuple[str, str]]] = {
    # --algo NAME -> the (label, config) runs whose curves go in one plot
    "drqn": [
        ("drqn", "configs/drqn/cartpole_novel.yaml"),  # DRQN on masked-velocity CartPole
        ("dqn", "configs/dqn/cartpole_novel.yaml"),  # its memory-less control, same env
    ],
    "redq": [("redq", "configs/redq/pendulum.yaml"), ("sac", "configs/sac/pendulum.yaml")],
}
"""``learn --algo NAME`` trains every config of ``LEARN_ALGOS[NAME]`` once per seed (``--config PATH``: one
config). Generic: any algorithm the runtime trains; add a table entry for a new one."""


def learn_entries(label: str, config: str, seeds: list[int], overrides: dict, threads: int,
                  population: bool = True) -> tuple[list[dict], str | None]:
    """The sweep-plan entries (:mod:`rlfunc.scale.sweep`) that train ``config`` once per seed:
    one population of all seeds where :func:`rlfunc.runtime.population_members.supports` allows it (and
    ``population``), else one entry per seed. Returns the entries and why they are separate runs
    (``None`` for a population). Every member's config is built here, so a bad key stops
    ``learn`` before anything trains."""
    from rlfunc.runtime import population_members as pop
    from rlfunc.runtime.config import apply_overrides, build_config, load_config

    raw = load_config(ROOT / config)  # absolute paths pass through
    base = {"train.progress": False, "train.threads": threads, **overrides}
    built = build_config(apply_overrides(raw, {**base, "train.seed": seeds[0]}))
    why = ("--no-population" if not population else "one seed" if len(seeds) < 2 else pop.supports(built))
    common = {"label": label, "grid": {}, "raw_config": raw, "config": config, "threads": threads,
              "total_steps": int(built.train.total_steps)}
    if why is None:
        over = {**base, "train.population": {"seeds": list(seeds)}}
        pop.member_specs(build_config(apply_overrides(raw, over)))  # every member checked now
        return [{**common, "name": f"{label}-pop", "seed": None, "seeds": list(seeds), "members": len(seeds),
                 "overrides": over}], None
    entries = []
    for seed in seeds:
        over = {**base, "train.seed": seed}
        build_config(apply_overrides(raw, over))
        entries.append({**common, "name": f"{label}-s{seed}", "seed": seed, "overrides": over})
    return entries, why


LEARN_RAY_MISSING = ('learn --jobs {jobs} trains its runs as Ray tasks and Ray is not installed; install it with '
                     'pip install -e ".[ray]", or pass --jobs 1 to train them one after another in this process.')


def learn_plan(sweep_dir: Path, entries: list[dict], seeds: list[int]) -> dict:
    """A sweep plan holding ``entries`` (each with its own config), written to ``sweep_dir`` so that
    ``rlfunc sweep --resume SWEEP_DIR`` continues a stopped ``learn``."""
    from rlfunc.scale.sweep import PLAN_VERSION, write_plan

    plan = {"version": PLAN_VERSION, "sweep_dir": str(Path(sweep_dir).resolve()), "config": None,
            "raw_config": None, "seeds": list(seeds), "grid": {}, "overrides": {}, "gpus": 0.0, "runs": entries}
    write_plan(plan)
    return plan


def run_learn_plan(plan: dict, jobs: int, echo=print) -> tuple[list[dict], dict[str, str], dict]:
    """Train the plan's unfinished entries and return every record (plan order), the failed
    entries and the executor's description. ``jobs == 1``: one after another in this process
    (:func:`rlfunc.scale.sweep.train_or_continue`, no Ray needed: the default works on a bare
    install, and Ctrl-C saves the running run as ``rlfunc train`` does); ``jobs > 1``: Ray tasks
    on an embedded loopback Ray, at most ``jobs`` at a time (:func:`rlfunc.scale.sweep.run_entries`:
    a dead worker's run is retried from its checkpoint)."""
    import importlib.util

    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import run_entries, split_finished, train_or_continue

    done, todo = split_finished(plan)
    failed: dict[str, str] = {}
    if jobs <= 1:
        executor = {"executor": "in-process, one entry after another (no Ray)"}
        for entry in todo:
            done[entry["name"]] = train_or_continue(plan, entry)
            _echo_entry(echo, entry, done[entry["name"]])
    else:
        if importlib.util.find_spec("ray") is None:
            raise ConfigError(LEARN_RAY_MISSING.format(jobs=jobs))
        trained, failed, executor = run_entries(plan, todo, None, max_concurrent=jobs, echo=lambda line: None)
        for entry in todo:
            if entry["name"] in trained:
                _echo_entry(echo, entry, trained[entry["name"]])
        done.update(trained)
        executor = {"executor": f"Ray tasks on an embedded loopback Ray, at most {jobs} at a time", **executor}
    records = []
    for entry in plan["runs"]:
        for r in done.get(entry["name"], []):
            records.append({**r, "population": entry["name"] if entry.get("members") else None})
    return records, failed, executor


def _echo_entry(echo, entry: dict, records: list[dict]) -> None:
    for r in records:
        final = "n/a" if r["final_return"] is None else f"{r['final_return']:.1f}"
        where = f" (population {entry['name']})" if entry.get("members") else ""
        echo(f"  {r['algo']} seed {r['seed']}: final {final} after {r['env_steps']} steps{where} "
             f"({r['wall_s'] or 0:.0f} s)")


def _configure_learn(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", choices=sorted(LEARN_ALGOS), default=None,
                   help="the algo's table of configs (LEARN_ALGOS); or pass --config")
    p.add_argument("--config", type=Path, default=None, help="train this config instead of a table (label: its algo)")
    p.add_argument("--seeds", type=int, default=3, help="seeds 0..K-1 per config")
    p.add_argument("--first-seed", type=int, default=0, help="seeds FIRST..FIRST+K-1 (e.g. to add seeds to earlier runs)")
    p.add_argument("--steps", type=int, default=None, help="env steps per run (default: each config's total_steps)")
    p.add_argument("--only", nargs="+", default=None, help="run only these labels of the algo's table")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run, e.g. --set train.eval_episodes=5 (repeatable)")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs (or populations) in parallel as Ray tasks on an embedded loopback Ray (the ray extra); "
                        "1: one after another in this process, no Ray needed")
    p.add_argument("--no-population", dest="population", action="store_false",
                   help="train each seed as its own run (default: a config's seeds are one population where "
                        "rlfunc.runtime.population_members.supports allows it)")
    p.add_argument("--threads", type=int, default=1, help="torch threads per run")
    p.add_argument("--runs-dir", type=Path, default=ROOT / "runs" / "learn", help="where the run directories go")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/learn_<algo>.json)")
    p.add_argument("--note", default=None, help="free text stored in the JSON")


def run_learn(args: argparse.Namespace) -> int:
    from rlfunc.runtime.config import parse_overrides
    from rlfunc.runtime.plot import plot_runs

    overrides = parse_overrides(args.overrides)
    if args.steps is not None:
        overrides["train.total_steps"] = args.steps
    if args.config is not None:
        from rlfunc.runtime.config import load_config

        label = str(load_config(args.config).get("algo", "redq"))
        cfg_path = args.config.resolve()
        table = [(label, str(cfg_path.relative_to(ROOT)) if cfg_path.is_relative_to(ROOT) else str(cfg_path))]
        args.algo = args.algo or label
    elif args.algo is None:
        print("learn: pass --algo NAME (one of " + ", ".join(sorted(LEARN_ALGOS)) + ") or --config PATH.", file=sys.stderr)
        return 2
    else:
        table = [(lab, cfg) for lab, cfg in LEARN_ALGOS[args.algo] if args.only is None or lab in args.only]
    if not table:
        print(f"--only {args.only} matches none of {[lab for lab, _ in LEARN_ALGOS[args.algo]]}.", file=sys.stderr)
        return 2
    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import SweepStopped

    if args.jobs < 1:
        print(f"--jobs must be a positive integer, got {args.jobs}.", file=sys.stderr)
        return 2
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # Ray's workers inherit it from this process
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))
    sweep_dir = args.runs_dir / f"{args.algo}-{time.strftime('%Y%m%d-%H%M%S')}"
    entries: list[dict] = []
    populations: dict[str, dict] = {}
    try:
        for label, cfg in table:
            mine, why = learn_entries(label, cfg, seeds, overrides, args.threads, args.population)
            entries += mine
            populations[label] = ({"members": len(seeds), "run_dir": str(sweep_dir / mine[0]["name"])} if why is None
                                  else {"members": None, "separate_runs_because": why})
    except ConfigError as exc:
        print(f"learn: {exc}", file=sys.stderr)
        return 2
    if not any(e.get("members") for e in entries):  # separate runs: seed-major, as learn always ran them
        entries.sort(key=lambda e: (e["seed"], [lab for lab, _ in table].index(e["label"])))
    how = "; ".join(f"{lab}: " + (f"one population of {p['members']}" if p["members"] else
                                  f"separate runs ({p['separate_runs_because']})") for lab, p in populations.items())
    print(f"learn --algo {args.algo}: {len(table) * len(seeds)} runs ({', '.join(lab for lab, _ in table)} x "
          f"{args.seeds} seeds) in {sweep_dir}; {how}; {args.jobs} at a time, {args.threads} thread(s) each", flush=True)
    # Load average before the runs; the GPU's name too when the runs train on CUDA (train.device).
    run_device = str(overrides.get("train.device", "cpu"))
    machine = machine_info(torch.device(run_device if torch.cuda.is_available() else "cpu"), allocator_tuned=False)
    machine["train_device"] = run_device
    t0 = time.perf_counter()
    try:
        plan = learn_plan(sweep_dir, entries, seeds)
        runs, failed, executor = run_learn_plan(plan, args.jobs, echo=lambda line: print(line, flush=True))
    except ConfigError as exc:
        print(f"learn: {exc}", file=sys.stderr)
        return 2
    except (SweepStopped, KeyboardInterrupt, SystemExit):
        print(f"learn: stopped; finished runs are kept under {sweep_dir} and the others continue from their "
              f"checkpoints with `rlfunc sweep --resume {sweep_dir}` (learn-collect gathers run directories).",
              file=sys.stderr, flush=True)
        return 130
    machine.update(executor)
    result = {
        "machine": machine,
        "runs": runs,
        "summary": _summary(runs),
        "settings": {
            "algo": args.algo,
            "configs": {lab: cfg for lab, cfg in table},
            "seeds": args.seeds,
            "first_seed": args.first_seed,
            "overrides": overrides,
            "jobs": args.jobs,
            "threads_per_run": args.threads,
            "population": populations,
            "sweep_dir": str(sweep_dir),
            "final_return": "mean greedy return of the last evaluation (train.eval_episodes episodes)",
            "wall_s": "each run's last evaluation time_s (a population's members share their population's clock)",
            "total_wall_s": time.perf_counter() - t0,
        },
    }
    if failed:
        result["failed"] = failed
    if args.note:
        result["note"] = args.note
    out = args.out or RESULTS_DIR / f"learn_{args.algo}.json"
    write_json(out, result)
    png = plot_runs([r["run_dir"] for r in runs], out.with_suffix(".png"),
                    title=f"learn --algo {args.algo} ({args.seeds} seeds; mean, min-max band)") if runs else None
    print()
    print_table(
        [{"algo": k, **v} for k, v in result["summary"].items()],
        [("algo", "algo", ""), ("seeds", "seeds", "d"), ("median final return", "median_final_return", ".1f")],
    )
    print(f"\nwrote {out} and {png}")
    for name, why in failed.items():
        print(f"learn: {name} failed: {why}", file=sys.stderr)
    return 1 if failed else 0


def _configure_learn_merge(p: argparse.ArgumentParser) -> None:
    p.add_argument("inputs", nargs="+", metavar="JSON[:LABEL,...]",
                   help="learn JSON files; ':drqn,dqn' keeps only those labels' runs; ':r2d2=r2d2_single' keeps "
                        "r2d2's runs under a new label (two JSONs of one algorithm, e.g. distributed and single-process)")
    p.add_argument("--out", type=Path, required=True, help="merged JSON path (the PNG is written beside it)")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--note", default=None, help="free text stored in the JSON")


MERGE_SAME_PER_LABEL = (("env", "env id"), ("wrappers", "wrappers"), ("total_steps", "total_steps"))
"""Run-record keys every run of one merged label must share (what the runs learned and for how long); the
agent settings may differ in keys added after older records were written, so they are not compared."""


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def merge_refusal(runs: list[dict], files: list[str]) -> str | None:
    """Why ``learn-merge`` refuses these runs (``files[k]`` is the input the k-th run came from), in one
    sentence, or ``None``: a (label, seed) that comes twice, or a label whose runs differ in env id,
    wrappers or ``total_steps`` (a key a record lacks is not compared)."""
    first: dict[tuple[str, str], tuple[object, str]] = {}  # (label, key) -> the first value recorded, its file
    for r, f in zip(runs, files):
        for k, name in MERGE_SAME_PER_LABEL:
            if k not in r:
                continue
            v0, f0 = first.setdefault((r["algo"], k), (r[k], f))
            if not _same(v0, r[k]):
                return (f"label {r['algo']!r} would hold runs of different {name} ({v0!r} from {f0}, {r[k]!r} "
                        f"from {f}); give one input's runs another label with JSON:{r['algo']}=NEW_LABEL.")
    seen: dict[tuple, str] = {}
    for r, f in zip(runs, files):
        key = (r["algo"], r.get("seed"))
        if key in seen:
            return (f"label {r['algo']!r} seed {r.get('seed')} comes twice (from {seen[key]} and {f}); pass each run "
                    f"once, or give one input's runs another label with JSON:{r['algo']}=NEW_LABEL.")
        seen[key] = f
    return None


def _hardware(m: dict | None) -> dict:
    """What a machine record says of the hardware (not its date or load)."""
    return {k: (m or {}).get(k) for k in ("cpu", "cores", "gpu")}


def _record_holds(r: dict) -> Path | None:
    """The run's directory if its ``eval.csv`` holds exactly the evaluations the record has (a later run
    may have reused the directory, e.g. ``runs/learn_minatar/<label>-<K>k-s<seed>``), else ``None``. A
    relative ``run_dir`` is looked up from here, then from the repository root."""
    import csv

    if not r.get("run_dir"):
        return None
    d = Path(r["run_dir"])
    if not d.is_absolute() and not d.is_dir():
        d = ROOT / d
    try:
        with open(d / "eval.csv", newline="") as f:
            rows = [[int(row["step"]), float(row["mean_return"])] for row in csv.DictReader(f)]
    except (OSError, KeyError, TypeError, ValueError):
        return None
    return d if rows and rows == [[int(a), float(b)] for a, b in r.get("evals") or []] else None


def run_learn_merge(args: argparse.Namespace) -> int:
    """Runs trained once serve two comparisons: ``learn --algo drqn`` (DRQN vs DQN) and
    ``learn --algo r2d2 --only r2d2`` give ``learn_r2d2.json`` = R2D2 + those DRQN runs,
    without training DRQN twice. Refused in one sentence (nothing written): a (label, seed) that
    comes twice and a label whose runs differ in env id, wrappers or ``total_steps``
    (:func:`merge_refusal`). When the inputs' machine records differ, each run keeps its own in its
    record (``machine``), and the JSON's top-level ``machine`` is the first input's only where every
    input names the same hardware. The PNG is drawn from the runs' ``eval.csv`` where every run
    directory still holds its recorded evaluations, else from the JSONs' ``evals``."""
    import numpy as np

    from rlfunc.runtime.plot import plot_curves, plot_runs

    runs: list[dict] = []
    files: list[str] = []
    machines: list = []
    sources: list[dict] = []
    for spec in args.inputs:
        path, _, labels = spec.partition(":")
        rename = dict(item.partition("=")[::2] for item in labels.split(",")) if labels else None
        keep = set(rename) if rename else None
        src = json.loads(Path(path).read_text())
        picked = [r for r in src["runs"] if keep is None or r["algo"] in keep]
        if rename:
            picked = [{**r, "algo": rename[r["algo"]] or r["algo"]} for r in picked]
        if not picked:
            print(f"{spec}: no runs with labels {sorted(keep or [])}.", file=sys.stderr)
            return 2
        runs += picked
        files += [str(path)] * len(picked)
        machines += [r.get("machine", src.get("machine")) for r in picked]  # a merged input's runs keep theirs
        sources.append({"file": str(path), "labels": sorted({r["algo"] for r in picked}),
                        "machine": src.get("machine"), "settings": src.get("settings"), "note": src.get("note")})
    refusal = merge_refusal(runs, files)
    if refusal:
        print(f"learn-merge: {refusal}", file=sys.stderr)
        return 2
    if all(_same(m, machines[0]) for m in machines):
        runs = [{k: v for k, v in r.items() if k != "machine"} for r in runs]
        result = {"machine": machines[0]}
    else:  # each run names the machine it was trained on; readme_tables refuses a label over several
        runs = [{**r, "machine": m} for r, m in zip(runs, machines)]
        same_hardware = all(_same(_hardware(m), _hardware(machines[0])) for m in machines)
        result = {"machine": machines[0]} if same_hardware else {}
    result.update({"runs": runs, "summary": _summary(runs), "settings": {"merged_from": sources}})
    if result.get("machine") is None:
        result.pop("machine", None)
    if args.note:
        result["note"] = args.note
    write_json(args.out, result)
    dirs = [_record_holds(r) for r in runs]
    png = None
    if all(dirs):  # one curve per label of the merged JSON, from each run's eval.csv
        png = plot_runs(dirs, args.out.with_suffix(".png"), title=args.title, labels=[r["algo"] for r in runs])
    elif all(r.get("evals") for r in runs):  # run directories gone or reused: the JSONs' own evaluations
        groups: dict[str, list] = {}
        for r in runs:
            steps, returns = zip(*r["evals"])
            groups.setdefault(r["algo"], []).append((np.array(steps), np.array(returns)))
        png = plot_curves(groups, args.out.with_suffix(".png"), title=args.title)
    else:
        print("some runs have neither a run directory holding them nor evaluations: no PNG.", file=sys.stderr)
    print_table(
        [{"algo": k, **v} for k, v in result["summary"].items()],
        [("algo", "algo", ""), ("seeds", "seeds", "d"), ("median final return", "median_final_return", ".1f")],
    )
    print(f"\nwrote {args.out}" + (f" and {png}" if png else ""))
    return 0


LEARN_ALGOS["drqv2"] = [("drqv2", "configs/drqv2/cartpole_balance.yaml")]  # DMC from pixels (paper: 987 +- 13 @100k frames)


def _configure_learn_collect(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="run directories (config.yaml + eval.csv)")
    p.add_argument("--out", type=Path, required=True, help="JSON path (the PNG is written beside it)")
    p.add_argument("--label", default=None, help="label of every run (default: each config's algo)")
    p.add_argument("--title", default=None, help="figure title")
    p.add_argument("--note", default=None, help="free text stored in the JSON")


def run_learn_collect(args: argparse.Namespace) -> int:
    """``final_return`` is each run's last evaluation so far, at ``env_steps``; ``complete`` says
    whether the run reached its ``total_steps``. Wall time is the last evaluation's ``time_s``."""
    from rlfunc.runtime.plot import plot_runs

    missing = [str(d) for d in args.run_dirs if not (d / "eval.csv").is_file() or not (d / "config.yaml").is_file()]
    if missing:
        print(f"not run directories (no config.yaml and eval.csv): {', '.join(missing)}.", file=sys.stderr)
        return 2
    runs = [_collected_run(d, args.label) for d in args.run_dirs]
    machine = machine_info(torch.device("cpu"), allocator_tuned=False)
    machine["recorded"] = "the machine learn-collect ran on (where the runs were read back, not necessarily trained)"
    result = {"machine": machine, "runs": runs, "summary": _summary(runs),
              "settings": {"collected_from": [str(d) for d in args.run_dirs],
                           "final_return": "mean greedy return of each run's last evaluation so far"}}
    if args.note:
        result["note"] = args.note
    write_json(args.out, result)
    png = plot_runs([str(d) for d in args.run_dirs], args.out.with_suffix(".png"), title=args.title)
    print_table(
        [{"algo": k, **v} for k, v in result["summary"].items()],
        [("algo", "algo", ""), ("seeds", "seeds", "d"), ("median final return", "median_final_return", ".1f")],
    )
    incomplete = [f"{r['run_dir']} ({r['env_steps']} of {r['total_steps']})" for r in runs if not r["complete"]]
    if incomplete:
        print("cut off before total_steps: " + "; ".join(incomplete))
    print(f"\nwrote {args.out} and {png}")
    return 0


# --------------------------------------------------------------------------- registration


def register(run) -> None:
    """Add ``learn``, ``learn-merge``, ``learn-collect`` to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("learn", "learning curves: train each config of an algo's table over seeds -> JSON + PNG",
                   _configure_learn)(run_learn)
    run.subcommand("learn-merge", "combine the runs of several learn JSONs (e.g. R2D2 and DRQN) into one JSON + PNG",
                   _configure_learn_merge)(run_learn_merge)
    run.subcommand("learn-collect", "a learn JSON + PNG read back from run directories (e.g. runs cut off before "
                   "learn wrote its JSON)", _configure_learn_collect)(run_learn_collect)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py learn --algo redq [--seeds 3]")
