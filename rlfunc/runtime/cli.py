"""``rlfunc`` command line: train, eval, resume, plot."""

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
