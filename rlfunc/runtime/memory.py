"""Memory sized before allocation: one sentence with the bytes needed instead of an out-of-memory crash.

Every learner (:mod:`rlfunc.runtime.learners`) calls :func:`require_memory`
first thing in its constructor, before the algorithm state or the replay
exist, with what it is about to allocate:

* its replay: capacity x bytes per stored item, from the env's spaces and the
  storage's dtypes (the learner's ``_replay_need``), counting what the run
  commits (on the CPU the pixel replay's frames are committed as they are
  written, so at most ``train.total_steps`` of them; a GPU reserves its whole
  ring at once);
* the algorithm's state (parameters, targets, optimizer state):
  :func:`state_bytes` runs the algorithm's ``init`` on PyTorch's ``meta``
  device, which gives every shape and allocates nothing;
* what it loads (``_data_needs``: RLPD's prior dataset, sized from its files
  before it is read) and one update's working memory (``_batch_need``: the
  sampled rows; DrQ-v2's augmented images and encoder activations too).

A population (:mod:`rlfunc.runtime.population`) checks ``P`` replays and ``2P``
states (the members' and their stacked copy) before building its other members.

Available memory is ``MemAvailable`` of ``/proc/meminfo`` (lowered to a
cgroup's limit less its usage where one is set, the usage without its
reclaimable ``inactive_file`` page cache) for the CPU, and the free memory of
the card (:func:`torch.cuda.mem_get_info`) for a CUDA device. Where it cannot
be known (another OS, ``mps``) nothing is checked.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Sequence

import torch

from rlfunc.runtime.config import ConfigError

__all__ = ["Need", "available_bytes", "format_bytes", "state_bytes", "network_need", "require_memory"]

NETWORK_KEYS = (
    "hidden_sizes",
    "num_critics",
    "encoder_sizes",
    "lstm_size",
    "head_sizes",
    "encoder_channels",
    "feature_dim",
    "hidden_dim",
)
"""Agent settings that size an algorithm's networks (named in the sentence when they do not fit)."""


@dataclasses.dataclass(frozen=True)
class Need:
    """One allocation: ``subject`` (what the user set) needs ``nbytes`` for ``what``; ``fix`` says what to change."""

    subject: str
    nbytes: int
    what: str
    fix: str
    plural: bool = False  # the subject takes "need", not "needs"


def format_bytes(n: float) -> str:
    """``68.0 GB``, ``512.0 MB``, ``12.0 KB``, ``100 bytes`` (decimal units)."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} bytes"


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().strip()
    except (OSError, ValueError):
        return None
    return int(text) if text.isdigit() else None


def _read_stat(path: str, key: str) -> int | None:
    """The value of ``key`` in a cgroup ``memory.stat`` file (``key value`` lines), or ``None``."""
    try:
        lines = Path(path).read_text().splitlines()
    except (OSError, ValueError):
        return None
    for line in lines:
        parts = line.split()
        if len(parts) == 2 and parts[0] == key and parts[1].isdigit():
            return int(parts[1])
    return None


_MEMINFO = "/proc/meminfo"
_CGROUPS = (
    # (limit, usage, memory.stat, the stat's reclaimable page cache): cgroup v2, then v1
    ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current", "/sys/fs/cgroup/memory.stat", "inactive_file"),
    (
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
        "/sys/fs/cgroup/memory/memory.usage_in_bytes",
        "/sys/fs/cgroup/memory/memory.stat",
        "total_inactive_file",
    ),
)
"""The files :func:`_host_available` reads for a container's memory limit."""


def _host_available() -> int | None:
    avail = None
    try:
        for line in Path(_MEMINFO).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        return None
    if avail is None:
        return None
    # A container's limit (cgroup v2, then v1) may be below the host's free memory. Its usage counts the
    # page cache of files read or written (checkpoints, datasets); the inactive part of it is reclaimed
    # before the limit is hit, so it is not counted as used (what `docker stats` and the kernel's own
    # working-set estimate do).
    for limit_file, usage_file, stat_file, inactive_key in _CGROUPS:
        limit, usage = _read_int(limit_file), _read_int(usage_file)
        if limit is not None and usage is not None and limit < 1 << 60:
            inactive = _read_stat(stat_file, inactive_key) or 0
            avail = min(avail, max(limit - (usage - min(inactive, usage)), 0))
            break
    return avail


def available_bytes(device: torch.device | str) -> int | None:
    """Free memory for new tensors on ``device`` in bytes, or ``None`` where it cannot be known."""
    device = torch.device(device)
    if device.type == "cpu":
        return _host_available()
    if device.type == "cuda" and torch.cuda.is_available():
        try:
            free, _ = torch.cuda.mem_get_info(device)
        except (RuntimeError, AssertionError, ValueError):
            return None
        return int(free)
    return None


def state_bytes(algo, config, obs_space, act_space) -> int | None:
    """Bytes of ``algo.init(config, obs_space, act_space)``'s tensors, found on the ``meta`` device
    (shapes only, nothing allocated). A ``ValueError`` of ``init`` (a bad space, a bad size) is raised
    as it is; any other failure of the meta run gives ``None`` (not known)."""
    try:
        with torch.device("meta"):
            state = algo.init(config, obs_space, act_space, seed=0, device="meta")
    except ValueError:
        raise
    except Exception:  # noqa: BLE001 -- an init that cannot run on meta is simply not sized here
        return None
    total = 0
    for value in state.exclude("config").values(True, True):
        if isinstance(value, torch.Tensor):
            total += value.numel() * value.element_size()
    return total


def network_need(algo, config, obs_space, act_space) -> Need | None:
    """The :class:`Need` of an algorithm's training state, naming the agent settings that size it."""
    nbytes = state_bytes(algo, config, obs_space, act_space)
    if nbytes is None:
        return None

    def shown(v):
        return list(v) if isinstance(v, tuple) else v

    keys = [k for k in NETWORK_KEYS if hasattr(config, k)]
    settings = ", ".join(f"agent.{k}={shown(getattr(config, k))}" for k in keys)
    return Need(
        subject=f"The agent's networks ({settings})" if settings else "The agent's networks",
        nbytes=nbytes,
        what="parameters, targets and optimizer state",
        fix="lower " + (" or ".join(f"agent.{k}" for k in keys) if keys else "the network sizes"),
        plural=True,
    )


def _check_device(device: torch.device) -> None:
    if device.type == "cuda" and torch.cuda.is_available() and device.index is not None:
        count = torch.cuda.device_count()
        if device.index >= count:
            raise ConfigError(
                f"train.device={device} names CUDA device {device.index}, but this machine has {count}; "
                "set train.device=cuda:0."
            )


def require_memory(needs: Sequence[Need | None], device: torch.device | str) -> None:
    """Raise :class:`ConfigError` (one sentence with the bytes) if ``needs`` do not fit in ``device``'s free memory."""
    device = torch.device(device)
    _check_device(device)
    needs = [n for n in needs if n is not None]
    avail = available_bytes(device)
    if avail is None or not needs:
        return
    total = sum(n.nbytes for n in needs)
    if total <= avail:
        return
    where = "memory" if device.type == "cpu" else f"memory on {device}"
    alone = [n for n in needs if n.nbytes > avail]
    if alone:
        n = max(alone, key=lambda x: x.nbytes)
        raise ConfigError(
            f"{n.subject} {'need' if n.plural else 'needs'} {format_bytes(n.nbytes)} for {n.what}, but only {format_bytes(avail)} of "
            f"{where} is available; {n.fix}."
        )
    parts = " and ".join(f"{n.subject[0].lower() + n.subject[1:]} ({format_bytes(n.nbytes)} for {n.what})" for n in needs)
    raise ConfigError(
        f"Together {parts} need {format_bytes(total)}, but only {format_bytes(avail)} of {where} is available; "
        f"{_joined_fixes([n.fix for n in needs])}."
    )


def _alternatives(fix: str) -> list[str]:
    """``fix`` split at its top-level `` or `` (not inside parentheses)."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(fix):
        ch = fix[i]
        depth += (ch == "(") - (ch == ")")
        if depth == 0 and fix.startswith(" or ", i):
            out.append(fix[start:i])
            start = i = i + 4
            continue
        i += 1
    out.append(fix[start:])
    return out


def _joined_fixes(fixes: Sequence[str]) -> str:
    """Several needs' fixes as one clause: the keys to lower once each (``lower a or b or c``), then
    every other remedy once (``, or use a smaller dataset``)."""
    keys: list[str] = []
    others: list[str] = []
    for fix in fixes:
        lowering = False
        for alt in _alternatives(fix):
            if alt.startswith("lower "):
                lowering, alt = True, alt.removeprefix("lower ")
            elif " " in alt.strip():  # a remedy of its own ("use a smaller dataset"), not a key after "lower"
                lowering = False
            target = keys if lowering else others
            if alt not in target:
                target.append(alt)
    text = "lower " + " or ".join(keys) if keys else ""
    if others:
        text = (text + ", or " if text else "") + " or ".join(others)
    return text
