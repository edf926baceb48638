"""rlfunc: functional, JAX-style reinforcement learning on PyTorch.

Pure pieces live in :mod:`rlfunc.core` and :mod:`rlfunc.algos`; the training
runtime (collector, loop, checkpoints, CLI) in :mod:`rlfunc.runtime`.

The names below, and the torch-side subpackages, are imported on first use (PEP 562):
``rlfunc --help`` and ``--version`` answer without importing torch, and a Ctrl-C while a
command starts is the CLI's one line, not an import traceback. rlfunc's gymnasium envs
(``MinAtar/<Game>-v0``, ``dmc/...``, ``rlfunc/CueMemory-v0``) are registered at import, as before.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rlfunc import envs as _envs  # noqa: F401  (registers rlfunc's gymnasium ids; no torch)

__version__ = "0.1.0"
__all__ = ["train", "resume", "load", "evaluate", "export", "Callback", "__version__"]

_LAZY = {
    "train": "rlfunc.runtime.trainer",
    "resume": "rlfunc.runtime.trainer",
    "load": "rlfunc.runtime.api",
    "evaluate": "rlfunc.runtime.api",
    "export": "rlfunc.runtime.api",
    "Callback": "rlfunc.runtime.callbacks",
}

_SUBPACKAGES = ("algos", "core", "replay", "runtime", "scale", "examples")
"""Reached as ``rlfunc.<name>`` after ``import rlfunc``: imported then (their modules, e.g.
``rlfunc.algos.redq``, are imported by name, ``from rlfunc.algos import redq``, as before)."""

if TYPE_CHECKING:  # for type checkers and IDEs: the same names, imported eagerly
    from rlfunc.runtime.api import evaluate, export, load
    from rlfunc.runtime.callbacks import Callback
    from rlfunc.runtime.trainer import resume, train


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBPACKAGES:
        value = importlib.import_module(f"rlfunc.{name}")
    else:
        raise AttributeError(f"module 'rlfunc' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBPACKAGES))
