"""Process-level performance settings for CPU training and benchmarks."""

from __future__ import annotations

import ctypes
import ctypes.util
import os

import torch

_M_TRIM_THRESHOLD = -1
_M_TOP_PAD = -2
_M_MMAP_THRESHOLD = -3


def tune_allocator() -> bool:
    """Keep freed tensor memory in the process instead of returning it to the OS.

    Pure updates allocate fresh parameter and optimizer buffers every step.
    With glibc's defaults, buffers of a few MB are ``mmap``-ed and unmapped each
    time, and every page is zero-filled again on first touch: on the 2-core
    CPUs here that made a functional Adam step 5x slower (6.7 ms vs 1.35 ms for
    REDQ's ten 256-256 critics). Raising the mmap and trim thresholds (what
    ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` do) removes that.
    Trimming is off, not only raised: a population's update frees more than any
    fixed threshold between calls (a 2-member DrQ-v2 population freed over 1 GB
    each update, so ~290k pages were faulted in again per call, 0.6 s of 3.4 s).
    The process keeps its peak memory, which the next update needs again.
    Returns False where glibc's ``mallopt`` is not available (nothing changes).
    """
    name = ctypes.util.find_library("c")
    if not name or os.name != "posix":
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    ok = mallopt(_M_MMAP_THRESHOLD, 1 << 30) == 1
    ok &= mallopt(_M_TRIM_THRESHOLD, -1) == 1  # -1: never trim (mallopt(3))
    ok &= mallopt(_M_TOP_PAD, 64 << 20) == 1
    return bool(ok)


def set_threads(threads: int | None) -> int:
    """Pin torch's intra-op threads (``None`` keeps the current number). Returns it."""
    if threads is not None and threads > 0:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def set_matmul_precision(precision: str | None) -> str:
    """``torch.set_float32_matmul_precision(precision)`` (``None`` keeps the current one). Returns it.

    ``"high"`` lets float32 matrix products on Ampere and newer GPUs run in TF32 (10-bit mantissa
    inputs, float32 accumulation): several times the throughput of full float32 on an H100/H200,
    which is what a population's batched products are limited by there. JAX computes float32
    matmuls this way by default on those GPUs (so RLPD's official JAX code did); PyTorch, and so
    REDQ's and DrQ-v2's official code, keeps full float32 for matmuls. On a CPU ``"high"`` also
    sets oneDNN's ``torch.backends.mkldnn.matmul.fp32_precision`` to ``"tf32"``, which changes the
    products only where oneDNN has such kernels for the CPU (none on the AMD EPYC machines here:
    measured equal); ``"medium"`` may change them (oneDNN's bfloat16 paths). Set it before the
    first update: a recorded CUDA graph keeps the matmul math it was recorded with."""
    if precision is not None:
        torch.set_float32_matmul_precision(precision)
    return torch.get_float32_matmul_precision()


RECOMPILE_LIMIT = 64
"""Graphs one compiled function may hold in a process (:func:`allow_recompiles`)."""


def allow_recompiles(limit: int = RECOMPILE_LIMIT) -> None:
    """Let one process compile the same update for up to ``limit`` structures (torch's default: 8).

    Dynamo keeps the graphs of a function per code object, shared by every ``torch.compile`` wrapper of
    it, and a config that changes the traced graph (network depth, ``n_step``, sequence length, REDQ's
    ``G`` in ``full`` mode) compiles it once more. Under ``fullgraph=True`` the limit is a hard error,
    so the ninth such config trained in one process (``benchmarks/run.py learn --jobs 1``, a sweep's
    reused Ray worker, a notebook's loop over ``rlfunc.train``) crashed before its first update. Never
    lowers a limit already set higher.
    """
    config = torch._dynamo.config
    config.recompile_limit = max(int(config.recompile_limit), int(limit))
    config.accumulated_recompile_limit = max(int(config.accumulated_recompile_limit), 4 * int(limit))
