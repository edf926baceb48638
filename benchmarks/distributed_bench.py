"""``benchmarks/run.py distributed``: distributed R2D2 throughput on Ray actors (issue #25 §2).

For each number of actors, two runs of ``rlfunc.train`` on the distributed config
(``configs/r2d2/cartpole_novel_distributed.yaml`` by default; :mod:`rlfunc.scale.distributed`),
each stopped by ``train.max_wall_s``:

* **learner paused**: ``distributed.max_replay_ratio`` 1e-9, so the learner never updates and
  the driver only inserts chunks: the actors' env steps/s with the Ray plumbing (parameters
  fetched, windows cut, priorities computed, chunks shipped and inserted);
* **with the learner**: the config's replay-ratio bound; env steps/s, learner updates/s (from
  the first update on) and the replay ratio reached.

Each run is measured over one window of ``--seconds`` that opens once every actor has sent a
chunk (and, with the learner, once it has updated): actor start-up -- a Python process
importing torch each -- and the warm-up are left out. The learner's update is eager
(``train.compile=false``: a compile would take most of a short window). One embedded loopback
Ray is shared by all runs (:func:`rlfunc.scale.distributed.connect_for` without an address:
``num_cpus`` = the machine's cores, actors at the driver's priority);
the load average is recorded before and after each run, since on a shared machine the actors
compete with everything else. Writes ``benchmarks/results/distributed_r2d2.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "r2d2" / "cartpole_novel_distributed.yaml"


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--actors", type=int, nargs="+", default=[1, 2], help="actor counts to measure (default 1 2)")
    p.add_argument("--envs-per-actor", type=int, default=None, help="envs per actor (default: the config's)")
    p.add_argument("--seconds", type=float, default=40.0, help="wall-clock length of each run (default 40)")
    p.add_argument("--repeats", type=int, default=1, help="runs per setting, interleaved; medians reported")
    p.add_argument("--config", default=str(DEFAULT_CONFIG), help="a distributed R2D2 config")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="config override for every run (repeatable)")
    p.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "distributed_r2d2.json"))


class _Window:
    """A callback that measures one window of ``seconds``: it opens once every actor has sent a chunk
    (and, with the learner, once it has updated), and stops the run when it closes."""

    def __init__(self, actors: int, paused: bool, seconds: float) -> None:
        self.actors, self.paused, self.seconds = actors, paused, seconds
        self.start: tuple[float, int, int] | None = None
        self.result: dict | None = None

    def on_step(self, run):
        now = time.monotonic()
        if self.start is None:
            if len({c[0] for c in run.chunks}) == self.actors and (self.paused or run.learner_calls > 0):
                self.start = (now, run.env_step, run.learner_calls, len(run.chunks), time.process_time())
            return None
        if now - self.start[0] < self.seconds:
            return None
        wall, steps, updates = now - self.start[0], run.env_step - self.start[1], run.learner_calls - self.start[2]
        chunks = run.chunks[self.start[3]:]
        actor_cpu = sum(c[5] for c in chunks)
        self.result = {"env_steps_per_s": steps / wall, "updates_per_s": updates / wall,
                       "actor_cpu_ms_per_env_step": 1e3 * actor_cpu / max(sum(c[2] for c in chunks), 1),
                       "actor_cpu_share": actor_cpu / wall, "driver_cpu_share": (time.process_time() - self.start[4]) / wall,
                       "replay_ratio": updates / max(steps, 1), "window_s": wall, "window_env_steps": steps,
                       "window_updates": updates, "chunks": len(run.chunks), "actor_restarts": run.actor_restarts}
        return "benchmark window closed"


def _one(raw: dict, actors: int, paused: bool, seconds: float, runs_dir: Path) -> dict:
    """One run measured over a window of ``seconds`` (:class:`_Window`)."""
    import rlfunc
    from rlfunc.runtime.config import apply_overrides

    over = {
        "distributed.actors": actors,
        "train.total_steps": 10**9,
        "train.max_wall_s": 4 * seconds + 300,  # a guard: the window ends the run
        "train.eval_every": 10**9,
        "train.checkpoint_every": 10**9,
        "train.log_every": 10**6,
        "train.eval_episodes": 1,
        "train.compile": False,
        "train.progress": False,
        "train.tensorboard": False,
        "train.keep_best": False,
    }
    if paused:
        over["distributed.max_replay_ratio"] = 1e-9
        over["distributed.min_replay_ratio"] = 0.0
    window = _Window(actors, paused, seconds)
    load_before = list(os.getloadavg())
    rlfunc.train(apply_overrides(raw, over), run_dir=tempfile.mkdtemp(dir=runs_dir), callbacks=[window])
    if window.result is None:
        raise RuntimeError(f"actors={actors}: the run ended before a {seconds} s window closed")
    return {**window.result, "loadavg_before": load_before, "loadavg_after": list(os.getloadavg())}


def run_distributed(args: argparse.Namespace, run) -> int:
    import torch

    from rlfunc.runtime.config import apply_overrides, build_config, load_config, parse_overrides, to_dict
    from rlfunc.scale.distributed import connect_for

    raw = load_config(args.config)
    raw = apply_overrides(raw, parse_overrides(args.overrides))
    if args.envs_per_actor is not None:
        raw = apply_overrides(raw, {"distributed.envs_per_actor": args.envs_per_actor})
    built = build_config(raw)
    if built.distributed is None:
        sys.exit(f"{args.config} has no distributed section; pass a distributed R2D2 config.")
    need = max(args.actors) * built.distributed.actor_cpus
    cores = os.cpu_count() or 1
    if need > cores:
        sys.exit(f"--actors {max(args.actors)} x actor_cpus {built.distributed.actor_cpus:g} need {need:g} CPUs; "
                 f"this machine has {cores}.")
    torch.set_num_threads(1)
    machine = run.machine_info(torch.device("cpu"), allocator_tuned=False)
    ray, started = connect_for(build_config(apply_overrides(raw, {"distributed.address": None})))  # a local Ray
    results: dict[tuple[int, bool], list[dict]] = {}
    try:
        machine["ray_version"] = ray.__version__
        with tempfile.TemporaryDirectory(prefix="rlfunc-distributed-bench-") as tmp:
            for _ in range(args.repeats):
                for paused in (True, False):
                    for actors in args.actors:
                        r = _one(raw, actors, paused, args.seconds, Path(tmp))
                        results.setdefault((actors, paused), []).append(r)
                        print(f"actors {actors} {'paused ' if paused else 'learner'}: {r['env_steps_per_s']:.0f} env steps/s, "
                              f"{r['updates_per_s']:.1f} updates/s, replay ratio {r['replay_ratio']:.3f}, "
                              f"load {r['loadavg_before'][0]:.1f}", flush=True)
    finally:
        if started:
            ray.shutdown()

    def med(actors: int, paused: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[(actors, paused)])

    base = med(min(args.actors), True, "env_steps_per_s") / min(args.actors)
    rows = []
    for actors in args.actors:
        paused = med(actors, True, "env_steps_per_s")
        rows.append({
            "actors": actors,
            "envs_per_actor": built.distributed.envs_per_actor,
            "env_steps_per_s_learner_paused": paused,
            "env_steps_per_s_with_learner": med(actors, False, "env_steps_per_s"),
            "learner_updates_per_s": med(actors, False, "updates_per_s"),
            "replay_ratio": med(actors, False, "replay_ratio"),
            "actor_cpu_ms_per_env_step_learner_paused": med(actors, True, "actor_cpu_ms_per_env_step"),
            "actor_cpu_share_learner_paused": med(actors, True, "actor_cpu_share"),
            "paused_speedup_vs_linear": paused / (base * actors),
            "runs": {"learner_paused": results[(actors, True)], "with_learner": results[(actors, False)]},
        })
    out = {
        "benchmark": "distributed",
        "machine": machine,
        "settings": {
            "config": str(Path(args.config).resolve().relative_to(ROOT)) if Path(args.config).resolve().is_relative_to(ROOT) else args.config,
            "overrides": args.overrides,
            "resolved_distributed": to_dict(built)["distributed"],
            "seconds_per_run": args.seconds,
            "repeats": args.repeats,
            "learner": "in the driver, eager (train.compile=false), train.threads from the config",
            "env_steps_per_s": "transitions inserted during a window of seconds_per_run that opens once every actor has sent a chunk (and the learner has updated)",
            "learner_paused": "distributed.max_replay_ratio=1e-9: no update runs; chunks are still inserted",
            "paused_speedup_vs_linear": "paused env steps/s / (actors x the smallest actor count's per-actor rate)",
            "actor_cpu_ms_per_env_step": "CPU time of the actor processes (time.process_time in each collect call) per env "
                                         "step: the actors' own cost, plumbing included, independent of how many cores "
                                         "they got on a shared machine",
            "actor_cpu_share": "actor CPU seconds per wall second in the window (cores the actors got)",
            "driver_cpu_share": "the driver's (learner's) CPU seconds per wall second in the window",
        },
        "rows": rows,
    }
    run.write_json(Path(args.out), out)
    run.print_table(rows, [("actors", "actors", ""), ("envs/actor", "envs_per_actor", ""),
                           ("steps/s paused", "env_steps_per_s_learner_paused", ".0f"),
                           ("steps/s learner", "env_steps_per_s_with_learner", ".0f"),
                           ("updates/s", "learner_updates_per_s", ".1f"), ("replay ratio", "replay_ratio", ".3f"),
                           ("paused vs linear", "paused_speedup_vs_linear", ".2f"),
                           ("actor CPU ms/step", "actor_cpu_ms_per_env_step_learner_paused", ".3f"),
                           ("actor cores", "actor_cpu_share_learner_paused", ".2f")])
    print(f"wrote {args.out}")
    return 0


def register(run) -> None:
    """Add the ``distributed`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("distributed", "distributed R2D2 on Ray actors: env steps/s with the learner paused and with it, "
                   "updates/s, replay ratio (issue #25)", configure)(lambda args: run_distributed(args, run))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py distributed [--actors 1 2] [--seconds 40]")
