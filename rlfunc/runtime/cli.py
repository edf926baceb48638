"""``rlfunc`` command line: train, eval, resume, plot, dataset collect."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlfunc", description="Functional RL on PyTorch: train, evaluate, resume, plot.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an agent (default: REDQ on Pendulum-v1)")
    t.add_argument("config", nargs="?", default=None, help="YAML config (default: the embedded REDQ/Pendulum config)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.seed=3 (repeatable)")
    t.add_argument("--run-dir", default=None, help="run directory (default: runs/<algo>-<env>-s<seed>-<time>)")

    e = sub.add_parser("eval", help="evaluate a run directory or checkpoint")
    e.add_argument("path")
    e.add_argument("--episodes", type=int, default=10)
    e.add_argument("--seed", type=int, default=10_000)

    r = sub.add_parser("resume", help="continue an interrupted run from its latest checkpoint")
    r.add_argument("run_dir")
    r.add_argument("--total-steps", type=int, default=None, help="train to this many env steps instead")

    pl = sub.add_parser("plot", help="learning curves of runs (seeds averaged) to a PNG")
    pl.add_argument("run_dirs", nargs="+")
    pl.add_argument("--out", default="curves.png")
    pl.add_argument("--title", default=None)

    d = sub.add_parser("dataset", help="make prior data for RLPD (no download needed)")
    dsub = d.add_subparsers(dest="dataset_command", required=True)
    dc = dsub.add_parser("collect", help="run a trained agent (or a random policy) and write a D4RL-style .npz")
    dc.add_argument("--checkpoint", default=None, metavar="RUN_OR_CKPT", help="run directory or checkpoint of a trained agent")
    dc.add_argument("--env", default=None, help="gymnasium id (default: the checkpoint's env)")
    dc.add_argument("--steps", type=int, required=True, help="transitions to collect")
    dc.add_argument("--noise", type=float, default=0.0, help="Gaussian action noise std in [-1, 1] units")
    dc.add_argument("--policy", choices=["checkpoint", "random"], default=None,
                    help="'random': uniform actions (default: checkpoint if given)")
    dc.add_argument("--seed", type=int, default=0)
    dc.add_argument("--out", required=True, help="output .npz file")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from rlfunc.runtime.checkpoint import CheckpointError
    from rlfunc.runtime.config import ConfigError
    from rlfunc.runtime.trainer import NonFiniteLossError

    try:
        if args.command == "train":
            from rlfunc.runtime.trainer import train

            res = train(args.config, overrides=args.overrides, run_dir=args.run_dir)
            _report(res)
        elif args.command == "resume":
            from rlfunc.runtime.trainer import resume

            _report(resume(args.run_dir, total_steps=args.total_steps))
        elif args.command == "eval":
            from rlfunc.runtime.api import evaluate

            out = evaluate(args.path, episodes=args.episodes, seed=args.seed)
            print(f"mean return {out['mean']:.2f} +- {out['std']:.2f} over {len(out['returns'])} episodes")
        elif args.command == "plot":
            from rlfunc.runtime.plot import plot_runs

            print(f"wrote {plot_runs(args.run_dirs, args.out, args.title)}")
        elif args.command == "dataset":
            from rlfunc.runtime.dataset import collect

            policy = args.policy or ("checkpoint" if args.checkpoint else "random")
            out = collect(
                args.out,
                checkpoint=args.checkpoint,
                env_id=args.env,
                steps=args.steps,
                noise=args.noise,
                policy=policy,
                seed=args.seed,
            )
            ret = "n/a" if out["mean_return"] is None else f"{out['mean_return']:.2f}"
            print(
                f"wrote {out['path']}: {out['transitions']} transitions of {out['env_id']} "
                f"({out['episodes']} complete episodes, mean return {ret}, policy {out['policy']})"
            )
    except (ConfigError, CheckpointError, NonFiniteLossError, FileNotFoundError, ValueError) as exc:
        print(f"rlfunc: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _report(res) -> None:
    final = "n/a" if res.final_return is None else f"{res.final_return:.2f}"
    print(f"run directory: {res.run_dir}")
    print(f"env steps: {res.env_steps}, final eval return: {final}, wall time: {res.wall_s:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
