"""``--seeds`` and ``--grid`` specs: parsed and checked before anything runs.

One parser for every command that takes them: ``rlfunc train --seeds/--grid`` (a population,
:mod:`rlfunc.runtime.population`) and ``rlfunc sweep`` (runs as Ray tasks, :mod:`rlfunc.scale`).

``--seeds 0-4`` (a range, both ends included), ``--seeds 0,3,7``, ``--seeds 2`` or a mix
(``0-2,9``). ``--grid agent.critic_lr=1e-3,3e-4`` (one key, its values split on the commas
outside brackets, each value YAML like ``--set``'s); several ``--grid`` options span their
product, the first varying slowest. Config files' grid values go through the same reading
(:func:`grid_value`), and values that are equal once read (``1e-3`` and ``0.001``, ``1`` and
``1.0``) are the same value named twice (:func:`same_value`).

At most :data:`MAX_SEEDS` seeds: a range like ``0-4294967295`` is a typo, refused before its
list is built.
"""

from __future__ import annotations

import itertools
import numbers
import re
from typing import Any

import yaml

from rlfunc.runtime.config import ConfigError, load_yaml

__all__ = ["MAX_SEEDS", "parse_seeds", "parse_grid", "grid_value", "same_value", "grid_points", "describe_point"]

MAX_SEEDS = 4096
"""The most seeds ``--seeds`` may name (``rlfunc train`` and ``rlfunc sweep``), and the most members
a population may have (:func:`rlfunc.runtime.population_members.check_spec`). A population holds every
member's replay (``P`` times one run's: REDQ's default million rows of Hopper are ~0.1 GB a member,
so 4096 members ~0.4 TB), learner and ``env.num_envs`` gymnasium envs in one process and runs each
member's Python halves in turn every env step; a sweep starts one Ray task per seed. Comparisons of
RL algorithms use a few to tens of seeds, so 4096 leaves room for large vmapped seed studies on
small problems, while anything more is a typo (``0-4294967295``), refused in one sentence before
any list is built."""

_RANGE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_ONE = re.compile(r"^\s*(\d+)\s*$")
_FLOAT = re.compile(r"^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def parse_seeds(text: str) -> list[int]:
    """``"0-4"`` -> ``[0, 1, 2, 3, 4]``; ``"0,3,7"``; ``"2"``; ``"0-2,9"``. Duplicates are refused, and
    more than :data:`MAX_SEEDS` seeds (counted before any list is built)."""
    parts: list[range] = []
    count = 0
    for part in str(text).split(","):
        m_range, m_one = _RANGE.match(part), _ONE.match(part)
        if m_range:
            lo, hi = int(m_range.group(1)), int(m_range.group(2))
            if hi < lo:
                raise ConfigError(f"--seeds {text!r}: the range {part.strip()!r} runs backwards; write it low-high, e.g. 0-4.")
            parts.append(range(lo, hi + 1))
        elif m_one:
            parts.append(range(int(m_one.group(1)), int(m_one.group(1)) + 1))
        else:
            raise ConfigError(
                f"--seeds {text!r} is not a seed list; write a range like 0-4, a comma list like 0,2,5, or one seed like 3."
            )
        count += len(parts[-1])
        if count > MAX_SEEDS:
            raise ConfigError(
                f"--seeds {text!r} names more than {MAX_SEEDS} seeds, the most one command takes; name fewer seeds "
                f"(e.g. 0-{MAX_SEEDS - 1})."
            )
    seeds: list[int] = []
    seen: set[int] = set()
    for r in parts:
        for s in r:
            if s in seen:
                raise ConfigError(f"--seeds {text!r} names seed {s} twice; list each seed once.")
            seen.add(s)
            seeds.append(s)
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
                value = grid_value(load_yaml(raw))
            except yaml.YAMLError:
                raise ConfigError(f"--grid {item!r}: the value {raw.strip()!r} is not valid YAML; quote it.") from None
            twin = next((v for v in parsed if same_value(v, value)), _NONE)
            if twin is not _NONE:
                raise ConfigError(f"--grid {item!r} gives one value twice ({twin!r} and {value!r}); list each value once.")
            parsed.append(value)
        grid[key] = parsed
    return grid


_NONE = object()


def grid_value(value: Any) -> Any:
    """A grid value as ``--grid`` reads it: YAML's value, except that a string that reads as a
    number is that float (YAML 1.1, PyYAML's, reads ``1e-3`` -- no dot -- as a string; a config
    file's ``grid: {agent.critic_lr: [1e-3]}`` too)."""
    if isinstance(value, str) and _FLOAT.match(value.strip()):
        return float(value)
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def same_value(a: Any, b: Any) -> bool:
    """Whether two grid values (as :func:`grid_value` reads them) set a setting to the same value:
    numbers compare by value (``1`` and ``1.0``, ``1e-3`` and ``0.001``: every numeric field is
    either type, and both coerce to the same), anything else by equality (``True`` is not ``1``)."""
    a, b = grid_value(a), grid_value(b)
    if _is_number(a) and _is_number(b):
        return float(a) == float(b)
    return type(a) is type(b) and bool(a == b)


def grid_points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The product of the grid's values as override mappings (one empty point for no grid)."""
    keys = list(grid)
    return [dict(zip(keys, values)) for values in itertools.product(*(grid[k] for k in keys))]


def describe_point(point: dict[str, Any]) -> str:
    """``{"agent.critic_lr": 0.001}`` -> ``"agent.critic_lr=0.001"`` (the curve's and the summary's label)."""
    return " ".join(f"{k}={yaml.safe_dump(v, default_flow_style=True).strip().removesuffix(chr(10) + '...')}"
                    for k, v in point.items())
