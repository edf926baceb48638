"""Run directories: the files a run keeps there, making and locking a new one, and the sentences for a
directory that already holds a run, sits inside one, or stopped before its first checkpoint.

Used by every way a run starts (single runs, populations, distributed R2D2, sweeps' runs)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from rlfunc.runtime.checkpoint import LOCK_FILE, hand_over_lock, list_checkpoints, lock_run_dir, unlock_run_dir
from rlfunc.runtime.config import ConfigError, RunConfig

__all__ = ["RUN_FILES", "WANDB_RUN_ID_FILE", "write_atomic", "new_run_dir", "started_run", "refuse_nothing_saved",
           "prepare_run_dir", "enclosing_run", "discard_new_run_dir"]

RUN_FILES = ("config.yaml", "metrics.csv", "eval.csv", "checkpoints")
"""What a run directory holds once a run has started there (a directory holding any of them is refused to a new run)."""

WANDB_RUN_ID_FILE = "wandb_run_id"
"""The run directory's record of the W&B run it logs to (``train.wandb``): a resume continues that W&B run."""


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file, fsync and rename: never half-written
    (and never written through a symlink or a leftover at the temporary name)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def new_run_dir(config: RunConfig, tag: str | None = None) -> Path:
    """A fresh ``train.run_dir/<algo>-<env>-<tag>-<time>`` path (``-1``, ``-2``, ... when taken); ``tag`` is
    ``s<seed>`` for a run, ``pop<P>`` for a population of ``P`` members."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    env = config.env.id.replace("/", "_").replace(":", "_")  # dmc/..., module:Env-v0
    tag = f"s{config.train.seed}" if tag is None else tag
    base = Path(config.train.run_dir) / f"{config.algo}-{env}-{tag}-{stamp}"
    path, i = base, 1
    while path.exists():
        path = Path(f"{base}-{i}")
        i += 1
    return path


def _refuse_held_run(run_dir: Path) -> None:
    held = [name for name in RUN_FILES if os.path.lexists(run_dir / name)]
    if held:
        raise ConfigError(
            f"Run directory {str(run_dir)!r} already holds a run ({', '.join(held)}); continue it with "
            f"`rlfunc resume {run_dir}` or pick another --run-dir."
        )


def started_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` is one ``rlfunc train`` started a run in: its ``config.yaml`` and lock file."""
    return (run_dir / "config.yaml").is_file() and os.path.lexists(run_dir / LOCK_FILE)


def refuse_nothing_saved(run_dir: Path) -> None:
    """One sentence for a run directory ``rlfunc train`` started a run in (:func:`started_run`) that holds
    no checkpoint (killed before its first one): ``train`` sends a held run directory to ``rlfunc resume``,
    whose "pass the directory `rlfunc train` created, once it has saved a checkpoint" sent the user back.
    Called by a resume holding the lock (a run still training there is refused as in use first)."""
    if started_run(run_dir) and not list_checkpoints(run_dir / "checkpoints"):
        raise ConfigError(
            f"{str(run_dir)!r} holds a run that stopped before its first checkpoint (killed, or stopped at env step 0), "
            "so there is nothing to resume; train again with another --run-dir, or delete this directory first."
        )


def prepare_run_dir(run_dir: Path) -> bool:
    """Refuse a directory that another live process trains in, or that holds another run; create
    it, prove it is writable and take its lock (:func:`~rlfunc.runtime.checkpoint.lock_run_dir`,
    released when the run ends), before any env is built. Returns whether the directory was
    created here (to remove it if the run never starts: :func:`discard_new_run_dir`)."""
    if run_dir.exists() and not run_dir.is_dir():
        raise ConfigError(f"Run directory {str(run_dir)!r} is a file; pass a directory with --run-dir.")
    outer = enclosing_run(run_dir)
    if outer is not None:
        raise ConfigError(
            f"Run directory {str(run_dir)!r} is inside the run directory {str(outer)!r}, whose own files and "
            "commands (resume, eval, checkpoint clean-up) it would mix with; pass a --run-dir outside it."
        )
    took = False
    try:
        if os.path.lexists(run_dir / LOCK_FILE):
            took = lock_run_dir(run_dir)  # a live process training there: refused as in use, first
        if run_dir.is_dir():
            _refuse_held_run(run_dir)  # refused without writing anything into it
        created = not run_dir.exists()
        probe = run_dir / f".rlfunc-write-test-{os.getpid()}"
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"Cannot write to run directory {str(run_dir)!r} ({exc.strerror or exc}); pick another --run-dir or fix its permissions."
            ) from None
        took = lock_run_dir(run_dir) or took
        _refuse_held_run(run_dir)  # a run another process started there since the check above
    except BaseException:
        if took:
            unlock_run_dir(run_dir)
        raise
    if took:
        hand_over_lock(run_dir)  # the run's Trainer.run releases it when it ends (not the process's exit)
    return created


def enclosing_run(run_dir: Path) -> Path | None:
    """The nearest directory above ``run_dir`` that is a run's (its ``config.yaml`` beside a
    ``checkpoints/``), or ``None``: a new run inside another (``--run-dir RUN/checkpoints``) made
    ``rlfunc eval RUN/checkpoints`` read the nested run."""
    for parent in Path(os.path.abspath(run_dir)).parents:
        if (parent / "config.yaml").is_file() and (parent / "checkpoints").is_dir():
            return parent
    return None


def discard_new_run_dir(run_dir: Path, created: bool) -> None:
    """A run that never started: release its lock and, if this process created the directory and
    nothing but the lock file is in it, remove it."""
    unlock_run_dir(run_dir)
    if not created or not run_dir.is_dir():
        return
    entries = [p.name for p in run_dir.iterdir()]
    if set(entries) <= {LOCK_FILE}:
        (run_dir / LOCK_FILE).unlink(missing_ok=True)
        run_dir.rmdir()
