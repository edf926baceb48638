"""MinAtar learning curves: DRQN and R2D2 vs the feed-forward DQN control, flicker on and off.

``python benchmarks/learn_minatar.py run LABEL... [--seeds 0 1 2] [--steps N]`` trains each
label's config once per seed with ``rlfunc train`` (one run at a time, ``nice -n 10``, one torch
thread; a run directory that already exists is resumed with ``rlfunc resume``, a finished one
skipped), under ``runs/learn_minatar/<label>-s<seed>``. ``python benchmarks/learn_minatar.py
collect`` reads every run directory there back (:func:`rlfunc.scale.results.collected_run`,
labels kept) into ``benchmarks/results/learn_minatar.json``, the learn JSON's schema, with the
machine, the budget, the overrides and the commands. Separate from ``benchmarks/run.py learn``
so that each (algorithm, game, flicker) cell keeps its own label and runs can be added seed by
seed as CPU time allows. ``run ... --steps N --extend-from K`` starts each missing ``N``-step run
from a copy of the finished ``K``-step run of the same label and seed (the ``K``-step directory is
kept as it was) and resumes it to ``N`` env steps (``rlfunc resume --total-steps N``), so a longer
budget does not retrain what a shorter one already trained.

The budget (:data:`BUDGET`): ``--steps`` env steps (frames: MinAtar has no frame skip) per
run, far below the MinAtar paper's 5M; the overrides shorten the warm-up and the epsilon
decay in proportion so that the short runs learn at all, the same for every algorithm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "runs" / "learn_minatar"
OUT = ROOT / "benchmarks" / "results" / "learn_minatar.json"

TABLE = {
    f"{algo}_{game}{flicker}": f"configs/{algo}/minatar_{game}{flicker}.yaml"
    for flicker in ("_flicker", "")
    for game in ("breakout", "seaquest")
    for algo in ("dqn", "drqn", "r2d2")
}
"""label -> config; e.g. ``drqn_breakout_flicker``."""

BUDGET = {"steps": 25_000}
# eps_decay_delay=0: the decay from the first step, the schedule of every committed run (the configs
# now start it at the replay start, as MinAtar's code; the key came after those runs).
OVERRIDES = {
    "dqn": ["train.learning_starts=2000", "agent.eps_decay_steps=10000", "agent.eps_decay_delay=0",
            "train.eval_every=5000", "train.eval_episodes=10", "train.checkpoint_every=5000"],
    "drqn": ["train.learning_starts=2000", "agent.eps_decay_steps=10000", "agent.eps_decay_delay=0",
             "train.eval_every=5000", "train.eval_episodes=10", "train.checkpoint_every=5000", "train.compile=true"],
    # R2D2 counts train.learning_starts in windows and explores with its fixed per-actor ladder
    "r2d2": ["train.eval_every=5000", "train.eval_episodes=10", "train.checkpoint_every=5000", "train.compile=true"],
}
"""Per algorithm, the short-budget overrides every seed of it gets (recorded in the JSON)."""


def _algo(label: str) -> str:
    return label.split("_", 1)[0]


def _run_dir(label: str, seed: int, steps: int) -> Path:
    """``runs/learn_minatar/<label>-s<seed>`` at the default budget, ``<label>-<K>k-s<seed>`` at another
    (``--steps``), so runs of different budgets never resume one another."""
    budget = "" if steps == BUDGET["steps"] else f"-{steps // 1000}k"
    return RUNS / f"{label}{budget}-s{seed}"


def default_out(steps: int) -> Path:
    """``learn_minatar.json`` at the default budget, ``learn_minatar_<K>k.json`` at another."""
    return OUT if steps == BUDGET["steps"] else OUT.with_name(f"learn_minatar_{steps // 1000}k.json")


def _cmd(label: str, seed: int, steps: int) -> list[str]:
    overrides = [f"train.seed={seed}", f"train.total_steps={steps}", *OVERRIDES[_algo(label)]]
    run_dir = _run_dir(label, seed, steps)
    if (run_dir / "checkpoints").is_dir():
        return ["nice", "-n", "10", sys.executable, "-m", "rlfunc.runtime.cli", "resume", str(run_dir),
                "--total-steps", str(steps)]
    sets = [x for o in overrides for x in ("--set", o)]
    return ["nice", "-n", "10", sys.executable, "-m", "rlfunc.runtime.cli", "train", TABLE[label],
            "--run-dir", str(run_dir), *sets]


def extend(label: str, seed: int, steps: int, from_steps: int) -> Path | None:
    """The ``steps``-budget run directory made from a copy of the finished ``from_steps`` one (the
    source is left as it was); ``None`` where the target exists already or there is no finished
    source to copy. Raises ``ValueError`` if ``from_steps`` is not below ``steps``."""
    import shutil

    from rlfunc.scale.results import run_finished

    if from_steps >= steps:
        raise ValueError(f"--extend-from {from_steps} must be below --steps {steps}.")
    source, target = _run_dir(label, seed, from_steps), _run_dir(label, seed, steps)
    if target.exists() or not run_finished(source):
        return None
    shutil.copytree(source, target)
    return target


def _done(run_dir: Path, steps: int) -> bool:
    """Whether the run reached ``steps`` env steps or a stopping rule ended it (a copy made by
    :func:`extend` is finished by its own config's shorter budget, not by this one)."""
    from rlfunc.scale.results import collected_run, run_finished

    if not run_finished(run_dir):
        return False
    rec = collected_run(run_dir)
    return rec["env_steps"] >= steps or rec["env_steps"] < rec["total_steps"]  # the latter: a stopping rule


def run(labels: list[str], seeds: list[int], steps: int, extend_from: int | None = None) -> int:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for seed in seeds:  # seed-major: each seed of every label before the next seed
        for label in labels:
            if extend_from is not None and (copied := extend(label, seed, steps, extend_from)) is not None:
                print(f"{copied.name}: a copy of {_run_dir(label, seed, extend_from).name}, resumed to {steps} steps",
                      flush=True)
            run_dir = _run_dir(label, seed, steps)
            if _done(run_dir, steps):
                continue
            cmd = _cmd(label, seed, steps)
            print(" ".join(cmd), flush=True)
            rc = subprocess.call(cmd, cwd=ROOT, env=env)
            if rc != 0:
                print(f"{label} seed {seed} stopped with exit status {rc}", file=sys.stderr)
                return rc
    return 0


NOTE = "a 2-core VM shared with other jobs; one run at a time under nice -n 10"


def _machine(note: str = NOTE) -> dict:
    """The shared harness's machine record (benchmarks/harness.py), plus how these runs shared it."""
    import torch

    sys.path.insert(0, str(ROOT))
    from benchmarks.harness import machine_info

    return {**machine_info(torch.device("cpu"), allocator_tuned=False), "threads_per_run": 1,
            "load_average_at_collect": os.getloadavg(),
            "note": note}


RETURN_STOPS = ("stop_at_return", "patience_evals")
"""Stopping rules that end a run on its returns: a run they stopped before the budget is complete.
The budget rules (``max_wall_s``, ``max_updates``) cut a run off instead."""


def complete_at(rec: dict, steps: int) -> bool:
    """Whether the run record (:func:`rlfunc.scale.results.collected_run`) counts as a finished run of
    the ``steps`` budget: it evaluated at ``steps`` env steps or later, or a :data:`RETURN_STOPS`
    rule ended it."""
    reason = (rec.get("stop_reason") or "").split(":", 1)[0].strip()
    return bool(rec["evals"]) and (rec["env_steps"] >= steps or reason in RETURN_STOPS)


def collect(out: Path | None = None, note: str = NOTE, steps: int = BUDGET["steps"]) -> int:
    from rlfunc.scale.results import collected_run, summary

    out = out or default_out(steps)
    budget = "" if steps == BUDGET["steps"] else f" --steps {steps}"
    runs = []
    for label in TABLE:
        for run_dir in sorted(RUNS.glob(f"{label}-s*")) if steps == BUDGET["steps"] else sorted(RUNS.glob(f"{label}-{steps // 1000}k-s*")):
            if not (run_dir / "eval.csv").is_file() or not run_dir.name.rsplit("-s", 1)[1].isdigit():
                continue
            rec = collected_run(run_dir, label)
            # Judged against this budget, not the run's own config.yaml (an --extend-from copy whose resume
            # failed still names the shorter one); only a return-based stop ends a run early, not a budget.
            rec["total_steps"] = steps
            rec["complete"] = complete_at(rec, steps)
            rec["run_dir"] = str(run_dir.relative_to(ROOT))
            rec["config"] = TABLE[label]
            rec["overrides"] = OVERRIDES[_algo(label)]
            runs.append(rec)
    result = {
        "machine": _machine(note),
        "runs": runs,
        "summary": summary([r for r in runs if r["complete"]]),  # complete runs only
        "partial_runs": [{"label": r["algo"], "seed": r["seed"], "env_steps": r["env_steps"],
                          "stop_reason": r["stop_reason"]} for r in runs if not r["complete"]],
        "settings": {
            "budget_env_steps": steps,
            "frames_note": "MinAtar has no frame skip: env steps are frames; the MinAtar paper's DQN curves go to 5M",
            "overrides": OVERRIDES,
            "configs": TABLE,
            "commands": f"python benchmarks/learn_minatar.py run LABEL... --seeds 0 1 2{budget}; "
                        f"python benchmarks/learn_minatar.py collect{budget}",
            "not_run": sorted(set(TABLE) - {r["algo"] for r in runs}),
            "collected": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        },
    }
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}: {len(runs)} runs")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="train LABELs over seeds (resume or skip existing run directories)")
    r.add_argument("labels", nargs="+", choices=sorted(TABLE), metavar="LABEL")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--steps", type=int, default=BUDGET["steps"])
    r.add_argument("--extend-from", type=int, default=None, metavar="K",
                   help="start each missing run from a copy of the finished K-step run of its label and seed")
    c = sub.add_parser("collect", help="write the learn JSON from the run directories")
    c.add_argument("--out", type=Path, default=None,
                   help="JSON path (default: learn_minatar.json, or learn_minatar_<K>k.json with --steps)")
    c.add_argument("--steps", type=int, default=BUDGET["steps"], help="the budget whose runs to collect")
    c.add_argument("--note", default=NOTE, help="how the runs shared the machine (recorded in the JSON)")
    args = p.parse_args(argv)
    if args.cmd == "run":
        try:
            return run(args.labels, args.seeds, args.steps, args.extend_from)
        except ValueError as e:
            print(e, file=sys.stderr)
            return 2
    return collect(args.out, args.note, args.steps)


if __name__ == "__main__":
    sys.exit(main())
