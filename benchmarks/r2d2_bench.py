"""R2D2 benchmarks, run through ``benchmarks/run.py``:

    python benchmarks/run.py update --algo r2d2 [--r2d2-scale cartpole|paper] [--threads 1]
    python benchmarks/run.py replay [--sizes 10000 100000 1000000] [--batch 64]
    python benchmarks/run.py learn --algo r2d2 --seeds 3 [--steps N] [--set key=value ...]
    python benchmarks/run.py stored-state RUN_DIR [--episodes 8] [--lag-updates 0 200]

``update`` times one R2D2 learner step -- burn-in from the stored state, online and
target unrolls, transformed n-step double-Q loss, priorities, Adam, periodic target copy
-- for the imperative baseline (``benchmarks/baselines/r2d2.py``: ``nn.LSTM`` + Python
loops + ``torch.optim.Adam``), the functional update eagerly and compiled
(``torch.compile(fullgraph=True)``), interleaved in one process. Same JSON fields as
``update_redq.json``; ``ms_per_env_step`` is milliseconds per update (one update is
the unit of work here), and the FLOPs are counted by ``torch.utils.flop_counter`` on
one update of each implementation (matmuls only).

``replay`` exposes ``benchmarks/prioritized_replay.py`` (sample and priority-update
microseconds of :class:`~rlfunc.replay.prioritized.PrioritizedSequenceReplay` at 10k,
100k and 1M stored sequences) and writes ``benchmarks/results/replay.json``.

``learn --algo r2d2`` is ``run.py``'s generic ``learn`` with the table R2D2 vs DRQN on
masked-velocity CartPole (``configs/r2d2/cartpole_novel.yaml``,
``configs/drqn/cartpole_novel.yaml``).

``stored-state`` is the paper's diagnostic (Kapturowski et al. 2019, Sec. 3, Fig. 1b) on a
trained agent: see :func:`stored_state_diagnostic`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

SCALES = {
    # the small-scale CartPole config (configs/r2d2/cartpole_novel.yaml)
    "cartpole": dict(obs=4, actions=2, encoder=(64,), lstm=64, head=(64,), burn_in=8, length=16, batch=32,
                     config=dict(gamma=0.99, lr=1e-3, target_period=500)),
    # smoke tests only
    "tiny": dict(obs=4, actions=2, encoder=(16,), lstm=16, head=(16,), burn_in=2, length=4, batch=8),
    # the paper's learner shapes with a 512-unit MLP torso for vector observations
    "paper": dict(obs=4, actions=2, encoder=(512,), lstm=512, head=(512,), burn_in=40, length=80, batch=64),
}


# --------------------------------------------------------------------------- update


def _problem(scale: dict, device: torch.device):
    import gymnasium as gym
    from tensordict import TensorDict

    from rlfunc.algos import r2d2

    config = r2d2.Config(
        encoder_sizes=scale["encoder"], lstm_size=scale["lstm"], head_sizes=scale["head"], burn_in=scale["burn_in"],
        sequence_length=scale["length"], sequence_period=max(1, scale["burn_in"]), batch_size=scale["batch"],
        **scale.get("config", {}),
    )
    O, A, B, H = scale["obs"], scale["actions"], scale["batch"], scale["lstm"]
    T = scale["burn_in"] + scale["length"]
    gen = torch.Generator().manual_seed(0)
    valid = torch.randint(T // 2, T + 1, (B,), generator=gen)
    valid[: B // 2] = T  # half the windows full, half end their episode (padded tails)
    mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[valid[B // 2 :] - 1, torch.arange(B // 2, B)] = True
    batch = TensorDict(
        {
            "obs": torch.randn(T, B, O, generator=gen),
            "action": torch.randint(0, A, (T, B), generator=gen),
            "reward": torch.rand(T, B, generator=gen),
            "next_obs": torch.randn(T, B, O, generator=gen),
            "terminated": terminated,
            "mask": mask,
            "weight": torch.rand(B, generator=gen).expand(T, B),
            "init_carry": TensorDict(
                {
                    "h": 0.1 * torch.randn(B, H, generator=gen),
                    "c": 0.1 * torch.randn(B, H, generator=gen),
                    "prev_action": torch.randint(0, A, (B,), generator=gen),
                    "prev_reward": torch.rand(B, generator=gen),
                },
                [B],
            ).expand(T, B),
        },
        batch_size=[T, B],
    ).to(device)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (O,), np.float32)
    return r2d2, config, obs_space, gym.spaces.Discrete(A), batch


def _count_flops(fn: Callable[[], object]) -> int:
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as fc:
        fn()
    return int(fc.get_total_flops())


def update_r2d2(args: argparse.Namespace, run) -> dict:
    """R2D2 learner updates/s: imperative baseline vs functional eager vs compiled (``run`` = benchmarks/run.py)."""
    from benchmarks.baselines.r2d2 import ImperativeR2D2

    device = torch.device(args.device)
    scale = SCALES[args.r2d2_scale]
    r2d2, config, obs_space, act_space, batch = _problem(scale, device)
    state0 = r2d2.init(config, obs_space, act_space, seed=0, device=device)
    agent = ImperativeR2D2.from_functional(state0, config)
    agent.q.to(device)
    agent.target.to(device)
    threads_list = list(args.threads)
    torch.set_num_threads(threads_list[0])

    flops = {
        "per_update": _count_flops(lambda: r2d2.update(r2d2.init(config, obs_space, act_space, device=device), batch)),
        "imperative_counted": _count_flops(lambda: agent.loss(batch)[0].backward()),
        "note": (
            "matmul FLOPs of one functional update, counted by torch.utils.flop_counter.FlopCounterMode; the same math "
            "as the baseline's, whose count (imperative_counted) misses nn.LSTM's fused kernel, which the counter "
            "has no formula for. flop_efficiency of every variant uses per_update"
        ),
    }
    agent.opt.zero_grad(set_to_none=True)
    per_update = flops["per_update"]

    runners: dict[str, Callable[[], None]] = {"imperative": lambda: agent.update(batch)}
    notes: dict[str, dict] = {
        "imperative": {"impl": "benchmarks/baselines/r2d2.py: nn.Linear + nn.LSTM + dueling nn.Sequential, loops over time, torch.optim.Adam"}
    }

    def functional_runner(fn):
        holder = {"state": r2d2.init(config, obs_space, act_space, seed=0, device=device)}

        def step() -> None:
            holder["state"], metrics = fn(holder["state"], batch)
            metrics["priorities"]  # what the learner writes back to the replay

        return step

    runners["functional-eager"] = functional_runner(r2d2.update)
    notes["functional-eager"] = {"impl": "rlfunc.algos.r2d2.update (functional LSTM, torch.func.grad_and_value)"}
    warm = run.warm_up(runners, args.warmup, device, unit="update")
    compile_info: dict | None = None
    if not args.no_compile:
        T = scale["burn_in"] + scale["length"]
        print(f"  compiling r2d2.update (fullgraph=True, {T + 1}-step unrolled LSTMs) ...", flush=True)
        step = functional_runner(torch.compile(r2d2.update, fullgraph=True))
        compile_info = {
            "compile_s": {},
            "error": None,
            "ensemble_mode": "n/a (no ensemble)",  # read by run.py's summary line
            "note": "compiled once; dynamo may recompile per thread count",
        }
        t0 = time.perf_counter()
        try:
            step()
            run.sync(device)
            first = time.perf_counter() - t0
            t1 = time.perf_counter()
            step()
            run.sync(device)
            second = time.perf_counter() - t1
            compile_info["compile_s"][str(threads_list[0])] = max(first - second, 0.0)
            warm["functional-compiled"] = second
            runners["functional-compiled"] = step
            notes["functional-compiled"] = {"impl": "torch.compile(rlfunc.algos.r2d2.update, fullgraph=True)"}
            print(f"  compiled in {first - second:.1f} s; {second * 1e3:.1f} ms/update", flush=True)
        except Exception as exc:  # noqa: BLE001 -- recorded, the rest still runs
            compile_info["compile_s"][str(threads_list[0])] = time.perf_counter() - t0
            compile_info["error"] = run.error_text(exc)
            print(f"  compile FAILED: {compile_info['error']}", flush=True)
    graph_name, graph_info = run.add_cuda_graph_variant(
        runners, notes, warm,
        r2d2.update if args.no_compile else torch.compile(r2d2.update, fullgraph=True),
        r2d2.init(config, obs_space, act_space, seed=0, device=device),
        (batch,),
        device,
        compiled=not args.no_compile,
    )
    steps = run.window_steps(warm, runners, args.window_s)
    rows: list[dict] = []
    ceilings: dict[int, float] = {}
    for threads in threads_list:
        torch.set_num_threads(threads)
        for fn in runners.values():
            fn()
        ceilings[threads] = run.matmul_ceiling(device, windows=2 if args.quick else 3, min_time=0.1 if args.quick else 0.3)
        print(f"threads={threads}: matmul ceiling {ceilings[threads]:.1f} GFLOP/s; timing {len(runners)} variants "
              f"x {args.repeats} interleaved windows ...", flush=True)
        times = run.time_interleaved(runners, repeats=args.repeats, steps=steps, device=device)
        base = statistics.median(times["imperative"])
        for name, ts in times.items():
            med = statistics.median(ts)
            row = {
                "variant": name,
                "updates_per_s": 1.0 / med,
                "ratio_vs_imperative": base / med,
                "flop_efficiency": per_update / med / (ceilings[threads] * 1e9),
                "threads": threads,
                "device": device.type,
                "torch": torch.__version__,
                "ms_per_env_step": med * 1e3,
                "ms_per_update": med * 1e3,
                "ms_per_env_step_windows": [t * 1e3 for t in ts],
                "env_steps_per_window": steps[name],
                "matmul_gflops_ceiling": ceilings[threads],
            }
            row.update(notes.get(name, {}))
            if name == "functional-compiled" and compile_info is not None:
                row["compile_s"] = compile_info["compile_s"].get(str(threads_list[0]))
            rows.append(row)
        if graph_name not in runners:
            rows.append(run.unavailable_row(graph_name, graph_info["unavailable"], threads, device))
    return {
        "benchmark": "update",
        "algo": "r2d2",
        "problem": {
            "scale": args.r2d2_scale,
            **{k: list(v) if isinstance(v, tuple) else v for k, v in scale.items()},
            "n_step": config.n_step,
            "dueling": True,
            "work_per_env_step": (
                "1 R2D2 update: online burn-in (no grad) + unroll fwd/bwd over L+1 steps, target unroll over "
                "burn_in+L+1, transformed 5-step double-Q TD, priorities, Adam, periodic target copy"
            ),
            "data": "pre-sampled [burn_in + L, B] window batch (stored state, padded tails, IS weights); no replay sampling",
            "ms_per_env_step": "milliseconds per update (one update = one unit of work here)",
        },
        "flops": flops,
        "matmul_gflops_ceiling": {str(k): v for k, v in ceilings.items()},
        "compile": compile_info,
        "timing": {"repeats": args.repeats, "window_s": args.window_s, "statistic": "median of windows", "interleaved": True},
        "variants": rows,
    }


# --------------------------------------------------------------------------- replay


def configure_replay(p: argparse.ArgumentParser) -> None:
    p.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="stored sequences")
    p.add_argument("--batch", type=int, default=64, help="sequences per sample / priority update (R2D2: 64)")
    p.add_argument("--reps", type=int, default=200, help="calls per timed round")
    p.add_argument("--rounds", type=int, default=15, help="timed rounds (min and median reported)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--device", default="cpu")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/replay.json)")
    p.add_argument("--note", default=None)


def run_replay(args: argparse.Namespace, run) -> int:
    """``benchmarks/prioritized_replay.py`` through run.py's helpers -> ``replay.json``."""
    from benchmarks import prioritized_replay as pr

    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    print(f"replay on {run.cpu_model()} ({run.machine_info(device, False)['cores']} cores), threads={args.threads}, "
          f"device={args.device}", flush=True)
    cal_before = pr.calibration()
    raw = pr.run(args.sizes, args.batch, args.reps, args.rounds, args.device)
    cal_after = pr.calibration()
    rows = [
        {
            "stored": r["size"],
            "batch": r["batch"],
            "sample_us": r["sample_us_median"],
            "update_us": r["update_us_median"],
            "sample_us_min": r["sample_us_min"],
            "update_us_min": r["update_us_min"],
            "sample_cpu_us": r["sample_cpu_us_median"],
            "update_cpu_us": r["update_cpu_us_median"],
            "tree_sample_us": r["tree_sample_us_median"],
            "fanout": r["fanout"],
            "blocks": r["blocks"],
        }
        for r in raw
    ]
    machine = run.machine_info(device, allocator_tuned=False)
    machine["threads"] = args.threads
    result = {
        "machine": machine,
        "rows": rows,
        "benchmark": "replay",
        "what": (
            "PrioritizedSequenceReplay: sample_us = one sample() of `batch` sequences (sum-tree draw, gather of every "
            "stored key and the stored state, probabilities, importance weights); update_us = one update_priorities() "
            "of `batch` rows. Medians of rounds (wall); *_min the best round, *_cpu_us the process CPU time "
            "(meaningful on a shared machine). 2-step sequences with tiny payloads, so 1M fit in memory."
        ),
        "calibration": {"before": cal_before, "after": cal_after},
        "source": "benchmarks/prioritized_replay.py",
    }
    if args.note:
        result["note"] = args.note
    out = args.out or run.RESULTS_DIR / "replay.json"
    run.write_json(out, result)
    print()
    run.print_table(rows, [("stored", "stored", ",d"), ("batch", "batch", "d"), ("sample us", "sample_us", ".0f"),
                           ("update us", "update_us", ".0f"), ("sample CPU us", "sample_cpu_us", ".0f"),
                           ("update CPU us", "update_cpu_us", ".0f")])
    print(f"\nwrote {out}")
    return 0


# --------------------------------------------------------------------------- stored-state diagnostic


def _actor_episodes(params, config, env_id: str, wrappers, episodes: int, epsilons: torch.Tensor, seed: int):
    """Run ``len(epsilons)`` actors (one vector env) until ``episodes`` episodes have ended.

    Returns one dict per complete episode: ``obs [T, O]``, ``prev_action [T]``,
    ``prev_reward [T]`` (the inputs of each step), ``h, c [T, H]`` (the actor's
    state *before* each step) and ``q [T, A]`` (the actor's own Q-values).
    """
    from rlfunc.algos import r2d2
    from rlfunc.envs import build_wrappers, make_vector_env

    n = len(epsilons)
    env = make_vector_env(env_id, n, wrappers=build_wrappers(wrappers))
    obs, _ = env.reset(seed=[seed + i for i in range(n)])
    gen = torch.Generator().manual_seed(seed)
    carry = r2d2.initial_carry(config, n)
    start = torch.ones(n, dtype=torch.bool)
    reward = torch.zeros(n)
    skip = np.zeros(n, dtype=bool)  # the next-step autoreset step of gymnasium vector envs
    current = [dict(obs=[], prev_action=[], prev_reward=[], h=[], c=[], q=[]) for _ in range(n)]
    done_eps: list[dict] = []
    while len(done_eps) < episodes:
        before = r2d2.prepare_carry(carry, None, reward, start)
        obs_t = torch.as_tensor(np.asarray(obs), dtype=torch.float32)
        with torch.no_grad():
            q, _ = r2d2.q_step(params, obs_t, before)
        action, carry = r2d2.act(params, obs_t, None, None, before, epsilons, r2d2.draw_act_noise(n, generator=gen))
        for i in range(n):
            if skip[i]:
                continue
            ep = current[i]
            ep["obs"].append(obs_t[i])
            ep["prev_action"].append(before.prev_action[i])
            ep["prev_reward"].append(before.prev_reward[i])
            ep["h"].append(before.h[i])
            ep["c"].append(before.c[i])
            ep["q"].append(q[i])
        obs, r, term, trunc, _ = env.step(action.numpy())
        reward = torch.as_tensor(r, dtype=torch.float32)
        ended = np.logical_or(term, trunc)
        start = torch.as_tensor(skip.copy())  # an autoreset step's observation starts an episode
        for i in np.flatnonzero(ended & ~skip):
            ep = current[i]
            done_eps.append({k: torch.stack(v) for k, v in ep.items()})
            current[i] = dict(obs=[], prev_action=[], prev_reward=[], h=[], c=[], q=[])
        skip = ended & ~skip
    env.close()
    return done_eps[:episodes]


def stored_state_diagnostic(
    params_actor,
    params_learner,
    config,
    episodes: list[dict],
    *,
    burn_in: int | None = None,
    length: int | None = None,
    period: int | None = None,
) -> dict:
    """The paper's Q-value discrepancy (Kapturowski et al. 2019, Sec. 3) of replayed windows.

    ``episodes`` were generated by an actor with ``params_actor``, which stored its
    recurrent state before every step (:func:`_actor_episodes`). Windows of
    ``burn_in + length`` steps start every ``period`` steps inside each episode, as the
    replay cuts them. For the trained part of each window, the learner's network
    (``params_learner``) computes Q-values from four start states and is compared with
    the "true" Q-values -- the learner's network run over the whole episode from its
    first step (with ``params_learner == params_actor`` these are exactly the actor's
    own Q-values):

    * ``stored+burn_in``: the stored state at the window start, then the burn-in (R2D2);
    * ``zero+burn_in``: a zero state at the window start, then the burn-in;
    * ``stored``: the stored state at the first trained step (no burn-in);
    * ``zero``: a zero state at the first trained step (DRQN's zero start).

    Discrepancy, per window and trained step ``t``:
    ``||q_hat_t - q_true_t||_2 / |max_{a,t'} q_true_{t',a}|`` (the paper's ΔQ,
    normalised by the window's largest true Q-value), averaged over the window's first
    trained step (``first``, where a stale start hurts most) and over all trained steps
    (``all``). Windows that start at an episode's first step are skipped (their stored
    and zero states coincide).
    """
    from rlfunc.algos import r2d2

    burn = config.burn_in if burn_in is None else burn_in
    L = config.sequence_length if length is None else length
    P = config.sequence_period if period is None else period
    out: dict[str, dict[str, list[float]]] = {k: {"first": [], "all": []} for k in ("stored+burn_in", "zero+burn_in", "stored", "zero")}
    with torch.no_grad():
        for ep in episodes:
            T = ep["obs"].shape[0]
            H = ep["h"].shape[-1]
            zero = (torch.zeros(1, H), torch.zeros(1, H))
            q_true, _ = r2d2.q_unroll(params_learner, ep["obs"][:, None], ep["prev_action"][:, None], ep["prev_reward"][:, None], zero)
            q_true = q_true[:, 0]
            for s in range(P, T - burn, P):
                e = min(s + burn + L, T)
                ref = q_true[s + burn : e]
                scale = ref.max().abs().clamp(min=1e-6)
                starts = {
                    "stored+burn_in": (s, (ep["h"][s : s + 1], ep["c"][s : s + 1])),
                    "zero+burn_in": (s, zero),
                    "stored": (s + burn, (ep["h"][s + burn : s + burn + 1], ep["c"][s + burn : s + burn + 1])),
                    "zero": (s + burn, zero),
                }
                for name, (t0, carry) in starts.items():
                    q_hat, _ = r2d2.q_unroll(
                        params_learner, ep["obs"][t0:e, None], ep["prev_action"][t0:e, None], ep["prev_reward"][t0:e, None], carry
                    )
                    q_hat = q_hat[s + burn - t0 :, 0]
                    dq = (q_hat - ref).norm(dim=-1) / scale
                    out[name]["first"].append(float(dq[0]))
                    out[name]["all"].append(float(dq.mean()))
    summary = {
        name: {
            "first_step_mean": float(np.mean(v["first"])) if v["first"] else None,
            "all_steps_mean": float(np.mean(v["all"])) if v["all"] else None,
            "first_step_median": float(np.median(v["first"])) if v["first"] else None,
        }
        for name, v in out.items()
    }
    summary["windows"] = len(out["zero"]["first"])
    return summary


def configure_stored_state(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", type=Path, help="an R2D2 run directory or checkpoint (the trained agent)")
    p.add_argument("--earlier", type=Path, default=None,
                   help="an earlier checkpoint of the same run: its parameters act (stale stored states), "
                        "the run's latest ones learn (default: the same parameters, lag 0)")
    p.add_argument("--episodes", type=int, default=8, help="actor episodes to cut into windows")
    p.add_argument("--actors", type=int, default=8, help="actors (vector env members), each with its own epsilon")
    p.add_argument("--seed", type=int, default=20_000)
    p.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/r2d2_stored_state.json)")


def _load_params(path: Path):
    from rlfunc.runtime.checkpoint import load_checkpoint
    from rlfunc.runtime.config import build_config

    tensors, meta = load_checkpoint(path)
    cfg = build_config(meta["config"], resolved=True)
    if cfg.algo != "r2d2":
        raise SystemExit(f"stored-state: {path} is a {cfg.algo!r} run, not r2d2.")
    return tensors["state", "params"], cfg, meta


def run_stored_state(args: argparse.Namespace, run) -> int:
    from rlfunc.algos import r2d2

    torch.set_num_threads(1)
    params, cfg, meta = _load_params(args.run)
    actor_params, actor_step = params, meta["env_step"]
    if args.earlier is not None:
        actor_params, _, m2 = _load_params(args.earlier)
        actor_step = m2["env_step"]
    eps = r2d2.actor_epsilons(args.actors, cfg.agent.epsilon_base, cfg.agent.epsilon_alpha)
    t0 = time.perf_counter()
    episodes = _actor_episodes(actor_params, cfg.agent, cfg.env.id, cfg.env.wrappers, args.episodes, eps, args.seed)
    summary = stored_state_diagnostic(actor_params, params, cfg.agent, episodes)
    result = {
        "machine": run.machine_info(torch.device("cpu"), allocator_tuned=False),
        "benchmark": "r2d2_stored_state",
        "run": str(args.run),
        "env": cfg.env.id,
        "wrappers": cfg.env.wrappers,
        "learner_env_step": meta["env_step"],
        "actor_env_step": actor_step,
        "episodes": args.episodes,
        "episode_lengths": [int(e["obs"].shape[0]) for e in episodes],
        "burn_in": cfg.agent.burn_in,
        "sequence_length": cfg.agent.sequence_length,
        "sequence_period": cfg.agent.sequence_period,
        "discrepancy": summary,
        "definition": "mean over windows of ||q_hat - q_true||_2 / |max q_true| (stored_state_diagnostic in benchmarks/r2d2_bench.py)",
        "wall_s": time.perf_counter() - t0,
    }
    out = args.out or run.RESULTS_DIR / "r2d2_stored_state.json"
    run.write_json(out, result)
    rows = [{"start": k, **v} for k, v in summary.items() if isinstance(v, dict)]
    run.print_table(rows, [("start state", "start", ""), ("dQ first step", "first_step_mean", ".4f"),
                           ("dQ all steps", "all_steps_mean", ".4f")])
    print(f"\n{summary['windows']} windows from {args.episodes} episodes; wrote {out}")
    return 0


# --------------------------------------------------------------------------- registration


LEARN_TABLE = [
    ("r2d2", "configs/r2d2/cartpole_novel.yaml"),  # R2D2 on masked-velocity CartPole
    ("drqn", "configs/drqn/cartpole_novel.yaml"),  # DRQN on the same env, same env-step budget
]


def register(run) -> None:
    """Add R2D2's entries to ``benchmarks/run.py`` (``run`` is that module)."""
    run.UPDATE_ALGOS["r2d2"] = lambda args: update_r2d2(args, run)
    help_, configure, runner = run.SUBCOMMANDS["update"]

    def configure_update(p: argparse.ArgumentParser) -> None:
        configure(p)
        p.add_argument("--r2d2-scale", choices=sorted(SCALES), default="cartpole",
                       help="R2D2: problem size (cartpole = configs/r2d2/cartpole_novel.yaml, paper = LSTM 512, 40+80, B 64)")

    run.SUBCOMMANDS["update"] = (help_, configure_update, runner)
    run.subcommand("replay", "prioritized sequence replay: sample + priority-update us at 10k/100k/1M sequences",
                   configure_replay)(lambda args: run_replay(args, run))
    run.subcommand("stored-state", "R2D2's stored-state diagnostic on a trained run: Q discrepancy of start states",
                   configure_stored_state)(lambda args: run_stored_state(args, run))
    if hasattr(run, "LEARN_ALGOS"):
        run.LEARN_ALGOS["r2d2"] = list(LEARN_TABLE)
