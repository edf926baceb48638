"""``python benchmarks/run.py population``: a population of P REDQ learners in one process
against P separate single learners in the same process (issue #24, "Benchmarks").

For each P: the population (:class:`rlfunc.runtime.population.PopulationTrainer`: P envs,
the vmapped ``act``, one batched replay gather, one vmapped update) and P single
runs' pieces (P :class:`~rlfunc.runtime.learners.TransitionLearner` s and P
collectors, stepped one after the other, as P runs sharing the process would) each
take full env steps -- act, step every member's env, store, learn -- after a
warm-up that fills the replays past ``train.learning_starts``. The two variants'
timed windows are interleaved (:func:`benchmarks.run.time_interleaved`), medians
reported: env steps per second per member and in total, the update's ms per env
step (the learn call alone, timed the same way), peak resident memory, and the
ratio of the population's total throughput to the P single runs'.
Agent shape: REDQ's defaults (N=10, M=2, G=20, 256x256, batch 256) on Pendulum-v1;
``--quick`` shrinks it for a smoke test. Writes ``benchmarks/results/population_redq.json``.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
from pathlib import Path


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, nargs="+", default=[1, 2, 4], help="population sizes P (default 1 2 4)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--repeats", type=int, default=5, help="timed windows per variant (default 5)")
    p.add_argument("--steps", type=int, default=3, help="env steps per timed window (default 3)")
    p.add_argument("--quick", action="store_true", help="tiny agent, for a smoke test (not written unless --out)")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/population_redq.json)")


def _raw(members: int, quick: bool) -> dict:
    agent = {"hidden_sizes": [16, 16], "num_critics": 3, "updates_per_step": 2, "batch_size": 8} if quick else {}
    train = {"total_steps": 10**6, "learning_starts": 300, "replay_size": 10_000, "progress": False, "tensorboard": False}
    raw = {"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": train, "agent": agent}
    return {**raw, "train": {**train, "population": {"seeds": list(range(members))}}}


def _population(members: int, quick: bool, where: Path):
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.population import PopulationTrainer

    pt = PopulationTrainer(build_config(_raw(members, quick)), where)
    for c, m in zip(pt.collectors, pt.members):
        c.reset(seed=m.seed)

    def env_step(learn: bool = True) -> None:
        actions = pt.explore()
        for k, c in enumerate(pt.collectors):
            rows, _ = c.step(actions[k])
            pt.observe(k, rows)
            pt.env_steps[k] += 1
        if learn:
            learn_only()

    def learn_only() -> None:
        pt.learn()
        pt._unchecked.clear()

    while pt.env_step < pt.config.train.learning_starts:
        env_step(learn=False)
    return env_step, learn_only


def _singles(members: int, quick: bool):
    from rlfunc.envs import env_spaces
    from rlfunc.runtime.collector import Collector
    from rlfunc.runtime.population import member_specs
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.registry import get_algo
    from rlfunc.runtime.trainer import _make_envs

    runs = []
    for m in member_specs(build_config(_raw(members, quick))):
        env, _, native = _make_envs(m.config)
        learner = get_algo("redq").make_learner(m.config, *env_spaces(env))
        learner.native_action_space = native
        collector = Collector(env, seed=m.seed)
        collector.reset(seed=m.seed)
        runs.append((learner, collector))
    step = {"n": 0}
    starts = runs[0][0].train_cfg.learning_starts

    def env_step(learn: bool = True) -> None:
        for learner, collector in runs:
            rows, _ = collector.step(learner.explore(collector.obs, step["n"]))
            learner.observe(rows)
        step["n"] += 1
        if learn:
            learn_only()

    def learn_only() -> None:
        for learner, _ in runs:
            learner.learn()

    while step["n"] < starts:
        env_step(learn=False)
    return env_step, learn_only


def run_population(args: argparse.Namespace, run) -> int:
    import torch

    from rlfunc.runtime.perf import set_threads

    set_threads(args.threads)
    device = torch.device("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in args.members:
            pop_step, pop_learn = _population(p, args.quick, Path(tmp) / f"pop{p}")
            one_step, one_learn = _singles(p, args.quick)
            for fn in (pop_step, one_step):  # warm: first updates allocate
                fn()
            runners = {"population": pop_step, "separate": one_step, "population_update": pop_learn, "separate_update": one_learn}
            times = run.time_interleaved(
                runners, repeats=args.repeats, steps={n: args.steps for n in runners}, device=device
            )
            med = {n: statistics.median(t) for n, t in times.items()}
            row = {
                "members": p,
                "population_env_steps_per_s_per_member": 1.0 / med["population"],
                "population_env_steps_per_s_total": p / med["population"],
                "separate_env_steps_per_s_per_member": 1.0 / med["separate"],
                "separate_env_steps_per_s_total": p / med["separate"],
                "population_update_ms_per_env_step": 1e3 * med["population_update"],
                "separate_update_ms_per_env_step": 1e3 * med["separate_update"],
                "total_throughput_ratio": med["separate"] / med["population"],
                "seconds_per_env_step": {n: t for n, t in times.items()},
                "peak_rss_mb_so_far": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
            rows.append(row)
            print(
                f"P={p}: population {row['population_env_steps_per_s_total']:.2f} env steps/s total "
                f"({row['population_update_ms_per_env_step']:.1f} ms update), separate "
                f"{row['separate_env_steps_per_s_total']:.2f} ({row['separate_update_ms_per_env_step']:.1f} ms), "
                f"ratio {row['total_throughput_ratio']:.2f}x",
                flush=True,
            )
    result = {
        "benchmark": "population",
        "algo": "redq",
        "env": "Pendulum-v1",
        "agent": _raw(1, args.quick)["agent"] or "REDQ defaults (N=10, M=2, G=20, hidden 256x256, batch 256)",
        "threads": args.threads,
        "repeats": args.repeats,
        "steps_per_window": args.steps,
        "machine": run.machine_info(device, allocator_tuned=False),
        "rows": rows,
        "notes": (
            "Full env steps (act, env step, store, learn) of a population of P members vs P separate single "
            "learners stepped one after the other in the same process, windows interleaved, medians. "
            "'update' rows time the learn call alone."
        ),
    }
    if args.out or not args.quick:
        out = Path(args.out) if args.out else run.RESULTS_DIR / "population_redq.json"
        run.write_json(out, result)
        print(f"wrote {out}")
    return 0


def register(run) -> None:
    """Add the ``population`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("population", "a population of P REDQ learners vs P separate ones in one process (issue #24)",
                   configure)(lambda args: run_population(args, run))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py population [--quick]")
