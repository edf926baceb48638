"""What every task of ``benchmarks/run.py peers`` shares: the problem sizes, the peers' imports
(a peer that does not import, or fails to build or run, becomes a row with the reason), the
:class:`Variant` a task measures, :func:`_measure` (build, warm up, settle, then interleaved windows
with :func:`benchmarks.harness.time_interleaved`; the package doc says how) and :func:`_rows`."""

from __future__ import annotations

import argparse
import statistics
import time
import traceback
from typing import Any, Callable

import torch

from benchmarks.harness import dynamo_counts, error_text, sync, time_interleaved

# Problem sizes. "full": the shapes; "tiny": smoke tests only.
SIZES: dict[str, dict[str, Any]] = {
    "full": dict(
        obs=11, act=3, hidden=(256, 256), batch=256, utd=20, redq_critics=10, redq_subset=2,
        loop_batch=256, loop_hidden=(256, 256), loop_utd=20, loop_learning_starts=256, loop_replay=100_000,
        drqn_batch=32, drqn_window=10, drqn_lstm=128, drqn_encoder=64, drqn_obs=4, drqn_actions=2,
        replay_capacity=100_000, replay_batch=256, seq_window=10, seq_batch=32, seq_episode=200,
    ),
    "tiny": dict(
        obs=11, act=3, hidden=(16, 16), batch=8, utd=2, redq_critics=3, redq_subset=2,
        loop_batch=8, loop_hidden=(16, 16), loop_utd=2, loop_learning_starts=16, loop_replay=1_000,
        drqn_batch=4, drqn_window=4, drqn_lstm=8, drqn_encoder=8, drqn_obs=4, drqn_actions=2,
        replay_capacity=2_000, replay_batch=32, seq_window=4, seq_batch=4, seq_episode=20,
    ),
}

_PEER_MODULES = {"torchrl": "torchrl", "stable-baselines3": "stable_baselines3"}


# --------------------------------------------------------------------------- helpers


def _reason(exc: BaseException) -> str:
    """One sentence from an exception: its type and first non-empty line."""
    return error_text(exc, lines=1, limit=300)


def _device(args: argparse.Namespace) -> torch.device:
    """The device every variant runs on (``--device``; ``cpu`` when the option is absent)."""
    return torch.device(getattr(args, "device", None) or "cpu")


def _peer(library: str):
    """``(module, None)`` if ``library`` imports, else ``(None, reason)``."""
    import importlib

    name = _PEER_MODULES[library]
    try:
        return importlib.import_module(name), None
    except Exception as exc:  # noqa: BLE001 -- any import failure makes the peer unavailable
        if isinstance(exc, ImportError):
            return None, f"{library} is not installed ({_reason(exc)})"
        return None, f"{library} failed to import ({_reason(exc)})"


class Unavailable(RuntimeError):
    """Raised by a variant's setup with the one-sentence reason that goes into its row as-is."""


def _torchrl_extension_error() -> str | None:
    """Why TorchRL's C++ extension (its segment trees) does not load, or ``None`` if it does."""
    try:
        import torchrl._torchrl  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        text = str(exc)
        return "undefined symbol (built for another torch)" if "undefined symbol" in text else _reason(exc)[:120]
    return None


def _torchrl_prioritized(make):
    """``make()`` for a TorchRL prioritized sampler/buffer; a missing C++ segment tree becomes :class:`Unavailable`."""
    try:
        return make()
    except RuntimeError as exc:
        if "SegmentTree" not in str(exc):
            raise
        why = _torchrl_extension_error() or "unknown"
        raise Unavailable(
            f"TorchRL's prioritized sampling needs its C++ sum-segment tree, and its C++ extension "
            f"(torchrl._torchrl) does not load with torch {torch.__version__}: {why}"
        ) from exc


def _versions(library: str) -> dict[str, str]:
    import tensordict

    import rlfunc

    v = {"torch": torch.__version__, "tensordict": tensordict.__version__}
    if library in ("rlfunc", "imperative"):
        v["rlfunc"] = rlfunc.__version__
    else:
        mod, _ = _peer(library)
        v[library] = getattr(mod, "__version__", "unknown") if mod is not None else "not installed"
    return v


class Variant:
    """One row to measure: ``setup()`` builds it and returns ``step()`` (one call = ``units`` of work)."""

    def __init__(self, library: str, variant: str, setup: Callable[[], Callable[[], None]] | None = None, *,
                 units: float = 1.0, unavailable: str | None = None, compiled: bool = False, **extra: Any) -> None:
        self.library, self.variant, self.setup, self.units = library, variant, setup, units
        self.unavailable, self.compiled, self.extra = unavailable, compiled, dict(extra)
        self.step: Callable[[], None] | None = None
        self.throughput: float | None = None
        self.windows_s: list[float] = []


def _measure(variants: list[Variant], args: argparse.Namespace, *, fixed_steps: bool = False) -> None:
    """Build, warm up and time every available variant, interleaved; fills ``throughput``.

    ``fixed_steps``: every window is one call (a training-loop segment); otherwise
    each window has about ``args.window_s`` seconds of calls.
    """
    device = _device(args)
    warm: dict[int, float] = {}
    pre_calls: dict[int, list[float]] = {}  # seconds of every call before timing
    for i, v in enumerate(variants):
        if v.unavailable is not None:
            continue
        label = f"{v.library} / {v.variant}"
        try:
            graphs0, breaks0 = dynamo_counts()
            sync(device)
            t0 = time.perf_counter()
            v.step = v.setup()
            sync(device)
            v.extra["setup_s"] = round(time.perf_counter() - t0, 2)
            for _ in range(1 if fixed_steps else 2):  # compiles a compiled variant (guards may fail once more)
                sync(device)
                t0 = time.perf_counter()
                v.step()
                sync(device)
                pre_calls.setdefault(i, []).append(time.perf_counter() - t0)
            warm[i] = pre_calls[i][-1]
            if v.compiled:
                graphs1, breaks1 = dynamo_counts()
                v.extra["graphs_compiled"] = graphs1 - graphs0
                v.extra["graph_breaks"] = breaks1 - breaks0
            print(f"  ready: {label} (setup {v.extra['setup_s']:.1f} s, first call(s) {sum(pre_calls[i]):.1f} s)",
                  flush=True)
        except Exception as exc:  # noqa: BLE001 -- recorded as the row's reason; the rest still runs
            v.unavailable = str(exc) if isinstance(exc, Unavailable) else (
                f"failed while building or first running it: {_reason(exc)}")
            v.step = None
            print(f"  UNAVAILABLE: {label}: {v.unavailable}", flush=True)
            if getattr(args, "traceback", False):
                traceback.print_exc()
    live = [i for i, v in enumerate(variants) if v.step is not None]
    if not live:
        return
    torch.set_num_threads(args.threads)
    # Settle: one more call of each, after all are built -- building one variant (a peer's
    # torch.compile in particular) can make another recompile; that must not land in a window.
    # The windows are sized from this call.
    graphs0, _ = dynamo_counts()
    for i in list(live):
        v = variants[i]
        try:
            sync(device)
            t1 = time.perf_counter()
            v.step()
            sync(device)
            warm[i] = time.perf_counter() - t1
            pre_calls[i].append(warm[i])
        except Exception as exc:  # noqa: BLE001
            v.unavailable, v.step = f"failed on its second run: {_reason(exc)}", None
            live.remove(i)
    if dynamo_counts()[0] != graphs0:
        print(f"  note: {dynamo_counts()[0] - graphs0} graph(s) recompiled while settling", flush=True)
        for i in live:  # time once more at the settled state
            sync(device)
            t1 = time.perf_counter()
            variants[i].step()
            sync(device)
            warm[i] = time.perf_counter() - t1
            pre_calls[i].append(warm[i])
    for i in live:
        v = variants[i]
        if v.compiled and fixed_steps:
            v.extra["compile_s"] = None
            v.extra["compile_note"] = "compiled during the loop's warm-up: included in setup_s, excluded from throughput"
        elif v.compiled:  # time of the calls before timing beyond as many settled calls: compiling
            v.extra["compile_s"] = round(max(sum(pre_calls[i]) - len(pre_calls[i]) * warm[i], 0.0), 1)
        print(f"  {v.library} / {v.variant}: {warm[i] * 1e3:.1f} ms/call"
              + (f", compile {v.extra['compile_s']:.0f} s (excluded)" if v.extra.get("compile_s") else ""), flush=True)
    runners = {str(i): variants[i].step for i in live}
    if fixed_steps:
        steps = {str(i): 1 for i in live}
    else:
        steps = {str(i): max(1, int(round(args.window_s / max(warm[i], 1e-7)))) for i in live}
    failed: dict[str, str] = {}

    def guard(key: str, fn: Callable[[], None]) -> Callable[[], None]:
        def call() -> None:
            if key in failed:
                return
            try:
                fn()
            except Exception as exc:  # noqa: BLE001
                failed[key] = f"failed while timing: {_reason(exc)}"

        return call

    print(f"  timing {len(live)} variants x {args.loop_repeats if fixed_steps else args.repeats} interleaved windows ...",
          flush=True)
    graphs0, _ = dynamo_counts()
    repeats = args.loop_repeats if fixed_steps else args.repeats
    times = time_interleaved({k: guard(k, fn) for k, fn in runners.items()}, repeats=repeats,
                             steps=steps, device=device)
    recompiled = dynamo_counts()[0] != graphs0
    for key, ts in times.items():
        v = variants[int(key)]
        if key in failed:
            v.unavailable = failed[key]
            continue
        med = statistics.median(ts)
        v.throughput = v.units / med
        v.windows_s = ts
        v.extra["calls_per_window"] = steps[key]
        if v.compiled:
            v.extra["recompiled_during_timing"] = recompiled


def _rows(task: str, unit: str, problem: dict, variants: list[Variant], threads: int, device: str = "cpu") -> list[dict]:
    rows = []
    for v in variants:
        row: dict[str, Any] = {
            "task": task,
            "library": v.library,
            "variant": v.variant,
            "throughput": v.throughput,
            "unit": unit,
            "ratio_vs_rlfunc": None,
            "threads": threads,
            "device": device,
            "versions": _versions(v.library),
            "problem": problem,
        }
        if v.throughput is None:
            row["unavailable"] = v.unavailable or "not measured"
        else:
            row["ms_per_call"] = 1e3 * v.units / v.throughput
            row["ms_per_call_windows"] = [round(t * 1e3, 3) for t in v.windows_s]
        row.update(v.extra)
        rows.append(row)
    best = max((r["throughput"] for r in rows if r["library"] == "rlfunc" and r["throughput"]), default=None)
    for r in rows:
        if best and r["throughput"] is not None:
            r["ratio_vs_rlfunc"] = r["throughput"] / best
    return rows


def _unavailable_peers(libraries: tuple[str, ...]) -> dict[str, str]:
    """library -> reason, for the peers of ``libraries`` that do not import."""
    out = {}
    for lib in libraries:
        _, why = _peer(lib)
        if why:
            out[lib] = why
    return out


def _lazy_storage(cls, capacity: int, device: torch.device):
    """TorchRL's ``LazyTensorStorage(capacity)``, on ``device`` when that is not the CPU (CPU: built as before)."""
    return cls(capacity) if device.type == "cpu" else cls(capacity, device=device)
