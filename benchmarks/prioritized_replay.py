"""Micro-benchmark: prioritized sequence replay at 10k / 100k / 1M stored sequences.

Measures, in microseconds per call with a batch of 64 sequences:

* ``tree_sample``: the sum-tree draw alone (64 indices);
* ``sample``: :meth:`PrioritizedSequenceReplay.sample` -- indices, gather of
  every stored key, stored state, probabilities and importance weights;
* ``update``: :meth:`PrioritizedSequenceReplay.update_priorities` with 64
  random rows and priorities.

Payloads are tiny (2-step sequences, 1-float observations and LSTM state) so
1M sequences fit in memory; the costs measured do not depend on the payload
size except for the gather in ``sample``. Each figure is reported as the
minimum and the median wall time over rounds of repeated calls, and the
median CPU time of this process (on a shared machine wall time includes the
time spent waiting for a core; CPU time does not). A yardstick -- the cost of
one tiny torch and numpy op, before and after -- is printed with them. Usage::

    python benchmarks/prioritized_replay.py [--sizes 10000 100000 1000000] [--out FILE]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.harness import cpu_model as _cpu_model  # noqa: E402 -- the machine record's CPU name
from rlfunc.replay.prioritized import PrioritizedSequenceReplay  # noqa: E402


def _time_us(fn, reps: int, rounds: int) -> tuple[float, float, float]:
    """``(wall min, wall median, CPU-time median)`` in microseconds per call.

    CPU time (``time.process_time``) counts only the time this process ran,
    so it stays meaningful when other processes share the cores.
    """
    for _ in range(max(3, reps // 10)):
        fn()
    wall, cpu = [], []
    for _ in range(rounds):
        start, start_cpu = time.perf_counter(), time.process_time()
        for _ in range(reps):
            fn()
        wall.append((time.perf_counter() - start) / reps * 1e6)
        cpu.append((time.process_time() - start_cpu) / reps * 1e6)
    return min(wall), statistics.median(wall), statistics.median(cpu)


def fill(size: int, num_envs: int = 4096, device: str = "cpu") -> PrioritizedSequenceReplay:
    """A replay holding ``size`` 2-step sequences with random priorities."""
    rb = PrioritizedSequenceReplay(size, 2, num_envs=num_envs, period=2, device=device)
    g = torch.Generator().manual_seed(0)
    zeros_b = torch.zeros(num_envs, dtype=torch.bool)
    while len(rb) < size:
        obs = torch.randn(num_envs, 1, generator=g)
        step = TensorDict(
            {
                "obs": obs,
                "action": torch.randint(4, (num_envs,), generator=g),
                "reward": obs[:, 0],
                "next_obs": obs + 1,
                "terminated": zeros_b,
                "truncated": zeros_b,
            },
            batch_size=[num_envs],
        )
        carry = TensorDict({"h": obs, "c": -obs}, batch_size=[num_envs])
        rb.add(step.to(device), carry=carry.to(device))
    rb.update_priorities(torch.arange(size, device=device), torch.rand(size, generator=g).to(device) * 10)
    return rb


def calibration(reps: int = 200, rounds: int = 15) -> dict:
    """Cost of one tiny torch op and one tiny numpy op right now: a yardstick for a shared machine."""
    import numpy as np

    t = torch.rand(64)
    a = np.random.rand(64)
    return {
        "torch_add_64_us_min": round(_time_us(lambda: t + t, reps, rounds)[0], 2),
        "numpy_add_64_us_min": round(_time_us(lambda: a + a, reps, rounds)[0], 2),
    }


def run(sizes=(10_000, 100_000, 1_000_000), batch: int = 64, reps: int = 200, rounds: int = 15, device: str = "cpu"):
    rows = []
    for size in sizes:
        t0 = time.perf_counter()
        rb = fill(size, device=device)
        fill_s = time.perf_counter() - t0
        g = torch.Generator(device=device).manual_seed(1)
        idx = torch.randint(size, (batch,), device=device)
        prio = torch.rand(batch, device=device) * 10
        row = {"size": size, "batch": batch, "fanout": rb.tree.fanout, "blocks": rb.tree.num_blocks, "fill_s": round(fill_s, 2)}
        for name, fn in (
            ("tree_sample", lambda: rb.tree.sample(batch, generator=g)),
            ("sample", lambda: rb.sample(batch, generator=g)),
            ("update", lambda: rb.update_priorities(idx, prio)),
        ):
            best, median, cpu = _time_us(fn, reps, rounds)
            row[name + "_us_min"] = round(best, 1)
            row[name + "_us_median"] = round(median, 1)
            row[name + "_cpu_us_median"] = round(cpu, 1)
        rows.append(row)
        print(
            f"{size:>9,d} sequences (F={row['fanout']}, {row['blocks']} blocks), us per call, "
            f"wall min / wall median / CPU median: "
            f"tree sample {row['tree_sample_us_min']:.0f} / {row['tree_sample_us_median']:.0f} / {row['tree_sample_cpu_us_median']:.0f}, "
            f"replay sample {row['sample_us_min']:.0f} / {row['sample_us_median']:.0f} / {row['sample_cpu_us_median']:.0f}, "
            f"update {row['update_us_min']:.0f} / {row['update_us_median']:.0f} / {row['update_cpu_us_median']:.0f}",
            flush=True,
        )
        del rb
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, default=None, help="write JSON results here")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"prioritized replay on {_cpu_model()} ({os.cpu_count()} cores), threads={args.threads}, "
          f"device={args.device}, load average {load:.2f}", flush=True)
    cal_before = calibration()
    rows = run(args.sizes, args.batch, args.reps, args.rounds, args.device)
    cal_after = calibration()
    print(f"yardstick (min): torch add of 64 floats {cal_before['torch_add_64_us_min']:.1f} / "
          f"{cal_after['torch_add_64_us_min']:.1f} us, numpy {cal_before['numpy_add_64_us_min']:.1f} / "
          f"{cal_after['numpy_add_64_us_min']:.1f} us (before / after)", flush=True)
    if args.out is not None:
        import shlex

        argv_used = sys.argv[1:] if argv is None else list(argv)
        result = {
            # every JSON records the command that wrote it (as benchmarks/harness.write_json does for run.py)
            "command": ("python benchmarks/prioritized_replay.py " + " ".join(shlex.quote(str(a)) for a in argv_used)).rstrip(),
            "benchmark": "prioritized_replay",
            "rows": rows,
            "calibration": {"before": cal_before, "after": cal_after},
            "machine": {
                "cpu": _cpu_model(),
                "cores": os.cpu_count(),
                "threads": args.threads,
                "device": args.device,
                "load_average_1min": load,
                "torch": torch.__version__,
                "python": platform.python_version(),
                "date": datetime.datetime.now().isoformat(timespec="seconds"),
            },
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
