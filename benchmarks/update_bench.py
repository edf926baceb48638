"""``python benchmarks/run.py update``: learner throughput of the functional update against the
imperative baseline of ``benchmarks/baselines``, in the same process, on pre-sampled batches and
noise (no replay, no env)::

    python benchmarks/run.py update --algo redq|rlpd|drqn|r2d2|drqv2|ALL [--device cpu|cuda] [--threads 1 2]
                                    [--repeats R] [--quick] [--no-compile] [--out PATH]

Per algorithm: the imperative baseline, the functional update eager (REDQ: each ensemble mode)
and compiled, and with ``--device cuda`` the update replayed as one CUDA graph
(``functional-compiled+cudagraph``, or ``functional-eager+cudagraph`` with ``--no-compile``;
:func:`cuda_graph_variant`); on CPU that row is written with ``"unavailable"`` and the reason.
REDQ and RLPD (:func:`update_redq`) and DRQN (:func:`update_drqn`) live here, DrQ-v2 in
``benchmarks/drqv2_bench.py`` and R2D2 in ``benchmarks/r2d2_bench.py`` (registered by their own
``register(run)``). Writes ``benchmarks/results/update_<algo>.json``.

Adding an algorithm: write ``fn(args) -> result dict`` (same JSON shape as :func:`update_redq`)
and add it to :data:`UPDATE_ALGOS`. Timing: :mod:`benchmarks.harness` (interleaved windows,
medians, the matmul ceiling a FLOP efficiency is measured against).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import torch

from benchmarks.harness import (
    RESULTS_DIR,
    cpu_model,
    dynamo_counts,
    error_text,
    machine_info,
    matmul_ceiling,
    print_table,
    sync,
    time_interleaved,
    warm_up,
    window_steps,
    write_json,
)


# --------------------------------------------------------------------------- update: CUDA-graph variant


def cuda_graph_variant(update, state, inputs: tuple, device: torch.device, *, compiled: bool):
    """The ``+cudagraph`` variant of an update benchmark: ``(name, step | None, info)``.

    ``update`` (eager, or compiled when ``compiled``) runs behind
    :class:`rlfunc.runtime.graphs.FixedStateUpdate` with ``cuda_graph=True``:
    the state at fixed addresses, the whole update replayed as one recorded
    CUDA graph; ``inputs`` (batch[, noise]) are copied into the graph's
    static inputs every step, as a learner does. The first call (warm-up,
    compile, capture) happens here. Where no graph can be recorded (a CPU
    run, or a failed capture) ``step`` is None and ``info["unavailable"]``
    says why: the variant is then reported as an unavailable row
    (:func:`unavailable_row`), not left out.
    """
    import warnings

    name = ("functional-compiled" if compiled else "functional-eager") + "+cudagraph"
    if device.type != "cuda":
        return name, None, {"unavailable": f"CUDA graphs need --device cuda (this run: --device {device.type})"}
    from rlfunc.runtime.graphs import FixedStateUpdate

    fixed = FixedStateUpdate(update, state, cuda_graph=True)

    def step() -> None:
        fixed(fixed.state, *inputs)

    t0 = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a failed capture is recorded below instead
            step()
        sync(device)
    except Exception as exc:  # noqa: BLE001 -- recorded, the rest still runs
        return name, None, {"unavailable": error_text(exc)}
    if fixed.mode != "cuda_graph":
        return name, None, {"unavailable": fixed.fallback_reason}
    impl = "rlfunc.runtime.graphs.FixedStateUpdate(cuda_graph=True)"
    return name, step, {"impl": impl + (" over the compiled update" if compiled else " over the eager update"),
                        "capture_s": time.perf_counter() - t0}


def add_cuda_graph_variant(runners: dict, notes: dict, warm: dict, update, state, inputs: tuple,
                           device: torch.device, *, compiled: bool, **info_extra) -> tuple[str, dict]:
    """:func:`cuda_graph_variant`, registered with a benchmark's ``runners``/``notes``/``warm``.

    When the graph is recorded, its step joins ``runners`` and one timed call
    fills ``warm[name]``; otherwise the reason is printed. Returns ``(name,
    info)`` (``info["unavailable"]`` set when it could not run).
    """
    name, step, info = cuda_graph_variant(update, state, inputs, device, compiled=compiled)
    info.update(info_extra)
    if step is None:
        print(f"  {name}: unavailable ({info['unavailable']})", flush=True)
        return name, info
    runners[name] = step
    notes[name] = info
    t0 = time.perf_counter()
    step()
    sync(device)
    warm[name] = time.perf_counter() - t0
    print(f"  warm-up {name}: {warm[name] * 1e3:.1f} ms/update", flush=True)
    return name, info


def empty_row(name: str, threads: int, device: torch.device, **extra) -> dict:
    """A variant row without numbers (``None``), plus ``extra`` fields saying why."""
    return {
        "variant": name,
        "updates_per_s": None,
        "ratio_vs_imperative": None,
        "flop_efficiency": None,
        "threads": threads,
        "device": device.type,
        "torch": torch.__version__,
        "ms_per_env_step": None,
        **extra,
    }


def unavailable_row(name: str, reason: str, threads: int, device: torch.device, **extra) -> dict:
    """A variant that could not run here, with the reason (the row's numbers are None)."""
    return empty_row(name, threads, device, unavailable=reason, **extra)


# --------------------------------------------------------------------------- update: REDQ


def redq_flops(obs: int, act: int, hidden: tuple[int, ...], critics: int, subset: int, batch: int, utd: int) -> dict:
    """Analytic matmul FLOPs of one REDQ critic update (multiply-add = 2 FLOPs).

    With ``lin(i, o) = 2 B i o`` (one Linear of a B-row batch), critic layer
    sizes ``c = (O + A, H..., 1)`` and policy ``p = (O, H..., 2A)`` (mean and
    log-std heads counted as one layer of width 2A):

    * ``Fq = sum lin(c)`` one critic forward, ``Fpi = sum lin(p)`` one policy forward;
    * critics, every update: N forwards, N weight-grad passes (``Fq``) and N
      input-grad passes for every layer but the first (``Fq - lin(O+A, H1)``):
      ``N (3 Fq - lin(O+A, H1))``;
    * target, every update: policy forward on next_obs ``Fpi`` + M target
      critics ``M Fq`` (only the subset is evaluated);
    * actor + temperature, once per env step, amortised over G: policy forward
      ``Fpi``, N critics forward ``N Fq``, N critic input-grad passes (all
      layers: the gradient reaches the action; critics frozen, no weight grads)
      ``N Fq``, policy weight grads ``Fpi`` and input grads but the first
      layer ``Fpi - lin(O, H1)``: ``3 Fpi - lin(O, H1) + 2 N Fq``.

    Elementwise work, the Adam steps and polyak are not counted (memory-bound).
    The count equals ``torch.utils.flop_counter.FlopCounterMode``'s for both the
    baseline and the functional update (``tests/test_benchmarks_smoke.py``).
    """

    def lin(i: int, o: int) -> float:
        return 2.0 * batch * i * o

    c = (obs + act, *hidden, 1)
    p = (obs, *hidden, 2 * act)
    fq = sum(lin(c[i], c[i + 1]) for i in range(len(c) - 1))
    fpi = sum(lin(p[i], p[i + 1]) for i in range(len(p) - 1))
    critic = critics * (3 * fq - lin(c[0], c[1]))
    target = fpi + subset * fq
    actor = 3 * fpi - lin(p[0], p[1]) + 2 * critics * fq
    per_update = critic + target + actor / utd
    return {
        "per_critic_update": per_update,
        "critic_fwd_bwd": critic,
        "target": target,
        "actor_per_env_step": actor,
        "note": "matmul FLOPs only; see redq_flops() in benchmarks/update_bench.py",
    }


def _redq_problem(args: argparse.Namespace, device: torch.device, algo: str = "redq"):
    import gymnasium as gym
    import numpy as np
    from tensordict import TensorDict

    import importlib

    redq = importlib.import_module(f"rlfunc.algos.{algo}")  # redq, or rlpd (same update, RLPD's Config)

    obs_dim, act_dim = args.obs_dim, args.act_dim
    G, B = args.utd, args.batch
    obs_space = gym.spaces.Box(-np.inf, np.inf, (obs_dim,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)
    gen = torch.Generator().manual_seed(0)
    batch = TensorDict(
        {
            "obs": torch.randn(G, B, obs_dim, generator=gen),
            "action": torch.rand(G, B, act_dim, generator=gen) * 2 - 1,
            "reward": torch.randn(G, B, generator=gen),
            "next_obs": torch.randn(G, B, obs_dim, generator=gen),
            "terminated": (torch.rand(G, B, generator=gen) < 0.01).float(),
        },
        batch_size=[G, B],
    ).to(device)

    def config(mode: str):
        return redq.Config(
            num_critics=args.critics,
            subset_size=min(args.subset, args.critics),
            updates_per_step=G,
            hidden_sizes=tuple(args.hidden),
            batch_size=B,
            ensemble_mode=mode,
        )

    noise = redq.draw_noise(config("loop"), G, B, act_dim, generator=gen).to(device)
    return redq, config, obs_space, act_space, batch, noise


def update_redq(args: argparse.Namespace, algo: str = "redq") -> dict:
    """REDQ (or, with ``algo="rlpd"``, RLPD: LayerNorm critics and RLPD's rules) vs its imperative baseline."""
    if algo == "rlpd":
        from benchmarks.baselines.rlpd import ImperativeRLPD as ImperativeREDQ
    else:
        from benchmarks.baselines.redq import ImperativeREDQ

    device = torch.device(args.device)
    redq, config, obs_space, act_space, batch, noise = _redq_problem(args, device, algo)
    G = args.utd
    flops = redq_flops(args.obs_dim, args.act_dim, tuple(args.hidden), args.critics, min(args.subset, args.critics), args.batch, G)

    # Every variant starts from the same initial parameters and threads its own state.
    state0 = redq.init(config("loop"), obs_space, act_space, seed=0, device=device)
    runners: dict[str, Callable[[], None]] = {}
    notes: dict[str, dict] = {}

    agent = ImperativeREDQ.from_functional_state(state0)
    runners["imperative"] = lambda: agent.update(batch, noise)
    notes["imperative"] = {"impl": f"benchmarks/baselines/{algo}.py: N nn.Modules, N+2 torch.optim.Adam, Python loops"}

    def functional_runner(fn, mode: str):
        holder = {"state": redq.init(config(mode), obs_space, act_space, seed=0, device=device)}

        def step() -> None:
            holder["state"], _ = fn(holder["state"], batch, noise)

        return step

    eager_modes = ("loop", "bmm", "vmap")
    for mode in eager_modes:
        runners[f"functional-eager-{mode}"] = functional_runner(redq.update, mode)
        notes[f"functional-eager-{mode}"] = {"ensemble_mode": mode}

    threads_list = list(args.threads)
    torch.set_num_threads(threads_list[0])

    # Warm up every eager variant and time a couple of steps to size the windows
    # and to pick the ensemble mode the compiled variant uses.
    warm = warm_up(runners, args.warmup, device, unit="env step")

    # The whole update recorded as one CUDA graph (state at fixed addresses); unavailable on CPU.
    graph_mode = min(eager_modes, key=lambda m: warm[f"functional-eager-{m}"])
    graph_name, graph_info = add_cuda_graph_variant(
        runners, notes, warm,
        redq.update if args.no_compile else redq.make_update(args.compile_mode),
        redq.init(config(graph_mode), obs_space, act_space, seed=0, device=device),
        (batch, noise),
        device,
        compiled=not args.no_compile,
        ensemble_mode=graph_mode,
    )

    # torch.compile: dynamo guards on the thread count (inductor bakes it into
    # its C++ kernels), so the update is compiled once per thread count; each
    # compile is timed separately and excluded from the throughput.
    compile_info: dict | None = None
    compiled_step: Callable[[], None] | None = None
    if not args.no_compile:
        best_mode = min(eager_modes, key=lambda m: warm[f"functional-eager-{m}"])
        compiled_step = functional_runner(redq.make_update(args.compile_mode), best_mode)
        compile_info = {
            "ensemble_mode": best_mode,
            "chosen_because": "fastest eager ensemble mode in the warm-up",
            "compile_s": {},
            "error": None,
            "note": "recompiled per thread count (dynamo guards on num_threads)",
            "compile_mode": args.compile_mode,
        }

    def compile_at(threads: int) -> None:
        """Compile (or recompile) at the current thread count; record time or error."""
        nonlocal compiled_step
        assert compile_info is not None and compiled_step is not None
        print(
            f"  compiling redq.update (mode={args.compile_mode}, fullgraph=True, ensemble_mode={compile_info['ensemble_mode']}, "
            f"G={G}, threads={threads}); this can take minutes on a 2-core CPU ...",
            flush=True,
        )
        t0 = time.perf_counter()
        try:
            compiled_step()  # compiles and runs one env step
            sync(device)
            first = time.perf_counter() - t0
            second = float("inf")
            for _ in range(2):
                t1 = time.perf_counter()
                compiled_step()
                sync(device)
                second = min(second, time.perf_counter() - t1)
            compile_s = max(first - second, 0.0)
            compile_info["compile_s"][str(threads)] = compile_s
            warm["functional-compiled"] = second
            runners["functional-compiled"] = compiled_step
            print(f"  compiled in {compile_s:.1f} s; {second * 1e3:.1f} ms/env step", flush=True)
            if compile_s > 300:
                compile_info["slow"] = (
                    f"compiling the {G}-step unrolled update took {compile_s:.0f} s here (threads={threads}); "
                    "measured anyway, compile time excluded from throughput"
                )
        except Exception as exc:  # noqa: BLE001 -- recorded in the results, the rest still runs
            compile_info["compile_s"][str(threads)] = time.perf_counter() - t0
            compile_info["error"] = error_text(exc)
            runners.pop("functional-compiled", None)
            compiled_step = None
            print(f"  compile FAILED: {compile_info['error']}", flush=True)

    rows: list[dict] = []
    ceilings: dict[int, float] = {}
    for threads in threads_list:
        torch.set_num_threads(threads)
        if compiled_step is not None:
            compile_at(threads)
        for fn in runners.values():  # settle at this thread count
            fn()
        # Windows of about --window-s seconds each (at least one env step).
        steps = window_steps(warm, runners, args.window_s)
        ceilings[threads] = matmul_ceiling(device, windows=2 if args.quick else 3, min_time=0.1 if args.quick else 0.3)
        print(f"threads={threads}: matmul ceiling {ceilings[threads]:.1f} GFLOP/s; timing {len(runners)} variants "
              f"x {args.repeats} interleaved windows ...", flush=True)
        graphs_before = dynamo_counts()[0]
        times = time_interleaved(runners, repeats=args.repeats, steps=steps, device=device)
        recompiled = dynamo_counts()[0] != graphs_before
        base = statistics.median(times["imperative"])
        for name, ts in times.items():
            med = statistics.median(ts)
            ups = G / med
            row = {
                "variant": name,
                "updates_per_s": ups,
                "ratio_vs_imperative": base / med,
                "flop_efficiency": flops["per_critic_update"] * ups / (ceilings[threads] * 1e9),
                "threads": threads,
                "device": device.type,
                "torch": torch.__version__,
                "ms_per_env_step": med * 1e3,
                "ms_per_env_step_windows": [t * 1e3 for t in ts],
                "env_steps_per_window": steps[name],
                "matmul_gflops_ceiling": ceilings[threads],
            }
            row.update(notes.get(name, {}))
            if name == "functional-compiled":
                row["ensemble_mode"] = compile_info["ensemble_mode"]
                row["compile_mode"] = compile_info["compile_mode"]
                row["compile_s"] = compile_info["compile_s"].get(str(threads))
                row["recompiled_during_timing"] = recompiled
            rows.append(row)
        if graph_name not in runners:
            rows.append(unavailable_row(graph_name, graph_info["unavailable"], threads, device,
                                        ensemble_mode=graph_mode))
        if compile_info is not None and compile_info["error"]:
            rows.append(empty_row("functional-compiled", threads, device,
                                  ensemble_mode=compile_info["ensemble_mode"], error=compile_info["error"]))

    return {
        "benchmark": "update",
        "algo": algo,
        "problem": {
            "critics": args.critics,
            "subset": min(args.subset, args.critics),
            "utd": G,
            "batch": args.batch,
            "hidden": list(args.hidden),
            "obs_dim": args.obs_dim,
            "act_dim": args.act_dim,
            "work_per_env_step": f"{G} x (target + N-critic fwd/bwd + Adam + polyak), 1 x (actor + temperature)",
            "data": "pre-sampled batch [G, B] and noise (rlfunc.algos.redq.draw_noise); no replay sampling",
        },
        "flops": flops,
        "matmul_gflops_ceiling": {str(k): v for k, v in ceilings.items()},
        "compile": compile_info,
        "timing": {"repeats": args.repeats, "window_s": args.window_s, "statistic": "median of windows", "interleaved": True},
        "variants": rows,
    }


UPDATE_ALGOS: dict[str, Callable[[argparse.Namespace], dict]] = {
    "redq": update_redq,
    "rlpd": lambda args: update_redq(args, algo="rlpd"),  # baseline: benchmarks/baselines/rlpd.py
}
"""``update --algo NAME`` -> ``fn(args) -> result dict``; DRQN below, DrQ-v2 and R2D2 added by :func:`register`
and ``benchmarks/r2d2_bench.py``."""


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", choices=[*sorted(UPDATE_ALGOS), "ALL"], default="redq",
                   help="one algorithm, or ALL: every one in turn, each to its own JSON")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="torch intra-op thread counts to measure")
    p.add_argument("--repeats", type=int, default=None, help="timed windows per variant (default 7; 2 with --quick)")
    p.add_argument("--window-s", type=float, default=None, help="target seconds per timed window (default 1.0; 0.05 --quick)")
    p.add_argument("--warmup", type=int, default=None, help="timed warm-up env steps per variant (default 2; 1 --quick)")
    p.add_argument("--quick", action="store_true", help="few short windows: a smoke test, not a measurement")
    p.add_argument("--no-compile", action="store_true", help="skip the torch.compile variant")
    p.add_argument("--compile-mode", choices=("step", "full"), default="step",
                   help="REDQ: compile per critic/policy step (default) or the whole G-step update (minutes to compile)")
    p.add_argument("--out", type=Path, default=None,
                   help="JSON path (default benchmarks/results/update_<algo>.json); with --algo ALL a directory")
    p.add_argument("--note", default=None, help="free text stored in the JSON (e.g. 'shared machine')")
    # problem size overrides (defaults: REDQ paper, HalfCheetah shapes)
    p.add_argument("--critics", type=int, default=10)
    p.add_argument("--subset", type=int, default=2)
    p.add_argument("--utd", type=int, default=20, help="critic updates per env step (G)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--hidden", type=int, nargs="+", default=[256, 256])
    p.add_argument("--obs-dim", type=int, default=17)
    p.add_argument("--act-dim", type=int, default=6)
    # DrQ-v2 problem size (defaults: the paper's; --batch and --act-dim above are shared)
    p.add_argument("--image-size", type=int, default=84, help="DrQ-v2: square image side (9 channels)")
    p.add_argument("--drqv2-hidden", type=int, default=1024, help="DrQ-v2: actor/critic head width")
    p.add_argument("--env-steps", type=int, default=300, help="DrQ-v2: agent steps timed per pixel env")
    p.add_argument("--no-cudnn-benchmark", action="store_true",
                   help="DrQ-v2 on CUDA: leave torch.backends.cudnn.benchmark off (the official train.py turns it on)")
    # DRQN problem size (update --algo drqn)
    p.add_argument("--windows", type=int, nargs="+", default=[10, 40], help="DRQN: window lengths T to measure")
    p.add_argument("--lstm-size", type=int, default=128, help="DRQN: LSTM units")
    p.add_argument("--num-actions", type=int, default=2, help="DRQN: discrete actions")


def run_update(args: argparse.Namespace) -> int:
    from rlfunc.runtime.perf import tune_allocator

    allocator_tuned = tune_allocator()
    if args.repeats is None:
        args.repeats = 2 if args.quick else 7
    if args.window_s is None:
        args.window_s = 0.05 if args.quick else 1.0
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: no CUDA device is available here.", file=sys.stderr)
        return 2
    if args.algo != "ALL":
        return _run_update_one(args, allocator_tuned)
    out_dir = args.out  # with ALL: a directory for the update_<algo>.json files (default benchmarks/results)
    if out_dir is not None and out_dir.suffix == ".json":
        print("--out with --algo ALL is a directory (each algo writes update_<algo>.json there).", file=sys.stderr)
        return 2
    failed = []
    for name in sorted(UPDATE_ALGOS):
        print(f"\n=== update --algo {name} ===", flush=True)
        out = None if out_dir is None else out_dir / f"update_{name}.json"
        try:
            rc = _run_update_one(argparse.Namespace(**{**vars(args), "algo": name, "out": out}), allocator_tuned)
        except Exception as exc:  # noqa: BLE001 -- one algo's failure must not hide the others' results
            print(f"update --algo {name} FAILED: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            rc = 1
        if rc != 0:
            failed.append(name)
    print(f"\nupdate --algo ALL: {len(UPDATE_ALGOS) - len(failed)} of {len(UPDATE_ALGOS)} algos measured"
          + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


def _run_update_one(args: argparse.Namespace, allocator_tuned: bool) -> int:
    device = torch.device(args.device)
    torch.set_num_threads(args.threads[0])
    print(f"update --algo {args.algo} on {cpu_model()} ({os.cpu_count()} cores), device={args.device}, "
          f"threads={args.threads}, allocator_tuned={allocator_tuned}", flush=True)
    result = UPDATE_ALGOS[args.algo](args)
    result["machine"] = machine_info(device, allocator_tuned)
    if args.quick:
        result["quick"] = True
    if args.note:
        result["note"] = args.note
    out = args.out or RESULTS_DIR / f"update_{args.algo}.json"
    ordered = {"machine": result.pop("machine"), "variants": result.pop("variants"), **result}
    write_json(out, ordered)
    print()
    print_table(
        ordered["variants"],
        [
            ("threads", "threads", "d"),
            ("variant", "variant", ""),
            ("ms/env step", "ms_per_env_step", ".1f"),
            ("critic upd/s", "updates_per_s", ".1f"),
            ("vs imperative", "ratio_vs_imperative", ".2f"),
            ("FLOP eff.", "flop_efficiency", ".1%"),
        ],
    )
    comp = ordered.get("compile")
    if comp:
        times_ = ", ".join(f"{t} thread(s): {c:.0f} s" for t, c in comp["compile_s"].items())
        if comp.get("error"):
            print(f"\nfunctional-compiled: compile FAILED ({times_}): {comp['error']}")
        else:
            print(f"\nfunctional-compiled: ensemble_mode={comp['ensemble_mode']}, compile time {times_} (excluded)")
    print(f"\nwrote {out}")
    return 0


# --------------------------------------------------------------------------- update: DRQN


def drqn_flops(obs: int, encoder: tuple[int, ...], lstm: int, actions: int, batch: int, window: int) -> dict:
    """Analytic matmul FLOPs of one DRQN update on a ``[T, B]`` window batch.

    One network step on B rows: ``Fs = sum lin(encoder) + lin(E, 4H) + lin(H, 4H)
    + lin(H, A)`` with ``lin(i, o) = 2 B i o`` and ``E`` the last encoder width.
    Online: T forward steps and T backward steps (weight grads ``Fs`` + input
    grads ``Fs - lin(O, E1)``: no gradient to the observation); target: T + 1
    forward steps (``o_0, next_obs_0 .. next_obs_{T-1}``). Elementwise LSTM
    gate math and Adam are not counted.
    """

    def lin(i: int, o: int) -> float:
        return 2.0 * batch * i * o

    enc = (obs, *encoder)
    e = enc[-1]
    f_enc = sum(lin(enc[i], enc[i + 1]) for i in range(len(enc) - 1))
    fs = f_enc + lin(e, 4 * lstm) + lin(lstm, 4 * lstm) + lin(lstm, actions)
    first = lin(enc[0], enc[1]) if len(enc) > 1 else lin(obs, 4 * lstm)
    online = window * (3 * fs - first)
    target = (window + 1) * fs
    return {
        "per_update": online + target,
        "online_fwd_bwd": online,
        "target": target,
        "note": "matmul FLOPs only; see drqn_flops() in benchmarks/update_bench.py",
    }


def drqn_batch(T: int, B: int, obs_dim: int, num_actions: int, seed: int = 0):
    """A synthetic time-major ``[T, B]`` DRQN window batch (seeded) whose windows end at random
    lengths >= T/2, so padded tails and the mask are exercised as in real replay."""
    from tensordict import TensorDict

    gen = torch.Generator().manual_seed(seed)
    valid = torch.randint(T // 2, T + 1, (B,), generator=gen)  # some windows end their episode: padding
    mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
    return TensorDict(
        {
            "obs": torch.randn(T, B, obs_dim, generator=gen),
            "action": torch.randint(0, num_actions, (T, B), generator=gen),
            "reward": torch.randn(T, B, generator=gen),
            "next_obs": torch.randn(T, B, obs_dim, generator=gen),
            "terminated": torch.zeros(T, B, dtype=torch.bool),
            "mask": mask,
        },
        batch_size=[T, B],
    )


def update_drqn(args: argparse.Namespace) -> dict:
    """DRQN sequence updates/s: imperative (nn.LSTM + torch.optim) vs functional eager vs compiled.

    Problem (the DRQN issue): batch 32 windows, window lengths ``--windows``
    (10 and 40), LSTM ``--lstm-size`` (128) after a 64-unit ReLU encoder,
    observation 4, 2 actions. The REDQ size options (``--batch``, ``--obs-dim``,
    ...) do not apply. One row per (window, threads, variant).
    """
    import gymnasium as gym
    import numpy as np

    from benchmarks.baselines.drqn import ImperativeDRQN
    from rlfunc.algos import drqn

    device = torch.device(args.device)
    B, O, A, H = 32, 4, args.num_actions, args.lstm_size
    obs_space = gym.spaces.Box(-np.inf, np.inf, (O,), np.float32)
    act_space = gym.spaces.Discrete(A)
    threads_list = list(args.threads)
    rows: list[dict] = []
    compile_s: dict[str, float] = {}  # "T=<window>, <threads>" -> seconds (dynamo guards on the thread count)
    compile_errors: list[str] = []
    flops_by_window: dict[str, dict] = {}
    ceilings: dict[int, float] = {}
    for T in args.windows:
        config = drqn.Config(lstm_size=H, sequence_length=T, batch_size=B)
        flops = drqn_flops(O, tuple(config.encoder_sizes), H, A, B, T)
        flops_by_window[str(T)] = flops
        batch = drqn_batch(T, B, O, A).to(device)
        state0 = drqn.init(config, obs_space, act_space, seed=0, device=device)
        agent = ImperativeDRQN.from_functional(state0, config)
        agent.q.to(device)
        agent.target.to(device)
        runners: dict[str, Callable[[], None]] = {"imperative": lambda: agent.update(batch)}
        notes: dict[str, dict] = {
            "imperative": {"impl": "benchmarks/baselines/drqn.py: nn.Linear + nn.LSTM modules, torch.optim.Adam"}
        }

        def functional_runner(fn):
            holder = {"state": drqn.init(config, obs_space, act_space, seed=0, device=device)}

            def step() -> None:
                holder["state"], _ = fn(holder["state"], batch)

            return step

        runners["functional-eager"] = functional_runner(drqn.update)
        notes["functional-eager"] = {"impl": "rlfunc.algos.drqn.update (functional LSTM, torch.func.grad)"}
        torch.set_num_threads(threads_list[0])
        warm = warm_up(runners, args.warmup, device, unit="update", prefix=f"T={T} ")
        if not args.no_compile:
            print(f"  T={T}: compiling drqn.update (fullgraph=True, {T}-step unrolled LSTM) ...", flush=True)
            step = functional_runner(torch.compile(drqn.update, fullgraph=True))
            info: dict = {"compile_s": None, "error": None}
            t0 = time.perf_counter()
            try:
                step()
                sync(device)
                info["compile_s"] = time.perf_counter() - t0
                t1 = time.perf_counter()
                step()
                sync(device)
                second = time.perf_counter() - t1
                info["compile_s"] = max(info["compile_s"] - second, 0.0)
                warm["functional-compiled"] = second
                runners["functional-compiled"] = step
                print(f"  compiled in {info['compile_s']:.1f} s; {second * 1e3:.1f} ms/update", flush=True)
            except Exception as exc:  # noqa: BLE001 -- recorded, the rest still runs
                info["compile_s"] = time.perf_counter() - t0
                info["error"] = error_text(exc)
                print(f"  compile FAILED after {info['compile_s']:.1f} s: {info['error']}", flush=True)
            if info["compile_s"] is not None:
                compile_s[f"T={T}, {threads_list[0]}"] = info["compile_s"]
            if info["error"]:
                compile_errors.append(f"T={T}: {info['error']}")
            notes["functional-compiled"] = {k: v for k, v in info.items() if v is not None}
        graph_name, graph_info = add_cuda_graph_variant(
            runners, notes, warm,
            drqn.update if args.no_compile else torch.compile(drqn.update, fullgraph=True),
            drqn.init(config, obs_space, act_space, seed=0, device=device),
            (batch,),
            device,
            compiled=not args.no_compile,
        )
        steps = window_steps(warm, runners, args.window_s)
        for threads in threads_list:
            torch.set_num_threads(threads)
            for name, fn in runners.items():  # settle; dynamo recompiles the compiled update per thread count
                t0 = time.perf_counter()
                fn()
                sync(device)
                if name == "functional-compiled" and threads != threads_list[0]:
                    compile_s[f"T={T}, {threads}"] = max(time.perf_counter() - t0 - warm[name], 0.0)
            if threads not in ceilings:
                ceilings[threads] = matmul_ceiling(
                    device, windows=2 if args.quick else 3, min_time=0.1 if args.quick else 0.3
                )
            print(f"T={T} threads={threads}: timing {len(runners)} variants x {args.repeats} interleaved windows ...",
                  flush=True)
            times = time_interleaved(runners, repeats=args.repeats, steps=steps, device=device)
            base = statistics.median(times["imperative"])
            for name, ts in times.items():
                med = statistics.median(ts)
                row = {
                    "variant": name,
                    "window": T,
                    "updates_per_s": 1.0 / med,
                    "ratio_vs_imperative": base / med,
                    "flop_efficiency": flops["per_update"] / med / (ceilings[threads] * 1e9),
                    "threads": threads,
                    "device": device.type,
                    "torch": torch.__version__,
                    "ms_per_env_step": med * 1e3,
                    "ms_per_env_step_windows": [t * 1e3 for t in ts],
                    "env_steps_per_window": steps[name],
                    "matmul_gflops_ceiling": ceilings[threads],
                }
                row.update({k: v for k, v in notes.get(name, {}).items() if v is not None})
                rows.append(row)
            if graph_name not in runners:
                rows.append(unavailable_row(graph_name, graph_info["unavailable"], threads, device, window=T))
    return {
        "benchmark": "update",
        "algo": "drqn",
        "problem": {
            "batch": B,
            "windows": list(args.windows),
            "lstm_size": H,
            "encoder_sizes": [64],
            "obs_dim": O,
            "num_actions": A,
            "work_per_env_step": "1 DRQN update: online unroll fwd/bwd over T steps, target unroll over T+1, Adam, periodic copy",
            "data": "pre-sampled [T, B] window batch with padded tails; no replay sampling",
            "ms_per_env_step": "milliseconds per update (one update = one unit of work here)",
        },
        "flops": flops_by_window,
        "matmul_gflops_ceiling": {str(k): v for k, v in ceilings.items()},
        "compile": None
        if args.no_compile
        else {
            "compile_s": compile_s,
            "error": "; ".join(compile_errors) or None,
            "ensemble_mode": "n/a (one network)",
            "note": "one compile per window length and thread count; times excluded from throughput",
        },
        "timing": {"repeats": args.repeats, "window_s": args.window_s, "statistic": "median of windows", "interleaved": True},
        "variants": rows,
    }


UPDATE_ALGOS["drqn"] = update_drqn


# --------------------------------------------------------------------------- registration


def register(run) -> None:
    """Add ``update`` to ``benchmarks/run.py`` (``run`` is that module), with DrQ-v2's entries
    (``update --algo drqv2`` and ``reference-returns``, ``benchmarks/drqv2_bench.py``)."""
    from benchmarks import drqv2_bench

    run.subcommand("update", "learner throughput: functional update vs the imperative baseline", configure)(run_update)
    UPDATE_ALGOS["drqv2"] = lambda args: drqv2_bench.update_drqv2(args, run)
    drqv2_bench.register(run)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py update --algo redq [--quick]")


