"""The ``rlfunc sweep`` subcommand's arguments and body (``rlfunc.runtime.cli`` registers it).
Importing this module does not import Ray."""

from __future__ import annotations

import argparse
import sys

__all__ = ["add_sweep_parser", "run_sweep_command"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def _nonnegative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return value


def add_sweep_parser(sub) -> argparse.ArgumentParser:
    s = sub.add_parser(
        "sweep",
        help="train seeds x a grid of settings as Ray tasks (embedded Ray, or --address a cluster)",
        description="Each (grid point, seed) is one Ray task (with --population, each grid point) that writes an "
                    "ordinary run directory under the "
                    "sweep directory; then the learn JSON and a PNG with one curve per grid point. "
                    'Needs pip install -e ".[ray]".',
    )
    s.add_argument("config", nargs="?", default=None,
                   help="a YAML file or a packaged config name, as for `rlfunc train` (not with --resume)")
    s.add_argument("--seeds", default=None, help="seeds: a range 0-4, a list 0,2,5 or one seed (default 0)")
    s.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2",
                   help="values to sweep, e.g. --grid agent.critic_lr=1e-3,3e-4 (repeatable: the product)")
    s.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="override for every run, e.g. --set train.total_steps=20000 (repeatable; a key set twice takes the last value)")
    s.add_argument("--address", default=None,
                   help="join a Ray cluster: auto, host:port or ray://host:port (default: a local Ray on this machine)")
    s.add_argument("--max-concurrent", type=_positive, default=None,
                   help="runs in flight at once (default: as many as the cluster's CPUs allow)")
    s.add_argument("--max-retries", type=_nonnegative, default=3,
                   help="retries of a run whose worker process dies; each resumes from its checkpoint (default 3)")
    s.add_argument("--gpus", type=float, default=None,  # None: not given (refused with --resume, 0 otherwise)
                   help="GPU (fraction) per run, e.g. 0.25 (default 0; not with --resume)")
    s.add_argument("--sweep-dir", default=None, help="where the run directories go (default: runs/sweep-<algo>-<env>-<time>)")
    s.add_argument("--resume", default=None, metavar="SWEEP_DIR",
                   help="continue a stopped sweep: finished runs are kept, the others resume from their checkpoints "
                        "(the stored plan: not with CONFIG, --seeds, --grid, --set, --sweep-dir, --population or "
                        "--gpus)")
    s.add_argument("--population", action="store_true",
                   help="train each grid point's seeds as one population (one task, member-<k>/ runs; "
                        "not with stopping rules, train.wandb, data.pretrain_steps, train.checkpoint_replay=false "
                        "or a distributed config) instead of one run per seed")
    s.add_argument("--out", default=None, help="the JSON path (default SWEEP_DIR/results.json; the PNG goes beside it)")
    from rlfunc.runtime.cli import _add_allow_import  # rlfunc resume's --allow-import, for the stored plan's configs

    _add_allow_import(s)  # with --resume only: a new sweep's CONFIG is the user's own
    s.add_argument("--trust-wandb-settings", action="store_true",
                   help="with --resume: use the stored configs' train.wandb keys that redirect W&B (dir, settings, ...), "
                        "which a loaded plan does not use on its own (as rlfunc resume --trust-wandb-settings)")
    return s


def run_sweep_command(args: argparse.Namespace) -> None:
    from rlfunc.runtime.packaged import resolve_config
    from rlfunc.scale.sweep import resume_command, sweep

    config = args.config
    if config is not None and args.resume is None:
        config = resolve_config(config)
    result = sweep(
        config, args.seeds, args.grid, args.overrides, sweep_dir=args.sweep_dir,
        resume=args.resume, address=args.address, max_concurrent=args.max_concurrent,
        max_retries=args.max_retries, gpus=args.gpus, out=args.out,
        echo=lambda line: print(line, flush=True), population=args.population, allow_import=args.allow_import,
        trust_wandb_settings=args.trust_wandb_settings,
    )
    for label, s in result["summary"].items():
        median = "n/a" if s["median_final_return"] is None else f"{s['median_final_return']:.1f}"
        print(f"{label}: median final return {median} over {s['seeds']} seed(s)")
    print(f"wrote {result['json']}" + (f" and {result['png']}" if result.get("png") else ""))
    if result["failed"]:
        for name, why in result["failed"].items():
            print(f"rlfunc: run {name} failed: {why}", file=sys.stderr)
        print(f"rlfunc: {len(result['failed'])} run(s) failed; fix the cause and continue with "
              f"`{resume_command(result['settings']['sweep_dir'], args.out)}`.", file=sys.stderr)
        raise SystemExit(1)
