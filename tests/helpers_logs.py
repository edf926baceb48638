"""Reading a run's CSV logs, and a fake clock for the loop's timing (the steps_per_s tests)."""

from __future__ import annotations

import csv
import time as real_time
import types
from pathlib import Path


def rows(path: Path) -> list[dict[str, str]]:
    """The rows of a run's ``metrics.csv`` or ``eval.csv`` as dicts of strings."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def fake_clock(monkeypatch, *modules) -> list[float]:
    """``time.monotonic`` of ``modules`` on a clock that moves on by whatever a test adds to ``offset[0]``."""
    offset = [0.0]
    clock = types.SimpleNamespace(monotonic=lambda: real_time.monotonic() + offset[0])
    for module in modules:
        monkeypatch.setattr(module, "time", clock)
    return offset
