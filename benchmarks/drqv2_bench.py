"""DrQ-v2 benchmarks, run through ``benchmarks/run.py``:

    python benchmarks/run.py update --algo drqv2 [--batch 256] [--image-size 84] [--drqv2-hidden 1024]
    python benchmarks/run.py learn --algo drqv2 --seeds 3 [--set key=value ...] [--jobs 3]
    python benchmarks/run.py reference-returns [--tasks dmc/cartpole_balance-v0 ...]

``update`` times one DrQ-v2 update (batch 256, 9x84x84 uint8 observations, the paper's
network sizes) for the imperative baseline (``benchmarks/baselines/drqv2.py``), the functional
update eagerly and compiled (``torch.compile(fullgraph=True)``), interleaved in one process.
The JSON has the same fields as REDQ's (``updates_per_s``, ``ratio_vs_imperative``,
``flop_efficiency``, ``ms_per_env_step`` = learning time per *agent* step, i.e. per update
divided by ``update_every = 2``) plus ``ms_per_update``, and two more sections:

* ``env``: frames/s of env stepping + rendering (DMC cartpole_balance at 84x84 with the
  paper's rendering and with ``fast_render``; gymnasium Pendulum through the ``pixels``
  wrapper). One agent step = ``action_repeat`` (2) frames, rendered once;
* ``replay``: :class:`rlfunc.replay.pixels.PixelReplay` bytes per stored transition and
  samples/s at batch 256 (frame stacks and 3-step returns assembled at sample time).

``learn --algo drqv2`` is run.py's generic ``learn`` over ``configs/drqv2/cartpole_balance.yaml``
(``LEARN_ALGOS["drqv2"]``); its steps are agent steps (x 2 = frames). :data:`PAPER` holds the
paper's numbers to compare with.

``reference-returns`` measures the returns of the zero action and of uniform random actions
on each DMC task (``benchmarks/results/reference_drqv2.json``): the floor a learning curve
has to clear before it shows learning.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]

PAPER = {
    "dmc/cartpole_balance-v0": {"frames": 100_000, "return": 987, "std": 13},
    "dmc/cartpole_swingup-v0": {"frames": 200_000, "return": 807, "std": None},
    "dmc/walker_walk-v0": {"frames": 1_000_000, "return": 950, "std": None},
}
"""Yarats et al. 2021 (FIDELITY.md's DrQ-v2 table): eval return at the given env frames."""


# --------------------------------------------------------------------------- update


def _problem(args: argparse.Namespace, device: torch.device):
    import gymnasium as gym
    from tensordict import TensorDict

    from rlfunc.algos import drqv2

    size, b, act_dim = args.image_size, args.batch, args.act_dim
    config = drqv2.Config(batch_size=b, hidden_dim=args.drqv2_hidden)
    obs_space = gym.spaces.Box(0, 255, (3 * config.frame_stack, size, size), np.uint8)
    act_space = gym.spaces.Box(-1.0, 1.0, (act_dim,), np.float32)
    gen = torch.Generator().manual_seed(0)
    shape = (b, 3 * config.frame_stack, size, size)
    batch = TensorDict(
        {
            "obs": torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8),
            "action": torch.rand(b, act_dim, generator=gen) * 2 - 1,
            "reward": torch.rand(b, generator=gen) * 3,
            "discount": torch.full((b,), config.gamma**config.nstep),
            "next_obs": torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8),
        },
        batch_size=[b],
    ).to(device)
    noise = drqv2.draw_noise(config, b, act_dim, generator=gen).to(device)
    return drqv2, config, obs_space, act_space, batch, noise


def count_flops(fn: Callable[[], Any]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def env_throughput(steps: int) -> dict:
    """Agent steps/s and frames/s (env stepping + rendering) of the pixel envs."""
    from rlfunc.envs import build_wrappers, make_env

    out: dict[str, Any] = {}
    cases: list[tuple[str, Callable[[], Any], int]] = []
    try:
        import dm_control  # noqa: F401

        for name, kwargs in (("default_render", {}), ("fast_render", {"fast_render": True})):
            cases.append((
                f"dmc/cartpole_balance-v0 {name}",
                lambda kw=kwargs: make_env("dmc/cartpole_balance-v0", kwargs={"action_repeat": 2, "size": 84, **kw}),
                2,
            ))
    except ImportError:
        out["dmc"] = 'skipped: dm-control not installed (pip install -e ".[dmc]")'
    cases.append((
        "Pendulum-v1 pixels",
        lambda: make_env(
            "Pendulum-v1", kwargs={"render_mode": "rgb_array"},
            wrappers=build_wrappers([{"pixels": {"size": 84, "frame_stack": 3, "action_repeat": 2}}]),
        ),
        2,
    ))
    for name, make, repeat in cases:
        try:
            env = make()
        except Exception as exc:  # e.g. gymnasium's classic-control renderer needs pygame
            out[name] = {"unavailable": f"{type(exc).__name__}: {exc}"}
            print(f"  env {name}: unavailable ({type(exc).__name__}: {exc})", flush=True)
            continue
        env.reset(seed=0)
        rng = np.random.default_rng(0)
        for _ in range(3):
            env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
        t0 = time.perf_counter()
        for _ in range(steps):
            _, _, term, trunc, _ = env.step(rng.uniform(-1, 1, env.action_space.shape).astype(np.float32))
            if term or trunc:
                env.reset()
        dt = time.perf_counter() - t0
        env.close()
        out[name] = {
            "agent_steps_per_s": steps / dt,
            "frames_per_s": steps * repeat / dt,
            "renders_per_s": steps / dt,
            "action_repeat": repeat,
            "image": "84x84 RGB, 3 stacked",
            "steps_timed": steps,
        }
        print(f"  env {name}: {steps * repeat / dt:.0f} frames/s ({steps / dt:.0f} agent steps/s)", flush=True)
    return out


def replay_throughput(batch: int, transitions: int, repeats: int, device: torch.device | str = "cpu",
                      sync: Callable[[torch.device], None] = lambda device: None) -> dict:
    """PixelReplay memory per transition and sampling speed (84x84, 3-stack, n = 3), storage on ``device``
    (``sync``: run.py's ``sync``, so CUDA timings read the clock after the device finished)."""
    from rlfunc.replay.pixels import PixelReplay

    ep_len = 500
    episodes = max(1, transitions // ep_len)
    capacity = episodes * (ep_len + 1)
    replay = PixelReplay(capacity, (9, 84, 84), 6, frame_stack=3, nstep=3, gamma=0.99, device=device)
    device = torch.device(device)
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (9, 84, 84), dtype=np.uint8)
    t0 = time.perf_counter()
    for _ in range(episodes):
        obs = base
        for t in range(ep_len):
            nxt = np.roll(base, t + 1, axis=2)
            replay.add(obs, np.zeros(6, np.float32), 1.0, nxt, False, t == ep_len - 1)
            obs = nxt
    add_s = time.perf_counter() - t0
    stored = episodes * ep_len
    gen = torch.Generator(device=device).manual_seed(0)
    replay.sample(batch, generator=gen)
    times = []
    for _ in range(repeats):
        sync(device)
        t0 = time.perf_counter()
        k = 0
        while time.perf_counter() - t0 < 0.5 or k < 3:
            replay.sample(batch, generator=gen)
            k += 1
        sync(device)
        times.append((time.perf_counter() - t0) / k)
    med = statistics.median(times)
    frame = 3 * 84 * 84
    stacked_naive = 2 * 9 * 84 * 84  # obs and next_obs stacks per transition, as a flat replay would keep them
    return {
        "transitions": stored,
        "frames_stored": replay.frames_stored,
        "bytes_total": replay.nbytes(),
        "bytes_per_transition": replay.nbytes() / stored,
        "frame_bytes": frame,
        "bytes_per_transition_stacked_obs_and_next_obs": stacked_naive,
        "batch": batch,
        "samples_per_s": batch / med,
        "batches_per_s": 1.0 / med,
        "ms_per_batch": med * 1e3,
        "ms_per_batch_windows": [t * 1e3 for t in times],
        "adds_per_s": stored / add_s,
        "episode_length": ep_len,
        "device": device.type,
    }



def update_drqv2(args: argparse.Namespace, R) -> dict:
    """``benchmarks/run.py update --algo drqv2`` (``R`` is the run.py module, for its helpers)."""
    from benchmarks.baselines.drqv2 import ImperativeDrQV2

    device = torch.device(args.device)
    # As the official train.py and rlfunc's PixelLearner on CUDA: cuDNN picks the fastest conv algorithms.
    cudnn_benchmark = device.type == "cuda" and not getattr(args, "no_cudnn_benchmark", False)
    torch.backends.cudnn.benchmark = cudnn_benchmark
    drqv2, config, obs_space, act_space, batch, noise = _problem(args, device)
    state0 = drqv2.init(config, obs_space, act_space, seed=0, device=device)
    state0["agent_step"] = torch.tensor(50_000, device=device)
    step = 50_000
    runners: dict[str, Callable[[], None]] = {}
    notes: dict[str, dict] = {}

    agent = ImperativeDrQV2.from_functional_state(state0)
    agent.record_grads = False  # the parity tests' gradient copies are no part of the official update
    runners["imperative"] = lambda: agent.update(batch, noise, step)
    notes["imperative"] = {"impl": "benchmarks/baselines/drqv2.py: official DrQV2Agent structure, 3 torch.optim.Adam"}

    def functional_runner(fn):
        holder = {"state": state0.clone()}
        holder["state"].set_non_tensor("config", config)

        def run() -> None:
            holder["state"], _ = fn(holder["state"], batch, noise)

        return run

    runners["functional-eager"] = functional_runner(drqv2.update)
    flops = count_flops(lambda: drqv2.update(state0, batch, noise))
    flops_base = count_flops(lambda: ImperativeDrQV2.from_functional_state(state0).update(batch, noise, step))
    print(f"  FLOPs per update: functional {flops / 1e9:.1f} G, imperative {flops_base / 1e9:.1f} G", flush=True)

    threads_list = list(args.threads)
    torch.set_num_threads(threads_list[0])
    warm = R.warm_up(runners, args.warmup, device, unit="update")

    compile_info: dict | None = None
    compiled = None
    if not args.no_compile:
        compiled = functional_runner(torch.compile(drqv2.update, fullgraph=True))
        compile_info = {"fullgraph": True, "compile_s": {}, "error": None,
                        "ensemble_mode": "loop (the twin Q heads; run.py's summary line prints this field)",
                        "note": "recompiled per thread count (dynamo guards on num_threads)"}

    graph_state = state0.clone()
    graph_state.set_non_tensor("config", config)
    graph_name, graph_info = R.add_cuda_graph_variant(
        runners, notes, warm,
        drqv2.update if args.no_compile else torch.compile(drqv2.update, fullgraph=True),
        graph_state,
        (batch, noise),
        device,
        compiled=not args.no_compile,
    )

    rows: list[dict] = []
    ceilings: dict[int, float] = {}
    for threads in threads_list:
        torch.set_num_threads(threads)
        if compiled is not None:
            print(f"  compiling drqv2.update (fullgraph=True, threads={threads}) ...", flush=True)
            t0 = time.perf_counter()
            try:
                compiled()
                R.sync(device)
                first = time.perf_counter() - t0
                t1 = time.perf_counter()
                compiled()
                R.sync(device)
                second = time.perf_counter() - t1
                compile_info["compile_s"][str(threads)] = max(first - second, 0.0)
                warm["functional-compiled"] = second
                runners["functional-compiled"] = compiled
                print(f"  compiled in {first - second:.0f} s; {second * 1e3:.0f} ms/update", flush=True)
            except Exception as exc:  # noqa: BLE001 -- recorded in the JSON
                compile_info["error"] = R.error_text(exc)
                runners.pop("functional-compiled", None)
                compiled = None
                print(f"  compile FAILED: {compile_info['error']}", flush=True)
        for fn in runners.values():
            fn()
        steps = R.window_steps(warm, runners, args.window_s)
        ceilings[threads] = R.matmul_ceiling(device, windows=2 if args.quick else 3, min_time=0.1 if args.quick else 0.3)
        print(f"threads={threads}: matmul ceiling {ceilings[threads]:.1f} GFLOP/s; timing {len(runners)} variants "
              f"x {args.repeats} interleaved windows ...", flush=True)
        times = R.time_interleaved(runners, repeats=args.repeats, steps=steps, device=device)
        base = statistics.median(times["imperative"])
        for name, ts in times.items():
            med = statistics.median(ts)
            row = {
                "variant": name,
                "updates_per_s": 1.0 / med,
                "ratio_vs_imperative": base / med,
                "flop_efficiency": flops / med / (ceilings[threads] * 1e9),
                "threads": threads,
                "device": device.type,
                "torch": torch.__version__,
                "ms_per_env_step": med * 1e3 / config.update_every,
                "ms_per_update": med * 1e3,
                "ms_per_update_windows": [t * 1e3 for t in ts],
                "updates_per_window": steps[name],
                "matmul_gflops_ceiling": ceilings[threads],
            }
            row.update(notes.get(name, {}))
            if name == "functional-compiled":
                row["compile_s"] = compile_info["compile_s"].get(str(threads))
            rows.append(row)
        if graph_name not in runners:
            rows.append(R.unavailable_row(graph_name, graph_info["unavailable"], threads, device))

    env_steps = 30 if args.quick else args.env_steps
    print("env stepping + rendering ...", flush=True)
    env = env_throughput(env_steps)
    print("pixel replay ...", flush=True)
    replay = replay_throughput(256, 1000 if args.quick else 20_000, 2 if args.quick else 5, device=device,
                               sync=R.sync)
    print(f"  replay: {replay['bytes_per_transition']:.0f} bytes/transition (one frame = {replay['frame_bytes']}), "
          f"{replay['samples_per_s']:.0f} samples/s at batch 256", flush=True)
    torch.set_num_threads(threads_list[0])
    return {
        "benchmark": "update",
        "algo": "drqv2",
        "problem": {
            "batch": args.batch,
            "obs": [3 * config.frame_stack, args.image_size, args.image_size],
            "obs_dtype": "uint8",
            "act_dim": args.act_dim,
            "encoder": {"channels": list(config.encoder_channels), "strides": list(config.encoder_strides)},
            "feature_dim": config.feature_dim,
            "hidden_dim": config.hidden_dim,
            "update_every": config.update_every,
            "cudnn_benchmark": cudnn_benchmark,
            "work_per_update": "2 random shifts, next_obs encode (no grad), target, encoder+critic fwd/bwd + 2 Adam, "
                               "actor fwd/bwd through the critic + Adam, polyak",
            "data": "pre-sampled batch and noise (rlfunc.algos.drqv2.draw_noise); no replay sampling",
        },
        "flops": {
            "per_update": flops,
            "per_update_imperative": flops_base,
            "method": "torch.utils.flop_counter.FlopCounterMode over one update (conv + matmul FLOPs)",
        },
        "matmul_gflops_ceiling": {str(k): v for k, v in ceilings.items()},
        "compile": compile_info,
        "timing": {"repeats": args.repeats, "window_s": args.window_s, "statistic": "median of windows",
                   "interleaved": True},
        "env": env,
        "replay": replay,
        "variants": rows,
    }


# --------------------------------------------------------------------------- reference returns

REFERENCE_POLICIES = ("zero", "uniform_random")


def reference_returns(tasks: list[str], episodes: int, seed: int) -> dict:
    """Episode returns (1000 frames, no action repeat needed: rewards are per frame) of two
    policies that learn nothing, on the raw dm_control task from states: the zero action and a
    uniform random action. A learning curve means little without them: on cartpole_balance
    the pole starts near upright, so doing nothing already scores far above zero."""
    from rlfunc.envs.dmc import load_suite

    suite = load_suite()  # picks the headless GL backend first, as every rlfunc DMC env does
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for env_id in tasks:
        domain, task = env_id.removeprefix("dmc/").removesuffix("-v0").split("_", 1)
        env = suite.load(domain, task, task_kwargs={"random": seed})
        spec = env.action_spec()
        per_policy = {}
        for policy in REFERENCE_POLICIES:
            returns = []
            for _ in range(episodes):
                ts, total = env.reset(), 0.0
                while not ts.last():
                    if policy == "zero":
                        action = np.zeros(spec.shape)
                    else:
                        action = rng.uniform(spec.minimum, spec.maximum, spec.shape)
                    ts = env.step(action)
                    total += ts.reward or 0.0
                returns.append(total)
            per_policy[policy] = {"returns": returns, "median": statistics.median(returns)}
            print(f"  {env_id} {policy}: median {statistics.median(returns):.1f} over {episodes} episodes", flush=True)
        out[env_id] = per_policy
    return out


def configure_reference(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tasks", nargs="+", default=list(PAPER), help="dmc/<domain>_<task>-v0 ids")
    p.add_argument("--episodes", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "reference_drqv2.json")


def register(run) -> None:
    """Add ``reference-returns`` to ``benchmarks/run.py``."""

    def run_reference(args: argparse.Namespace) -> int:
        result = {
            "machine": run.machine_info(torch.device("cpu"), allocator_tuned=False),  # every JSON names its machine
            "benchmark": "reference-returns",
            "what": "return per 1000-frame episode of policies that learn nothing, from states "
                    "(the floor a DrQ-v2 learning curve has to clear)",
            "episodes": args.episodes,
            "seed": args.seed,
            "paper": PAPER,
            "tasks": reference_returns(args.tasks, args.episodes, args.seed),
        }
        run.write_json(args.out, result)
        print(f"\nwrote {args.out}")
        return 0

    run.subcommand("reference-returns", "DMC returns of the zero-action and uniform-random policies (DrQ-v2 floor)",
                   configure_reference)(run_reference)
