"""Where a run's numbers go: CSV files, TensorBoard, W&B, and the progress line.

* :class:`CsvLog` appends rows to ``metrics.csv`` / ``eval.csv`` and never
  rewrites the file for a new column: rows logged before the learner's first
  metrics (the random warm-up) wait in memory until the columns are known.
* :class:`TensorBoardLog` writes event files into the run directory
  (``torch.utils.tensorboard``; TensorBoard is a dependency, so every run with
  ``train.tensorboard`` on, the default, has them: ``tensorboard --logdir runs/``).
* :class:`WandbLog` mirrors the same rows to Weights & Biases when the user
  installs ``wandb`` (the ``wandb`` extra) and sets ``train.wandb``; W&B's
  offline mode (``train.wandb: {mode: offline}`` or ``WANDB_MODE=offline``)
  needs no network.
* :class:`Progress` is a tqdm bar whose rate and ETA are measured within the
  current phase only: the random warm-up steps are far faster than learning
  steps, so the ETA is only given once learning runs, from the learning steps'
  own rate (evaluations and checkpoints included).
"""

from __future__ import annotations

import contextlib
import csv
import errno
import io
import math
import os
import stat
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["CsvLog", "TensorBoardLog", "WandbLog", "Progress"]


class CsvLog:
    """An append-only CSV log whose columns are fixed by its first complete row.

    ``write(row, complete=False)`` holds a row back until a complete one
    arrives (the learner's loss columns appear only once learning starts), or
    until :meth:`close`; the header is then written once, with every column
    seen. A column that appears only later still is not logged (with a
    warning), never rewritten into the file, except at the first complete row
    of a resumed run whose file holds only held-back rows (a run interrupted
    in its warm-up): the file is rewritten once with the new columns. ``truncate_after``: on resume,
    drop rows logged after that step (the state they describe was not saved).

    The file is only ever a regular file of the run directory: one that is a symlink (or a FIFO,
    a directory) is refused with one :class:`~rlfunc.runtime.config.ConfigError` sentence, and
    every open is ``O_NOFOLLOW``, so a resume never writes through a link to a file elsewhere.
    """

    def __init__(self, path: Path, truncate_after: int | None = None) -> None:
        self.path = path
        self.fields: list[str] | None = None
        self._pending: list[dict[str, Any]] = []
        self._warned: set[str] = set()
        self._complete_seen = False  # a complete row was written by this process
        if _check_regular(path):
            with _open(path, "r") as f:
                text = f.read()
            # A last line without its line end was cut off (a full disk, a crash before the page cache
            # reached the disk): dropped, else the next row was appended onto it as one garbled row.
            cut = bool(text) and not text.endswith("\n")
            if cut:  # (cut between a row's "\r" and "\n": the row is whole)
                text = text + "\n" if text.endswith("\r") else text[: text.rfind("\n") + 1]
            reader = csv.DictReader(io.StringIO(text, newline=""))
            rows = list(reader)
            self.fields = list(reader.fieldnames or []) or None
            if self.fields:
                kept = [r for r in rows if _step(r) <= truncate_after] if truncate_after is not None else rows
                if cut or len(kept) != len(rows):
                    _rewrite(path, self.fields, kept)

    def write(self, row: dict[str, Any], complete: bool = True) -> None:
        if self.fields is None:
            if not complete:
                self._pending.append(row)
                return
            self._start([*self._pending, row])
            self._pending = []
            self._complete_seen = True
            return
        new = [k for k in row if k not in self.fields and k not in self._warned]
        if new and complete and not self._complete_seen:
            self._widen(row)  # a resumed run whose file holds warm-up rows only: its loss columns arrive now
            return
        self._complete_seen = self._complete_seen or complete
        if new:
            self._warned.update(new)
            print(f"rlfunc: warning: {self.path.name} has no column for {', '.join(new)}; not logged there.", file=sys.stderr)
        with _naming(self.path), _open(self.path, "a") as f:
            csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore").writerow(row)

    def _widen(self, row: dict[str, Any]) -> None:
        """Rewrite the file once with ``row``'s new columns added (the rows already there leave them
        empty), then append ``row``: the first learning row of a run interrupted during its warm-up."""
        with _open(self.path, "r") as f:
            rows = list(csv.DictReader(f))
        self.fields = [*self.fields, *(k for k in row if k not in self.fields)]
        _rewrite(self.path, self.fields, [*rows, row])
        self._complete_seen = True

    def close(self) -> None:
        """Write rows still held back (a run that stopped before learning)."""
        if self._pending and self.fields is None:
            self._start(self._pending)
        self._pending = []

    def _start(self, rows: list[dict[str, Any]]) -> None:
        self.fields = list(dict.fromkeys(k for r in rows for k in r))
        with _naming(self.path), _open(self.path, "w") as f:
            w = csv.DictWriter(f, fieldnames=self.fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


def _step(row: dict[str, str]) -> float:
    try:
        return float(row.get("step") or 0)
    except ValueError:
        return math.inf


_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _refusal(path: Path, what: str):
    from rlfunc.runtime.config import ConfigError

    return ConfigError(
        f"{str(path)!r} {what}, not a log file rlfunc wrote; rlfunc writes its logs only to regular files "
        "in the run directory, so remove it (or put a copy of the file in its place) and run again."
    )


def _check_regular(path: Path) -> bool:
    """Whether the log ``path`` exists; a symlink or anything but a regular file there is refused."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(mode):
        raise _refusal(path, "is a symbolic link")
    if not stat.S_ISREG(mode):
        raise _refusal(path, "is not a regular file")
    return True


@contextlib.contextmanager
def _naming(path: Path):
    """A write error without a file name (a full disk raises at ``write``/``close``, where Python names
    no file) names ``path``, so the user's sentence says which file could not be written."""
    try:
        yield
    except OSError as exc:
        if exc.filename is None and exc.errno is not None:
            raise OSError(exc.errno, exc.strerror or os.strerror(exc.errno), str(path)) from exc
        raise


def _opener(path: str, flags: int) -> int:
    return os.open(path, flags | _NOFOLLOW | _NONBLOCK | getattr(os, "O_CLOEXEC", 0), 0o644)


def _open(path: Path, mode: str) -> io.TextIOWrapper:
    """``open(path, mode, newline="")`` that never follows a symlink (``O_NOFOLLOW``), never
    blocks on a FIFO (``O_NONBLOCK``) and accepts a regular file only."""
    try:
        f = open(path, mode, newline="", opener=_opener)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise _refusal(path, "is a symbolic link") from None
        if exc.errno == errno.ENXIO:  # a FIFO opened for writing with no reader
            raise _refusal(path, "is not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
        f.close()
        raise _refusal(path, "is not a regular file")
    return f


def _rewrite(path: Path, fields: list[str], rows: list[dict[str, Any]]) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.unlink(missing_ok=True)  # a leftover, or a link planted there, is replaced, never written through
    try:
        with _naming(path), _open(tmp, "x") as f:
            w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


class TensorBoardLog:
    """Scalars of every metrics and eval row as TensorBoard events in the run directory."""

    def __init__(self, run_dir: Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # purge_step: on resume, TensorBoard hides events logged past the restored step.
        self.writer = SummaryWriter(log_dir=str(run_dir), purge_step=purge_step)

    def write(self, prefix: str, row: dict[str, Any]) -> None:
        step = int(row["step"])
        for key, value in row.items():
            if key == "step" or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            self.writer.add_scalar(f"{prefix}/{key}", value, step)

    def close(self) -> None:
        self.writer.flush()
        self.writer.close()


class WandbLog:
    """The same rows in a W&B run (``train.wandb``: keyword arguments of ``wandb.init``).

    ``resume_id``: the id of the W&B run an earlier part of this training run logged to (a resume): the
    rows continue in that W&B run (``resume="allow"``), unless ``train.wandb`` names its own ``id``.
    Rows are plotted against ``env_step`` (``define_metric``), not W&B's own step, which must only
    grow: a resumed run logs again the steps after its checkpoint, which W&B would drop."""

    def __init__(self, settings: dict[str, Any], run_dir: Path, config: dict[str, Any],
                 resume_id: str | None = None, resumed: bool = False) -> None:
        import wandb

        from rlfunc.runtime.config import ConfigError

        kwargs = {"dir": str(run_dir), "config": config, "name": run_dir.name, **settings}
        if resume_id and "id" not in settings:
            kwargs.update(id=resume_id, resume=settings.get("resume", "allow"))
        try:
            self.run = wandb.init(**kwargs)
        except ValueError as exc:  # pydantic's ValidationError: wandb's Settings refused a value
            refused = _wandb_refusal(exc, settings)
            if refused is None:
                raise
            raise ConfigError(refused) from None
        except Exception as exc:  # wandb's own errors (no server, no API key): one sentence, nothing trained yet
            refused = _wandb_failure(exc, resumed)
            if refused is None:
                raise
            raise ConfigError(refused) from None
        self.run.define_metric("env_step")
        for prefix in ("train", "eval"):
            self.run.define_metric(f"{prefix}/*", step_metric="env_step")

    def write(self, prefix: str, row: dict[str, Any]) -> None:
        values = {f"{prefix}/{k}": v for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
        self.run.log({**values, "env_step": int(row["step"])})

    def close(self) -> None:
        self.run.finish()


def _wandb_failure(exc: Exception, resumed: bool) -> str | None:
    """One sentence for ``wandb.init`` failing with one of wandb's own errors (``wandb.errors.Error``:
    ``CommError`` when its server cannot be reached, ``UsageError`` / ``AuthenticationError`` without an
    API key): wandb's message and how to go on without W&B; ``None`` for any other error. It fails when the
    run starts, before any step is trained (and, resuming, before the checkpoint is trained on)."""
    try:
        from wandb.errors import Error as WandbError
    except ImportError:  # another wandb layout: its errors are left as they are
        return None
    if not isinstance(exc, WandbError):
        return None
    reason = " ".join(str(exc).split()).rstrip(".") or type(exc).__name__
    if len(reason) > 300:
        reason = reason[:297] + "..."
    instead = (
        "or resume it logging only on this machine with WANDB_MODE=offline in the environment (used unless "
        "train.wandb sets mode; `wandb sync` uploads it later)"
        if resumed else
        "or train without W&B (--set train.wandb=null) or offline (--set train.wandb.mode=offline)"
    )
    return (
        f"W&B could not start its run ({type(exc).__name__}: {reason}), so nothing was trained; fix that and run "
        f"the same command again, {instead}."
    )


def _wandb_refusal(exc: ValueError, settings: dict[str, Any]) -> str | None:
    """One sentence for a pydantic ``ValidationError`` of ``wandb.init``: the ``train.wandb`` key and
    value it refused, with wandb's own short reason; ``None`` for any other error.

    wandb validates ``wandb.init``'s arguments as its ``Settings`` fields, whose names may differ
    (``job_type`` is ``run_job_type``); ``train.wandb.settings`` entries are fields themselves."""
    errors = getattr(exc, "errors", None)
    if not callable(errors) or type(exc).__name__ != "ValidationError":
        return None
    try:
        found = [e for e in errors(include_url=False) if isinstance(e, dict) and e.get("loc")]
    except Exception:  # not pydantic's errors(): leave the error as it is
        return None
    if not found:
        return None
    field, value = str(found[0]["loc"][0]), found[0].get("input")
    nested = settings.get("settings")
    nested = nested if isinstance(nested, dict) else {}
    if field in settings and field != "settings":
        key, value = f"train.wandb.{field}", settings[field]
    elif field in nested:
        key, value = f"train.wandb.settings.{field}", nested[field]
    else:  # a field named otherwise than its wandb.init argument: the argument holding the value
        same = [k for k, v in settings.items() if k != "settings" and _same(v, value)]
        same += [f"settings.{k}" for k, v in nested.items() if _same(v, value)]
        key = f"train.wandb.{same[0]}" if len(same) == 1 else f"train.wandb (wandb's setting {field})"
    reasons = (" ".join(str(e.get("msg", "")).split()).rstrip(".") for e in found if e["loc"][0] == found[0]["loc"][0])
    reason = " or ".join(dict.fromkeys(r[:1].lower() + r[1:] for r in reasons if r))
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    return f"wandb.init refused {key}={shown}" + (f" ({reason})" if reason else "") + "; change or remove it."


def _same(a: Any, b: Any) -> bool:
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:
        return False


class Progress:
    """A tqdm bar: steps done, the current phase's rate, the ETA once it can be known, the last eval."""

    def __init__(self, enabled: bool, total: int, initial: int, label: str) -> None:
        self.enabled = enabled
        self.total = total
        self._bar = None
        self._phase = "warm-up"
        self._phase_t = time.monotonic()
        self._phase_step = initial
        if enabled:
            from tqdm import tqdm

            tty = sys.stderr.isatty()
            self._bar = tqdm(
                total=total,
                initial=initial,
                desc=label,
                unit="step",
                file=sys.stderr,
                dynamic_ncols=True,
                mininterval=0.5 if tty else 30.0,
                bar_format="{desc}: {percentage:3.0f}%|{bar:20}| {n_fmt}/{total_fmt} [{elapsed}] {postfix}",
            )

    def learning_started(self, step: int) -> None:
        """The rate so far described the warm-up; measure the learning phase on its own."""
        if self._phase != "learning":
            self._phase, self._phase_t, self._phase_step = "learning", time.monotonic(), step

    def status(self, step: int, last_eval: float | None) -> str:
        elapsed = time.monotonic() - self._phase_t
        done = step - self._phase_step
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        rate_text = "n/a" if rate is None else f"{rate:.1f}"
        if step >= self.total:
            eta = "done"
        elif self._phase != "learning":
            eta = "ETA after warm-up"
        elif rate is None or elapsed < 2.0:
            eta = "ETA n/a"
        else:
            eta = f"ETA {_duration((self.total - step) / rate)}"
        ev = "n/a" if last_eval is None else f"{last_eval:.1f}"
        return f"{self._phase} {rate_text} steps/s | {eta} | eval {ev}"

    def update(self, step: int, last_eval: float | None, force: bool = False) -> None:
        if self._bar is None:
            return
        self._bar.set_postfix_str(self.status(step, last_eval), refresh=False)
        self._bar.update(step - self._bar.n)
        if force:
            self._bar.refresh()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
