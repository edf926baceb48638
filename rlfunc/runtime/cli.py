"""``rlfunc`` command line: train, eval, resume, plot, dataset collect."""

from __future__ import annotations

import argparse
import errno
import sys
import traceback

__all__ = ["main"]


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonnegative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rlfunc", description="Functional RL on PyTorch: train, evaluate, resume, plot.")
    sub = p.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train an agent (default: REDQ on Pendulum-v1)")
    t.add_argument("config", nargs="?", default=None, help="YAML config (default: the embedded REDQ/Pendulum config)")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.seed=3 (repeatable)")
    t.add_argument("--run-dir", default=None, help="run directory (default: runs/<algo>-<env>-s<seed>-<time>)")

    e = sub.add_parser("eval", help="evaluate a run directory or checkpoint")
    e.add_argument("path", help="run directory or checkpoint directory")
    e.add_argument("--episodes", type=_positive_int, default=10, help="episodes to run (default 10)")
    e.add_argument("--seed", type=_nonnegative_int, default=10_000, help="seed of the first episode")

    r = sub.add_parser("resume", help="continue an interrupted run from its newest checkpoint that verifies")
    r.add_argument("run_dir", help="the run directory `rlfunc train` created")
    r.add_argument("--total-steps", type=_positive_int, default=None, help="train to this many env steps instead")

    pl = sub.add_parser("plot", help="learning curves of runs (seeds averaged) to a PNG")
    pl.add_argument("run_dirs", nargs="+", help="run directories (seeds of one setting are averaged)")
    pl.add_argument("--out", default="curves.png")
    pl.add_argument("--title", default=None)

    d = sub.add_parser("dataset", help="make prior data for RLPD (no download needed)")
    dsub = d.add_subparsers(dest="dataset_command", required=True)
    dc = dsub.add_parser("collect", help="run a trained agent (or a random policy) and write a D4RL-style .npz")
    dc.add_argument("--checkpoint", default=None, metavar="RUN_OR_CKPT", help="run directory or checkpoint of a trained agent")
    dc.add_argument("--env", default=None, help="gymnasium id (default: the checkpoint's env)")
    dc.add_argument("--steps", type=_positive_int, required=True, help="transitions to collect")
    dc.add_argument("--noise", type=float, default=0.0, help="Gaussian action noise std in [-1, 1] units")
    dc.add_argument("--policy", choices=["checkpoint", "random"], default=None,
                    help="'random': uniform actions (default: checkpoint if given)")
    dc.add_argument("--seed", type=_nonnegative_int, default=0)
    dc.add_argument("--out", required=True, help="output .npz file")
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done, 2 bad input (one sentence on stderr, nothing
    trained is lost), 130 interrupted (saved; how to continue is printed), 1 a bug in rlfunc
    (its traceback, and a line saying so)."""
    args = _parser().parse_args(argv)
    try:
        _run(args)
    except KeyboardInterrupt as exc:
        print(f"rlfunc: {exc or 'interrupted'}", file=sys.stderr)
        return 130
    except Exception as exc:
        message = user_error_message(exc)
        if message is None:
            traceback.print_exc()
            print(
                "rlfunc: this is a bug in rlfunc, not in your input; please report it with the traceback above.",
                file=sys.stderr,
            )
            return 1
        print(f"rlfunc: error: {message}", file=sys.stderr)
        return 2
    return 0


def user_error_message(exc: BaseException) -> str | None:
    """One line for an error caused by the user's input (a config, an override, a path, a file,
    a checkpoint, a dataset, the disk or the memory it asks for); ``None`` for a bug in rlfunc."""
    import gymnasium as gym
    import torch
    import yaml

    from rlfunc.replay.offline import DatasetError
    from rlfunc.runtime.checkpoint import CheckpointError, CheckpointWriteError
    from rlfunc.runtime.config import ConfigError
    from rlfunc.runtime.trainer import NonFiniteLossError

    if isinstance(exc, (ConfigError, CheckpointError, CheckpointWriteError, DatasetError, NonFiniteLossError)):
        text = str(exc)
    elif isinstance(exc, OSError):
        what = f"{exc.filename!r}" if exc.filename else "a file"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            text = f"cannot write {what}: the disk is full; free space and run again."
        else:
            text = f"cannot use {what}: {exc.strerror or exc}; check the path and its permissions."
    elif isinstance(exc, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc)  # torch's CPU allocator
    ):
        text = (
            f"out of memory ({type(exc).__name__}: {exc}); lower train.replay_size, agent.batch_size "
            "or the network sizes, or use a machine with more memory."
        )
    elif isinstance(exc, (ValueError, gym.error.Error, yaml.YAMLError)):
        text = str(exc)
    else:
        return None
    return " ".join(text.split()) or type(exc).__name__


def _run(args: argparse.Namespace) -> None:
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


def _report(res) -> None:
    final = "n/a" if res.final_return is None else f"{res.final_return:.2f}"
    print(f"run directory: {res.run_dir}")
    print(f"env steps: {res.env_steps}, final eval return: {final}, wall time: {res.wall_s:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
