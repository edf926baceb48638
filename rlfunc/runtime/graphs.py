"""A pure ``update`` behind fixed-address state buffers, optionally replayed as a CUDA graph.

Every algorithm's ``update(state, batch[, noise]) -> (new_state, metrics)`` is
pure: each call returns a *new* state TensorDict, so the parameters and
optimizer moments move to new memory every step. A CUDA graph replays kernels
on the addresses it recorded, so it needs the opposite: the state must live
in buffers that never move. :class:`FixedStateUpdate` supplies them:

* it owns one copy of the training state (cloned from the state it is given);
* each call runs the pure ``update`` (eager or ``torch.compile``-d) on those
  buffers and copies the new state back into them in place, so every
  parameter and optimizer tensor keeps its ``data_ptr()`` for the whole run;
* it returns ``(state, metrics)`` like ``update`` does, where ``state`` is
  always the same (owned) TensorDict.

With ``cuda_graph=True`` and a CUDA state it also records the update and that
copy as one ``torch.cuda.CUDAGraph``, over static buffers for the batch and
the noise, and afterwards each call is: copy the batch and noise into the
static buffers, replay the graph, clone the metrics.

Why an explicit ``torch.cuda.CUDAGraph`` rather than
``torch.compile(mode="reduce-overhead")``: the state copy belongs *inside* the
graph (one replay per update, no per-tensor copy launches afterwards); it
works for the eager update as well as for every compile mode, including
REDQ's per-step compile where the ``G``-step loop is Python (the whole loop is
recorded as one graph); and the returned state is not memory of the graph's
pool, which a later replay would overwrite.

Why not tensordict's ``CudaGraphModule`` (tensordict 0.15): it fits a
function whose state lives outside its inputs (an ``nn.Module`` and a
``torch.optim`` optimizer read from the enclosing scope), not a pure update
whose state *is* an input and an output. Wrapping ``update`` with it would copy
the whole training state (parameters, targets, every optimizer moment) into
the graph's static inputs on every call and clone the whole new state out of
its output buffers afterwards ("in-place writes to the input tensors do not
reach the caller's inputs"; outputs "will be cloned"): two full state copies
per update where this wrapper copies only the batch and the noise. It is also
marked a prototype whose API restrictions may change.

What callers must know:

* **Inputs**: the first call with a given set of shapes and dtypes of
  ``(batch, noise)`` warms up (``warmup`` calls of the pure update whose
  results are discarded, on a side stream, which is also where
  ``torch.compile`` compiles) and records a graph; a new set of shapes records
  another one. The batch and noise are copied into the graph's static inputs
  on every call (device-to-device copies, no host sync).
* **Randomness**: pass the noise explicitly (every learner does). An update
  that draws from torch's default CUDA generator inside the graph gets fresh
  numbers per replay (PyTorch registers that generator with the graph), but
  not the numbers the eager code would draw.
* **Metrics** are outputs of the graph and are overwritten by the next
  replay, so they are cloned before they are returned (``clone_metrics``;
  R2D2's ``priorities`` included).
* **Arguments** after the state are tensors, TensorDicts or ``None``; anything
  else (a Python number, a tuple) is refused with a ``TypeError`` on every
  path, the eager CPU one included: a graph would replay the value it was
  recorded with. Pass a changing number as a tensor (or keep it in the state).
* **The returned state** is the wrapper's buffers: passing it back is free.
  Passing any other TensorDict with the same tensor keys and shapes (a loaded
  checkpoint) copies it into the buffers first; one with tensors the buffers
  do not hold (e.g. an ``hparams`` entry added after this wrapper was built)
  or without some of theirs is a ``ValueError``, not silently dropped.
  Assigning a new tensor into the returned state (``state[key] = t``) is *not*
  seen by a recorded graph (and the eager path would stop updating that
  entry); write in place (``state[key].fill_(v)``, ``.copy_(t)``).
* **Fallback**: if capture fails, a single warning is logged and the
  wrapper runs the same update eagerly on the fixed buffers from then on
  (``mode`` says which path is in use, ``fallback_reason`` why). A CPU state
  with ``cuda_graph=True`` takes the same eager path with a warning; the run
  config refuses that combination earlier (``train.cuda_graph`` needs
  ``train.device: cuda``).

Tested here on CPU only (this repository's CI has no GPU): buffer addresses
stay fixed and results equal the plain update. The CUDA-graph path is
covered by tests that run only where ``torch.cuda.is_available()``.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable

import torch
from tensordict import TensorDict, TensorDictBase

__all__ = ["FixedStateUpdate", "tensor_keys"]

log = logging.getLogger(__name__)


def tensor_keys(td: TensorDict) -> list:
    """Nested keys of the tensor leaves of ``td`` (non-tensor entries such as ``config`` left out)."""
    return [k for k, v in td.items(include_nested=True, leaves_only=True) if isinstance(v, torch.Tensor)]


def _copy_leaves(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """``dst[i].copy_(src[i])`` for every pair, skipping a tensor copied onto itself.

    A source that shares memory with another destination (an update that
    returns a view of an old buffer) is cloned first, so no copy reads what
    an earlier copy of the same batch wrote.
    """
    pairs = [(d, s) for d, s in zip(dst, src) if s is not d]
    if not pairs:
        return
    storages = {d.untyped_storage().data_ptr() for d, _ in pairs}
    ds = [d for d, _ in pairs]
    ss = [s.clone() if s.untyped_storage().data_ptr() in storages else s for _, s in pairs]
    torch._foreach_copy_(ds, ss)


def _check_args(args: tuple) -> None:
    """A ``TypeError`` for an argument that is not a tensor, a TensorDict or ``None`` (checked on every
    path, so that a CPU run refuses what a recorded graph could not take: a Python number would be
    replayed with the value it was recorded with)."""
    for i, a in enumerate(args):
        if a is not None and not isinstance(a, (torch.Tensor, TensorDictBase)):
            raise TypeError(
                f"FixedStateUpdate passes tensors, TensorDicts or None to the update after the state; argument "
                f"{i + 2} of the call is a {type(a).__name__}. Pass it as a tensor (a CUDA graph would replay "
                "the value it was recorded with) or keep it in the state."
            )


def _signature(args: tuple) -> tuple:
    sig = []
    for a in args:
        if a is None:
            sig.append(None)
        elif isinstance(a, torch.Tensor):
            sig.append((tuple(a.shape), a.dtype, str(a.device)))
        else:
            sig.append(tuple((k, tuple(v.shape), v.dtype, str(v.device)) for k, v in sorted(
                ((k, v) for k, v in a.items(include_nested=True, leaves_only=True) if isinstance(v, torch.Tensor)),
                key=lambda kv: str(kv[0]),
            )))
    return tuple(sig)


def _leaves(x: Any) -> list[torch.Tensor]:
    if x is None:
        return []
    if isinstance(x, torch.Tensor):
        return [x]
    return [x.get(k) for k in sorted(tensor_keys(x), key=str)]


class _Captured:
    """One recorded graph: its static inputs (flat) and static metrics."""

    def __init__(self, graph, static_args: tuple, metrics: TensorDict) -> None:
        self.graph = graph
        self.static_args = static_args
        self.static_leaves = [t for a in static_args for t in _leaves(a)]
        self.metrics = metrics


class FixedStateUpdate:
    """``update`` with the training state at fixed addresses (see the module docstring).

    >>> import gymnasium as gym, torch
    >>> from rlfunc.algos import drqn
    >>> from rlfunc.runtime.graphs import FixedStateUpdate
    >>> config = drqn.Config(lstm_size=8, encoder_sizes=(8,), sequence_length=4, batch_size=2)
    >>> state = drqn.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))
    >>> fixed = FixedStateUpdate(drqn.update, state)          # cuda_graph=False: eager, fixed buffers
    >>> ptr = fixed.state["params", "lstm", "weight_ih"].data_ptr()
    >>> batch = TensorDict({"obs": torch.randn(4, 2, 3), "action": torch.randint(2, (4, 2)),
    ...                     "reward": torch.randn(4, 2), "next_obs": torch.randn(4, 2, 3),
    ...                     "terminated": torch.zeros(4, 2, dtype=torch.bool),
    ...                     "mask": torch.ones(4, 2, dtype=torch.bool)}, batch_size=[4, 2])
    >>> new_state, metrics = fixed(fixed.state, batch)
    >>> new_state is fixed.state, new_state["params", "lstm", "weight_ih"].data_ptr() == ptr
    (True, True)
    >>> int(new_state["step"]), fixed.mode
    (1, 'eager')
    """

    def __init__(
        self,
        update: Callable[..., tuple[TensorDict, TensorDict]],
        state: TensorDict,
        *,
        cuda_graph: bool = False,
        warmup: int = 3,
        clone_metrics: bool = True,
    ) -> None:
        if warmup < 1 and cuda_graph:
            raise ValueError(f"warmup must be at least 1 before a CUDA graph capture, got {warmup}.")
        self._fn = update
        self._state = state.clone()
        self._keys = tensor_keys(self._state)
        self._key_set = set(self._keys)
        self._bufs = [self._state.get(k) for k in self._keys]
        self.warmup = int(warmup)
        self.clone_metrics = clone_metrics
        self.cuda_graph = bool(cuda_graph)
        self._graphs: dict[tuple, _Captured] = {}
        self.fallback_reason: str | None = None
        if self.cuda_graph:
            device = self._bufs[0].device if self._bufs else torch.device("cpu")
            if device.type != "cuda" or not torch.cuda.is_available():
                self._fall_back(f"the state is on {device}, not on a CUDA device")

    # -- public -----------------------------------------------------------------
    @property
    def state(self) -> TensorDict:
        """The owned state: the same TensorDict (and the same tensors) for the whole run."""
        return self._state

    @property
    def mode(self) -> str:
        """``"cuda_graph"`` while graphs are recorded and replayed, else ``"eager"`` (fixed buffers only)."""
        return "cuda_graph" if self.cuda_graph and self.fallback_reason is None else "eager"

    def load(self, state: TensorDict) -> TensorDict:
        """Copy ``state`` (same keys and shapes) into the owned buffers; returns the owned state."""
        if state is self._state:
            return self._state
        got = tensor_keys(state)
        have = set(got)
        missing = [k for k in self._keys if k not in have]
        if missing:
            raise ValueError(f"state is missing {missing[:3]}; pass a state of the algorithm this update was built for.")
        extra = [k for k in got if k not in self._key_set]
        if extra:  # the update would run without them (the buffers are the state it reads): refused, not dropped
            raise ValueError(
                f"state has tensors {extra[:3]} that this FixedStateUpdate's buffers do not hold (they were made "
                "from the state it was built with); build the FixedStateUpdate from a state that has them."
            )
        src = [state.get(k) for k in self._keys]
        for k, b, s in zip(self._keys, self._bufs, src):
            if s.shape != b.shape:
                raise ValueError(f"state tensor {k} has shape {tuple(s.shape)}, the buffers hold {tuple(b.shape)}.")
        with torch.no_grad():
            _copy_leaves(self._bufs, [s.to(device=b.device, dtype=b.dtype) for b, s in zip(self._bufs, src)])
        return self._state

    def __call__(self, state: TensorDict, *args: Any) -> tuple[TensorDict, TensorDict]:
        """``update(state, *args)`` on the owned buffers; returns ``(owned state, metrics)``."""
        _check_args(args)
        self.load(state)
        if self.mode == "cuda_graph":
            sig = _signature(args)
            captured = self._graphs.get(sig)
            if captured is None:
                captured = self._capture(args)
            if captured is not None:
                _copy_leaves(captured.static_leaves, [t for a in args for t in _leaves(a)])
                captured.graph.replay()
                metrics = captured.metrics
                return self._state, metrics.clone() if self.clone_metrics else metrics
        return self._eager(args)

    # -- internals -----------------------------------------------------------
    def _eager(self, args: tuple) -> tuple[TensorDict, TensorDict]:
        new_state, metrics = self._fn(self._state, *args)
        self._write_back(new_state)
        return self._state, metrics

    def _write_back(self, new_state: TensorDict) -> None:
        with torch.no_grad():
            _copy_leaves(self._bufs, [new_state.get(k) for k in self._keys])

    def _fall_back(self, reason: str) -> None:
        self.fallback_reason = reason
        msg = f"CUDA graph capture is off ({reason}); running the update eagerly on fixed buffers."
        log.warning(msg)
        warnings.warn(msg, RuntimeWarning, stacklevel=3)

    def _capture(self, args: tuple) -> _Captured | None:
        static_args = tuple(a.clone() if a is not None else None for a in args)
        body_error: list[Exception] = []  # the update's own error while capturing (reported, not capture_end's)
        prev = None
        try:
            side = torch.cuda.Stream()
            prev = torch.cuda.current_stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(self.warmup):  # pure: results discarded, the state does not advance
                    self._fn(self._state, *static_args)
            torch.cuda.current_stream().wait_stream(side)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                try:
                    new_state, metrics = self._fn(self._state, *static_args)
                    self._write_back(new_state)
                except Exception as exc:  # noqa: BLE001
                    body_error.append(exc)
                    raise
            torch.cuda.synchronize()
        except Exception as exc:  # noqa: BLE001 -- any capture failure falls back to eager
            # torch.cuda.graph's __exit__ ends the capture before it leaves the capture stream: where ending it
            # raised (the update invalidated the capture, e.g. by a host sync), the process stayed on that
            # stream, and the error was capture_end's, not the update's
            if prev is not None:
                try:
                    torch.cuda.set_stream(prev)
                except Exception:  # noqa: BLE001
                    pass
            exc = body_error[0] if body_error else exc
            first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
            self._fall_back(f"capture failed: {type(exc).__name__}: {first}"[:300])
            try:
                torch.cuda.synchronize()
            except Exception:  # noqa: BLE001
                pass
            return None
        captured = _Captured(graph, static_args, metrics)
        self._graphs[_signature(args)] = captured
        return captured
