"""``python benchmarks/run.py population``: P learners as one population in one process against
P separate single learners in the same process (issue #24, "Benchmarks").

Two kinds of timing, each written to ``benchmarks/results/population_<algo>.json`` (``kind``):

* ``env_steps`` (``--algo redq|sac|rlpd``, Pendulum-v1 or ``--env``; ``--device cuda
  [--cuda-graph]`` on a GPU, as ``train.device``/``train.cuda_graph``): for each P, the population
  (:class:`rlfunc.runtime.population.PopulationTrainer`: P members' envs in one vector env, the
  vmapped ``act``, one batched replay write and gather, one vmapped update) and P single runs' pieces (P learners and P
  collectors, stepped one after the other, as P runs sharing the process would) each take
  full env steps -- act, step every member's env, store, learn -- after a warm-up that fills
  the replays past ``train.learning_starts``. Reported: env steps per second per member and
  in total, the learn call's ms per env step (timed alone, the same way), peak resident
  memory, and the ratio of the population's total throughput to the P single runs'. With
  ``--compile`` the same four runners again with ``train.compile=true`` (the population's
  update compiled as its trainer compiles it, :func:`rlfunc.runtime.population.population_update`;
  each single learner's update compiled as ``rlfunc train`` compiles it).
* ``collect`` (``--collect-only``, ``--algo redq|sac|rlpd``): the same env steps without the
  update -- act (past ``train.learning_starts``: the network's), step every member's env, store
  the rows -- the population (its members' envs in one vector env, one batched replay write)
  against P single runs' collectors and learners: what a population's step costs besides its
  update, the part that decides the whole-run GPU goal of issue #24 once the update is batched.
* ``update_only`` (``--update-only``, any of the seven algorithms): the pure update alone on
  pre-drawn batches and noise of the algorithm's default shapes (``--obs minatar``: DRQN's, DQN's
  or R2D2's MinAtar Breakout config and frames), ``torch.vmap`` over P stacked
  states (:func:`rlfunc.core.population.vmap_update`) against P single ``update`` calls: update
  ms per learner call (all members), and the same ratio. No env, no replay.
* ``whole_runs`` (``--runs CONFIG``, any algorithm): whole training runs of a config as a user
  starts them, the population (``rlfunc train CONFIG --seeds 0-(P-1)``) against P single runs one
  after the other, in this process, alternated ``--repeats`` times after one untimed run of each;
  written to ``population_<algo>_<config name>_runs.json``.

Timed windows of the variants are interleaved (:func:`benchmarks.run.time_interleaved`) and
medians reported, so load changes on a shared machine hit every variant alike; the machine and
its load average at the start and end of each P are recorded. Every number is given by wall
time and by this process's CPU time (:func:`_timed`): on an oversubscribed machine the CPU-time
ratio is the steadier one.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PRIOR_DATA = ROOT / "tests" / "data" / "pendulum_expert_2k.npz"  # RLPD's prior data (2k expert transitions)
ENV_ALGOS = ("redq", "sac", "rlpd")
UPDATE_ALGOS = ("redq", "sac", "rlpd", "drqv2", "drqn", "dqn", "r2d2")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--algo", nargs="+", default=["redq"], help=f"algorithms (env steps: {', '.join(ENV_ALGOS)}; "
                   f"--update-only: {', '.join(UPDATE_ALGOS)})")
    p.add_argument("--members", type=int, nargs="+", default=[1, 2, 4, 8], help="population sizes P (default 1 2 4 8)")
    p.add_argument("--compile", type=int, nargs="*", default=None, metavar="P",
                   help="also time train.compile=true (env steps; --update-only: the vmapped and the single update "
                        "compiled as the trainers compile them, REDQ/SAC/RLPD per step): at these P (no values: every P)")
    p.add_argument("--update-only", action="store_true", help="time the pure update alone (no env, no replay)")
    p.add_argument("--collect-only", action="store_true",
                   help="env steps without the update: act, step every member's env, store (what a population step "
                        "costs besides its update; written as population_<algo>[_<env>]_collect[_cuda].json)")
    p.add_argument("--vectorize", default="auto", choices=("auto", "vmap", "loop"),
                   help="env steps: the population's train.population.vectorize (default auto, what a user gets; "
                        "--update-only always times the vmapped update)")
    p.add_argument("--obs", default="vector", choices=("vector", "minatar"),
                   help="--update-only, drqn/dqn/r2d2: the default vector shapes, or MinAtar Breakout's frames with the "
                        "conv torso of configs/<algo>/minatar_breakout.yaml (written as population_<algo>_minatar_update_only.json)")
    p.add_argument("--runs", default=None, metavar="CONFIG",
                   help="time whole training runs of this config instead: `rlfunc train CONFIG --seeds 0-(P-1)` against P "
                        "single runs one after the other, in this process (any algorithm; with --run-steps and --set)")
    p.add_argument("--run-steps", type=int, default=10_000, help="--runs: train.total_steps of every run (default 10000)")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="--runs: a config override for every run (repeatable)")
    p.add_argument("--device", default="cpu", help="the learners' device (train.device; --update-only: of the states, "
                   "batches and noise): cpu (default) or cuda, for the GPU goals of issue #24; --runs stays on the CPU")
    p.add_argument("--cuda-graph", action="store_true",
                   help="on cuda: every variant's update behind rlfunc.runtime.graphs.FixedStateUpdate with "
                        "cuda_graph=True (the population's one graph, each separate learner's own), as train.cuda_graph "
                        "runs them")
    p.add_argument("--env", default="Pendulum-v1",
                   help="env steps: the env id (default Pendulum-v1; Hopper-v5 for the paper's REDQ shapes, with the "
                        "mujoco extra)")
    p.add_argument("--matmul-precision", default=None, choices=("highest", "high", "medium"),
                   help="torch.set_float32_matmul_precision for both sides (train.matmul_precision; high: TF32 on "
                        "Ampere+ GPUs); recorded in the JSON and named in its default file name")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--repeats", type=int, default=5, help="timed windows per variant (default 5)")
    p.add_argument("--steps", type=int, default=3, help="env steps (or updates) per timed window (default 3)")
    p.add_argument("--quick", action="store_true", help="tiny agent, for a smoke test (not written unless --out)")
    p.add_argument("--out", default=None, help="JSON path, one algorithm (default benchmarks/results/population_<algo>.json)")


# ----------------------------------------------------------------------------- env steps


def _raw(algo: str, members: int, quick: bool, compile: bool, vectorize: str = "auto",
         where: argparse.Namespace | None = None) -> dict:
    """The benchmark's run config; ``where``: the command's ``--env``, ``--device`` and ``--cuda-graph``."""
    agent = {"hidden_sizes": [16, 16], "batch_size": 8} if quick else {}
    if quick and algo != "sac":
        agent.update(num_critics=3, updates_per_step=2)
    train = {"total_steps": 10**6, "learning_starts": 300, "replay_size": 10_000, "progress": False,
             "tensorboard": False, "compile": compile,
             "population": {"seeds": list(range(members)), "vectorize": vectorize}}
    env = "Pendulum-v1"
    if where is not None:
        env = where.env
        train.update(device=where.device, cuda_graph=bool(where.cuda_graph))
    raw = {"algo": algo, "env": {"id": env}, "train": train, "agent": agent}
    if algo == "rlpd":
        raw["data"] = {"path": str(PRIOR_DATA)}
    return raw


def _population(algo: str, members: int, quick: bool, compile: bool, where: Path, vectorize: str = "auto",
                args: argparse.Namespace | None = None):
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.population import PopulationTrainer

    pt = PopulationTrainer(build_config(_raw(algo, members, quick, compile, vectorize, args)), where)
    pt.collector.reset([m.seed for m in pt.members])
    counter = {"n": 0}

    def env_step(learn: bool = True) -> None:
        pt.collect(pt.explore())  # every member's envs in one vector env, every member's rows stored
        _advance(pt, counter)
        if learn:
            learn_only()

    def learn_only() -> None:
        pt.learn()
        pt._unchecked.clear()  # the finiteness read is the trainer loop's, once per log window

    while counter["n"] < pt.config.train.learning_starts:
        env_step(learn=False)
    return env_step, learn_only, pt


def _advance(pt, counter: dict) -> None:
    """One env step on the population's counters (a list per member, or one shared counter)."""
    counter["n"] += 1
    if isinstance(getattr(pt, "env_steps", None), list):
        for k in range(len(pt.env_steps)):
            pt.env_steps[k] += 1
    else:
        pt.env_step += 1


def _singles(algo: str, members: int, quick: bool, compile: bool, args: argparse.Namespace | None = None):
    from rlfunc.envs import env_spaces
    from rlfunc.runtime.collector import Collector
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.population_members import member_specs
    from rlfunc.runtime.registry import get_algo
    from rlfunc.runtime.trainer import _make_envs

    runs = []
    for m in member_specs(build_config(_raw(algo, members, quick, compile, "auto", args))):
        env, _, native = _make_envs(m.config)
        learner = get_algo(algo).make_learner(m.config, *env_spaces(env))
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
            _single_learn(learner)

    while step["n"] < starts:
        env_step(learn=False)
    return env_step, learn_only


def _single_learn(learner) -> None:
    """What a single run's trainer does per learner call (:meth:`rlfunc.runtime.trainer.Trainer._learn`):
    the learner's ``learn`` and its metrics' finiteness queued as one reduced tensor, as the
    population's ``learn`` queues its members' (both read later, once per log window)."""
    import torch

    metrics = learner.learn()
    keys = [k for k, v in metrics.items(True, True) if v.is_floating_point()]
    torch.stack([torch.isfinite(metrics[k]).all() for k in keys])


def _timed(runners: dict, args: argparse.Namespace, run, device=None) -> tuple[dict, dict]:
    """:func:`benchmarks.run.time_interleaved` of ``runners``, returning wall and CPU seconds per call
    (per window). CPU time (``time.process_time``: this process's, one thread) is what the work
    costs whatever else the machine runs; wall time is what a user waits on a quiet machine. On a
    shared, oversubscribed machine the two differ by the share of the cores this process got."""
    import time

    import torch

    cpu: dict[str, list[float]] = {n: [] for n in runners}

    def counted(name, fn):
        def call() -> None:
            t0 = time.process_time()
            fn()
            cpu[name].append(time.process_time() - t0)
        return call

    wall = run.time_interleaved({n: counted(n, f) for n, f in runners.items()}, repeats=args.repeats,
                                steps={n: args.steps for n in runners}, device=device or torch.device("cpu"))
    per_window = {n: [sum(c[i:i + args.steps]) / args.steps for i in range(0, len(c), args.steps)] for n, c in cpu.items()}
    return wall, per_window


def _compiled_at(args: argparse.Namespace, p: int) -> bool:
    return args.compile is not None and (not args.compile or p in args.compile)


def _state_mb(pt) -> float:
    state = pt.state.exclude("config")
    return sum(t.numel() * t.element_size() for t in state.values(True, True)) / 2**20


def _env_rows(algo: str, args: argparse.Namespace, run, emit=lambda rows: None) -> list[dict]:
    import torch

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in args.members:
            modes = [False, True] if _compiled_at(args, p) else [False]
            load_start = os.getloadavg()
            runners, state_mb = {}, None
            for compiled in modes:
                tag = "_compiled" if compiled else ""
                pop_step, pop_learn, pt = _population(algo, p, args.quick, compiled, Path(tmp) / f"pop{p}{tag}",
                                                      getattr(args, "vectorize", "auto"), args)
                vectorized = pt.vectorize
                one_step, one_learn = _singles(algo, p, args.quick, compiled, args)
                state_mb = _state_mb(pt)
                for fn in (pop_step, one_step):  # warm: first updates allocate (and compile)
                    fn()
                    fn()
                runners.update({f"population{tag}": pop_step, f"separate{tag}": one_step,
                                f"population{tag}_update": pop_learn, f"separate{tag}_update": one_learn})
            device = torch.device(args.device)
            times, cpu = _timed(runners, args, run, device)
            med = {n: statistics.median(t) for n, t in times.items()}
            cmed = {n: statistics.median(t) for n, t in cpu.items()}
            row = {"members": p, "vectorize": vectorized}
            if device.type == "cuda":  # both sides' states, replays and graphs at this P
                row["cuda_max_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
                torch.cuda.reset_peak_memory_stats(device)  # how the population updated (train.population.vectorize)
            for compiled in modes:
                tag = "_compiled" if compiled else ""
                name = "compiled" if compiled else "eager"
                metrics = {
                    "population_env_steps_per_s_per_member": 1.0 / med[f"population{tag}"],
                    "population_env_steps_per_s_total": p / med[f"population{tag}"],
                    "separate_env_steps_per_s_per_member": 1.0 / med[f"separate{tag}"],
                    "separate_env_steps_per_s_total": p / med[f"separate{tag}"],
                    "population_update_ms_per_env_step": 1e3 * med[f"population{tag}_update"],
                    "separate_update_ms_per_env_step": 1e3 * med[f"separate{tag}_update"],
                    "total_throughput_ratio": med[f"separate{tag}"] / med[f"population{tag}"],
                    "update_ratio": med[f"separate{tag}_update"] / med[f"population{tag}_update"],
                    "cpu_time": {
                        "population_env_steps_per_cpu_s_total": p / cmed[f"population{tag}"],
                        "separate_env_steps_per_cpu_s_total": p / cmed[f"separate{tag}"],
                        "population_update_cpu_ms_per_env_step": 1e3 * cmed[f"population{tag}_update"],
                        "separate_update_cpu_ms_per_env_step": 1e3 * cmed[f"separate{tag}_update"],
                        "total_throughput_ratio": cmed[f"separate{tag}"] / cmed[f"population{tag}"],
                        "update_ratio": cmed[f"separate{tag}_update"] / cmed[f"population{tag}_update"],
                    },
                }
                if compiled:
                    row["compiled"] = metrics
                else:
                    row.update(metrics)
                r = metrics
                print(f"{algo} P={p} {name}: population {r['population_env_steps_per_s_total']:.2f} env steps/s total "
                      f"({r['population_update_ms_per_env_step']:.1f} ms update), separate "
                      f"{r['separate_env_steps_per_s_total']:.2f} ({r['separate_update_ms_per_env_step']:.1f} ms), "
                      f"ratio {r['total_throughput_ratio']:.2f}x (CPU time: {r['cpu_time']['total_throughput_ratio']:.2f}x)",
                      flush=True)
            row.update(
                seconds_per_env_step=times,
                cpu_seconds_per_env_step=cpu,
                population_state_mb=state_mb,
                peak_rss_mb_so_far=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                loadavg_start=load_start,
                loadavg_end=os.getloadavg(),
            )
            rows.append(row)
            emit(rows)
    return rows


def _collect_rows(algo: str, args: argparse.Namespace, run, emit=lambda rows: None) -> list[dict]:
    """For each P: the population's env step without its update (``env_step(learn=False)`` of
    :func:`_population`: act, the one vector env's step, the batched write) against P single runs'
    (:func:`_singles`), past ``train.learning_starts`` so the networks act."""
    import torch

    rows = []
    device = torch.device(args.device)
    with tempfile.TemporaryDirectory() as tmp:
        for p in args.members:
            load_start = os.getloadavg()
            pop_step, _, pt = _population(algo, p, args.quick, False, Path(tmp) / f"pop{p}", "auto", args)
            one_step, _ = _singles(algo, p, args.quick, False, args)
            runners = {"population": lambda: pop_step(learn=False), "separate": lambda: one_step(learn=False)}
            for fn in runners.values():  # warm
                fn()
                fn()
            times, cpu = _timed(runners, args, run, device)
            med = {n: statistics.median(t) for n, t in times.items()}
            cmed = {n: statistics.median(t) for n, t in cpu.items()}
            row = {
                "members": p,
                "population_env_steps_per_s_total": p / med["population"],
                "separate_env_steps_per_s_total": p / med["separate"],
                "population_ms_per_env_step": 1e3 * med["population"],
                "separate_ms_per_env_step": 1e3 * med["separate"],
                "total_throughput_ratio": med["separate"] / med["population"],
                "cpu_time": {
                    "population_ms_per_env_step": 1e3 * cmed["population"],
                    "separate_ms_per_env_step": 1e3 * cmed["separate"],
                    "total_throughput_ratio": cmed["separate"] / cmed["population"],
                },
                "seconds_per_env_step": times,
                "cpu_seconds_per_env_step": cpu,
                "loadavg_start": load_start,
                "loadavg_end": os.getloadavg(),
            }
            print(f"{algo} P={p} collect: population {row['population_ms_per_env_step']:.2f} ms an env step of all members, "
                  f"separate {row['separate_ms_per_env_step']:.2f} ms, ratio {row['total_throughput_ratio']:.2f}x "
                  f"(CPU time: {row['cpu_time']['total_throughput_ratio']:.2f}x)", flush=True)
            rows.append(row)
            emit(rows)
            del pt
    return rows


# ----------------------------------------------------------------------------- whole runs


def _whole_run_rows(args: argparse.Namespace, emit=lambda rows: None) -> list[dict]:
    """For each P: the population run (:func:`rlfunc.runtime.population.train`, ``seeds=0..P-1``, its
    ``vectorize``: ``auto`` unless ``--vectorize``) and the P single runs (:func:`rlfunc.train`, one
    after the other), ``--repeats`` times alternately, each into a fresh run directory: what a user
    waits for, with the trainers' own loops, evaluations, logs and checkpoints. One untimed run of
    each side first (imports, the allocator's first growth, ``train.compile``'s compilation: a
    separate process would pay its own compile once per run, which this leaves out). Wall and CPU
    seconds of every timed repeat; ratios of the medians (> 1: the population is faster)."""
    import time

    import rlfunc
    from rlfunc.runtime import population

    overrides = [*args.sets, f"train.total_steps={args.run_steps}", "train.progress=false", "train.tensorboard=false"]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for p in args.members:
            load_start = os.getloadavg()
            times: dict[str, list[float]] = {"population": [], "separate": []}
            cpu: dict[str, list[float]] = {"population": [], "separate": []}
            vectorized = None
            for r in range(-1, args.repeats):  # r = -1: one untimed run of each side first (imports, allocator, compile)
                t0, c0 = time.perf_counter(), time.process_time()
                res = population.train(args.runs, overrides, Path(tmp) / f"pop{p}-{r}", seeds=list(range(p)),
                                       vectorize=None if args.vectorize == "auto" else args.vectorize)
                if r >= 0:
                    times["population"].append(time.perf_counter() - t0)
                    cpu["population"].append(time.process_time() - c0)
                vectorized = res.vectorize
                t0, c0 = time.perf_counter(), time.process_time()
                for k in range(p):
                    rlfunc.train(args.runs, [*overrides, f"train.seed={k}"], run_dir=Path(tmp) / f"one{p}-{r}-{k}")
                if r >= 0:
                    times["separate"].append(time.perf_counter() - t0)
                    cpu["separate"].append(time.process_time() - c0)
            med = {n: statistics.median(t) for n, t in times.items()}
            cmed = {n: statistics.median(t) for n, t in cpu.items()}
            row = {
                "members": p,
                "vectorize": vectorized,
                "population_env_steps_per_s_total": p * args.run_steps / med["population"],
                "separate_env_steps_per_s_total": p * args.run_steps / med["separate"],
                "total_throughput_ratio": med["separate"] / med["population"],
                "cpu_time": {
                    "population_env_steps_per_cpu_s_total": p * args.run_steps / cmed["population"],
                    "separate_env_steps_per_cpu_s_total": p * args.run_steps / cmed["separate"],
                    "total_throughput_ratio": cmed["separate"] / cmed["population"],
                },
                "seconds_per_run": times,
                "cpu_seconds_per_run": cpu,
                "peak_rss_mb_so_far": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "loadavg_start": load_start,
                "loadavg_end": os.getloadavg(),
            }
            print(f"runs P={p} ({vectorized}): population {med['population']:.1f} s, separate {med['separate']:.1f} s, "
                  f"ratio {row['total_throughput_ratio']:.2f}x (CPU time: {row['cpu_time']['total_throughput_ratio']:.2f}x)",
                  flush=True)
            rows.append(row)
            emit(rows)
    return rows


# ----------------------------------------------------------------------------- update only


def _update_problem(algo: str, quick: bool, obs: str = "vector"):
    """``(module, config, init(seed), batch(generator), noise(generator) or None)`` at the
    algorithm's default shapes (``quick``: tiny), the inputs tests/test_population.py uses.
    ``obs="minatar"`` (DRQN, DQN, R2D2): MinAtar Breakout's frames (``10x10x4`` booleans, stored as
    uint8, 6 actions) and the agent section of ``configs/<algo>/minatar_breakout.yaml``
    (MinAtar's conv torso into the LSTM), the shapes of the MinAtar learning runs."""
    import gymnasium as gym
    import numpy as np
    import torch
    from tensordict import TensorDict

    from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd

    box3, box1 = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))
    if algo in ("redq", "sac", "rlpd"):
        small = dict(hidden_sizes=(16, 16), batch_size=8)
        module = rlpd if algo == "rlpd" else redq
        if algo == "sac":
            config = redq.sac_config(**(small if quick else {}))
        else:
            config = module.Config(**({**small, "num_critics": 3, "updates_per_step": 2} if quick else {}))
        G, B = config.updates_per_step, config.batch_size

        def batch(g):
            return TensorDict({"obs": torch.randn(G, B, 3, generator=g), "action": torch.rand(G, B, 1, generator=g) * 2 - 1,
                               "reward": torch.randn(G, B, generator=g), "next_obs": torch.randn(G, B, 3, generator=g),
                               "terminated": (torch.rand(G, B, generator=g) < 0.1).float()}, batch_size=[G, B])

        return (module, config, lambda s: module.init(config, box3, box1, seed=s), batch,
                lambda g: module.draw_noise(config, G, B, 1, generator=g))
    if algo == "drqv2":
        config = drqv2.Config(**(dict(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1,
                                      frame_stack=2, batch_size=4) if quick else {}))
        C, H = 3 * config.frame_stack, 84 if not quick else 12
        pixels, B = gym.spaces.Box(0, 255, (C, H, H), np.uint8), config.batch_size

        def batch(g):
            return TensorDict({"obs": torch.randint(256, (B, C, H, H), dtype=torch.uint8, generator=g),
                               "action": torch.rand(B, 1, generator=g) * 2 - 1, "reward": torch.randn(B, generator=g),
                               "discount": torch.full((B,), 0.99**3),
                               "next_obs": torch.randint(256, (B, C, H, H), dtype=torch.uint8, generator=g)}, batch_size=[B])

        return (drqv2, config, lambda s: drqv2.init(config, pixels, box1, seed=s), batch,
                lambda g: drqv2.draw_noise(config, B, 1, generator=g))
    from rlfunc.runtime.registry import get_algo

    module = r2d2 if algo == "r2d2" else drqn
    defaults = dict(get_algo(algo).config_defaults)  # DQN: DRQN's learner with core="mlp", one-step windows
    if obs == "minatar":
        import yaml

        agent = yaml.safe_load((ROOT / "configs" / algo / "minatar_breakout.yaml").read_text())["agent"]
        if quick:
            r2d2_small = {"burn_in": 2, "sequence_period": 2, "head_sizes": [8]} if algo == "r2d2" else {}
            agent.update(lstm_size=8, batch_size=4, sequence_length=agent["sequence_length"] if algo == "dqn" else 4,
                         **r2d2_small)
        config = module.Config(**{**defaults, **{k: tuple(v) if isinstance(v, list) else v for k, v in agent.items()}})
        obs_space, actions = gym.spaces.Box(0, 1, (10, 10, 4), bool), gym.spaces.Discrete(6)

        def frames(shape, g):
            return (torch.rand(*shape, 10, 10, 4, generator=g) < 0.1).to(torch.uint8)
    else:
        obs_space, actions = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
        small = dict(encoder_sizes=(8,), lstm_size=8, batch_size=4, **({} if algo == "dqn" else {"sequence_length": 4}))
        if algo != "r2d2":
            config = drqn.Config(**{**defaults, **(small if quick else {})})
        else:
            config = r2d2.Config(**({**small, "head_sizes": (8,), "burn_in": 2, "sequence_period": 2} if quick else {}))

        def frames(shape, g):
            return torch.randn(*shape, 4, generator=g)
    T = config.sequence_length + (config.burn_in if algo == "r2d2" else 0)
    B, n = config.batch_size, actions.n

    def batch(g):
        td = TensorDict({"obs": frames((T, B), g), "action": torch.randint(n, (T, B), generator=g),
                         "reward": torch.randn(T, B, generator=g), "next_obs": frames((T, B), g),
                         "terminated": torch.rand(T, B, generator=g) < 0.05,
                         "mask": torch.ones(T, B, dtype=torch.bool)}, batch_size=[T, B])
        if algo == "r2d2":
            carry = r2d2.Carry(torch.randn(B, config.lstm_size, generator=g), torch.randn(B, config.lstm_size, generator=g),
                               torch.randint(n, (B,), generator=g), torch.randn(B, generator=g))
            td["init_carry"] = r2d2.carry_to_td(carry).expand(T, B)
            td["weight"] = torch.rand(B, generator=g).expand(T, B)
        return td

    return module, config, lambda s: module.init(config, obs_space, actions, seed=s), batch, None


def _update_shape(config) -> dict:
    return {f: getattr(config, f) for f in ("num_critics", "subset_size", "updates_per_step", "hidden_sizes", "batch_size",
                                           "feature_dim", "hidden_dim", "frame_stack", "encoder_sizes", "lstm_size",
                                           "sequence_length", "burn_in") if hasattr(config, f)}


def _update_rows(algo: str, args: argparse.Namespace, run, emit=lambda rows: None) -> tuple[list[dict], dict]:
    import torch

    from rlfunc.core import population

    from types import SimpleNamespace

    from rlfunc.runtime.graphs import FixedStateUpdate
    from rlfunc.runtime.learners.base import compiled_update
    from rlfunc.runtime.population import population_update

    module, config, init, batch, noise = _update_problem(algo, args.quick, args.obs)
    device = torch.device(args.device)
    rows = []
    for p in args.members:
        modes = [False, True] if _compiled_at(args, p) else [False]
        load_start = os.getloadavg()
        gens = [torch.Generator().manual_seed(1000 + k) for k in range(p)]
        singles = [init(k).to(device) for k in range(p)]
        batches = [batch(g).to(device) for g in gens]
        noises = [noise(g).to(device) for g in gens] if noise else [None] * p
        holder = {"pop": population.stack(singles), "one": list(singles)}
        pb = torch.stack(batches)
        pn = torch.stack(noises) if noise else None
        runners = {}
        for compiled in modes:
            tag = "_compiled" if compiled else ""
            pop_fn = population.vmap_update(module.update)
            one_fn = module.update
            if compiled:  # as the trainers compile them (train.compile, train.compile_mode "step")
                cfg = SimpleNamespace(compile=True, compile_mode="step")
                pop_fn, one_fn = population_update(module, cfg), compiled_update(module, cfg)
            one_fns = [one_fn] * p
            if args.cuda_graph:  # each side's state at fixed addresses, each update one graph replay
                pop_fn = FixedStateUpdate(pop_fn, holder["pop"], cuda_graph=True)
                one_fns = [FixedStateUpdate(one_fn, holder["one"][k], cuda_graph=True) for k in range(p)]

            def pop_step(fn=pop_fn) -> None:
                holder["pop"], _ = fn(holder["pop"], pb, *((pn,) if noise else ()))

            def one_step(fns=one_fns) -> None:
                for k in range(p):
                    holder["one"][k], _ = fns[k](holder["one"][k], batches[k], *((noises[k],) if noise else ()))

            for fn in (pop_step, one_step):
                fn()
                fn()
            runners.update({f"population{tag}": pop_step, f"separate{tag}": one_step})
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times, cpu = _timed(runners, args, run, device)
        med = {n: statistics.median(t) for n, t in times.items()}
        cmed = {n: statistics.median(t) for n, t in cpu.items()}
        row = {"members": p}
        for compiled in modes:
            tag, name = ("_compiled", "compiled") if compiled else ("", "eager")
            metrics = {
                "population_update_ms_all_members": 1e3 * med[f"population{tag}"],
                "separate_update_ms_all_members": 1e3 * med[f"separate{tag}"],
                "population_updates_per_s_total": p / med[f"population{tag}"],
                "separate_updates_per_s_total": p / med[f"separate{tag}"],
                "total_throughput_ratio": med[f"separate{tag}"] / med[f"population{tag}"],
                "cpu_time": {
                    "population_update_cpu_ms_all_members": 1e3 * cmed[f"population{tag}"],
                    "separate_update_cpu_ms_all_members": 1e3 * cmed[f"separate{tag}"],
                    "total_throughput_ratio": cmed[f"separate{tag}"] / cmed[f"population{tag}"],
                },
            }
            if compiled:
                row["compiled"] = metrics
            else:
                row.update(metrics)
            r = metrics
            print(f"{algo} update-only P={p} {name}: population {r['population_update_ms_all_members']:.1f} ms, separate "
                  f"{r['separate_update_ms_all_members']:.1f} ms, ratio {r['total_throughput_ratio']:.2f}x "
                  f"(CPU time: {r['cpu_time']['total_throughput_ratio']:.2f}x)", flush=True)
        state = holder["pop"].exclude("config")
        if device.type == "cuda":  # everything this P allocated (both sides, graphs' pools included)
            row["cuda_max_memory_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
            torch.cuda.reset_peak_memory_stats(device)
        row.update(seconds_per_update=times, cpu_seconds_per_update=cpu,
                   population_state_mb=sum(t.numel() * t.element_size() for t in state.values(True, True)) / 2**20,
                   peak_rss_mb_so_far=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                   loadavg_start=load_start, loadavg_end=os.getloadavg())
        rows.append(row)
        emit(rows)
    return rows, _update_shape(config)


# ----------------------------------------------------------------------------- command


NOTES = (
    "P members as one population vs P separate learners stepped one after the other in the same "
    "process; windows of every variant interleaved, medians; total_throughput_ratio = separate time / "
    "population time (> 1: the population is faster). A row's top-level numbers are eager; "
    "'compiled' (train.compile: each side compiled as its trainer compiles it -- REDQ, SAC and RLPD per "
    "step since 2026-11-28, the others torch.compile fullgraph), where present, was timed in the same "
    "interleaved windows. Each set of numbers is given twice: by wall time (top level) and by this "
    "process's CPU time ('cpu_time'); on a shared machine whose other jobs take most of the cores, "
    "the CPU-time ratio is the steadier measure of the work, the wall-time ratio what an idle machine "
    "would show (one thread: the two agree when the process is not descheduled). Both sides queue "
    "their metrics' finiteness per learner call, as their trainers do. 'complete': false marks a run "
    "stopped before its last P (the file is rewritten after every P)."
)


CUDA_NOTE = (
    " On CUDA each window ends with a device synchronize, so the wall time is the measure; 'cpu_time' counts "
    "only this process's host work (launching, or replaying graphs), not the card's."
)


def default_name(algo: str, update_only: bool, obs: str = "vector", device: str = "cpu", env: str = "Pendulum-v1",
                 collect_only: bool = False, matmul_precision: str | None = None) -> str:
    """``population_<algo>.json`` for env steps, ``population_<algo>_update_only.json`` for the pure
    update (REDQ, SAC and RLPD have both; one name each, so neither run overwrites the other);
    ``population_<algo>_minatar_update_only.json`` for the MinAtar shapes (DRQN, DQN, R2D2);
    ``..._cuda.json`` for timings on a GPU; env steps of another env than Pendulum name it
    (``population_redq_hopper_cuda.json``); ``--collect-only`` adds ``_collect``, a
    ``--matmul-precision`` other than highest ``_matmul_<precision>``."""
    env_part = "" if update_only or env == "Pendulum-v1" else "_" + env.split("-")[0].split("/")[-1].lower()
    return (f"population_{algo}{'_minatar' if obs == 'minatar' else ''}{env_part}{'_update_only' if update_only else ''}"
            f"{'_collect' if collect_only and not update_only else ''}"
            f"{f'_matmul_{matmul_precision}' if matmul_precision not in (None, 'highest') else ''}"
            f"{'_cuda' if device == 'cuda' else ''}.json")


def run_whole_runs(args: argparse.Namespace, run) -> int:
    """``--runs CONFIG``: :func:`_whole_run_rows`, written to
    ``benchmarks/results/population_<algo>_<config name>_runs.json`` (or ``--out``)."""
    import torch

    from rlfunc.runtime.config import load_config
    from rlfunc.runtime.perf import set_threads, tune_allocator

    if (args.update_only or args.collect_only or args.compile is not None or args.device != "cpu" or args.cuda_graph
            or args.env != "Pendulum-v1" or args.matmul_precision):
        print("population: --runs times whole runs as configured; set train.compile, train.device, train.cuda_graph and "
              "train.matmul_precision with --set, not --compile, --update-only, --collect-only, --device, --cuda-graph, "
              "--matmul-precision or --env.", file=sys.stderr)
        return 2
    raw = load_config(args.runs)  # a missing or bad config is its own one-sentence error
    algo, stem = raw["algo"], Path(args.runs).stem
    set_threads(args.threads)
    tuned = tune_allocator()  # as the trainers do (they call it again: idempotent)
    out = Path(args.out) if args.out else run.RESULTS_DIR / f"population_{algo}_{stem}_runs.json"
    machine = run.machine_info(torch.device("cpu"), allocator_tuned=tuned)

    def result(rows: list[dict], complete: bool) -> dict:
        return {
            "benchmark": "population",
            "kind": "whole_runs",
            "unit": "env steps per second of whole training runs (P members x run_steps), population vs P single runs",
            "algo": algo,
            "config": args.runs,
            "overrides": args.sets,
            "run_steps": args.run_steps,
            "threads": args.threads,
            "repeats": args.repeats,
            "machine": machine,
            "complete": complete,
            "rows": rows,
            "command": "python benchmarks/run.py population " + " ".join(sys.argv[2:]),
            "notes": "Whole runs (rlfunc.runtime.population.train vs rlfunc.train, seeds 0..P-1), alternated "
                     "--repeats times in one process after one untimed run of each (so compilation is left out); "
                     "medians; ratio = separate time / population time (> 1: the population is faster). Wall "
                     "time and this process's CPU time.",
        }

    rows = _whole_run_rows(args, emit=lambda rows: run.write_json(out, result(rows, complete=False))
                           if len(rows) < len(args.members) else None)
    run.write_json(out, result(rows, complete=True))
    print(f"wrote {out}")
    return 0


def run_population(args: argparse.Namespace, run) -> int:
    import torch

    from rlfunc.runtime.perf import set_matmul_precision, set_threads

    if args.runs:
        return run_whole_runs(args, run)
    allowed = UPDATE_ALGOS if args.update_only else ENV_ALGOS
    bad = [a for a in args.algo if a not in allowed]
    if bad:
        print(f"population: --algo {bad[0]} is not one of {', '.join(allowed)}"
              f"{' (the others need --update-only)' if not args.update_only else ''}.", file=sys.stderr)
        return 2
    if args.obs != "vector" and (not args.update_only or set(args.algo) - {"drqn", "dqn", "r2d2"}):
        print("population: --obs minatar is for --update-only with --algo drqn, dqn or r2d2.", file=sys.stderr)
        return 2
    if args.collect_only and (args.update_only or args.compile is not None or args.cuda_graph):
        print("population: --collect-only times acting and storing without the update; drop --update-only, --compile "
              "and --cuda-graph.", file=sys.stderr)
        return 2
    if args.cuda_graph and not args.device.startswith("cuda"):
        print("population: --cuda-graph needs --device cuda.", file=sys.stderr)
        return 2
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"population: --device {args.device} needs a CUDA build of torch and a visible GPU; this machine has "
              "none (use --device cpu).", file=sys.stderr)
        return 2
    if args.out and len(args.algo) > 1:
        print("population: --out names one file; pass one --algo with it.", file=sys.stderr)
        return 2
    set_threads(args.threads)
    set_matmul_precision(args.matmul_precision)  # the trainers keep it (their train.matmul_precision is null)
    # As every trainer (and so every population) does: without it, freed buffers go back to the OS and are
    # zero-filled again on first touch, which penalizes whichever side allocates more per call.
    from rlfunc.runtime.perf import tune_allocator

    tuned = tune_allocator()
    device = torch.device(args.device)
    for algo in args.algo:
        machine = run.machine_info(device, allocator_tuned=tuned)
        out = None
        if args.out or not args.quick:
            out = Path(args.out) if args.out else run.RESULTS_DIR / default_name(algo, args.update_only, args.obs,
                                                                                  device.type, args.env, args.collect_only,
                                                                                  args.matmul_precision)
        if args.update_only:
            kind, unit = "update_only", "update ms per learner call, all P members (no env, no replay)"
            agent = _update_shape(_update_problem(algo, args.quick, args.obs)[1])
        elif args.collect_only:
            kind, unit = "collect", "env steps per second without the update (act, env step, store), per member and total"
            agent = _raw(algo, 1, args.quick, False)["agent"] or f"{algo} defaults of rlfunc.runtime.registry"
        else:
            kind, unit = "env_steps", "env steps per second (act, env step, store, learn), per member and total"
            agent = _raw(algo, 1, args.quick, False)["agent"] or f"{algo} defaults of rlfunc.runtime.registry"

        def result(rows: list[dict], complete: bool) -> dict:
            return {
                "benchmark": "population",
                "kind": kind,
                "unit": unit,
                "algo": algo,
                "env": ("MinAtar/Breakout-v0 shapes" if args.obs == "minatar" else None) if args.update_only else args.env,
                "agent": agent,
                "threads": args.threads,
                "device": str(device),
                "cuda_graph": bool(args.cuda_graph),
                "matmul_precision": torch.get_float32_matmul_precision(),
                "repeats": args.repeats,
                "steps_per_window": args.steps,
                "machine": machine,
                "complete": complete,
                "rows": rows,
                "notes": NOTES + (CUDA_NOTE if device.type == "cuda" else ""),
            }

        def emit(rows: list[dict]) -> None:  # after every P: a run stopped part-way keeps the rows it measured
            if out is not None and len(rows) < len(args.members):
                run.write_json(out, result(rows, complete=False))

        if args.update_only:
            rows, _ = _update_rows(algo, args, run, emit)
        elif args.collect_only:
            rows = _collect_rows(algo, args, run, emit)
        else:
            rows = _env_rows(algo, args, run, emit)
        if out is not None:
            run.write_json(out, result(rows, complete=True))
            print(f"wrote {out}")
    return 0


def register(run) -> None:
    """Add the ``population`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("population", "P learners as one population vs P separate ones in one process (issue #24)",
                   configure)(lambda args: run_population(args, run))


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py population [--algo redq sac rlpd] [--update-only] [--quick]")
