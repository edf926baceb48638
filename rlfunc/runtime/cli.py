"""``rlfunc`` command line: train, eval, resume, export, configs, algos, plot, dataset collect, sweep."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import traceback
from pathlib import Path

__all__ = ["main", "build_parser", "algo_defaults"]


def _int_at_least(minimum: int, what: str, maximum: int | None = None):
    """An argparse type: an integer >= ``minimum`` (and <= ``maximum``), else one sentence naming
    ``what`` it must be."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1, "a positive integer")


def _seed_arg():
    """``--seed`` of eval and dataset collect: train.seed's range, [0, 2**32 - 1] (a larger seed used to
    reach torch's generator as "Overflow when unpacking long long")."""
    from rlfunc.runtime.config import MAX_SEED

    return _int_at_least(0, f"an integer in [0, 2**{MAX_SEED.bit_length()} - 1]", maximum=MAX_SEED)


def _version() -> str:
    """The installed distribution's version (``importlib.metadata``), else the package's own."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("rlfunc")
    except PackageNotFoundError:
        from rlfunc import __version__

        return __version__


_ALLOW_IMPORT_HELP = (
    "trust the stored config of the run or checkpoint this far: import MODULE where its env.id or env.wrappers "
    "name it (a package allows its submodules), or apply the gymnasium wrapper gymnasium.wrappers.CLASS, which may "
    "render or write files; repeatable. Without it rlfunc imports no module a loaded file names (unless already "
    "imported, or ale_py) and applies only rlfunc's and gymnasium's I/O-free wrappers (docs/checkpoints.md)"
)


def _add_allow_import(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-import", dest="allow_import", action="append", default=[], metavar="MODULE",
                        help=_ALLOW_IMPORT_HELP)


def build_parser() -> argparse.ArgumentParser:
    """The ``rlfunc`` argument parser, every subcommand included (``sweep`` from
    :mod:`rlfunc.scale.cli`); building it runs no command and does not import Ray."""
    p = argparse.ArgumentParser(
        prog="rlfunc", description="Functional RL on PyTorch: train, evaluate, resume, export, plot."
    )
    p.add_argument("--version", action="version", version=f"rlfunc {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND", help="what to do (each command has --help)")

    t = sub.add_parser("train", help="train an agent (default: REDQ on Pendulum-v1)")
    t.add_argument("config", nargs="?", default=None,
                   help="a YAML file, or the name of a packaged config as `rlfunc configs` lists it "
                        "(e.g. redq/hopper); default: the embedded REDQ/Pendulum config")
    t.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config value, e.g. --set train.seed=3 (repeatable; a key set twice takes the last value)")
    t.add_argument("--run-dir", default=None,
                   help="run directory (default: runs/<algo>-<env>-s<seed>-<time>; a population's "
                        "runs/<algo>-<env>-pop<N>-<time>)")
    t.add_argument("--seeds", default=None, metavar="SEEDS",
                   help="train a population of these seeds in one process, e.g. 0-3 or 0,2,5 (train.population.seeds)")
    t.add_argument("--grid", action="append", default=None, metavar="KEY=V1,V2",
                   help="population members for each value, e.g. agent.critic_lr=3e-4,1e-3 (repeatable; settings "
                        "the algorithm takes as data only; train.population.grid)")
    t.add_argument("--vectorize", default=None, choices=("auto", "vmap", "loop"),
                   help="how a population updates its members: one vmapped update (vmap), each member's own update "
                        "in turn (loop), or auto: vmap on a GPU and where batching pays on a CPU "
                        "(train.population.vectorize, default auto; needs --seeds, --grid or a config's "
                        "train.population)")

    e = sub.add_parser("eval", help="evaluate a run directory, checkpoint or export")
    e.add_argument("path", help="run directory, checkpoint directory or `rlfunc export` directory")
    e.add_argument("--episodes", type=_positive_int, default=10, help="episodes to run (default 10)")
    e.add_argument("--seed", type=_seed_arg(), default=10_000,
                   help="seed of the first episode, 0 to 2**32 - 1 (default 10000)")
    e.add_argument("--stochastic", action="store_true",
                   help="act with the algorithm's own exploration (policy samples, DrQ-v2 noise, epsilon-greedy) "
                        "instead of the deterministic evaluation action")
    e.add_argument("--device", default="cpu", help="where the policy runs: cpu (default), cuda, cuda:N")
    e.add_argument("--video", default=None, metavar="DIR",
                   help="record every episode to DIR as mp4 (gymnasium's RecordVideo; needs "
                        'pip install -e ".[video]")')
    e.add_argument("--max-episode-steps", type=_positive_int, default=None, metavar="N",
                   help="end each episode after at most N steps (default: the env's own time limit; "
                        "an env without one runs each episode until it terminates)")
    _add_allow_import(e)

    r = sub.add_parser("resume", help="continue an interrupted run from its newest checkpoint that verifies")
    r.add_argument("run_dir", help="the run directory `rlfunc train` created")
    r.add_argument("--total-steps", type=_positive_int, default=None,
                   help="train to this many env steps (per member, for a population) instead of the stored "
                        "train.total_steps; not fewer than the run has")
    r.add_argument("--address", default=None, metavar="ADDR",
                   help="a distributed run: where its Ray runs, local (Ray on this machine), auto, host:port or "
                        "ray://host:port; needed to resume a run trained on a cluster (the address stored in its "
                        "checkpoint is never joined on its own)")
    r.add_argument("--trust-wandb-settings", action="store_true",
                   help="use the run's stored train.wandb keys that can redirect W&B (dir, settings, ...); without "
                        "it only project, entity, name, group, tags, notes, job_type, mode, id and resume are used")
    _add_allow_import(r)

    x = sub.add_parser("export", help="write a run's policy as a small weights-only checkpoint to share")
    x.add_argument("path", help="run directory or checkpoint directory to export (default: its newest checkpoint)")
    x.add_argument("--out", required=True, metavar="DIR", help="new (or empty) directory to write the export to")

    sub.add_parser("configs", help="list the packaged configs `rlfunc train NAME` accepts")

    a = sub.add_parser("algos", help="list the algorithms, or show one algorithm's agent defaults")
    a.add_argument("name", nargs="?", default=None,
                   help="an algorithm name: print every default of its agent section, and its train.learning_starts "
                        "and train.replay_size (omit to list all)")

    pl = sub.add_parser("plot", help="learning curves of runs (seeds averaged) to a PNG")
    pl.add_argument("run_dirs", nargs="+",
                    help="run directories (a population's plots all its members); runs of one setting that differ "
                         "only in the seed are averaged, with a min-max band")
    pl.add_argument("--out", default="curves.png", metavar="FILE",
                    help="the figure to write (default curves.png; .png is added to a name without a suffix, "
                         "and another suffix such as .svg or .pdf picks that format)")
    pl.add_argument("--title", default=None, help="the figure's title (default: none)")

    d = sub.add_parser("dataset", help="make prior data for RLPD (no download needed)")
    dsub = d.add_subparsers(dest="dataset_command", required=True, metavar="ACTION", help="what to do (collect)")
    dc = dsub.add_parser("collect", help="run a trained agent (or a random policy) and write a D4RL-style .npz")
    dc.add_argument("--checkpoint", default=None, metavar="RUN_OR_CKPT",
                    help="run directory, checkpoint or `rlfunc export` directory of a trained agent")
    dc.add_argument("--env", default=None, help="gymnasium id (default: the checkpoint's env)")
    dc.add_argument("--steps", type=_positive_int, required=True, help="transitions to collect")
    dc.add_argument("--noise", type=float, default=0.0,
                    help="Gaussian noise std added to the checkpoint's actions, in [-1, 1] units "
                         "(default 0; not with --policy random)")
    dc.add_argument("--policy", choices=["checkpoint", "random"], default=None,
                    help="'random': uniform actions (default: checkpoint when --checkpoint is given, else random)")
    dc.add_argument("--seed", type=_seed_arg(), default=0,
                    help="seed of the env, the random actions and the noise, 0 to 2**32 - 1 (default 0)")
    dc.add_argument("--out", required=True, help="output .npz file, new (an existing file is not replaced)")
    _add_allow_import(dc)

    from rlfunc.scale.cli import add_sweep_parser  # Ray itself is imported only when a sweep runs

    add_sweep_parser(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run one command. Exit codes: 0 done, 2 bad input (one sentence on stderr, nothing
    trained is lost), 130 interrupted (saved; how to continue is printed), 1 a bug in rlfunc
    (its traceback, and a line saying so)."""
    try:
        args = build_parser().parse_args(argv)
    except KeyboardInterrupt:  # while the parser is built (it imports what the help lists)
        print("rlfunc: interrupted.", file=sys.stderr)
        return 130
    try:
        _run(args)  # torch and the rest are imported here, so a Ctrl-C while they load is this one line too
    except KeyboardInterrupt as exc:  # a run's own says what was saved; a plain Ctrl-C has no message
        print(f"rlfunc: {str(exc) or _interrupted(args)}", file=sys.stderr)
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


def _interrupted(args: argparse.Namespace) -> str:
    """The line of a Ctrl-C that no run answered with its own (an evaluation, a data collection)."""
    if args.command == "dataset":
        return f"interrupted; nothing written ({args.out} holds the transitions only once collected)."
    if args.command == "eval":
        return "interrupted; no result (the episodes run so far are not reported)."
    return "interrupted."


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
    elif isinstance(exc, OSError) and exc.errno is None and exc.filename is None:
        text = str(exc)  # rlfunc's own sentence (e.g. plot: a run without eval.csv), not the system's
    elif isinstance(exc, OSError):
        what = f"{exc.filename!r}" if exc.filename else "a file"
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            run_dir = _resumable_run_of(exc.filename)
            then = f"free space, then continue with `rlfunc resume {run_dir}`" if run_dir else "free space and run again"
            text = f"cannot write {what}: the disk is full; {then}."
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


def _resumable_run_of(filename) -> str | None:
    """The run directory holding ``filename`` (itself, or one of its three parents: a run's
    ``metrics.csv``, ``checkpoints/step_*/...``) when that run has a checkpoint to resume from, else ``None``.
    A population member's directory is passed over: the population above it is what resumes."""
    import re

    from rlfunc.runtime.checkpoint import latest_checkpoint
    from rlfunc.runtime.population import is_population_run

    if not filename:
        return None
    path = Path(os.fsdecode(filename)).absolute()
    for run_dir in [path, *list(path.parents)[:4]]:
        if re.fullmatch(r"member-\d+", run_dir.name) and is_population_run(run_dir.parent):
            continue
        if (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints").is_dir():
            try:
                return str(run_dir) if latest_checkpoint(run_dir / "checkpoints") is not None else None
            except OSError:
                return None
    return None


_PATH_ARGS = {
    "config": "CONFIG", "run_dir": "--run-dir", "path": "PATH", "out": "--out", "video": "--video",
    "checkpoint": "--checkpoint", "sweep_dir": "--sweep-dir", "resume": "--resume",
}


def _check_no_empty_paths(args: argparse.Namespace) -> None:
    """An empty path (``--run-dir "$UNSET"``) meant the current directory: a run trained, a sweep or an
    export written into wherever the command ran. Refused in one sentence instead."""
    from rlfunc.runtime.config import ConfigError

    names = {**_PATH_ARGS, "run_dir": "RUN_DIR"} if args.command == "resume" else _PATH_ARGS
    for dest, name in names.items():
        if getattr(args, dest, None) == "":
            raise ConfigError(f"{name} is empty; pass a path (an unset shell variable?).")
    if "" in (getattr(args, "run_dirs", None) or []):
        raise ConfigError("a run directory is empty; pass each run's path (an unset shell variable?).")


def _run(args: argparse.Namespace) -> None:
    _check_no_empty_paths(args)
    if args.command == "train":
        from rlfunc.runtime.packaged import resolve_config
        from rlfunc.runtime.population import train

        config = None
        if args.config is not None:
            config = resolve_config(args.config)
            if str(config) != args.config:
                print(f"config {args.config}: {config}")  # stdout: an error after it stays stderr's one line
        res = train(config, overrides=args.overrides, run_dir=args.run_dir, seeds=args.seeds, grid=args.grid,
                    vectorize=args.vectorize)
        _report(res)
    elif args.command == "resume":
        from rlfunc.runtime.trainer import resume

        _report(resume(args.run_dir, total_steps=args.total_steps, allow_import=args.allow_import,
                       address=args.address, trust_wandb_settings=args.trust_wandb_settings))
    elif args.command == "eval":
        from rlfunc.runtime.api import check_device, evaluate

        check_device(args.device)
        out = evaluate(
            args.path, episodes=args.episodes, seed=args.seed, stochastic=args.stochastic, device=args.device,
            video_dir=args.video, allow_import=args.allow_import, max_episode_steps=args.max_episode_steps,
        )
        how = " (stochastic)" if args.stochastic else ""
        print(f"mean return {out['mean']:.2f} +- {out['std']:.2f} over {len(out['returns'])} episodes{how}")
        if args.video is not None:
            print(f"wrote {len(out['videos'])} video(s) to {args.video}")
    elif args.command == "export":
        from rlfunc.runtime.api import export

        written = _export(export, args.path, args.out)
        size = sum(f.stat().st_size for f in written.rglob("*") if f.is_file())
        print(f"wrote {written} ({size / 1e6:.2f} MB); load it with rlfunc.load({args.out!r}) or `rlfunc eval {args.out}`")
    elif args.command == "configs":
        _list_configs()
    elif args.command == "algos":
        _list_algos(args.name)
    elif args.command == "plot":
        from rlfunc.runtime.config import ConfigError
        from rlfunc.runtime.plot import plot_runs

        try:  # before any run is read: one sentence, not plot_curves' RuntimeError (exit 1, "a bug")
            import matplotlib  # noqa: F401  (plot_curves picks its Agg backend before pyplot)
        except ImportError:
            raise ConfigError('rlfunc plot needs matplotlib, which is not installed; install it with pip install -e ".[plots]".') from None

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
            allow_import=args.allow_import,
        )
        ret = "n/a" if out["mean_return"] is None else f"{out['mean_return']:.2f}"
        print(
            f"wrote {out['path']}: {out['transitions']} transitions of {out['env_id']} "
            f"({out['episodes']} complete episodes, mean return {ret}, policy {out['policy']})"
        )
    elif args.command == "sweep":
        from rlfunc.scale.cli import run_sweep_command

        run_sweep_command(args)


def _export(export, path: str, out: str):
    """``export(path, out)``; a write that fails (a place that cannot be written, a full disk) is one
    sentence about the export, not the checkpoint writer's advice to resume a run, and the ``--out``
    directory made for it is removed again when it is left empty."""
    import os
    from pathlib import Path

    from rlfunc.runtime.checkpoint import CheckpointWriteError

    existed = os.path.lexists(out)
    try:
        return export(path, out)
    except CheckpointWriteError as exc:
        if not existed:
            try:
                Path(out).rmdir()  # only if empty: what a failed export made, nothing else
            except OSError:
                pass
        cause = exc.__cause__
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        reason = "the disk is full" if full else (getattr(cause, "strerror", None) or str(cause or exc))
        raise ValueError(
            f"Cannot write the export to {out!r} ({reason}); "
            + ("free space and export again." if full else "pass --out a new directory in a place you can write to.")
        ) from None


def _list_configs() -> None:
    from rlfunc.runtime.packaged import configs_dir, list_configs

    configs = list_configs()
    if not configs:
        raise ValueError("No packaged configs were found next to this rlfunc installation; reinstall rlfunc.")
    width = max(len(c.name) for c in configs)
    for c in configs:
        print(f"{c.name:<{width}}  {c.summary}{_needs_data(c.path)}")
    print(f"({len(configs)} configs in {configs_dir()}; run one with `rlfunc train NAME`)")


def _needs_data(path) -> str:
    """`` (needs --set data.path=FILE.npz)`` for a packaged RLPD config shipped without its prior data
    (``rlfunc train NAME`` alone refuses it), else ``""``."""
    from rlfunc.runtime.config import load_config

    try:
        raw = load_config(path)
    except Exception:  # noqa: BLE001 -- a listing never fails on one file; `rlfunc train` says what is wrong
        return ""
    data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    online_only = data.get("offline_ratio") == 0  # RLPD without prior data trains online only
    return " (needs --set data.path=FILE.npz)" if raw.get("algo") == "rlpd" and not data.get("path") and not online_only else ""


def algo_defaults(name: str) -> dict:
    """What a config of algorithm ``name`` gets when it leaves a key out: ``{"algo": name, "train":
    {learning_starts, replay_size}, "agent": {every field of the algorithm's Config}}``, as plain YAML
    values (tuples as lists). ``rlfunc algos NAME`` prints it; the docs' config reference shows it."""
    import dataclasses

    from rlfunc.runtime.registry import get_algo

    entry = get_algo(name)
    agent = dataclasses.asdict(entry.config_cls(**entry.config_defaults))
    plain = {k: list(v) if isinstance(v, tuple) else v for k, v in agent.items()}
    return {"algo": entry.name, "train": dict(entry.train_defaults), "agent": plain}


def _list_algos(name: str | None) -> None:
    import yaml

    from rlfunc.runtime.packaged import list_configs
    from rlfunc.runtime.registry import ALGOS, get_algo

    if name is not None:
        entry = get_algo(name)
        print(f"# {entry.name}: {entry.description}")
        learner = entry.learner_cls
        print(f"# every agent default ({entry.module}.{entry.config_cls_name}); a config's agent section overrides them")
        print(
            f"# train.learning_starts counts {learner.learning_starts_unit}, "
            f"train.replay_size counts {learner.replay_size_unit}"
        )
        print(yaml.safe_dump(algo_defaults(name), sort_keys=False, default_flow_style=None), end="")
        return
    by_algo: dict[str, list[str]] = {}
    for c in list_configs():
        by_algo.setdefault(c.name.split("/")[0], []).append(c.name)
    width = max(len(n) for n in ALGOS)
    for n, entry in ALGOS.items():
        print(f"{n:<{width}}  {entry.description}")
        print(f"{'':<{width}}  configs: {', '.join(by_algo.get(n, [])) or 'none packaged'}")
    print("(`rlfunc algos NAME` prints an algorithm's agent defaults)")


def _report(res) -> None:
    for member in getattr(res, "members", []):  # a population: each member's line, then the whole run's
        final = "n/a" if member.final_return is None else f"{member.final_return:.2f}"
        print(f"{member.run_dir}: final eval return {final}")
    if hasattr(res, "members"):
        grads = sorted({m.gradient_steps for m in res.members})  # members' counts drift with their episodes
        grad = f"{grads[0]}" if len(grads) == 1 else f"{grads[0]}-{grads[-1]}"
        print(f"population of {len(res.members)} in {res.run_dir}: env steps {res.env_steps} per member, "
              f"gradient steps {grad} per member, wall time {res.wall_s:.0f}s")
        return
    final = "n/a" if res.final_return is None else f"{res.final_return:.2f}"
    print(f"run directory: {res.run_dir}")
    print(
        f"env steps: {res.env_steps}, gradient steps: {res.gradient_steps}, final eval return: {final}, "
        f"wall time: {res.wall_s:.0f}s"
    )
    print(f"stopped: {res.stop_reason}")


if __name__ == "__main__":
    sys.exit(main())
