"""Prioritized replay of fixed-length sequences (R2D2; Kapturowski et al., ICLR 2019).

:class:`PrioritizedSequenceReplay` is :class:`rlfunc.replay.sequence.SequenceReplay`
-- windows of ``sequence_length = burn_in + length`` steps of one episode,
starting every ``period`` steps (R2D2: 40 + 80, period 40), the tail of an
episode zero-padded with ``mask`` False, the actor's recurrent state *before*
each window's first step stored with it -- plus proportional priorities
(Schaul et al., ICLR 2016) kept in a :class:`rlfunc.replay.sumtree.SumTree`:

* a window is sampled with probability ``P(i) = p_i^alpha / sum_j p_j^alpha``
  (``priority_exponent`` alpha, R2D2 0.9), independently with replacement (as
  Reverb's ``Prioritized`` selector does for Acme's R2D2);
* each sample carries ``probability`` and the importance weight
  ``w_i = (N P(i))^-beta / max_batch w`` (``importance_exponent`` beta, R2D2
  0.6, normalised by the batch max as in Acme's R2D2 learner);
* :meth:`PrioritizedSequenceReplay.update_priorities` writes the priorities a
  learner computed for the windows it sampled (``batch["window"][0]``; R2D2's
  ``0.9 max |td| + 0.1 mean |td|`` from :func:`rlfunc.core.returns.sequence_priorities`);
* a new window enters with the largest priority seen so far
  (``initial_priority=None``; Schaul et al.), so it is replayed soon; a fixed
  ``initial_priority`` (Acme's adders insert with priority 1.0) is an option.

Sampling and priority updates are a constant number of vectorised ops (no
loop over the batch or the tree depth), so their cost hardly grows with the
buffer: on one core of the 2-core AMD EPYC development machine (load average ~3,
from other jobs at low priority), drawing 64 windows from 1M took ~0.03 ms
(0.02 ms from 10k), writing their priorities back ~0.03 ms, and a whole
``sample`` (draw, gather of every key, stored state, weights) ~0.1 ms (CPU
time), against a yardstick of ~0.9 us for one tiny torch op
(``python benchmarks/prioritized_replay.py --out
benchmarks/results/prioritized_replay.json``). :meth:`state_dict` /
:meth:`load_state_dict` include the priorities, so a resumed run samples
exactly as it would have.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.sumtree import SumTree

__all__ = ["PrioritizedSequenceReplay", "check_prioritized_checkpoint", "check_priority_total", "importance_weights"]


def importance_weights(probabilities: torch.Tensor, size: int | torch.Tensor, exponent: float) -> torch.Tensor:
    """Prioritized-replay importance weights ``(N P(i))^-beta``, normalised by their max.

    ``probabilities [B]`` are the sampling probabilities of the drawn items,
    ``size`` the number of items ``N`` in the buffer, ``exponent`` beta
    (``0`` gives all ones). The largest weight in the batch is 1 (Acme's R2D2
    learner; Schaul et al. 2016 normalise by ``max w`` the same way). Computed
    in float64, returned as float32.
    """
    if probabilities.dim() != 1:
        raise ValueError(f"importance_weights expects probabilities [B], got shape {tuple(probabilities.shape)}.")
    return _normalised_weights(probabilities, float(size) if probabilities.device.type == "cpu" else size, exponent)


def _normalised_weights(probabilities: torch.Tensor, size, exponent: float) -> torch.Tensor:
    """:func:`importance_weights` over rows: ``probabilities [..., B]``, ``size`` a number or an
    array/tensor broadcastable to them (one ``N`` per row), each row normalised by its own max."""
    if probabilities.device.type == "cpu":  # numpy: ~1 us per op against ~5-20 us for small torch ops
        p = np.maximum(probabilities.numpy(), np.finfo(np.float64).tiny, dtype=np.float64)
        w = (p * size) ** -float(exponent)
        return torch.from_numpy((w / w.max(axis=-1, keepdims=True)).astype(np.float32))
    p = probabilities.to(torch.float64).clamp(min=torch.finfo(torch.float64).tiny)
    w = (p * size).pow(-float(exponent))
    return (w / w.amax(dim=-1, keepdim=True)).to(torch.float32)


def check_priority_total(totals: np.ndarray) -> None:
    """Refuse to sample where a tree's priorities are all zero (every stored window has priority 0:
    there is nothing to draw in proportion to, and the probabilities would be 0/0)."""
    empty = np.flatnonzero(~(totals > 0))
    if empty.size:
        who = "" if totals.size == 1 else f" of member(s) {empty.tolist()}"
        raise RuntimeError(
            f"Cannot sample: every stored window{who} has priority 0 (or a non-finite total); write positive "
            "priorities with update_priorities, or add windows, which enter with a positive priority."
        )


def check_prioritized_checkpoint(td: TensorDict, priority_exponent: float, kind: str, uniform: str) -> None:
    """Refuse a replay checkpoint without priorities (saved by the ``uniform`` class) or with
    another ``priority_exponent``: the single and the population prioritized replays both check so."""
    if "priority_leaves" not in td.keys():
        raise ValueError(f"Not a {kind} checkpoint (no 'priority_leaves'); it was saved by a uniform {uniform}.")
    saved_alpha = float(td["priority_exponent"])
    if abs(saved_alpha - priority_exponent) > 1e-12:
        raise ValueError(
            f"Checkpointed replay has priority_exponent={saved_alpha} but this buffer has "
            f"{priority_exponent}; create the buffer with priority_exponent={saved_alpha}."
        )


class PrioritizedSequenceReplay(SequenceReplay):
    """Sequence replay with proportional priorities over windows.

    Args:
        capacity: windows kept (the oldest are overwritten; R2D2/Acme 100k).
        sequence_length: steps per window, ``burn_in + length`` for R2D2.
        num_envs: envs of the vector env feeding :meth:`add`.
        period: steps between window starts (R2D2 40; default: no overlap).
        priority_exponent: alpha (R2D2 0.9).
        importance_exponent: beta (R2D2 0.6).
        initial_priority: priority of a new window; ``None`` (default) uses
            the largest priority seen so far (1.0 before any update).
        fanout: sum-tree block size (``None``: automatic).
        device: where storage, priorities and sampling live.
    """

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        num_envs: int = 1,
        *,
        period: int | None = None,
        priority_exponent: float = 0.9,
        importance_exponent: float = 0.6,
        initial_priority: float | None = None,
        fanout: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__(capacity, sequence_length, num_envs, period=period, device=device)
        if priority_exponent < 0:
            raise ValueError(f"priority_exponent must be >= 0, got {priority_exponent}.")
        if importance_exponent < 0:
            raise ValueError(f"importance_exponent must be >= 0, got {importance_exponent}.")
        if initial_priority is not None and not initial_priority > 0:
            raise ValueError(f"initial_priority must be positive (or None for the max so far), got {initial_priority}.")
        self.priority_exponent = float(priority_exponent)
        self.importance_exponent = float(importance_exponent)
        self.initial_priority = None if initial_priority is None else float(initial_priority)
        self._tree = SumTree(self.capacity, fanout=fanout, device=self.device)
        self._max_priority = torch.ones((), dtype=torch.float64, device=self.device)
        self._max_np = self._max_priority.numpy() if self.device.type == "cpu" else None

    # ------------------------------------------------------------------ info
    @property
    def tree(self) -> SumTree:
        """The sum-tree of ``priority ** priority_exponent`` per storage row."""
        return self._tree

    @property
    def max_priority(self) -> torch.Tensor:
        """Largest priority written so far (0-dim copy, before the exponent)."""
        return self._max_priority.clone()

    def priorities(self, indices: torch.Tensor) -> torch.Tensor:
        """Current priorities (before the exponent) of storage rows ``indices``. With
        ``priority_exponent == 0`` the tree keeps only ``p ** 0`` (1 for every window,
        uniform sampling), so this returns those ones, not the priorities written."""
        leaf = self._tree.get(indices.to(self.device))
        if self.priority_exponent == 0:
            return leaf
        return leaf.pow(1.0 / self.priority_exponent)

    # --------------------------------------------------------------- hooks
    def _on_insert(self, rows: torch.Tensor) -> None:
        p = self._max_priority if self.initial_priority is None else torch.tensor(self.initial_priority, dtype=torch.float64)
        self._tree.update(rows, p.pow(self.priority_exponent))

    def _sample_indices(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        return self._tree.sample(batch_size, generator=generator).to(self.device)

    # --------------------------------------------------------------- sample
    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """``batch_size`` windows drawn in proportion to ``priority ** alpha``, time-major ``[T, B]``.

        The keys of :meth:`SequenceReplay.sample` (every added key, ``mask``,
        ``window``, ``episode_start``, ``init_carry``) plus ``probability``
        (float64) and ``weight`` (float32 importance weights, max 1 over the
        batch), both constant along T like ``window``. Gathers each stored
        tensor with one ``index_select`` (several times faster than indexing
        the storage TensorDict at this batch size).
        """
        if self._size == 0 or self._storage is None:
            raise RuntimeError(
                "Cannot sample from an empty sequence replay; add steps until at least one window is complete."
            )
        if self.device.type == "cpu":  # a host check only where it costs no sync
            check_priority_total(self._tree.total().reshape(1).numpy())
        T = self.sequence_length
        shape = (T, batch_size)
        idx = self._sample_indices(batch_size, generator)
        step_leaves, window_leaves = self._leaves()
        data: dict = {k: v.index_select(1, idx) for k, v in step_leaves}
        data["window"] = idx.expand(shape)  # expand prepends the time dim: a stride-0 view
        for k, v in window_leaves:
            x = v.index_select(0, idx)
            data[k] = x.expand(T, *x.shape)
        prob = self._tree.probabilities(idx)
        data["probability"] = prob.expand(shape)
        data["weight"] = importance_weights(prob, self._size, self.importance_exponent).expand(shape)
        return TensorDict(data, batch_size=shape, device=self.device)

    def _leaves(self) -> tuple[list, list]:
        """``(key, tensor)`` pairs of the storage ``[T, C]`` and of per-window data ``[C]``.

        Cached: rows are written into these same tensors in place; the cache is
        rebuilt when the storage is (re)allocated, e.g. by :meth:`load_state_dict`.
        """
        tag = (id(self._storage), id(self._carry), id(self._info))
        if getattr(self, "_leaves_tag", None) != tag:
            step = list(self._storage.items(include_nested=True, leaves_only=True))
            window = [("episode_start", self._info.get("start"))]
            if self._carry is not None:
                for k, v in self._carry.items(include_nested=True, leaves_only=True):
                    window.append((("init_carry", *k) if isinstance(k, tuple) else ("init_carry", k), v))
            self._leaves_cache = (step, window)
            self._leaves_tag = tag
        return self._leaves_cache

    def add_windows(self, windows: TensorDict, priorities: torch.Tensor | None = None) -> torch.Tensor:
        """Store windows cut elsewhere (:meth:`SequenceReplay.drain`), each with the priority its actor
        computed (``priorities [k]``; Ape-X / R2D2 actors compute initial priorities with their copy of
        the network), or with the insert priority when ``None``. Returns the storage rows."""
        rows = super().add_windows(windows)
        if priorities is not None:
            p = torch.as_tensor(priorities).reshape(-1)
            if p.numel() != windows.batch_size[0]:
                raise ValueError(
                    f"add_windows got {p.numel()} priorities for {windows.batch_size[0]} windows; pass one per window."
                )
            self.update_priorities(rows, p[-rows.numel():] if rows.numel() else p[:0])
        return rows

    # --------------------------------------------------------- priorities
    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set the priorities of storage rows ``indices [B]`` (``batch["window"][0]``).

        ``priorities [B]`` are non-negative (R2D2: :func:`rlfunc.core.returns.sequence_priorities`);
        the tree stores ``priority ** priority_exponent``. With ``priority_exponent > 0`` a window
        with priority 0 is never sampled again until it is overwritten (when every stored window
        has priority 0, :meth:`sample` raises on CPU; on an accelerator it returns the last row);
        with ``priority_exponent == 0`` sampling is uniform (``0 ** 0`` is 1). On CPU,
        negative or non-finite values and rows that hold no window raise; on an accelerator
        nothing is checked (that would need a host sync).
        """
        idx = torch.as_tensor(indices, device=self.device).detach().reshape(-1)
        p = torch.as_tensor(priorities, device=self.device).detach().reshape(-1)
        if idx.shape != p.shape:
            raise ValueError(
                f"update_priorities got {idx.numel()} indices and {p.numel()} priorities; pass one priority per index."
            )
        if idx.numel() == 0:
            return
        if self.device.type == "cpu":  # numpy: a few microseconds per call instead of tens
            i = idx.numpy().astype(np.int64, copy=False)
            q = p.numpy().astype(np.float64)
            if not np.isfinite(q).all() or (q < 0).any():
                raise ValueError(f"Priorities must be finite and non-negative, got {q[:8].tolist()}...")
            if i.min() < 0 or i.max() >= self._size:
                raise IndexError(f"update_priorities: indices must be stored rows in [0, {self._size}), got {i[:8].tolist()}...")
            np.maximum(self._max_np, q.max(), out=self._max_np)
            self._tree.update(i, q**self.priority_exponent if self.priority_exponent != 1 else q)
            return
        p = p.to(torch.float64)
        self._max_priority.copy_(torch.maximum(self._max_priority, p.max()))
        self._tree.update(idx.long(), p.pow(self.priority_exponent))

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> TensorDict:
        """:meth:`SequenceReplay.state_dict` plus the priorities of the stored rows."""
        td = super().state_dict()
        n = max(self._size, 1)
        td["priority_leaves"] = self._tree.leaves[:n].clone().cpu()
        td["max_priority"] = self._max_priority.clone().cpu()
        td["priority_exponent"] = torch.tensor(self.priority_exponent, dtype=torch.float64)
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; layout and ``priority_exponent`` must match."""
        check_prioritized_checkpoint(td, self.priority_exponent, "prioritized sequence replay", "SequenceReplay")
        super().load_state_dict(td)
        leaves = td["priority_leaves"].to(torch.float64)
        if leaves.numel() > self.capacity or leaves.numel() < self._size:
            raise ValueError(
                f"Corrupt prioritized replay checkpoint: {leaves.numel()} priorities for size {self._size}."
            )
        full = torch.zeros(self.capacity, dtype=torch.float64)
        full[: leaves.numel()] = leaves
        self._tree.load_state_dict({"leaves": full})
        self._max_priority.copy_(td["max_priority"].to(dtype=torch.float64).reshape(()))
