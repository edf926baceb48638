"""rlfunc side by side with Stable-Baselines3 and TorchRL, run through ``benchmarks/run.py``:

    python benchmarks/run.py peers [--threads 1] [--device cpu|cuda] [--quick] [--tiny] [--no-compile]
                                   [--only TASK ...] [--out PATH] [--note TEXT]

Every comparison of a task runs in one process, on identical shapes, batch size
and thread count, timed with :func:`benchmarks.harness.time_interleaved` (each
repeat runs every variant for one window, in a rotated order; the throughput is
the median window). Writes ``benchmarks/results/peers.json`` (``peers_cuda.json``
with ``--device cuda``)::

    {"machine": {...harness.machine_info...}, "settings": {...},
     "rows": [{"task", "library", "variant", "throughput", "unit", "ratio_vs_rlfunc",
               "threads", "device", "versions": {...}, "problem": {...},
               "unavailable"?: "<why>", ...}, ...]}

and a bar chart ``peers.png`` beside it (one panel per task), and prints a
table. ``ratio_vs_rlfunc`` is a row's throughput over the best ``rlfunc`` row
of the same task. A peer that is not installed, or fails to build or run, gets
``throughput: null`` and ``unavailable: "<reason>"`` instead of stopping the
command. ``library`` is one of ``rlfunc``, ``imperative`` (this repository's
``benchmarks/baselines``: the ordinary ``nn.Module`` + ``torch.optim`` way),
``torchrl``, ``stable-baselines3``.

Tasks (``--only`` takes these names), one module each:

* ``redq_critic_update`` / ``sac_critic_update``: :mod:`benchmarks.peers.critic_update`;
* ``pendulum_train_loop_utd20``: :mod:`benchmarks.peers.pendulum_loop`;
* ``sequence_update``: :mod:`benchmarks.peers.sequence_update`;
* ``replay_sample``: :mod:`benchmarks.peers.replay_sample`;
* ``replay_sample_sequence``: :mod:`benchmarks.peers.sequence_replay_sample`.

Each module's doc says what its rows measure and their caveats. What they share (sizes, the
peers' imports, :class:`~benchmarks.peers.measure.Variant`, the measuring) is
:mod:`benchmarks.peers.measure`; the bar chart :mod:`benchmarks.peers.plot`.

Timing: each variant is built and called (twice; once for a loop segment),
then every variant is called once more after all are built ("settling"), and
the windows are sized from that call. Settling matters: importing and compiling
TorchRL registers pytree node types, and dynamo guards rlfunc's compiled
functions on ``len(torch.utils._pytree.SUPPORTED_NODES)``, so they recompile
once after TorchRL's compile; without settling that recompile lands in a timed
window. ``compile_s`` is the time of the calls before timing beyond as many
settled calls (for the compiled loop it is part of ``setup_s``, which also holds
the random steps and the warm-up); ``graphs_compiled``/``graph_breaks`` count
dynamo's work while building a compiled variant, ``recompiled_during_timing``
flags any recompile inside the windows. TorchRL under ``torch.compile`` breaks
the graph in many places (backward, ``Optimizer.step``, tensordict internals)
and hits dynamo's recompile limit in tensordict helpers (those frames then run
eagerly): its compiled rows measure what ``torch.compile`` gives a TorchRL user
today, not a fullgraph compile.

``--device cuda`` (exit code 2 if CUDA is not available) puts every variant on
the GPU: rlfunc state, batches and replay (``device=``; sampling draws its
indices with a CUDA generator), the imperative baselines, TorchRL modules,
losses, batches and ``LazyTensorStorage(device=...)``, SB3 ``device="cuda"``
(its ``ReplayBuffer`` keeps numpy arrays on the host and copies every sampled
batch to the GPU: its real behaviour, measured as is and said in the row's
``note``), and the training loops (rlfunc ``train.device=cuda``, SB3 SAC on
cuda, TorchRL's ``GymEnv(device="cuda")``; the gymnasium env itself steps on the
host for all of them). Every timing reads the clock after
``torch.cuda.synchronize``; rows record ``"device": "cuda"`` and the machine info
the GPU's name. A task that fails outside its variants' guards becomes one
``(whole task)`` row with the reason.

Options: ``--quick`` (2 short windows, 2-step loop segments: a smoke test, not
a measurement), ``--tiny`` (tiny shapes for the tests; the ``problem`` of every
row says which shapes ran), ``--no-compile`` (skip every compiled row),
``--repeats`` (default 5), ``--window-s`` (default 1.0), ``--segment-steps``
(default 30), ``--loop-repeats`` (default 3), ``--loop-warmup`` (default 3),
``--traceback`` (print the traceback of every failing variant). Compiling takes
minutes on a 2-core CPU (TorchRL's REDQ and SAC steps about 2 minutes each here,
rlfunc's about 1); compile time is excluded from throughput. A full run at one
thread should take about 20 minutes (an estimate from ``--quick`` runs, not
measured), mostly compiling and the training loop (TorchRL's loop is the slowest).
Installing the peers: ``pip install stable-baselines3`` and
``pip install --no-deps torchrl`` (TorchRL pins ``tensordict<0.15``; with
``--no-deps`` its pure-Python losses and buffers run with ours).
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from benchmarks.harness import RESULTS_DIR, cpu_model, machine_info, print_table, write_json
from benchmarks.peers.critic_update import task_critic_update
from benchmarks.peers.measure import (  # noqa: F401 -- Variant, _rows, SIZES: the package's API (tests)
    _PEER_MODULES,
    SIZES,
    Variant,
    _device,
    _peer,
    _reason,
    _rows,
    _versions,
)
from benchmarks.peers.pendulum_loop import task_pendulum_loop
from benchmarks.peers.plot import plot
from benchmarks.peers.replay_sample import task_replay_sample
from benchmarks.peers.sequence_replay_sample import task_replay_sample_sequence
from benchmarks.peers.sequence_update import task_sequence_update

TASKS = (
    "redq_critic_update",
    "sac_critic_update",
    "pendulum_train_loop_utd20",
    "sequence_update",
    "replay_sample",
    "replay_sample_sequence",
)

TASK_FNS: dict[str, Callable[..., list[dict]]] = {
    "redq_critic_update": task_critic_update,
    "sac_critic_update": task_critic_update,
    "pendulum_train_loop_utd20": task_pendulum_loop,
    "sequence_update": task_sequence_update,
    "replay_sample": task_replay_sample,
    "replay_sample_sequence": task_replay_sample_sequence,
}


# --------------------------------------------------------------------------- CLI


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads for every variant (default 1)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="device of every variant's state, batches and buffers (default cpu); "
                        "cuda writes benchmarks/results/peers_cuda.json by default")
    p.add_argument("--quick", action="store_true", help="2 short windows and 2-step loop segments: a smoke test")
    p.add_argument("--tiny", action="store_true", help="tiny shapes (tests); every row's 'problem' records the shapes")
    p.add_argument("--only", nargs="+", choices=TASKS, default=None, metavar="TASK",
                   help="run only these tasks: " + ", ".join(TASKS))
    p.add_argument("--no-compile", action="store_true", help="skip every torch.compile row (rlfunc and peers)")
    p.add_argument("--repeats", type=int, default=None, help="timed windows per variant (default 5; 2 with --quick)")
    p.add_argument("--window-s", type=float, default=None, help="seconds per window (default 1.0; 0.05 with --quick)")
    p.add_argument("--segment-steps", type=int, default=None,
                   help="env steps per timed window of the training loop (default 30; 2 with --quick)")
    p.add_argument("--loop-repeats", type=int, default=None,
                   help="timed segments per training-loop variant (default 3; 2 with --quick)")
    p.add_argument("--loop-warmup", type=int, default=None,
                   help="learning env steps run before timing the loop (default 3; 1 with --quick)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default benchmarks/results/peers.json, peers_cuda.json with --device cuda); PNG beside it")
    p.add_argument("--note", default=None, help="free text stored in the JSON")
    p.add_argument("--traceback", action="store_true", help="print the traceback of every failing variant")


def _command(args: argparse.Namespace) -> str:
    flags = [f"--threads {args.threads}"] + [f"--device {args.device}"] * (_device(args).type != "cpu")
    flags += ["--quick"] * bool(args.quick) + ["--tiny"] * bool(args.tiny) + ["--no-compile"] * bool(args.no_compile)
    if args.only:
        flags.append("--only " + " ".join(args.only))
    return "python benchmarks/run.py peers " + " ".join(flags)


def _failed_task_row(task: str, exc: BaseException, threads: int, device: str) -> dict:
    """The row of a task that raised outside its variants' guards (e.g. a CUDA error surfacing at a sync)."""
    return {"task": task, "library": "rlfunc", "variant": "(whole task)", "throughput": None, "unit": "-",
            "ratio_vs_rlfunc": None, "threads": threads, "device": device, "versions": _versions("rlfunc"),
            "problem": {}, "unavailable": f"the task failed: {_reason(exc)}"}


def run_peers(args: argparse.Namespace) -> int:
    from rlfunc.runtime.perf import tune_allocator

    if getattr(args, "device", None) is None:
        args.device = "cpu"
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is available here.", file=sys.stderr)
        return 2
    device = _device(args)

    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.window_s is None:
        args.window_s = 0.05 if args.quick else 1.0
    if args.segment_steps is None:
        args.segment_steps = 2 if args.quick else 30
    if args.loop_repeats is None:
        args.loop_repeats = 2 if args.quick else 3
    if args.loop_warmup is None:
        args.loop_warmup = 1 if args.quick else 3
    allocator_tuned = tune_allocator()  # process-wide: every library in this process gets it
    torch.set_num_threads(args.threads)
    sz = SIZES["tiny" if args.tiny else "full"]
    tasks = [t for t in TASKS if args.only is None or t in args.only]
    peers = {lib: (_peer(lib)[1] or "installed") for lib in _PEER_MODULES}
    machine = machine_info(device, allocator_tuned)
    where = cpu_model() if device.type == "cpu" else f"{machine.get('gpu', device.type)} ({device.type}; host {cpu_model()})"
    print(f"peers on {where}, threads={args.threads}, tasks={tasks}, sizes={'tiny' if args.tiny else 'full'}; "
          + ", ".join(f"{k}: {v}" for k, v in peers.items()), flush=True)
    rows: list[dict] = []
    for task in tasks:
        print(f"{task}:", flush=True)
        t0 = time.perf_counter()
        try:
            rows += TASK_FNS[task](task, args, sz)
        except Exception as exc:  # noqa: BLE001 -- one task's failure must not lose the others' rows
            print(f"  TASK FAILED: {task}: {_reason(exc)}", flush=True)
            if getattr(args, "traceback", False):
                traceback.print_exc()
            rows.append(_failed_task_row(task, exc, args.threads, device.type))
        torch.set_num_threads(args.threads)  # a peer may have changed it
        print(f"  {task} done in {time.perf_counter() - t0:.0f} s", flush=True)
    result = {
        "machine": machine,
        "rows": rows,
        "settings": {
            "command": _command(args),
            "threads": args.threads,
            "device": device.type,
            "sizes": "tiny" if args.tiny else "full",
            "repeats": args.repeats,
            "window_s": args.window_s,
            "segment_steps": args.segment_steps,
            "loop_warmup": args.loop_warmup,
            "loop_repeats": args.loop_repeats,
            "compile": not args.no_compile,
            "statistic": "median of interleaved windows; ratio_vs_rlfunc = throughput / best rlfunc row of the task",
            "peers": peers,
        },
    }
    if args.quick:
        result["quick"] = True
    if args.note:
        result["note"] = args.note
    out = args.out or RESULTS_DIR / ("peers.json" if device.type == "cpu" else f"peers_{device.type}.json")
    write_json(out, result)
    on = f"{machine['cpu']}" if device.type == "cpu" else f"{device.type}: {machine.get('gpu', '?')}, host {machine['cpu']}"
    png = plot(rows, out.with_suffix(".png"),
               title=f"rlfunc vs peers ({args.threads} thread(s), {on}; "
                     f"{'tiny shapes, ' if args.tiny else ''}{'quick' if args.quick else 'median of windows'})")
    print()
    table = [dict(r, unavailable=(r.get("unavailable") or "")[:70]) for r in rows]
    print_table(table, [("task", "task", ""), ("library", "library", ""), ("variant", "variant", ""),
                        ("throughput", "throughput", ".4g"), ("unit", "unit", ""),
                        ("vs rlfunc", "ratio_vs_rlfunc", ".2f"), ("unavailable", "unavailable", "")])
    print(f"\nwrote {out}" + (f" and {png}" if png else ""))
    return 0


def register(run) -> None:
    """Add the ``peers`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("peers", "rlfunc side by side with Stable-Baselines3 and TorchRL (same shapes, threads, process)",
                   configure)(run_peers)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py peers [--quick]")
