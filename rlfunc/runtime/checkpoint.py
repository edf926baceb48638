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

Format 1 (rlfunc 0.1, a tensordict memmap without a manifest) is still read,
by a parser of its JSON metadata that accepts plain tensors only.
"""

from __future__ import annotations

import errno
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
_NAME_RE = re.compile(r"^step_\d{9}$")
_META_MAX_BYTES = 256 * 2**20  # a meta.json larger than this is not one rlfunc wrote
_CHUNK = 16 * 2**20


class CheckpointError(ValueError):
    """A checkpoint is missing, damaged, crafted or incompatible; the message names the file."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (full disk, permissions); the previous one is intact."""

    def __str__(self) -> str:
        return str(self.strerror)


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
    checkpoint and ``latest`` are untouched.
    """
    directory = Path(directory)
    if not _NAME_RE.match(name):
        raise ValueError(f"checkpoint names look like step_000001000, got {name!r}")
    final = directory / name
    tmp = directory / f".{name}.tmp-{os.getpid()}"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if tmp.exists():
            shutil.rmtree(tmp)
        (tmp / "tensors").mkdir(parents=True)
        manifest = []
        for i, (key, value) in enumerate(_leaves(tensors)):
            if value.dtype not in _DTYPE_NAMES:
                raise TypeError(f"checkpoint entry {'/'.join(key)} has dtype {value.dtype}, not one of {sorted(DTYPES)}")
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
        meta = dict(meta, format_version=FORMAT_VERSION, manifest=manifest, batch_sizes=_batch_sizes(tensors))
        meta["checksum"] = meta_checksum(meta)
        _write_bytes(tmp / "meta.json", json.dumps(meta, indent=1, sort_keys=True).encode())
        _fsync_dir(tmp)
        if final.exists():
            old = directory / f".{name}.old-{os.getpid()}"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, final)
        _fsync_dir(directory)
        latest_tmp = directory / f".latest.tmp-{os.getpid()}"
        with open(latest_tmp, "w") as f:
            f.write(name + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(latest_tmp, directory / "latest")
        _fsync_dir(directory)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else (exc.strerror or str(exc))
        previous = latest_checkpoint(directory) if directory.is_dir() else None
        kept = f"the previous checkpoint {previous.name} is intact" if previous else "no earlier checkpoint exists"
        raise CheckpointWriteError(
            exc.errno, f"Could not write checkpoint {name} in {str(directory)!r} ({reason}); {kept}; free space or fix the permissions, then `rlfunc resume` the run."
        ) from exc
    return final


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
        replaced = re.fullmatch(r"\.(step_\d{9})\.old-\d+", entry.name)
        if replaced and not (directory / replaced.group(1)).exists():
            os.replace(entry, directory / replaced.group(1))
            done.append(f"restored {replaced.group(1)} from an interrupted replacement")
            continue
        if not (replaced or re.fullmatch(r"\.(step_\d{9}\.tmp|latest\.tmp)-\d+", entry.name)):
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)
        done.append(f"removed {entry.name}, left by an interrupted write")
    return done


def prune_checkpoints(directory: str | Path, keep: int) -> list[str]:
    """Delete all but the ``keep`` newest checkpoints in ``directory`` (``train.keep_checkpoints``);
    never the one ``latest`` names. Returns the names deleted."""
    directory = Path(directory)
    pointer = latest_checkpoint(directory)
    deleted = []
    for old in list_checkpoints(directory)[keep:]:
        if pointer is not None and old.name == pointer.name:
            continue
        shutil.rmtree(old, ignore_errors=True)
        deleted.append(old.name)
    return deleted


# -- finding ------------------------------------------------------------------------------


def list_checkpoints(directory: str | Path) -> list[Path]:
    """Complete-looking checkpoints in ``directory`` (``step_*`` with a meta.json), newest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [p for p in directory.iterdir() if _NAME_RE.match(p.name) and (p / "meta.json").is_file()]
    return sorted(found, key=lambda p: p.name, reverse=True)


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``None`` if there is none)."""
    directory = Path(directory)
    pointer = directory / "latest"
    try:
        name = pointer.read_text(errors="replace").strip() if pointer.is_file() else ""
    except OSError:
        name = ""
    if _NAME_RE.match(name) and (directory / name / "meta.json").is_file():
        return directory / name
    complete = list_checkpoints(directory)
    return complete[0] if complete else None


def _checkpoints_dir(path: Path) -> Path | None:
    for candidate in (path / "checkpoints", path):
        if candidate.is_dir() and (list_checkpoints(candidate) or (candidate / "latest").is_file()):
            return candidate
    return None


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, a ``checkpoints`` directory or a checkpoint -> checkpoint dir."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"No run or checkpoint at {str(path)!r}; check the path.")
    if not path.is_dir():
        raise CheckpointError(f"{str(path)!r} is a file, not a run directory or checkpoint; pass the directory `rlfunc train` created.")
    if (path / "meta.json").exists():
        return path
    directory = _checkpoints_dir(path)
    found = latest_checkpoint(directory) if directory is not None else None
    if found is None:
        raise CheckpointError(
            f"{str(path)!r} holds no complete checkpoint (no step_*/meta.json); pass a run directory that has trained past its first checkpoint."
        )
    return found


def checkpoint_candidates(path: str | Path) -> list[Path]:
    """Every checkpoint ``path`` could mean, the preferred first: a checkpoint itself,
    else a run's (or a ``checkpoints`` directory's) checkpoints, newest first."""
    path = Path(path)
    first = resolve_checkpoint(path)
    if (path / "meta.json").exists():
        return [first]
    rest = [p for p in list_checkpoints(first.parent) if p != first]
    return [first, *rest]


# -- reading ------------------------------------------------------------------------------


def _damaged(ckpt: Path, what: str) -> CheckpointError:
    return CheckpointError(f"Checkpoint {str(ckpt)!r} is damaged or was not written by rlfunc: {what}; use an earlier checkpoint.")


def _read_meta(ckpt: Path) -> dict[str, Any]:
    meta_path = ckpt / "meta.json"
    try:
        with open(meta_path, "rb") as f:
            raw = f.read(_META_MAX_BYTES + 1)
    except OSError as exc:
        raise _damaged(ckpt, f"meta.json cannot be read ({exc.strerror or exc})") from None
    if len(raw) > _META_MAX_BYTES:
        raise _damaged(ckpt, "meta.json is larger than any rlfunc writes")
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise _damaged(ckpt, f"meta.json is not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise _damaged(ckpt, "meta.json does not hold a mapping")
    version = meta.get("format_version")
    if version not in READABLE_FORMATS:
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} has format {version!r}, this rlfunc reads {list(READABLE_FORMATS)}; "
            "load it with the rlfunc version that wrote it."
        )
    return meta


def _check_entry(ckpt: Path, i: int, entry: Any) -> tuple[tuple[str, ...], torch.dtype, tuple[int, ...], int, str]:
    if not isinstance(entry, dict):
        raise _damaged(ckpt, f"manifest entry {i} is not a mapping")
    key, dtype, shape, size, digest = (entry.get(k) for k in ("key", "dtype", "shape", "bytes", "blake2b"))
    if not (isinstance(key, list) and key and all(isinstance(k, str) and k for k in key)):
        raise _damaged(ckpt, f"manifest entry {i} has no valid key")
    where = "/".join(key)
    if dtype not in DTYPES:
        raise _damaged(ckpt, f"tensor {where} has dtype {dtype!r}, not one of {sorted(DTYPES)}")
    if not (isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)):
        raise _damaged(ckpt, f"tensor {where} has an invalid shape {shape!r}")
    itemsize = torch.empty((), dtype=DTYPES[dtype]).element_size()
    expected = math.prod(shape) * itemsize
    if size != expected:
        raise _damaged(ckpt, f"tensor {where} records {size!r} bytes, but {dtype} {shape} needs {expected}")
    if not (isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest)):
        raise _damaged(ckpt, f"tensor {where} has no valid checksum")
    return tuple(key), DTYPES[dtype], tuple(shape), expected, digest


def _read_tensor(ckpt: Path, file: Path, where: str, dtype: torch.dtype, shape: tuple[int, ...], size: int, digest: str | None) -> torch.Tensor:
    """Read one tensor file read-only (no symlinks, regular files only), check size and checksum."""
    rel = file.relative_to(ckpt)
    nofollow = getattr(os, "O_NOFOLLOW", 0)
    try:
        f = open(file, "rb", opener=lambda p, flags: os.open(p, flags | nofollow))
    except FileNotFoundError:
        raise _damaged(ckpt, f"{rel} (tensor {where}) is missing") from None
    except OSError as exc:
        raise _damaged(ckpt, f"{rel} (tensor {where}) cannot be opened ({exc.strerror or exc})") from None
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise _damaged(ckpt, f"{rel} (tensor {where}) is not a regular file")
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
    if meta.get("checksum") != meta_checksum(meta):
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
    if not tensors_dir.is_dir() or tensors_dir.is_symlink():
        raise _damaged(ckpt, "tensors/ is missing")
    _refuse_extras(ckpt, tensors_dir, expected_files)
    flat = {}
    for i, (key, dtype, shape, size, digest) in enumerate(entries):
        flat[key] = _read_tensor(ckpt, tensors_dir / f"{i:05d}.bin", "/".join(key), dtype, shape, size, digest)
    batch_sizes = meta.get("batch_sizes", [])
    if not isinstance(batch_sizes, list) or not all(isinstance(b, dict) for b in batch_sizes):
        raise _damaged(ckpt, "meta.json has invalid batch_sizes")
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
        ok_shape = isinstance(shape, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        if not (ok_key and ok_shape):
            raise _damaged(ckpt, f"batch size {shape!r} of {key!r} is invalid")
        try:
            sub = td.get(tuple(key)) if key else td
            if not isinstance(sub, TensorDict):
                raise KeyError(key)
            sub.batch_size = torch.Size(shape)
        except (KeyError, ValueError, TypeError, RuntimeError):
            raise _damaged(ckpt, f"batch size {shape} of {'/'.join(key) or 'the root'} does not fit its tensors") from None
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
        try:
            info = json.loads((directory / "meta.json").read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raise _damaged(ckpt, f"{rel}/meta.json cannot be read") from None
        if not isinstance(info, dict) or info.get("_type") != "<class 'tensordict._td.TensorDict'>":
            raise _damaged(ckpt, f"{rel}/meta.json describes {info.get('_type') if isinstance(info, dict) else info!r}, not a plain TensorDict")
        if info.get("shape"):
            batch_sizes.append((list(prefix), info.get("shape")))
        allowed = {"meta.json"}
        for name, spec in info.items():
            if name in ("shape", "device", "_type", "_format_version", "_class", "names"):
                continue
            if not isinstance(spec, dict) or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise _damaged(ckpt, f"{rel}/meta.json has an entry {name!r} rlfunc did not write")
            if spec.get("type") == "TensorDict" and set(spec) == {"type"}:
                allowed.add(name)
                walk(directory / name, prefix + (name,), depth + 1)
                continue
            dtype = str(spec.get("dtype", "")).removeprefix("torch.")
            shape = spec.get("shape")
            if set(spec) - {"device", "shape", "dtype", "is_nested"} or spec.get("is_nested") or dtype not in DTYPES:
                raise _damaged(ckpt, f"{rel}/{name} is not a plain tensor (a non-tensor or object entry rlfunc did not write)")
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise _damaged(ckpt, f"{rel}/{name} has an invalid shape {shape!r}")
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
    meta = _read_meta(ckpt)
    tensors = _load_v2(ckpt, meta) if meta["format_version"] == 2 else _load_v1(ckpt)
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
        return {(root,) + ((k,) if isinstance(k, str) else tuple(k)): v for k, v in sub.items(True, True)}

    want, got = leaves(expected), leaves(tensors)
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    if missing or extra:
        what = f"lacks {'/'.join(missing[0])}" if missing else f"holds {'/'.join(extra[0])}, which this algorithm does not have"
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} does not fit its config: it {what}; it holds another algorithm's or configuration's state."
        )
    for key, w in want.items():
        g = got[key]
        if g.shape != w.shape or g.dtype != w.dtype:
            raise CheckpointError(
                f"Checkpoint {str(ckpt)!r} has {'/'.join(key)} as {g.dtype} {tuple(g.shape)}, but its config builds "
                f"{w.dtype} {tuple(w.shape)}; it holds another configuration's state."
            )


def load_newest_good(path: str | Path, log=None) -> tuple[Path, TensorDict, dict[str, Any]]:
    """The newest checkpoint under ``path`` that verifies -> ``(checkpoint, tensors, meta)``.

    Each damaged newer checkpoint is skipped with a line (to ``log``, default
    stderr) naming it and why. Raises the newest one's :class:`CheckpointError`
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
