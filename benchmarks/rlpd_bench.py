"""RLPD entries of ``benchmarks/run.py``: ``learn --algo rlpd``.

``python benchmarks/run.py learn --algo rlpd --seeds 3`` answers "does prior
data help, and does LayerNorm matter?" on Pendulum-v1:

1. **expert**: the project's own agent -- SAC trained with
   ``configs/sac/pendulum.yaml`` for ``--expert-steps`` env steps (or an
   existing run/checkpoint with ``--expert``);
2. **prior data**: ``rlfunc dataset collect`` with that agent and Gaussian
   action noise (``--data-steps`` transitions, ``--data-noise`` std in
   ``[-1, 1]`` units), or an existing ``.npz`` with ``--data``;
3. three runs per seed, each ``--steps`` online env steps with the same
   warm-up (``--learning-starts`` steps of uniform actions) and evaluation schedule:

   * ``rlpd``: ``configs/rlpd/pendulum.yaml`` with the prior data;
   * ``rlpd_no_layernorm``: the same without LayerNorm in the critics;
   * ``sac_scratch``: ``configs/sac/pendulum.yaml`` (256-256, G = 1), no prior data.

``--preset cpu`` (default) shrinks RLPD's update so that 3 seeds fit a
2-core CPU in well under an hour: critics and actor 64-64, G = 5 critic steps
per env step, batch 128 (RLPD's rules otherwise: 10 LayerNorm critics, M = 2,
target entropy -|A|/2, actor after the critic steps, half prior data in every
mini-batch). ``--preset paper`` keeps the official 256-256, G = 20, batch 256
(about 1-2 s per env step on one CPU core; use a GPU). The JSON records which.

Output: ``benchmarks/results/learn_rlpd.json`` (every run's evaluations, the
median over seeds per evaluation step, the first step where the median reaches
``--target``) and ``learn_rlpd.png`` (median curves with min-max bands).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

PRESETS = {
    "cpu": {"agent.hidden_sizes": [64, 64], "agent.updates_per_step": 5, "agent.batch_size": 128, "agent.ensemble_mode": "bmm"},
    "paper": {},
}

LABELS = ("rlpd", "rlpd_no_layernorm", "sac_scratch")


def configure(p: argparse.ArgumentParser) -> None:
    """Options of ``learn`` that only ``--algo rlpd`` reads."""
    g = p.add_argument_group("learn --algo rlpd")
    g.add_argument("--expert", type=Path, default=None, help="RLPD: trained run/checkpoint that collects the prior data")
    g.add_argument("--expert-steps", type=int, default=8000, help="RLPD: SAC training steps when --expert is not given")
    g.add_argument("--data", type=Path, default=None, help="RLPD: an existing prior-data .npz (skips collection)")
    g.add_argument("--data-steps", type=int, default=5000, help="RLPD: transitions to collect")
    g.add_argument("--data-noise", type=float, default=0.2, help="RLPD: action noise std of the collecting agent")
    g.add_argument("--learning-starts", type=int, default=200, help="RLPD: uniform warm-up steps of every run")
    g.add_argument("--preset", choices=sorted(PRESETS), default="cpu", help="RLPD: update size (module doc)")
    g.add_argument("--target", type=float, default=-200.0, help="RLPD: return the median must reach")


def _median_curve(runs: list[dict]) -> list[list[float]]:
    steps = sorted({s for r in runs for s, _ in r["evals"]})
    out = []
    for s in steps:
        vals = [v for r in runs for st, v in r["evals"] if st == s]
        if len(vals) == len(runs):
            out.append([s, statistics.median(vals), min(vals), max(vals)])
    return out


def _plot(curves: dict[str, list[list[float]]], path: Path, title: str, target: float) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curve in curves.items():
        if not curve:
            continue
        xs = [c[0] for c in curve]
        ax.plot(xs, [c[1] for c in curve], label=label, marker="o", ms=3)
        ax.fill_between(xs, [c[2] for c in curve], [c[3] for c in curve], alpha=0.2)
    ax.axhline(target, color="grey", ls="--", lw=1, label=f"target {target:g}")
    ax.set_xlabel("online env steps")
    ax.set_ylabel("eval return (median over seeds, min-max band)")
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def run_learn_rlpd(args: argparse.Namespace, run) -> int:
    """``learn --algo rlpd``: expert -> prior data -> RLPD / RLPD without LayerNorm / SAC over seeds."""
    import torch

    from rlfunc.runtime.config import parse_overrides
    from rlfunc.runtime.dataset import collect

    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = Path(args.runs_dir) / f"rlpd-{stamp}"
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    shared = parse_overrides(args.overrides)
    steps = args.steps or 2000

    # 1. the expert
    expert = args.expert
    expert_info: dict = {}
    if args.data is None and expert is None:
        print(f"learn --algo rlpd: training the SAC expert ({args.expert_steps} steps) ...", flush=True)
        entries, _ = run.learn_entries(
            "sac_expert", "configs/sac/pendulum.yaml", [100],
            {"train.total_steps": args.expert_steps, "train.eval_every": 1000, "train.checkpoint_every": 1000},
            args.threads)
        (res,), _, _ = run.run_learn_plan(run.learn_plan(work / "expert", entries, [100]), jobs=1, echo=lambda line: None)
        expert = Path(res["run_dir"])
        expert_info = {"trained_here": True, "steps": args.expert_steps, "evals": res["evals"], "wall_s": res["wall_s"]}
        print(f"  expert final eval {res['final_return']:.1f} ({res['wall_s']:.0f} s)", flush=True)
    # 2. the prior data
    if args.data is not None:
        data_path = Path(args.data).resolve()
        data_info = {"path": str(data_path), "collected_here": False}
    else:
        data_path = work / "prior.npz"
        data_info = collect(data_path, checkpoint=expert, steps=args.data_steps, noise=args.data_noise, seed=1)
        data_info["collected_here"] = True
        expert_info.setdefault("path", str(expert))
        print(f"  prior data: {data_info['transitions']} transitions, mean episode return "
              f"{data_info['mean_return']:.1f} (noise {args.data_noise})", flush=True)
    # 3. the comparison
    common = {
        "train.total_steps": steps,
        "train.learning_starts": args.learning_starts,
        "train.eval_every": 250,
        "train.eval_episodes": 5,
        "train.checkpoint_every": steps,
        **shared,
    }
    rlpd_over = {**common, **PRESETS[args.preset], "data.path": str(data_path)}
    table = {
        "rlpd": ("configs/rlpd/pendulum.yaml", rlpd_over),
        "rlpd_no_layernorm": ("configs/rlpd/pendulum.yaml", {**rlpd_over, "agent.critic_layer_norm": False}),
        "sac_scratch": ("configs/sac/pendulum.yaml", dict(common)),
    }
    labels = [lab for lab in LABELS if args.only is None or lab in args.only]
    seeds = list(range(args.first_seed, args.first_seed + args.seeds))  # --first-seed adds seeds to earlier runs
    entries = []
    for lab in labels:
        entries += run.learn_entries(lab, table[lab][0], seeds, table[lab][1], args.threads,
                                     getattr(args, "population", True))[0]
    print(f"learn --algo rlpd: {len(labels) * len(seeds)} runs ({', '.join(labels)} x {args.seeds} seeds, {steps} steps, "
          f"preset {args.preset}), {args.jobs} at a time", flush=True)
    runs, failed, executor = run.run_learn_plan(run.learn_plan(work / "runs", entries, seeds), args.jobs,
                                                echo=lambda line: print(line, flush=True))
    if failed:
        for name, why in failed.items():
            print(f"learn --algo rlpd: {name} failed: {why}", file=sys.stderr)
        return 1
    curves = {lab: _median_curve([r for r in runs if r["algo"] == lab]) for lab in labels}
    summary = run._summary(runs)
    for lab in labels:
        curve = curves[lab]
        reach = next((int(c[0]) for c in curve if c[1] >= args.target), None)
        summary[lab]["median_curve"] = curve
        summary[lab]["first_step_median_reaches_target"] = reach
        summary[lab]["median_at_2000"] = next((c[1] for c in curve if c[0] == 2000), None)
    verdict = None
    if "rlpd" in summary and "sac_scratch" in summary:
        r_med, s_med = summary["rlpd"]["median_final_return"], summary["sac_scratch"]["median_final_return"]
        verdict = {
            "target": args.target,
            "rlpd_median_final": r_med,
            "sac_scratch_median_final": s_med,
            "rlpd_reaches_target": summary["rlpd"]["first_step_median_reaches_target"] is not None,
            "rlpd_ahead_of_sac_by": None if r_med is None or s_med is None else r_med - s_med,
        }
    result = {
        "machine": {**run.machine_info(torch.device("cpu"), allocator_tuned=False), **executor},
        "benchmark": "learn",
        "algo": "rlpd",
        "verdict": verdict,
        "summary": summary,
        "runs": runs,
        "settings": {
            "env": "Pendulum-v1",
            "online_steps": steps,
            "seeds": args.seeds,
            "first_seed": args.first_seed,
            "preset": args.preset,
            "preset_overrides": PRESETS[args.preset],
            "common_overrides": common,
            "configs": {lab: table[lab][0] for lab in labels},
            "expert": expert_info or {"path": str(expert) if expert else None},
            "data": data_info,
            "jobs": args.jobs,
            "threads_per_run": args.threads,
            "final_return": "mean greedy return of the last evaluation (5 episodes)",
            "total_wall_s": time.perf_counter() - t0,
        },
    }
    if args.note:
        result["note"] = args.note
    out = args.out or run.RESULTS_DIR / "learn_rlpd.json"
    run.write_json(out, result)
    png = _plot(curves, out.with_suffix(".png"),
                f"RLPD on Pendulum-v1 with prior data ({args.seeds} seeds, preset {args.preset})", args.target)
    print()
    run.print_table(
        [{"algo": k, **v} for k, v in summary.items()],
        [("algo", "algo", ""), ("seeds", "seeds", "d"), ("median final", "median_final_return", ".1f"),
         ("median reaches target at", "first_step_median_reaches_target", "")],
    )
    print(f"\nwrote {out}" + (f" and {png}" if png else ""))
    return 0


def register(run) -> None:
    """Add ``learn --algo rlpd`` to ``benchmarks/run.py`` (``run`` is that module)."""
    if not hasattr(run, "LEARN_ALGOS") or "learn" not in run.SUBCOMMANDS:
        return
    run.LEARN_ALGOS["rlpd"] = [(lab, "configs/rlpd/pendulum.yaml") for lab in LABELS]
    help_, configure_learn, runner = run.SUBCOMMANDS["learn"]

    def configure_all(p: argparse.ArgumentParser) -> None:
        configure_learn(p)
        configure(p)

    def dispatch(args: argparse.Namespace) -> int:
        if getattr(args, "algo", None) == "rlpd" and getattr(args, "config", None) is None:
            return run_learn_rlpd(args, run)
        return runner(args)

    run.SUBCOMMANDS["learn"] = (help_, configure_all, dispatch)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python benchmarks/run.py learn --algo rlpd --seeds 3")
