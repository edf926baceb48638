"""``python benchmarks/run.py population-replay``: one batched sample from a population replay
against P separate single replays' samples, in the same process (issue #24 §5).

For each replay the population batches -- R2D2's prioritized sequence replay
(:class:`rlfunc.replay.population_sequence.PopulationPrioritizedSequenceReplay`),
DRQN's sequence replay (:class:`~rlfunc.replay.population_sequence.PopulationSequenceReplay`)
and DrQ-v2's pixel replay (:class:`rlfunc.replay.population_pixels.PopulationPixelReplay`)
-- and each P, the population and P single replays are filled with the same
random data (episode lengths, terminations and truncations drawn per member),
past their capacity; then one ``sample(B, generators)`` of the population and P
``sample(B, generator_k)`` calls of the singles (and, for R2D2, writing the
priorities of a ``[P, B]`` batch back in one call against P calls) are timed in
interleaved windows (the rotation of :func:`benchmarks.run.time_interleaved`), each
call timed on its own: the median call is reported (a window's mean is dominated by
the few calls another job preempts on a shared 2-core machine), with the 10th and
90th percentiles and the storage bytes of each. Shapes are the agents' defaults: R2D2 windows of
40 + 80 steps every 40 with a 512-unit LSTM state, batch 64; DRQN windows of 10
steps every step, batch 32; DrQ-v2 84x84 RGB frames stacked 3, 3-step returns,
batch 256 (capacities are small here: sampling cost hardly depends on them).
Writes ``benchmarks/results/population_replays.json``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--members", type=int, nargs="+", default=[1, 4, 8], help="population sizes P (default 1 4 8)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--device", default="cpu", help="where storage and sampling live (default cpu)")
    p.add_argument("--repeats", type=int, default=15, help="timed windows per variant (default 15)")
    p.add_argument("--steps", type=int, default=10, help="calls per timed window (default 10)")
    p.add_argument("--quick", action="store_true", help="tiny shapes, for a smoke test (not written unless --out)")
    p.add_argument("--out", default=None, help="JSON path (default benchmarks/results/population_replays.json)")


def _shapes(quick: bool) -> dict:
    if quick:
        return {
            "r2d2": dict(capacity=40, sequence_length=6, period=3, num_envs=2, obs=4, lstm=8, batch=8),
            "drqn": dict(capacity=40, sequence_length=4, period=1, num_envs=1, obs=4, lstm=8, batch=8),
            "drqv2": dict(capacity=60, obs_shape=(9, 8, 8), action_dim=2, batch=8),
        }
    return {
        "r2d2": dict(capacity=400, sequence_length=120, period=40, num_envs=4, obs=8, lstm=512, batch=64),
        "drqn": dict(capacity=2000, sequence_length=10, period=1, num_envs=1, obs=4, lstm=64, batch=32),
        "drqv2": dict(capacity=3000, obs_shape=(9, 84, 84), action_dim=6, batch=256),
    }


def _sequence_data(rng: np.random.Generator, num_envs: int, obs: int, lstm: int, steps: int, with_carry: bool):
    """``steps`` adds of one member: (step, carry) TensorDicts with random episode ends."""
    import torch
    from tensordict import TensorDict

    left = rng.integers(5, 300, num_envs)
    for _ in range(steps):
        left -= 1
        end = left <= 0
        trunc = end & (rng.random(num_envs) < 0.3)
        step = TensorDict(
            {
                "obs": torch.from_numpy(rng.standard_normal((num_envs, obs), dtype=np.float32)),
                "action": torch.from_numpy(rng.integers(0, 4, num_envs)),
                "reward": torch.from_numpy(rng.standard_normal(num_envs, dtype=np.float32)),
                "terminated": torch.from_numpy(end & ~trunc),
                "truncated": torch.from_numpy(trunc),
            },
            batch_size=[num_envs],
        )
        left[end] = rng.integers(5, 300, int(end.sum()))
        carry = None
        if with_carry:
            carry = TensorDict(
                {
                    "h": torch.from_numpy(rng.standard_normal((num_envs, lstm), dtype=np.float32)),
                    "c": torch.from_numpy(rng.standard_normal((num_envs, lstm), dtype=np.float32)),
                },
                batch_size=[num_envs],
            )
        yield step, carry


def _sequence_problem(name: str, p: int, shape: dict, device: str):
    from rlfunc.replay.population_sequence import PopulationPrioritizedSequenceReplay, PopulationSequenceReplay
    from rlfunc.replay.prioritized import PrioritizedSequenceReplay
    from rlfunc.replay.sequence import SequenceReplay

    prioritized = name == "r2d2"
    one_cls, pop_cls = (
        (PrioritizedSequenceReplay, PopulationPrioritizedSequenceReplay) if prioritized else (SequenceReplay, PopulationSequenceReplay)
    )
    kw = dict(capacity=shape["capacity"], sequence_length=shape["sequence_length"], num_envs=shape["num_envs"],
              period=shape["period"], device=device)
    pop, singles = pop_cls(**kw, members=p), [one_cls(**kw) for _ in range(p)]
    steps = 2 * shape["capacity"] * shape["period"] // shape["num_envs"] + 2 * shape["sequence_length"]
    for k in range(p):
        data = _sequence_data(np.random.default_rng(k), shape["num_envs"], shape["obs"], shape["lstm"], steps, prioritized)
        for step, carry in data:
            pop.add(k, step, carry=carry)
            singles[k].add(step, carry=carry)
    return pop, singles


def _pixel_problem(p: int, shape: dict, device: str):
    from rlfunc.replay.pixels import PixelReplay
    from rlfunc.replay.population_pixels import PopulationPixelReplay

    kw = dict(capacity=shape["capacity"], obs_shape=shape["obs_shape"], action_dim=shape["action_dim"], device=device)
    pop, singles = PopulationPixelReplay(**kw, members=p), [PixelReplay(**kw) for _ in range(p)]
    c, h, w = shape["obs_shape"]
    for k in range(p):
        rng = np.random.default_rng(k)
        obs = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
        left = int(rng.integers(50, 500))
        for _ in range(shape["capacity"] + 100):
            nxt = rng.integers(0, 256, (c, h, w), dtype=np.uint8)
            action = rng.standard_normal(shape["action_dim"]).astype(np.float32)
            left -= 1
            term = left == 0 and rng.random() < 0.5
            trunc = left == 0 and not term
            args = (obs, action, float(rng.standard_normal()), nxt, term, trunc)
            pop.add(k, *args)
            singles[k].add(*args)
            obs = nxt
            if left == 0:
                left = int(rng.integers(50, 500))
    return pop, singles


def _time_calls(runners: dict, repeats: int, calls: int, device, run) -> dict[str, list[float]]:
    """Seconds of each call: ``repeats`` rounds, each running every runner ``calls`` times
    from a rotated first runner (so none always runs first)."""
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            fn = runners[name]
            for _ in range(calls):
                run.sync(device)
                t0 = time.perf_counter()
                fn()
                run.sync(device)
                times[name].append(time.perf_counter() - t0)
    return times


def _bytes(replay) -> int:
    """Storage bytes; a single sequence replay counted as the population counts its members
    (windows, per-window info and carries, pending rings)."""
    if hasattr(replay, "nbytes"):
        return int(replay.nbytes())
    tds = (replay._storage, replay._info, replay._pending, replay._carry, replay._pending_carry)
    return int(sum(x.numel() * x.element_size() for td in tds if td is not None for x in td.values(True, True)))


def run_bench(args: argparse.Namespace, run) -> int:
    import torch

    from rlfunc.runtime.perf import set_threads, tune_allocator

    set_threads(args.threads)
    allocator_tuned = tune_allocator()  # as the trainers do: a [P, B] pixel batch is tens of MB, mmap-ed afresh otherwise
    device = torch.device(args.device)
    machine = run.machine_info(device, allocator_tuned=allocator_tuned)  # load average before, and at the end below
    shapes = _shapes(args.quick)
    rows = []
    for name in ("r2d2", "drqn", "drqv2"):
        shape = shapes[name]
        b = shape["batch"]
        for p in args.members:
            pop, singles = _pixel_problem(p, shape, args.device) if name == "drqv2" else _sequence_problem(name, p, shape, args.device)
            gens = [torch.Generator(device=device).manual_seed(k) for k in range(p)]
            runners = {
                "population": lambda pop=pop, gens=gens: pop.sample(b, gens),
                "separate": lambda singles=singles, gens=gens: [s.sample(b, g) for s, g in zip(singles, gens)],
            }
            if name == "r2d2":
                idx = pop.sample(b, gens)["window"][:, 0]
                prio = torch.rand(p, b, generator=torch.Generator().manual_seed(0)).to(device) + 0.1
                runners["population_update_priorities"] = lambda pop=pop, idx=idx, prio=prio: pop.update_priorities(idx, prio)
                runners["separate_update_priorities"] = lambda singles=singles, idx=idx, prio=prio: [
                    s.update_priorities(idx[k], prio[k]) for k, s in enumerate(singles)
                ]
            for fn in runners.values():  # warm
                fn()
            times = _time_calls(runners, args.repeats, args.steps, device, run)
            med = {n: statistics.median(t) for n, t in times.items()}
            pct = {n: [1e3 * float(q) for q in np.percentile(t, [10, 90])] for n, t in times.items()}
            row = {
                "replay": name,
                "members": p,
                "batch_per_member": b,
                "population_sample_ms": 1e3 * med["population"],
                "separate_sample_ms": 1e3 * med["separate"],
                "sample_speedup": med["separate"] / med["population"],
                "population_sample_ms_p10_p90": pct["population"],
                "separate_sample_ms_p10_p90": pct["separate"],
                "population_bytes": _bytes(pop),
                "separate_bytes": sum(_bytes(s) for s in singles),
            }
            if name == "r2d2":
                row["population_update_priorities_ms"] = 1e3 * med["population_update_priorities"]
                row["separate_update_priorities_ms"] = 1e3 * med["separate_update_priorities"]
                row["update_priorities_speedup"] = med["separate_update_priorities"] / med["population_update_priorities"]
            rows.append(row)
            extra = (f", update_priorities {row['population_update_priorities_ms']:.3f} vs "
                     f"{row['separate_update_priorities_ms']:.3f} ms" if name == "r2d2" else "")
            print(f"{name} P={p}: sample {row['population_sample_ms']:.3f} ms (population) vs "
                  f"{row['separate_sample_ms']:.3f} ms ({p} separate), {row['sample_speedup']:.2f}x{extra}", flush=True)
            del pop, singles
    result = {
        "benchmark": "population_replays",
        "device": str(device),
        "threads": args.threads,
        "repeats": args.repeats,
        "calls_per_window": args.steps,
        "shapes": {k: {n: list(v) if isinstance(v, tuple) else v for n, v in s.items()} for k, s in shapes.items()},
        "machine": {**machine, "loadavg_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None},
        "rows": rows,
        "notes": (
            "One sample(B, generators) of a population replay ([P, ...] storage, every member's batch in one gather) "
            "vs P single replays' sample(B, generator_k) one after the other, same data, windows interleaved, "
            "median call (10th and 90th percentiles beside). "
            "Member k's batch is the same in both (tests/test_population_replays.py)."
        ),
    }
    if args.out or not args.quick:
        from pathlib import Path

        out = Path(args.out) if args.out else run.RESULTS_DIR / "population_replays.json"
        run.write_json(out, result)
        print(f"wrote {out}")
    return 0


def register(run) -> None:
    """Add the ``population-replay`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("population-replay", "one population replay sample vs P single replays' samples (issue #24 §5)",
                   configure)(lambda args: run_bench(args, run))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py population-replay [--quick]")
