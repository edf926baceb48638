"""One-sentence checks for the algorithms' ``Config`` dataclasses (called from their ``__post_init__``).

Every message starts with the field's name and says what a valid value is, so
the run config layer (:mod:`rlfunc.runtime.config`) can name it as
``agent.<field>``. Each helper raises :class:`ValueError`.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any, Iterable

from rlfunc.core.optim import LRSchedule

__all__ = [
    "LINEAR_INITS",
    "LSTM_INITS",
    "check_finite",
    "check_booleans",
    "positive_int",
    "nonnegative_int",
    "positive_float",
    "nonnegative_float",
    "probability",
    "discount",
    "fraction",
    "layer_sizes",
    "one_of",
    "optional_positive_float",
    "lr_schedules",
]

LINEAR_INITS = ("xavier_uniform", "orthogonal", "torch_default", "haiku", "lecun_normal")
"""Weight inits of :func:`rlfunc.core.nets.linear_init`."""
LSTM_INITS = ("torch_default", "orthogonal", "haiku", "lecun_normal")
"""Weight inits of :func:`rlfunc.core.nets.lstm_init`."""


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def check_finite(config) -> None:
    """Every number-valued field of ``config`` is finite (no NaN, no infinity)."""
    for f in dataclasses.fields(config):
        v = getattr(config, f.name)
        if _is_real(v) and not math.isfinite(v):
            raise ValueError(f"{f.name} must be a finite number, got {v}.")


def check_booleans(config) -> None:
    """Every field whose default is a bool holds a bool (``true``/``false``), not a number or a string."""
    for f in dataclasses.fields(config):
        if isinstance(f.default, bool) and not isinstance(getattr(config, f.name), bool):
            raise ValueError(f"{f.name} must be true or false, got {getattr(config, f.name)!r}.")


def positive_int(config, *names: str) -> None:
    for name in names:
        v = getattr(config, name)
        if not _is_int(v) or v < 1:
            raise ValueError(f"{name} must be a positive integer, got {v!r}.")


def nonnegative_int(config, *names: str) -> None:
    for name in names:
        v = getattr(config, name)
        if not _is_int(v) or v < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {v!r}.")


def positive_float(config, *names: str) -> None:
    for name in names:
        v = getattr(config, name)
        if not _is_real(v) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {v!r}.")


def optional_positive_float(config, *names: str, off: str = "off") -> None:
    for name in names:
        v = getattr(config, name)
        if v is not None and (not _is_real(v) or not math.isfinite(v) or v <= 0):
            raise ValueError(f"{name} must be a finite number > 0 or null ({off}), got {v!r}.")


def nonnegative_float(config, *names: str) -> None:
    for name in names:
        v = getattr(config, name)
        if not _is_real(v) or not math.isfinite(v) or v < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {v!r}.")


def probability(config, *names: str) -> None:
    for name in names:
        v = getattr(config, name)
        if not _is_real(v) or not 0.0 <= v <= 1.0:
            raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}.")


def fraction(config, *names: str) -> None:
    """In ``(0, 1]`` (a Polyak rate, an epsilon base)."""
    for name in names:
        v = getattr(config, name)
        if not _is_real(v) or not 0.0 < v <= 1.0:
            raise ValueError(f"{name} must be in (0, 1], got {v!r}.")


def discount(config, name: str = "gamma") -> None:
    v = getattr(config, name)
    if not _is_real(v) or not 0.0 < v <= 1.0:
        raise ValueError(f"{name} must be a discount in (0, 1], got {v!r}.")


def layer_sizes(config, name: str, *, allow_empty: bool = False) -> None:
    """A list of positive layer widths (non-empty unless ``allow_empty``)."""
    v = getattr(config, name)
    ok = isinstance(v, (tuple, list)) and all(_is_int(s) and s >= 1 for s in v) and (allow_empty or len(v) > 0)
    if not ok:
        what = "a list of positive layer widths" if allow_empty else "a non-empty list of positive layer widths"
        shown = list(v) if isinstance(v, (tuple, list)) else v
        raise ValueError(f"{name} must be {what}, got {shown!r}.")


def one_of(config, name: str, options: Iterable[str]) -> None:
    options = tuple(options)
    v = getattr(config, name)
    if v not in options:
        raise ValueError(f"{name} must be one of {', '.join(repr(o) for o in options)}, got {v!r}.")


def lr_schedules(config, *names: str) -> None:
    """Each named field (``lr_schedule``, ``critic_lr_schedule``, ...) becomes an
    :class:`~rlfunc.core.optim.LRSchedule` (a mapping from YAML is parsed) or stays ``None``;
    a bad value is one sentence naming the field (:meth:`LRSchedule.parse`)."""
    for name in names:
        object.__setattr__(config, name, LRSchedule.parse(getattr(config, name), name))
