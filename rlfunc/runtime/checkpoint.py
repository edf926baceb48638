"""Crash-safe, verified checkpoints that never run code when read.

A checkpoint is a directory::

    step_000001000/
        meta.json        counters, env RNG states, the resolved config, and the
                         manifest: for every tensor its key, dtype, shape, byte
                         size and BLAKE2b checksum (plus a checksum of meta.json
                         itself)
        tensors/         00000.bin, 00001.bin, ...: each tensor's raw bytes
                         (C order, little-endian), nothing else

What a checkpoint may contain: plain numeric tensors (the dtypes in
:data:`DTYPES`) and JSON. What it may not: pickles, Python objects, file names
of its own choosing, any file the manifest does not name. Reading one parses
JSON and copies raw bytes into tensors; nothing in it is ever unpickled,
imported or constructed, so loading a downloaded checkpoint cannot run code.

Reading verifies before anything is used: the manifest must be complete
(missing, extra, wrong size, wrong dtype, wrong shape, wrong checksum are each
refused), floating-point training state must be finite, and files are opened
read-only. Writing goes to a temporary directory whose files and directory
entries are fsynced before it is renamed into place, so a crash or a full disk
never leaves a half-written checkpoint behind and never harms the previous
one; ``latest`` (a one-line text file, also replaced atomically) names the
newest complete one. :func:`clean_leftovers` removes what a killed write left.

``latest`` names the head of the run's line of checkpoints, which is not always
the highest step: a resume that fell back past a damaged newer checkpoint
leaves that one on disk (until it is overwritten or pruned) while the run goes
on from the older one, and ``best/`` keeps the best evaluation, not the newest.
A write killed between renaming its checkpoint into place and updating
``latest`` (or whose ``latest`` update failed, a full disk: that write is
saved, with one warning) leaves a complete checkpoint newer than the one ``latest`` names;
each checkpoint records the name ``latest`` held when it was written
(``written_after`` in meta.json), so that one is recognised as the head while
a leftover of an abandoned line is not (:func:`latest_checkpoint`).

Names are ``step_`` and the step, zero-padded to 9 digits
(``step_000001000``); from 10**9 on the step's own digits
(``step_1000000000``). They are ordered by the number.

A run directory being trained in is locked (:func:`lock_run_dir`, an advisory
``flock`` on its ``.rlfunc.lock`` held while the process trains there and
released by the kernel if it dies), so a second process cannot train or
resume in it, or clean up a write the first one is making.

Format 1 (development versions before the 0.1.0 release, a tensordict memmap without a manifest) is still read,
by a parser of its JSON metadata that accepts plain tensors only.
"""

from __future__ import annotations

import errno
import contextlib
import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import stat
import sys
from pathlib import Path
from typing import Any, Iterator

import torch
from tensordict import TensorDict

from rlfunc.runtime.config import ConfigError

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "latest_checkpoint",
    "list_checkpoints",
    "resolve_checkpoint",
    "clean_leftovers",
    "prune_checkpoints",
    "checkpoint_candidates",
    "check_structure",
    "load_newest_good",
    "meta_checksum",
    "checkpoint_name",
    "recorded_best_return",
    "prune_best",
    "lock_run_dir",
    "locked_run_dir",
    "unlock_run_dir",
    "hand_over_lock",
    "is_count",
    "MAX_STEP",
    "LOCK_FILE",
    "CheckpointError",
    "CheckpointWriteError",
    "DTYPES",
]

FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)

DTYPES: dict[str, torch.dtype] = {
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "uint8": torch.uint8,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
"""The tensor dtypes a checkpoint may hold (by their manifest names)."""

_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_NAME = r"step_(?:\d{9}|[1-9]\d{9,18})"
_NAME_RE = re.compile(rf"^{_NAME}$")
"""``step_`` and the step: 9 digits, zero-padded, below 10**9; the step's own digits (no leading
zero, so each step has one name) from 10**9 to :data:`MAX_STEP`."""
MAX_STEP = 2**63 - 2
"""The largest step (and count) a checkpoint names or a resumed run takes from its meta.json: the logs
count on from it in int64 (TensorBoard's steps refused more as "Value out of range: ...")."""
_META_MAX_BYTES = 256 * 2**20  # a meta.json larger than this is not one rlfunc wrote
_CHUNK = 16 * 2**20


class CheckpointError(ValueError):
    """A checkpoint is missing, damaged, crafted or incompatible; the message names the file."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (full disk, permissions); the previous one is intact."""

    def __str__(self) -> str:
        return str(self.strerror)


def checkpoint_name(step: int) -> str:
    """The name of the checkpoint of ``step``: ``step_000001000``; ``step_1000000000`` from 10**9 on."""
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= MAX_STEP:
        raise ValueError(f"A checkpoint's step must be an integer from 0 to {MAX_STEP}, got {step!r}.")
    return f"step_{step:09d}"


def _step(path: Path | str) -> int:
    """The step of a checkpoint named like :data:`_NAME_RE`."""
    return int(Path(path).name[len("step_") :])


def _cut(text: str, limit: int = 120) -> str:
    """``text`` cut to ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters (a crafted value may be megabytes long)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**limit:
        return "a number too long to print"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# -- opening files safely ----------------------------------------------------------------

_O_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


class _NotRegular(OSError):
    """Raised by :func:`_open_regular` for a FIFO, device, socket or directory."""


def _open_regular(path: Path):
    """``path`` opened for reading in binary mode: never through a symlink (``O_NOFOLLOW``), never
    blocking on a FIFO (``O_NONBLOCK``), and only if it is a regular file (else :class:`_NotRegular`)."""
    fd = os.open(path, _O_READ)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular(errno.EINVAL, "not a regular file")
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _why_unopened(exc: OSError) -> str:
    """What is wrong with a file :func:`_open_regular` refused, as the end of a sentence about it."""
    if isinstance(exc, _NotRegular):
        return "is not a regular file (a FIFO, device or directory is in its place)"
    if exc.errno in (errno.ELOOP, errno.EMLINK):
        return "is a symbolic link, not a regular file rlfunc wrote"
    if isinstance(exc, FileNotFoundError):
        return "is missing"
    return f"cannot be opened ({exc.strerror or exc})"


# -- writing ------------------------------------------------------------------------------


def _leaves(tensors: TensorDict) -> Iterator[tuple[list[str], torch.Tensor]]:
    for key, value in tensors.items(include_nested=True, leaves_only=True):
        path = [key] if isinstance(key, str) else list(key)
        if not isinstance(value, torch.Tensor) or getattr(value, "is_nested", False):
            raise TypeError(f"checkpoint entry {'/'.join(path)} is not a plain tensor ({type(value).__name__})")
        yield path, value


def _batch_sizes(tensors: TensorDict) -> list[dict[str, Any]]:
    """The non-empty batch sizes of ``tensors`` and its nested TensorDicts (``[{"key": [...], "shape": [...]}]``)."""
    out = [{"key": [], "shape": list(tensors.batch_size)}] if tensors.batch_size else []
    for key, value in tensors.items(include_nested=True):
        if isinstance(value, TensorDict) and value.batch_size:
            out.append({"key": [key] if isinstance(key, str) else list(key), "shape": list(value.batch_size)})
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_bytes(path: Path, data: memoryview | bytes) -> str:
    """Write ``data`` to a new file, fsync it, return its BLAKE2b hex digest."""
    digest = hashlib.blake2b(digest_size=32)
    with open(path, "xb") as f:
        for start in range(0, len(data), _CHUNK):
            chunk = data[start : start + _CHUNK]
            digest.update(chunk)
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    return digest.hexdigest()


def _tensor_bytes(t: torch.Tensor) -> memoryview:
    t = t.detach().to("cpu").contiguous().reshape(-1)
    if t.numel() == 0:
        return memoryview(b"")
    return memoryview(t.view(torch.uint8).numpy()).cast("B")


def meta_checksum(meta: dict[str, Any]) -> str:
    """BLAKE2b of ``meta`` (without its own ``checksum`` field) as canonical JSON."""
    body = {k: v for k, v in meta.items() if k != "checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


def save_checkpoint(directory: str | Path, name: str, tensors: TensorDict, meta: dict[str, Any]) -> Path:
    """Write ``tensors`` + ``meta`` to ``directory/name`` atomically; update ``latest``.

    Raises :class:`CheckpointWriteError` (one sentence) if the disk is full or
    not writable; the temporary directory is removed and the previous
    checkpoint and ``latest`` are untouched. meta.json records the name
    ``latest`` held before (``written_after``; see :func:`latest_checkpoint`).
    A failure to update ``latest`` once the checkpoint is renamed into place
    is not a failed write: the checkpoint is complete and returned, with one
    warning on stderr saying what ``latest`` still names and whether a resume
    finds the new checkpoint anyway (:func:`latest_checkpoint`: by its
    ``written_after``, or by step where ``latest`` names none on disk).
    """
    directory = Path(directory)
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"Checkpoint names look like step_000001000 (see checkpoint_name), got {_short(name)}.")
    final = directory / name
    tmp = directory / f".{name}.tmp-{os.getpid()}"
    old = directory / f".{name}.old-{os.getpid()}"  # the checkpoint of the same name being replaced
    latest_tmp = directory / f".latest.tmp-{os.getpid()}"
    previous = None
    try:
        directory.mkdir(parents=True, exist_ok=True)
        previous = latest_checkpoint(directory)
        written_after = _read_pointer(directory)
        if tmp.exists():
            shutil.rmtree(tmp)
        (tmp / "tensors").mkdir(parents=True)
        manifest = []
        for i, (key, value) in enumerate(_leaves(tensors)):
            if value.dtype not in _DTYPE_NAMES:
                raise TypeError(f"checkpoint entry {'/'.join(key)} has dtype {value.dtype}, not one of {', '.join(sorted(DTYPES))}.")
            data = _tensor_bytes(value)
            digest = _write_bytes(tmp / "tensors" / f"{i:05d}.bin", data)
            manifest.append(
                {
                    "key": key,
                    "dtype": _DTYPE_NAMES[value.dtype],
                    "shape": list(value.shape),
                    "bytes": len(data),
                    "blake2b": digest,
                }
            )
        _fsync_dir(tmp / "tensors")
        meta = dict(
            meta, format_version=FORMAT_VERSION, manifest=manifest, batch_sizes=_batch_sizes(tensors), written_after=written_after
        )
        meta["checksum"] = meta_checksum(meta)
        _write_bytes(tmp / "meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        _fsync_dir(tmp)
        if os.path.lexists(final):
            os.replace(final, old)
            os.replace(tmp, final)
            _remove(old)
        else:
            os.replace(tmp, final)
        _fsync_dir(directory)
    except OSError as exc:
        _undo_write(tmp, old, final, latest_tmp)
        reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        kept = f"the previous checkpoint {previous.name} is intact" if previous else "no earlier checkpoint exists"
        raise CheckpointWriteError(
            exc.errno, f"Could not write checkpoint {name} in {str(directory)!r} ({reason}); {kept}; free space or fix the permissions, then `rlfunc resume` the run."
        ) from exc
    except BaseException:  # a tensor that cannot be stored, Ctrl-C, SIGTERM: leave no temporary directory
        _undo_write(tmp, old, final, latest_tmp)
        raise
    try:  # the checkpoint is complete and in place: a failure from here on is the pointer's only
        _write_pointer(directory, latest_tmp, name)
    except OSError as exc:
        print(f"rlfunc: warning: {_pointer_not_updated(directory, final, exc)}", file=sys.stderr)
    finally:  # a Ctrl-C or SIGTERM here leaves no temporary file either
        try:
            latest_tmp.unlink(missing_ok=True)
        except OSError:
            pass
    return final


def _write_pointer(directory: Path, latest_tmp: Path, name: str) -> None:
    """Point ``directory/latest`` at ``name``, through ``latest_tmp`` (written, fsynced, renamed)."""
    latest_tmp.unlink(missing_ok=True)  # a leftover (or a planted link) is never written through
    fd = os.open(latest_tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(latest_tmp, directory / "latest")
    _fsync_dir(directory)


def _pointer_not_updated(directory: Path, final: Path, exc: OSError) -> str:
    """The sentence for a checkpoint written in full whose ``latest`` update failed (:func:`save_checkpoint`
    returns it as saved): what ``latest`` still names and whether a resume finds the new checkpoint anyway,
    by its ``written_after`` or, with no valid ``latest``, by step (:func:`latest_checkpoint`)."""
    reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
    pointer = _read_pointer(directory)
    head = latest_checkpoint(directory)
    saved = f"checkpoint {final.name} is saved in full in {str(directory)!r}, but its `latest` pointer was not updated ({reason})"
    if head is not None and head.name == final.name:
        named = pointer is not None and any(c.name == pointer for c in list_checkpoints(directory))
        if pointer == final.name:  # it replaced a checkpoint of the same name
            found = f"`latest` already names {final.name}"
        elif named:
            found = (f"`latest` still names {pointer}, and `rlfunc resume` (and eval, load) uses {final.name} anyway: "
                     f"it records that it was written after {pointer}")
        else:
            found = f"`rlfunc resume` (and eval, load) finds {final.name} anyway, by step among the step_* checkpoints"
        return f"{saved}; {found}."
    other = f"would start from {head.name}" if head is not None else "would not find it"
    return (f"{saved}; `rlfunc resume` {other}: free space, then write {final.name} into "
            f"{str(directory / 'latest')!r}.")


def _undo_write(tmp: Path, old: Path, final: Path, latest_tmp: Path) -> None:
    """What an interrupted or failed :func:`save_checkpoint` leaves, undone in the process that was
    writing (not only at the next start, :func:`clean_leftovers`): the temporary directory and the
    ``latest`` temporary file are removed, and a checkpoint of the same name that was moved aside to
    be replaced is put back if its replacement never arrived (else deleted). Without this, a Ctrl-C
    or SIGTERM between the two renames left the previous checkpoint only as ``.step_*.old-PID``,
    which ``rlfunc.load``, ``rlfunc eval`` and the run's own way-out save do not see, and a full copy
    of it on disk until the next ``rlfunc resume``."""
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        latest_tmp.unlink(missing_ok=True)
        if os.path.lexists(old):
            if os.path.lexists(final):
                _remove(old)
            else:
                os.replace(old, final)
    except OSError:  # never mask the write's own error; clean_leftovers finishes this at the next start
        pass


def unwritable_parent(path: str | Path) -> Path | None:
    """The nearest existing directory above ``path`` if this process may not create ``path`` in it (not a
    directory, or no write permission), else ``None``: an output checked before the work that writes it."""
    parent = Path(path).parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    return None if parent.is_dir() and os.access(parent, os.W_OK | os.X_OK) else parent


def clean_leftovers(directory: str | Path) -> list[str]:
    """Remove what killed writes left in a checkpoints ``directory``; returns what was done.

    A ``.step_*.tmp-PID`` directory (a write that never finished) or a
    ``.latest.tmp-PID`` file is deleted. A ``.step_*.old-PID`` directory is the
    previous copy of a checkpoint being replaced: if the replacement never
    arrived it is put back, else deleted.
    """
    directory = Path(directory)
    done: list[str] = []
    if not directory.is_dir():
        return done
    for entry in sorted(directory.iterdir()):
        replaced = re.fullmatch(rf"\.({_NAME})\.old-\d+", entry.name)
        if replaced and not os.path.lexists(directory / replaced.group(1)):
            os.replace(entry, directory / replaced.group(1))
            done.append(f"restored {replaced.group(1)} from an interrupted replacement")
            continue
        if not (replaced or re.fullmatch(rf"\.({_NAME}\.tmp|latest\.tmp)-\d+", entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        done.append(f"removed {entry.name}, left by an interrupted write")
    return done


def _remove(path: Path) -> None:
    """Delete a checkpoint directory (a symlink in its place: the link only, never what it points to).

    A checkpoint is first renamed to the name of a killed write's leftover (``.step_*.tmp-PID``), then
    deleted: a process killed while deleting it (a large replay takes a while) leaves that leftover,
    which :func:`clean_leftovers` removes at the next start. Deleted in place, a kill could leave a
    ``step_*`` whose meta.json was already gone (the order of ``rmtree`` is the file system's; tmpfs
    lists meta.json first) beside its tensors: no longer a checkpoint, so no pruning ever removed it."""
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    if _NAME_RE.match(path.name):
        doomed = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            if os.path.lexists(doomed):
                shutil.rmtree(doomed, ignore_errors=True)
            os.replace(path, doomed)
            path = doomed
        except OSError:  # deleted in place then, as before
            pass
    shutil.rmtree(path, ignore_errors=True)


def prune_checkpoints(directory: str | Path, keep: int) -> list[str]:
    """Delete all but the ``keep`` newest checkpoints of the run's line in ``directory``
    (``train.keep_checkpoints``; :func:`latest_checkpoint` first, then older ones, then leftovers of
    an abandoned line); never the head :func:`latest_checkpoint` returns. Returns the names deleted."""
    directory = Path(directory)
    ordered = _ordered(directory)
    head = ordered[0] if ordered else None
    deleted = []
    for old in ordered[keep:]:
        if old == head:
            continue
        _remove(old)
        deleted.append(old.name)
    return deleted


# -- finding ------------------------------------------------------------------------------


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete-looking checkpoints in ``directory`` (``step_*`` with a meta.json), newest (highest step) first.

    Entries that are not what rlfunc writes (a symlink instead of the directory or of its
    meta.json, a FIFO) are listed too, so that reading them refuses them with a sentence."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    try:
        entries = list(directory.iterdir())
    except OSError:
        return []
    found = [p for p in entries if _NAME_RE.match(p.name) and os.path.lexists(p / "meta.json")]
    return sorted(found, key=_step, reverse=True)


def _read_pointer(directory: Path) -> str | None:
    """The checkpoint name in ``directory/latest`` (a regular file of one line), or ``None``."""
    try:
        with _open_regular(directory / "latest") as f:
            text = f.read(64)
    except OSError:
        return None
    name = text.decode("utf-8", errors="replace").strip()
    return name if _NAME_RE.match(name) else None


def _written_after(ckpt: Path) -> str | None:
    """The name ``latest`` held when ``ckpt`` was written (its meta.json's ``written_after``), or ``None``."""
    try:
        value = _read_meta(ckpt).get("written_after")
    except CheckpointError:
        return None
    return value if isinstance(value, str) else None


def _ordered(directory: Path) -> list[Path]:
    """The checkpoints in ``directory`` in the order to use them: the run's head first, then older ones
    newest first, then the leftovers of an abandoned line.

    ``latest`` names the head, unless a newer checkpoint was written after it (its ``written_after``
    is ``latest``'s name: a write killed between renaming the checkpoint into place and updating
    ``latest``); then the newest such one is. A checkpoint newer than the one ``latest`` names that
    was written before it is a leftover of a line a resume abandoned (it had fallen back past it),
    used only when nothing else verifies. Without a valid ``latest``: by step, newest first."""
    complete = list_checkpoints(directory)
    pointer = _read_pointer(directory)
    named = next((c for c in complete if c.name == pointer), None)
    if named is None:
        return complete
    newer = [c for c in complete if _step(c) > _step(named)]
    after = [c for c in newer if _written_after(c) == named.name]
    stale = [c for c in newer if c not in after]
    older = [c for c in complete if _step(c) < _step(named)]
    return [*after, named, *older, *stale]


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint of the run's line in ``directory`` (``None`` if there is none):
    the one ``latest`` names, or one written after it whose ``latest`` update a crash prevented."""
    ordered = _ordered(Path(directory))
    return ordered[0] if ordered else None


def _checkpoints_dir(path: Path) -> Path | None:
    for candidate in (path / "checkpoints", path):
        if candidate.is_dir() and (list_checkpoints(candidate) or (candidate / "latest").is_file()):
            return candidate
    return None


def _refuse_links(ckpt: Path) -> None:
    """A checkpoint directory, its meta.json and tensors/ are what rlfunc writes: no symlinks, no FIFOs."""
    if ckpt.is_symlink():
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} is a symbolic link, not a directory rlfunc wrote; pass the directory it points to "
            "if you trust it, or use another checkpoint."
        )
    try:
        mode = os.lstat(ckpt / "meta.json").st_mode
    except FileNotFoundError:
        raise _damaged(ckpt, "meta.json is missing") from None
    except OSError as exc:
        raise _damaged(ckpt, f"meta.json cannot be read ({exc.strerror or exc})") from None
    if stat.S_ISLNK(mode):
        raise _damaged(ckpt, "meta.json is a symbolic link, not a regular file rlfunc wrote")
    if not stat.S_ISREG(mode):
        raise _damaged(ckpt, "meta.json is not a regular file (a FIFO, device or directory is in its place)")


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, a ``checkpoints`` directory or a checkpoint -> checkpoint dir.

    A run's (or a ``checkpoints`` directory's) checkpoint is :func:`latest_checkpoint`'s. A
    checkpoint that is a symlink, or whose meta.json is a symlink or not a regular file, is refused
    (:class:`CheckpointError`, one sentence) before anything opens it."""
    path = Path(path)
    if not os.path.lexists(path):
        raise CheckpointError(f"No run or checkpoint at {str(path)!r}; check the path.")
    if not path.is_dir():
        raise CheckpointError(f"{str(path)!r} is a file, not a run directory or checkpoint; pass the directory `rlfunc train` created.")
    if os.path.lexists(path / "meta.json"):
        _refuse_links(path)
        return path
    directory = _checkpoints_dir(path)
    found = latest_checkpoint(directory) if directory is not None else None
    if found is None and (path / "sweep.json").is_file():
        runs = sorted(p.name for p in path.iterdir() if (p / "config.yaml").is_file())
        example = str(path / runs[0]) if runs else str(path / "RUN")
        raise CheckpointError(
            f"{str(path)!r} is a sweep's directory, which holds one run directory per run; pass one of them, e.g. {example!r}."
        )
    if found is None:
        raise CheckpointError(
            f"{str(path)!r} holds no complete checkpoint (no step_*/meta.json); pass a run directory that has trained past its first checkpoint."
        )
    _refuse_links(found)
    return found


def checkpoint_candidates(path: str | Path) -> list[Path]:
    """Every checkpoint ``path`` could mean, the preferred first: a checkpoint itself, else a run's
    (or a ``checkpoints`` directory's) checkpoints: the head of its line (:func:`latest_checkpoint`),
    then older ones newest first, then leftovers of an abandoned line."""
    path = Path(path)
    if os.path.lexists(path / "meta.json"):
        return [resolve_checkpoint(path)]
    if not os.path.lexists(path) or not path.is_dir():
        resolve_checkpoint(path)  # its sentence
    directory = _checkpoints_dir(path)
    ordered = _ordered(directory) if directory is not None else []
    if not ordered:
        resolve_checkpoint(path)  # its sentence
    return ordered


# -- reading ------------------------------------------------------------------------------


def _damaged(ckpt: Path, what: str) -> CheckpointError:
    return CheckpointError(f"Checkpoint {str(ckpt)!r} is damaged or was not written by rlfunc: {what}; use an earlier checkpoint.")


def _read_json(ckpt: Path, file: Path, limit: int = _META_MAX_BYTES) -> Any:
    """Parse the JSON file ``file`` of checkpoint ``ckpt`` (a regular file, no symlink, at most
    ``limit`` bytes); anything else is a :class:`CheckpointError` naming it."""
    rel = file.relative_to(ckpt)
    try:
        with _open_regular(file) as f:
            raw = f.read(limit + 1)
    except OSError as exc:
        raise _damaged(ckpt, f"{rel} {_why_unopened(exc)}") from None
    if len(raw) > limit:
        raise _damaged(ckpt, f"{rel} is larger than any rlfunc writes")
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, an integer of more than 4300 digits
        raise _damaged(ckpt, f"{rel} is not valid JSON ({_cut(str(exc))})") from None


def _read_meta(ckpt: Path) -> dict[str, Any]:
    meta = _read_json(ckpt, ckpt / "meta.json")
    if not isinstance(meta, dict):
        raise _damaged(ckpt, "meta.json does not hold a mapping")
    version = meta.get("format_version")
    if type(version) is not int or version not in READABLE_FORMATS:  # not True (== 1), not 2.0
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} has format {_short(version)}, this rlfunc reads {list(READABLE_FORMATS)}; "
            "load it with the rlfunc version that wrote it."
        )
    return meta


def is_count(value: Any, limit: int = 2**63 - 1) -> bool:
    """A JSON integer from 0 to ``limit`` (not a bool, not a float)."""
    return type(value) is int and 0 <= value <= limit


def _is_shape(value: Any) -> bool:
    return isinstance(value, list) and len(value) <= 64 and all(is_count(d) for d in value)


def _check_entry(ckpt: Path, i: int, entry: Any) -> tuple[tuple[str, ...], torch.dtype, tuple[int, ...], int, str]:
    if not isinstance(entry, dict):
        raise _damaged(ckpt, f"manifest entry {i} is not a mapping")
    key, dtype, shape, size, digest = (entry.get(k) for k in ("key", "dtype", "shape", "bytes", "blake2b"))
    if not (isinstance(key, list) and key and len(key) <= 64 and all(isinstance(k, str) and k for k in key)):
        raise _damaged(ckpt, f"manifest entry {i} has no valid key")
    where = "/".join(key)
    where = where if len(where) <= 200 else where[:197] + "..."
    if not (isinstance(dtype, str) and dtype in DTYPES):
        raise _damaged(ckpt, f"tensor {where} has dtype {_short(dtype)}, not one of {', '.join(sorted(DTYPES))}")
    if not _is_shape(shape):
        raise _damaged(ckpt, f"tensor {where} has an invalid shape {_short(shape)}")
    itemsize = torch.empty((), dtype=DTYPES[dtype]).element_size()
    expected = math.prod(shape) * itemsize
    if not (is_count(size) and size == expected):
        raise _damaged(ckpt, f"tensor {where} records {_short(size)} bytes, but {dtype} {_short(shape)} needs {_short(expected)}")
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise _damaged(ckpt, f"tensor {where} has no valid checksum")
    return tuple(key), DTYPES[dtype], tuple(shape), expected, digest


def _read_tensor(ckpt: Path, file: Path, where: str, dtype: torch.dtype, shape: tuple[int, ...], size: int, digest: str | None) -> torch.Tensor:
    """Read one tensor file read-only (no symlinks, regular files only), check size and checksum."""
    rel = file.relative_to(ckpt)
    try:
        f = _open_regular(file)
    except OSError as exc:
        raise _damaged(ckpt, f"{rel} (tensor {where}) {_why_unopened(exc)}") from None
    with f:
        st = os.fstat(f.fileno())
        if st.st_size != size:
            raise _damaged(ckpt, f"{rel} (tensor {where}) has {st.st_size} bytes, the manifest says {size} (truncated or overwritten)")
        buf = bytearray(size)
        view = memoryview(buf)
        got = 0
        while got < size:
            n = f.readinto(view[got:])
            if not n:
                raise _damaged(ckpt, f"{rel} (tensor {where}) ended early")
            got += n
    if digest is not None:
        h = hashlib.blake2b(digest_size=32)
        for start in range(0, size, _CHUNK):
            h.update(view[start : start + _CHUNK])
        if h.hexdigest() != digest:
            raise _damaged(ckpt, f"{rel} (tensor {where}) does not match its checksum (the bytes changed after it was written)")
    if size == 0:
        return torch.empty(shape, dtype=dtype)
    return torch.frombuffer(buf, dtype=dtype).reshape(shape)


def _load_v2(ckpt: Path, meta: dict[str, Any]) -> TensorDict:
    try:
        signed = meta.get("checksum") == meta_checksum(meta)
    except (ValueError, TypeError, RecursionError):  # nested too deep to serialise again
        signed = False
    if not signed:
        raise _damaged(ckpt, "meta.json does not match its checksum (it was edited or damaged)")
    manifest = meta.get("manifest")
    if not isinstance(manifest, list):
        raise _damaged(ckpt, "meta.json has no tensor manifest")
    entries = [_check_entry(ckpt, i, e) for i, e in enumerate(manifest)]
    keys = [e[0] for e in entries]
    if len(set(keys)) != len(keys):
        raise _damaged(ckpt, "the manifest names a tensor twice")
    expected_files = {f"{i:05d}.bin" for i in range(len(entries))}
    _refuse_extras(ckpt, ckpt, {"meta.json", "tensors"})
    tensors_dir = ckpt / "tensors"
    if tensors_dir.is_symlink():
        raise _damaged(ckpt, "tensors/ is a symbolic link, not a directory rlfunc wrote")
    if not tensors_dir.is_dir():
        raise _damaged(ckpt, "tensors/ is missing")
    _refuse_extras(ckpt, tensors_dir, expected_files)
    flat = {}
    for i, (key, dtype, shape, size, digest) in enumerate(entries):
        flat[key] = _read_tensor(ckpt, tensors_dir / f"{i:05d}.bin", "/".join(key), dtype, shape, size, digest)
    batch_sizes = meta.get("batch_sizes", [])
    if not isinstance(batch_sizes, list) or not all(isinstance(b, dict) for b in batch_sizes):
        raise _damaged(ckpt, "meta.json has invalid batch_sizes")
    for b in batch_sizes:
        key, shape = b.get("key"), b.get("shape")
        if not (isinstance(key, list) and all(isinstance(k, str) for k in key) and _is_shape(shape)):
            raise _damaged(ckpt, f"batch size {_short(shape)} of {_short(key)} is invalid")
    return _nest(ckpt, flat, [(b.get("key"), b.get("shape")) for b in batch_sizes])


def _refuse_extras(ckpt: Path, directory: Path, allowed: set[str]) -> None:
    try:
        names = {p.name for p in directory.iterdir()}
    except OSError as exc:
        raise _damaged(ckpt, f"{directory.relative_to(ckpt) if directory != ckpt else '.'} cannot be listed ({exc.strerror or exc})") from None
    extra = sorted(names - allowed)
    if extra:
        rel = directory.relative_to(ckpt) / extra[0]
        raise _damaged(ckpt, f"it holds {rel}, an entry rlfunc did not write")


def _nest(ckpt: Path, flat: dict[tuple[str, ...], torch.Tensor], batch_sizes: list[tuple[Any, Any]] = ()) -> TensorDict:
    """Nested TensorDict from flat keys, with the recorded batch sizes (outer levels first)."""
    td = TensorDict({}, batch_size=[])
    for key, value in flat.items():
        try:
            td.set(key, value)
        except (KeyError, ValueError, TypeError, RuntimeError):
            raise _damaged(ckpt, f"tensor {'/'.join(key)} collides with another entry") from None
    for key, shape in sorted(batch_sizes, key=lambda b: len(b[0]) if isinstance(b[0], list) else 0):
        ok_key = isinstance(key, list) and all(isinstance(k, str) for k in key)
        if not (ok_key and _is_shape(shape)):
            raise _damaged(ckpt, f"batch size {_short(shape)} of {_short(key)} is invalid")
        try:
            if key and tuple(key) not in td.keys(include_nested=True):
                # a TensorDict that holds no tensor (a network part without layers: a population's stacked
                # params/encoder of MinAtar and Atari configs) has its batch size recorded and nothing else
                td.set(tuple(key), TensorDict({}, batch_size=torch.Size(shape)))
                continue
            sub = td.get(tuple(key)) if key else td
            if not isinstance(sub, TensorDict):
                raise KeyError(key)
            sub.batch_size = torch.Size(shape)
        except (KeyError, ValueError, TypeError, RuntimeError, OverflowError, IndexError):
            raise _damaged(ckpt, f"batch size {_short(shape)} of {_short('/'.join(key)) if key else 'the root'} does not fit its tensors") from None
    return td


def _load_v1(ckpt: Path) -> TensorDict:
    """Format 1: tensordict's memmap layout, parsed as JSON; only plain tensors are accepted."""
    _refuse_extras(ckpt, ckpt, {"meta.json", "tensors"})
    flat: dict[tuple[str, ...], torch.Tensor] = {}
    batch_sizes: list[tuple[list[str], Any]] = []

    def walk(directory: Path, prefix: tuple[str, ...], depth: int) -> None:
        if depth > 32:
            raise _damaged(ckpt, "tensors/ is nested deeper than rlfunc writes")
        rel = directory.relative_to(ckpt)
        if directory.is_symlink() or not directory.is_dir():
            raise _damaged(ckpt, f"{rel} is not a directory rlfunc wrote (a symbolic link, or missing)")
        info = _read_json(ckpt, directory / "meta.json")
        if not isinstance(info, dict) or info.get("_type") != "<class 'tensordict._td.TensorDict'>":
            raise _damaged(ckpt, f"{rel}/meta.json describes {_short(info.get('_type') if isinstance(info, dict) else info)}, not a plain TensorDict")
        if info.get("shape") and not _is_shape(info.get("shape")):
            raise _damaged(ckpt, f"{rel}/meta.json has an invalid batch size {_short(info.get('shape'))}")
        if info.get("shape"):
            batch_sizes.append((list(prefix), info.get("shape")))
        allowed = {"meta.json"}
        for name, spec in info.items():
            if name in ("shape", "device", "_type", "_format_version", "_class", "names"):
                continue
            if not isinstance(spec, dict) or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise _damaged(ckpt, f"{rel}/meta.json has an entry {_short(name)} rlfunc did not write")
            if spec.get("type") == "TensorDict" and set(spec) == {"type"}:
                allowed.add(name)
                walk(directory / name, prefix + (name,), depth + 1)
                continue
            dtype = spec.get("dtype", "")
            dtype = dtype.removeprefix("torch.") if isinstance(dtype, str) else None
            shape = spec.get("shape")
            if set(spec) - {"device", "shape", "dtype", "is_nested"} or spec.get("is_nested") or dtype not in DTYPES:
                raise _damaged(ckpt, f"{rel}/{name} is not a plain tensor (a non-tensor or object entry rlfunc did not write)")
            if not _is_shape(shape):
                raise _damaged(ckpt, f"{rel}/{name} has an invalid shape {_short(shape)}")
            allowed.add(f"{name}.memmap")
            size = math.prod(shape) * torch.empty((), dtype=DTYPES[dtype]).element_size()
            flat[prefix + (name,)] = _read_tensor(ckpt, directory / f"{name}.memmap", "/".join(prefix + (name,)), DTYPES[dtype], tuple(shape), size, None)
        _refuse_extras(ckpt, directory, allowed)

    walk(ckpt / "tensors", (), 0)
    return _nest(ckpt, flat, batch_sizes)


def _check_finite(ckpt: Path, tensors: TensorDict) -> None:
    """Training state (parameters, targets, optimizer moments) must be finite."""
    if "state" not in tensors.keys():
        return
    for key, value in tensors["state"].items(include_nested=True, leaves_only=True):
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            where = "/".join(("state",) + ((key,) if isinstance(key, str) else tuple(key)))
            raise CheckpointError(
                f"Checkpoint {str(ckpt)!r} holds non-finite values in {where} (training had diverged); use an earlier checkpoint."
            )


def load_checkpoint(path: str | Path) -> tuple[TensorDict, dict[str, Any]]:
    """Read and verify a checkpoint written by :func:`save_checkpoint` -> ``(tensors, meta)``.

    ``path``: a checkpoint, a run directory or its ``checkpoints`` directory
    (then the newest checkpoint). Raises :class:`CheckpointError`, one sentence
    naming the file, for anything missing, damaged, crafted or non-finite.
    Tensors are ordinary in-memory copies; the files are opened read-only.
    """
    ckpt = resolve_checkpoint(path)
    try:
        meta = _read_meta(ckpt)
        tensors = _load_v2(ckpt, meta) if meta["format_version"] == 2 else _load_v1(ckpt)
    except CheckpointError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, RecursionError) as exc:
        # every field is type-checked above; this is the net under a crafted value that slipped past
        raise _damaged(ckpt, f"meta.json holds a value rlfunc did not write ({type(exc).__name__}: {_cut(str(exc))})") from None
    _check_finite(ckpt, tensors)
    meta.pop("manifest", None)
    meta.pop("checksum", None)
    return tensors, meta


def check_structure(ckpt: Path, tensors: TensorDict, expected: TensorDict, root: str) -> None:
    """Refuse a checkpoint whose ``root`` entry is not what this config builds: every tensor of
    ``expected[root]`` must be in ``tensors[root]`` with the same shape and dtype, and nothing else
    (a foreign algorithm's or another config's state)."""

    def leaves(td: TensorDict) -> dict[tuple[str, ...], torch.Tensor]:
        if root not in td.keys():
            return {}
        sub = td.get(root)
        if isinstance(sub, torch.Tensor):
            return {(root,): sub}
        # tensors, and the TensorDicts that hold none (a network part without layers): an extra or a missing
        # empty part is another structure too
        return {(root,) + ((k,) if isinstance(k, str) else tuple(k)): v for k, v in sub.items(True)
                if not isinstance(v, TensorDict) or next(iter(v.values(True, True)), None) is None}

    want, got = leaves(expected), leaves(tensors)
    # an empty part with no batch size is not recorded (nothing to write): missing, it is not missed
    missing = sorted(k for k in set(want) - set(got) if not isinstance(want[k], TensorDict))
    extra = sorted(set(got) - set(want))
    if missing or extra:
        what = f"lacks {'/'.join(missing[0])}" if missing else f"holds {'/'.join(extra[0])}, which this algorithm does not have"
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} does not fit its config: it {what}; it holds another algorithm's or configuration's state."
        )
    for key, w in want.items():
        if key not in got:
            continue
        g = got[key]
        if isinstance(w, TensorDict) or isinstance(g, TensorDict):
            if isinstance(w, TensorDict) != isinstance(g, TensorDict):
                raise CheckpointError(f"Checkpoint {str(ckpt)!r} does not fit its config at {'/'.join(key)}; it holds "
                                      "another algorithm's or configuration's state.")
            continue
        if g.shape != w.shape or g.dtype != w.dtype:
            raise CheckpointError(
                f"Checkpoint {str(ckpt)!r} has {'/'.join(key)} as {g.dtype} {tuple(g.shape)}, but its config builds "
                f"{w.dtype} {tuple(w.shape)}; it holds another configuration's state."
            )


def load_newest_good(path: str | Path, log=None) -> tuple[Path, TensorDict, dict[str, Any]]:
    """The newest checkpoint under ``path`` that verifies -> ``(checkpoint, tensors, meta)``.

    Tried in :func:`checkpoint_candidates`' order: the head of the run's line
    (:func:`latest_checkpoint`: what ``latest`` names, or a complete checkpoint
    written after it whose ``latest`` update a crash prevented), then older
    ones by step, newest first, then leftovers of a line an earlier resume
    abandoned. Each damaged one is skipped with a line (to ``log``, default
    stderr) naming it and why. Raises the first one's :class:`CheckpointError`
    if none verifies.
    """
    log = log or (lambda line: print(line, file=sys.stderr))
    errors: list[CheckpointError] = []
    for ckpt in checkpoint_candidates(path):
        try:
            tensors, meta = load_checkpoint(ckpt)
        except CheckpointError as exc:
            errors.append(exc)
            log(f"rlfunc: skipping {ckpt.name}: {exc}")
            continue
        return ckpt, tensors, meta
    if len(errors) > 1:
        raise CheckpointError(f"No checkpoint under {str(path)!r} verifies ({len(errors)} tried); the newest: {errors[0]}")
    raise errors[0]


# -- the best policy (train.keep_best) -------------------------------------------------------


def _eval_return(meta: dict[str, Any]) -> float | None:
    value = meta.get("eval_return")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def recorded_best_return(directory: str | Path) -> float:
    """The best evaluation return that a ``train.keep_best`` policy in ``directory`` (a run's
    ``best/``) records and verifies with; ``-inf`` if there is none.

    A resumed run starts its best return from it as well as from its checkpoint's evaluations: an
    evaluation after the last checkpoint may have saved a better policy before the run was killed,
    and a worse one must not replace it."""
    best = -math.inf
    for ckpt in list_checkpoints(directory):
        try:
            _, meta = load_checkpoint(ckpt)
        except CheckpointError:
            continue
        value = _eval_return(meta)
        if value is not None and value > best:
            best = value
    return best


def prune_best(directory: str | Path, kept: Path, eval_return: float) -> list[str]:
    """After ``kept``, a best policy of ``eval_return``, was written to ``directory``: delete the other
    policies there. A policy there that verifies and records a better return is never deleted; then
    ``kept`` is (a better policy is never replaced by a worse one). Returns the names deleted."""
    kept = Path(kept)
    worse, better = [], False
    for other in list_checkpoints(directory):
        if other.name == kept.name:
            continue
        try:
            _, meta = load_checkpoint(other)
        except CheckpointError:
            meta = {}
        value = _eval_return(meta)
        if value is not None and value > eval_return:
            better = True
        else:
            worse.append(other)
    if better:
        worse.append(kept)
    for old in worse:
        _remove(old)
    return [old.name for old in worse]


# -- the run directory's lock ----------------------------------------------------------------

LOCK_FILE = ".rlfunc.lock"
"""The file in a run directory that the process training there holds an exclusive ``flock`` on."""

_LOCKS: dict[str, int] = {}  # real path of a run directory -> fd of its lock file, held by this process
_HANDED_OVER: set[str] = set()  # locks taken for a run about to start (hand_over_lock): its locked_run_dir releases them


def _forget_locks_in_child() -> None:
    """A forked child (an env worker) must not keep its parent's run locked after the parent dies."""
    for fd in _LOCKS.values():
        if fd >= 0:
            try:
                os.close(fd)  # the parent's lock stays: flock belongs to the parent's open file description
            except OSError:
                pass
    _LOCKS.clear()
    _HANDED_OVER.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_locks_in_child)


def lock_run_dir(run_dir: str | Path) -> bool:
    """Take ``run_dir``'s lock for this process, or refuse with one :class:`ConfigError` sentence if
    another live process holds it (it is training or resuming there).

    The lock is an advisory ``flock`` on ``run_dir/.rlfunc.lock`` (which also records the holder's
    pid): the kernel releases it when the process ends, killed or not, so a crashed run never stays
    locked. Taking it again in the same process does nothing; :func:`unlock_run_dir` releases it.
    On a file system without locks, a warning is printed and the run goes on unlocked. Returns
    whether this call took it (``False``: this process held it already)."""
    run_dir = Path(run_dir)
    key = os.path.realpath(run_dir)
    if key in _LOCKS:
        return False
    path = run_dir / LOCK_FILE
    flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):
            raise ConfigError(f"{str(path)!r} is a symbolic link, not the lock file rlfunc writes; remove it and run again.") from None
        raise ConfigError(
            f"Cannot lock run directory {str(run_dir)!r} ({exc.strerror or exc}); fix its permissions or pick another run directory."
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ConfigError(f"{str(path)!r} is not a regular file, not the lock file rlfunc writes; remove it and run again.")
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                print(
                    f"rlfunc: warning: the file system of {str(run_dir)!r} cannot lock files ({exc.strerror or exc}); "
                    "nothing stops a second process from training in this run directory at the same time.",
                    file=sys.stderr,
                )
                os.close(fd)
                _LOCKS[key] = -1
                return True
            try:
                holder = os.pread(fd, 32, 0).decode("ascii", errors="replace").strip()
            except OSError:
                holder = ""
            pid = f" (pid {holder})" if holder.isdigit() else ""
            raise ConfigError(
                f"Run directory {str(run_dir)!r} is in use by another rlfunc process{pid} that is training there; "
                "wait for it to end (or stop it) before training or resuming in this directory."
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except OSError:
            pass  # the pid is only for the message above
    except BaseException:
        os.close(fd)
        raise
    _LOCKS[key] = fd
    return True


def unlock_run_dir(run_dir: str | Path) -> None:
    """Release ``run_dir``'s lock if this process holds it (the lock file stays; it is reused)."""
    key = os.path.realpath(Path(run_dir))
    _HANDED_OVER.discard(key)
    fd = _LOCKS.pop(key, None)
    if fd is not None and fd >= 0:
        os.close(fd)


def hand_over_lock(run_dir: str | Path) -> None:
    """Mark ``run_dir``'s lock, which this process holds, as the lock of the run about to start there:
    that run's :func:`locked_run_dir` releases it when the run ends, as if it had taken it.

    What takes the lock before the run exists (``rlfunc.train``'s check of a new run directory) hands
    it over, so the lock (and its file descriptor) is not held after the run until the process ends,
    which refused any later ``rlfunc resume`` of the finished run in another process while, e.g., the
    notebook that trained it was still open. A lock this process does not hold is left alone."""
    key = os.path.realpath(Path(run_dir))
    if key in _LOCKS:
        _HANDED_OVER.add(key)


@contextlib.contextmanager
def locked_run_dir(run_dir: str | Path):
    """Hold ``run_dir``'s lock (:func:`lock_run_dir`) for the block, creating the directory first;
    released at its end only if this block took it or it was handed over to it (:func:`hand_over_lock`);
    an outer holder, e.g. ``resume``, keeps it."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    took = lock_run_dir(run_dir)
    key = os.path.realpath(Path(run_dir))
    if key in _HANDED_OVER:
        _HANDED_OVER.discard(key)
        took = True
    try:
        yield
    finally:
        if took:
            unlock_run_dir(run_dir)
