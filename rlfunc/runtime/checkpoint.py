"""Crash-safe checkpoints without pickle.

A checkpoint is a directory::

    step_000001000/
        meta.json        counters, env RNG states, the resolved config
        tensors/         a TensorDict memory-mapped by tensordict (raw tensor
                         files + JSON metadata; no pickle anywhere)

It is written under a temporary name and renamed into place, so a crash never
leaves a half-written checkpoint behind; ``latest`` (a one-line text file,
also replaced atomically) names the newest complete one.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from tensordict import TensorDict

__all__ = ["save_checkpoint", "load_checkpoint", "latest_checkpoint", "resolve_checkpoint", "CheckpointError"]

FORMAT_VERSION = 1


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete or incompatible."""


def save_checkpoint(directory: str | Path, name: str, tensors: TensorDict, meta: dict[str, Any]) -> Path:
    """Write ``tensors`` + ``meta`` to ``directory/name`` atomically; update ``latest``."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    tmp = directory / f".{name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    tensors.detach().to("cpu").memmap(tmp / "tensors", num_threads=0)
    meta = dict(meta, format_version=FORMAT_VERSION)
    with open(tmp / "meta.json", "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    if final.exists():
        old = directory / f".{name}.old-{os.getpid()}"
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    latest_tmp = directory / f".latest.tmp-{os.getpid()}"
    latest_tmp.write_text(name + "\n")
    os.replace(latest_tmp, directory / "latest")
    return final


def latest_checkpoint(directory: str | Path) -> Path | None:
    """The newest complete checkpoint in ``directory`` (``None`` if there is none)."""
    directory = Path(directory)
    pointer = directory / "latest"
    if pointer.exists():
        candidate = directory / pointer.read_text().strip()
        if (candidate / "meta.json").exists():
            return candidate
    complete = sorted(p for p in directory.glob("step_*") if (p / "meta.json").exists())
    return complete[-1] if complete else None


def resolve_checkpoint(path: str | Path) -> Path:
    """A run directory, a ``checkpoints`` directory or a checkpoint -> checkpoint dir."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"No run or checkpoint at {str(path)!r}; check the path.")
    if (path / "meta.json").exists():
        return path
    for candidate_dir in (path / "checkpoints", path):
        if candidate_dir.is_dir():
            found = latest_checkpoint(candidate_dir)
            if found is not None:
                return found
    raise CheckpointError(
        f"{str(path)!r} holds no complete checkpoint (no step_*/meta.json); pass a run directory that has trained past its first checkpoint."
    )


def load_checkpoint(path: str | Path) -> tuple[TensorDict, dict[str, Any]]:
    """Read a checkpoint written by :func:`save_checkpoint` -> ``(tensors, meta)``.

    Tensors are copied into ordinary memory (not left memory-mapped).
    """
    ckpt = resolve_checkpoint(path)
    try:
        with open(ckpt / "meta.json") as f:
            meta = json.load(f)
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} is corrupt (meta.json unreadable: {exc}); use an earlier checkpoint.") from exc
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} has format {meta.get('format_version')!r}, this rlfunc reads {FORMAT_VERSION}; "
            "load it with the rlfunc version that wrote it."
        )
    try:
        tensors = TensorDict.load_memmap(ckpt / "tensors").clone()
    except Exception as exc:  # tensordict raises several types for damaged files
        raise CheckpointError(
            f"Checkpoint {str(ckpt)!r} is corrupt (tensor files unreadable: {type(exc).__name__}: {exc}); use an earlier checkpoint."
        ) from exc
    return tensors, meta
