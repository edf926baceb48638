"""The timing harness every benchmark of ``benchmarks/run.py`` shares.

* :func:`time_interleaved`: seconds per call of several variants, ``repeats``
  windows each, interleaved (each repeat runs every variant once, in a rotated
  order, so load changes hit all of them alike); report the median window.
* :func:`warm_up`, :func:`window_steps`: first calls and the calls per window
  that make a window last about ``--window-s`` seconds.
* :func:`matmul_ceiling`: the float32 matmul GFLOP/s a FLOP efficiency is measured against.
* :func:`machine_info`, :func:`cpu_model`: the machine record every JSON carries
  (CPU, cores, versions, date, allocator tuning, ``OMP_WAIT_POLICY``, load average; the GPU's name on CUDA).
* :func:`write_json` (adds the invocation's ``"command"``, set by ``benchmarks/run.py``'s
  ``main``), :func:`print_table`, :data:`RESULTS_DIR`.
* :func:`sync`, :func:`dynamo_counts`, :func:`error_text`: small pieces the timing loops need.

The allocator tuning is :func:`rlfunc.runtime.perf.tune_allocator` (its result goes into
``machine_info(device, allocator_tuned)``). The machines here are noisy (see
shared/MACHINE-FACTS.md): every number is the median of several timed windows.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from pathlib import Path
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"

COMMAND: str | None = None
"""The command line of this invocation (set by ``benchmarks/run.py``'s ``main``); :func:`write_json`
stores it as ``"command"``."""


def sync(device: torch.device) -> None:
    """``torch.cuda.synchronize(device)`` on CUDA (read the clock after the device finished); no-op on CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device, allocator_tuned: bool) -> dict:
    import tensordict

    info = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "tensordict": tensordict.__version__,
        "python": platform.python_version(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "allocator_tuned": bool(allocator_tuned),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "loadavg_at_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def matmul_ceiling(device: torch.device, *, size: int | None = None, windows: int = 3, min_time: float = 0.3) -> float:
    """Best-of-``windows`` float32 square-matmul GFLOP/s at the current thread count."""
    size = size or (4096 if device.type == "cuda" else 1024)
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    out = torch.empty(size, size, device=device)
    for _ in range(2):
        torch.matmul(a, b, out=out)
    sync(device)
    flops = 2.0 * size**3
    t0 = time.perf_counter()
    torch.matmul(a, b, out=out)
    sync(device)
    one = max(time.perf_counter() - t0, 1e-6)
    iters = max(1, int(min_time / one))
    best = 0.0
    for _ in range(windows):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(a, b, out=out)
        sync(device)
        best = max(best, flops * iters / (time.perf_counter() - t0) / 1e9)
    return best


def time_interleaved(
    runners: dict[str, Callable[[], None]],
    *,
    repeats: int,
    steps: dict[str, int],
    device: torch.device,
) -> dict[str, list[float]]:
    """Seconds per call of each runner: ``repeats`` windows each, interleaved.

    Repeat ``r`` runs every runner for one window of ``steps[name]`` calls,
    starting at a rotated position, so no variant always runs first or last.
    """
    names = list(runners)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(repeats):
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            fn, k = runners[name], steps[name]
            sync(device)
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            sync(device)
            times[name].append((time.perf_counter() - t0) / k)
    return times


def warm_up(runners: dict[str, Callable[[], None]], calls: int, device: torch.device, *,
            unit: str = "update", prefix: str = "") -> dict[str, float]:
    """Seconds per call of each runner after a first call, from ``calls`` timed calls (at least one
    counted); prints ``{prefix}warm-up NAME: X ms/{unit}`` for each."""
    warm: dict[str, float] = {}
    calls = max(int(calls), 1)  # --warmup 0 would time no call: warm 0 -> window_steps' 1e6-call windows
    for name, fn in runners.items():
        fn()
        sync(device)
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(device)
        warm[name] = (time.perf_counter() - t0) / calls
        print(f"  {prefix}warm-up {name}: {warm[name] * 1e3:.1f} ms/{unit}", flush=True)
    return warm


def window_steps(warm: dict[str, float], names, window_s: float) -> dict[str, int]:
    """Calls per timed window of each of ``names``: about ``window_s`` seconds, at least one call."""
    return {n: max(1, int(round(window_s / max(warm[n], 1e-6)))) for n in names}


def dynamo_counts() -> tuple[int, int]:
    """(graphs compiled, graph breaks) by dynamo so far in this process (to detect recompiles while timing);
    ``(-1, -1)`` where the private counters are missing."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"]), int(sum(counters["graph_break"].values()))
    except Exception:  # noqa: BLE001 -- private API; a missing counter only loses this check
        return -1, -1


def error_text(exc: BaseException, *, lines: int = 2, limit: int = 600) -> str:
    """An exception as one line for a JSON: its type and first ``lines`` non-empty lines, cut at ``limit``."""
    text = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {' '.join(text[:lines])}"[:limit]


def write_json(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if COMMAND is not None and "command" not in obj:
        obj = {"command": COMMAND, **obj}
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def print_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> None:
    """``columns``: (header, key, format spec); missing values print as '-'."""
    cells = [[h for h, _, _ in columns]]
    for row in rows:
        line = []
        for _, key, fmt in columns:
            v = row.get(key)
            line.append("-" if v is None else format(v, fmt) if fmt else str(v))
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    numeric = [bool(fmt) for _, _, fmt in columns]
    for i, r in enumerate(cells):
        print("  ".join(c.rjust(w) if numeric[j] else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
