"""``--seeds`` and ``--grid`` specs: parsed and checked before anything runs.

One parser for every command that takes them: ``rlfunc train --seeds/--grid`` (a population,
:mod:`rlfunc.runtime.population`) and ``rlfunc sweep`` (runs as Ray tasks, :mod:`rlfunc.scale`).

``--seeds 0-4`` (a range, both ends included), ``--seeds 0,3,7``, ``--seeds 2`` or a mix
(``0-2,9``). ``--grid agent.critic_lr=1e-3,3e-4`` (one key, its values split on the commas
outside brackets, each value YAML like ``--set``'s); several ``--grid`` options span their
product, the first varying slowest.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import yaml

from rlfunc.runtime.config import ConfigError

__all__ = ["parse_seeds", "parse_grid", "grid_points", "describe_point"]

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_ONE = re.compile(r"^\s*(\d+)\s*$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``; ``"0,3,7"``; ``"2"``; ``"0-2,9"``. Duplicates are refused."""
    seeds: list[int] = []
    for part in str(text).split(","):
        m_range, m_one = _RANGE.match(part), _ONE.match(part)
        if m_range:
            lo, hi = int(m_range.group(1)), int(m_range.group(2))
            if hi < lo:
                raise ConfigError(f"--seeds {text!r}: the range {part.strip()!r} runs backwards; write it low-high, e.g. 0-4.")
            seeds.extend(range(lo, hi + 1))
        elif m_one:
            seeds.append(int(m_one.group(1)))
        else:
            raise ConfigError(
                f"--seeds {text!r} is not a seed list; write a range like 0-4, a comma list like 0,2,5, or one seed like 3."
            )
    dup = sorted({s for s in seeds if seeds.count(s) > 1})
    if dup:
        raise ConfigError(f"--seeds {text!r} names seed {dup[0]} twice; list each seed once.")
    return seeds


def _split_top_level(text: str) -> list[str]:
    """Split on the commas outside ``[]``/``{}`` and quotes, so ``[64,64],[256,256]`` is two values."""
    parts, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    parts.append("".join(cur))
    return parts


def parse_grid(items: list[str] | None) -> dict[str, list[Any]]:
    """``["agent.critic_lr=1e-3,3e-4", "agent.batch_size=128,256"]`` -> ``{key: [values]}`` (ordered)."""
    grid: dict[str, list[Any]] = {}
    for item in items or []:
        key, sep, values = str(item).partition("=")
        key = key.strip()
        if not sep or not key or any(not p for p in key.split(".")) or "." not in key:
            raise ConfigError(
                f"--grid {item!r} must look like section.key=value1,value2, e.g. agent.critic_lr=1e-3,3e-4."
            )
        if key in grid:
            raise ConfigError(f"--grid names {key} twice; give all its values in one --grid {key}=v1,v2.")
        parsed = []
        for raw in _split_top_level(values):
            if not raw.strip():
                raise ConfigError(f"--grid {item!r} has an empty value; separate the values with single commas.")
            try:
                value = yaml.safe_load(raw)
            except yaml.YAMLError:
                raise ConfigError(f"--grid {item!r}: the value {raw.strip()!r} is not valid YAML; quote it.") from None
            if isinstance(value, str) and _FLOAT.match(value):  # YAML 1.1 reads 1e-3 (no dot) as a string
                value = float(value)
            parsed.append(value)
        grid[key] = parsed
    return grid


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The product of the grid's values as override mappings (one empty point for no grid)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def describe_point(point: dict[str, Any]) -> str:
    """``{"agent.critic_lr": 0.001}`` -> ``"agent.critic_lr=0.001"`` (the curve's and the summary's label)."""
    return " ".join(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix(chr(10) + '...')}"
                    for k, v in point.items())
