"""DRQN's acting-view diagnostic: how a trained agent's greedy episodes end.

    python benchmarks/run.py drqn-episodes CHECKPOINT [CHECKPOINT ...] [--episodes 20] [--window 10] [--out PATH]

DRQN trains on windows unrolled from a zero state (Hausknecht & Stone 2015,
"bootstrapped random updates") but acts with the LSTM state carried through the
whole episode. For each checkpoint (a run directory or ``checkpoints/step_*``)
this plays the same greedy episodes twice, on the env the run trained on:

* ``carried``: as evaluation does (:class:`rlfunc.runtime.policy.Policy`), greedy
  even if the run set ``eval_epsilon``;
* ``windowed``: at every step the last ``--window`` observations are unrolled
  from zeros and the last step's Q-values act -- the view the training windows had.

and reports mean return and length and how the episodes ended: ``truncated``
(time limit) or terminated, which on CartPole is split into ``pole`` (angle past
its threshold) and ``cart`` (position off the track). If the two modes score
alike, the train/act state mismatch is not what limits the agent.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import torch


def _end_cause(env, terminated: bool) -> str:
    if not terminated:
        return "truncated"
    base = env.unwrapped
    state = getattr(base, "state", None)
    if state is not None and hasattr(base, "theta_threshold_radians") and hasattr(base, "x_threshold"):
        x, theta = float(state[0]), float(state[2])
        if abs(theta) > base.theta_threshold_radians:
            return "pole"
        if abs(x) > base.x_threshold:
            return "cart"
    return "terminated"


def play(policy, env, episodes: int, seed: int, window: int | None) -> dict:
    """Greedy episodes of a DRQN ``policy``; ``window=None`` carries the state, else re-unrolls."""
    from rlfunc.algos import drqn

    returns, lengths, ends = [], [], []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        policy.reset(1)
        history = [obs]
        total, steps = 0.0, 0
        while True:
            if window is None:
                action = policy.act(obs)
            else:
                x = torch.as_tensor(np.stack(history[-window:])[:, None], dtype=torch.float32)
                with torch.no_grad():
                    q, _ = drqn.q_unroll(policy.params, x, drqn.initial_carry(policy.config, 1))
                action = int(q[-1, 0].argmax())
            obs, reward, terminated, truncated, _ = env.step(action)
            history.append(obs)
            total += float(reward)
            steps += 1
            if terminated or truncated:
                ends.append(_end_cause(env, terminated))
                break
        returns.append(total)
        lengths.append(steps)
    return {
        "mean_return": float(np.mean(returns)),
        "mean_length": float(np.mean(lengths)),
        "returns": returns,
        "ends": {cause: ends.count(cause) for cause in sorted(set(ends))},
    }


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("checkpoints", nargs="+", type=Path, help="DRQN run directories or checkpoints/step_* folders")
    p.add_argument("--episodes", type=int, default=20)
    p.add_argument("--window", type=int, default=None,
                   help="observations re-unrolled from zeros per action (default: the run's sequence_length)")
    p.add_argument("--seed", type=int, default=100, help="episode i is reset with seed + i, the same in both modes")
    p.add_argument("--threads", type=int, default=1, help="torch threads (1: the acting is tiny)")
    p.add_argument("--out", type=Path, default=None, help="JSON path (default: print only)")
    p.add_argument("--note", default=None, help="free text stored in the JSON (which runs these checkpoints are)")


def run_episodes_diagnostic(args: argparse.Namespace, run) -> int:
    import rlfunc
    from rlfunc.envs import build_wrappers, make_env
    from rlfunc.runtime.checkpoint import resolve_checkpoint

    torch.set_num_threads(args.threads)
    rows = []
    for path in args.checkpoints:
        policy = rlfunc.load(path)
        cfg = policy.run_config
        if cfg.algo != "drqn":
            raise SystemExit(f"drqn-episodes: {path} is a {cfg.algo!r} run, not drqn.")
        # Both modes greedy: a run's eval_epsilon would make only the carried mode explore.
        policy.config = dataclasses.replace(policy.config, eval_epsilon=0.0)
        window = args.window or policy.config.sequence_length
        env = make_env(cfg.env.id, kwargs=cfg.env.kwargs, wrappers=build_wrappers(cfg.env.wrappers))
        meta = json.loads((resolve_checkpoint(path) / "meta.json").read_text())
        row = {
            "checkpoint": str(path),
            "env_step": meta.get("env_step"),
            "window": window,
            "carried": play(policy, env, args.episodes, args.seed, None),
            "windowed": play(policy, env, args.episodes, args.seed, window),
        }
        env.close()
        rows.append(row)
        print(f"{path}: carried {row['carried']['mean_return']:.1f} {row['carried']['ends']}, "
              f"windowed({window}) {row['windowed']['mean_return']:.1f} {row['windowed']['ends']}", flush=True)
    if args.out is not None:
        run.write_json(args.out, {
            "benchmark": "drqn_episode_ends",
            "note": args.note,
            "machine": run.machine_info(torch.device("cpu"), allocator_tuned=False),
            "threads": args.threads,
            "episodes": args.episodes,
            "seed": args.seed,
            "rows": rows,
        })
        print(f"wrote {args.out}")
    return 0


def register(run) -> None:
    """Add the ``drqn-episodes`` subcommand to ``benchmarks/run.py`` (``run`` is that module)."""
    run.subcommand("drqn-episodes", "DRQN: how greedy episodes end, acting from the carried state vs 10-step windows",
                   configure)(lambda args: run_episodes_diagnostic(args, run))
