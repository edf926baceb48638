"""A vectorised two-level sum-tree for proportional prioritized sampling.

Prioritized replay (Schaul et al., ICLR 2016) samples item ``i`` with
probability ``p_i / sum_j p_j``. The classic structure is a binary sum-tree
walked one element at a time, ``log2(N)`` dependent steps per sample. Here a
whole batch is served by a constant number of array operations:

* the ``N`` leaves are cut into ``num_blocks`` blocks of ``F`` (the fanout;
  by default ``sqrt(N)`` clipped to [16, 128]: 10k items -> ``F = 100``,
  1M items -> ``F = 128``, 7,813 blocks);
* each block keeps the **inclusive prefix sums** of its leaves
  (``prefix [num_blocks, F]``; its last column is the block's sum), and the
  block sums are kept as one global inclusive prefix sum (``top [num_blocks]``,
  whose last entry is the total) -- a sum-tree of depth two whose levels are
  stored as prefix sums;
* :meth:`SumTree.find` maps uniforms ``u [S]`` in ``[0, total)`` to leaves
  with one ``searchsorted`` over ``top`` (which block) and one ``[S, F]``
  comparison against the chosen blocks' prefix rows (which leaf in it);
* :meth:`SumTree.update` writes the leaves, recomputes the prefix rows of the
  touched blocks (``[k, F]``) and the ``top`` prefix (one ``cumsum`` over
  ``num_blocks`` entries).
  Parents are recomputed from their children rather than adjusted by deltas,
  so repeated indices in one update are harmless and rounding never drifts.

Sums are float64. On CPU the buffers are driven through numpy views of the
same memory (a small numpy call costs ~1-3 us here against ~5-20 us for a
small torch op; see ``benchmarks/prioritized_replay.py``); on other devices
the same steps run as torch ops on the device, with no host round-trip. The
total is a 0-dim tensor (no ``.item()``).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from rlfunc.replay._layout import check_capacity

__all__ = ["SumTree", "find_in_blocks"]


def _auto_fanout(capacity: int) -> int:
    # Sampling touches [S, F] entries, an update O(num_blocks) ones; on a CPU
    # F = 128 balances the two up to ~10M items (benchmarks/prioritized_replay.py).
    return max(1, min(capacity, 128, max(16, math.ceil(math.sqrt(capacity)))))


def find_in_blocks(top: torch.Tensor, cum: torch.Tensor, prefix: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The two-level prefix search of :meth:`SumTree.find` as torch ops, over any leading dims.

    ``top [..., num_blocks]`` (contiguous) and ``cum [..., num_blocks + 1]`` are the
    inclusive and exclusive prefix sums of the block sums, ``prefix [..., num_blocks, F]``
    the in-block inclusive prefix sums, ``u [..., S]`` uniforms scaled to each total.
    Returns leaf indices ``[..., S]``. Only comparisons, one subtraction and
    ``nextafter``: a batched call returns exactly what one call per leading index would.
    """
    zero = torch.zeros((), dtype=torch.float64, device=u.device)
    u = torch.minimum(u, torch.nextafter(top[..., -1:], zero))
    block = torch.searchsorted(top, u, right=True).clamp(max=top.shape[-1] - 1)
    u = u - cum.gather(-1, block)
    rows = torch.take_along_dim(prefix, block.unsqueeze(-1), dim=-2)  # [..., S, F]
    u = torch.minimum(u, torch.nextafter(rows[..., -1], zero))
    j = (rows <= u.unsqueeze(-1)).sum(dim=-1)
    return block * prefix.shape[-1] + j


class SumTree:
    """Sums over ``capacity`` non-negative priorities, with batched sampling.

    Args:
        capacity: number of leaves (items).
        fanout: leaves per block; ``None`` picks ``sqrt(capacity)`` clipped to [16, 128].
        device: where the sums live.
        backend: ``"numpy"`` (CPU only) or ``"torch"``; ``None`` picks numpy
            on CPU and torch elsewhere. Both give the same indices.
    """

    def __init__(
        self,
        capacity: int,
        *,
        fanout: int | None = None,
        device: torch.device | str = "cpu",
        backend: str | None = None,
    ) -> None:
        capacity = check_capacity("SumTree", capacity)
        fanout = _auto_fanout(int(capacity)) if fanout is None else check_capacity("SumTree", fanout, "fanout")
        self.capacity = int(capacity)
        self.fanout = fanout
        self.num_blocks = -(-self.capacity // fanout)
        self.device = torch.device(device)
        f64 = dict(dtype=torch.float64, device=self.device)
        self._leaves = torch.zeros(self.num_blocks, fanout, **f64)  # padded with zeros
        self._prefix = torch.zeros(self.num_blocks, fanout, **f64)  # in-block inclusive cumsum
        self._sums = torch.zeros(self.num_blocks, **f64)  # block sums (contiguous copy of prefix[:, -1])
        self._cum = torch.zeros(self.num_blocks + 1, **f64)  # [0, then inclusive cumsum of block sums]
        self._top = self._cum[1:]  # view: top[b] = sum of blocks 0..b
        if backend not in (None, "numpy", "torch"):
            raise ValueError(f"SumTree backend must be 'numpy', 'torch' or None, got {backend!r}.")
        if backend == "numpy" and self.device.type != "cpu":
            raise ValueError(f"The numpy SumTree backend needs device='cpu', got {self.device}.")
        self._np = self.device.type == "cpu" if backend is None else backend == "numpy"
        if self._np:
            self._leaves_np = self._leaves.numpy()
            self._prefix_np = self._prefix.numpy()
            self._sums_np = self._sums.numpy()
            self._cum_np = self._cum.numpy()
            self._top_np = self._cum_np[1:]

    # ----------------------------------------------------------------- read
    def total(self) -> torch.Tensor:
        """Sum of all priorities, a 0-dim tensor on ``device``."""
        return self._top[-1]

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """Leaf values at ``indices`` (any shape, int64)."""
        return self._leaves.view(-1)[indices]

    def probabilities(self, indices: torch.Tensor) -> torch.Tensor:
        """``p_i / total`` at ``indices [S]`` (float64, on ``device``)."""
        if self._np:
            i = indices.numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
            return torch.from_numpy(self._leaves_np.reshape(-1)[i] / self._top_np[-1])
        return self.get(indices) / self.total()

    @property
    def leaves(self) -> torch.Tensor:
        """All ``capacity`` leaf values (a view; write through :meth:`update`)."""
        return self._leaves.view(-1)[: self.capacity]

    # ---------------------------------------------------------------- write
    def update(self, indices: torch.Tensor, values: torch.Tensor | float) -> None:
        """Set leaves ``indices [k]`` to ``values`` (``[k]`` or a scalar), each >= 0.

        With repeated indices one of the given values is kept (as for any
        indexed assignment); the sums stay consistent with the leaves.
        """
        if self._np:
            idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64).reshape(-1)
            if idx.size == 0:
                return
            vals = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
            self._leaves_np.reshape(-1)[idx] = vals.reshape(-1) if vals.ndim else vals
            blocks = idx // self.fanout
            # torch's CPU cumsum is ~3x faster than numpy's; same buffers either way
            rows = torch.cumsum(torch.from_numpy(self._leaves_np[blocks]), dim=1).numpy()
            self._prefix_np[blocks] = rows
            self._sums_np[blocks] = rows[:, -1]
            torch.cumsum(self._sums, dim=0, out=self._top)
            return
        idx = torch.as_tensor(indices, device=self.device).reshape(-1).long()
        if idx.numel() == 0:
            return
        vals = torch.as_tensor(values, dtype=torch.float64, device=self.device)
        self._leaves.view(-1).index_put_((idx,), vals.reshape(-1) if vals.dim() else vals)
        blocks = torch.div(idx, self.fanout, rounding_mode="floor")
        rows = self._leaves[blocks].cumsum(dim=1)
        self._prefix.index_put_((blocks,), rows)
        self._sums.index_put_((blocks,), rows[:, -1])
        torch.cumsum(self._sums, dim=0, out=self._top)

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace the first ``len(values)`` leaves (the rest become 0) and rebuild all sums."""
        values = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
        if values.numel() > self.capacity:
            raise ValueError(f"SumTree.set_leaves got {values.numel()} values for capacity {self.capacity}.")
        self._leaves.zero_()
        self._leaves.view(-1)[: values.numel()] = values.to(self.device)
        torch.cumsum(self._leaves, dim=1, out=self._prefix)
        self._sums.copy_(self._prefix[:, -1])
        torch.cumsum(self._sums, dim=0, out=self._top)

    # --------------------------------------------------------------- sample
    def find(self, u: torch.Tensor) -> torch.Tensor:
        """Leaf ``i`` with ``sum_{j<i} p_j <= u < sum_{j<=i} p_j`` for each ``u [S]`` in ``[0, total)``.

        ``u`` at or beyond the total (rounding) is clamped just below it, so a
        zero-priority leaf is never returned unless every leaf is zero; then
        the last leaf, ``capacity - 1``, is (the search would otherwise step
        past the end; callers that hold fewer items check the total).
        Returns int64 ``[S]`` on ``device``.
        """
        if self._np:
            u_np = u.detach().cpu().numpy() if isinstance(u, torch.Tensor) else np.asarray(u)
            return torch.from_numpy(self._find_np(np.array(u_np, dtype=np.float64).reshape(-1)))
        u = torch.as_tensor(u, dtype=torch.float64, device=self.device).reshape(-1)
        return find_in_blocks(self._top, self._cum, self._prefix, u).clamp_(max=self.capacity - 1)

    def _find_np(self, u: np.ndarray) -> np.ndarray:
        top = self._top_np
        np.minimum(u, np.nextafter(top[-1], 0.0), out=u)
        block = np.searchsorted(top, u, side="right")
        np.minimum(block, self.num_blocks - 1, out=block)
        u -= self._cum_np[block]  # sum of the blocks before
        rows = self._prefix_np[block]  # [S, F] in-block prefix sums
        np.minimum(u, np.nextafter(rows[:, -1], 0.0), out=u)
        j = (rows <= u[:, None]).sum(axis=1)
        return np.minimum(block * self.fanout + j, self.capacity - 1)  # all leaves zero: j = F, past the end

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """``batch_size`` leaf indices drawn independently with probability ``p_i / total``.

        Uniforms come from ``generator`` (which must live on ``device``) or
        torch's default generator. Returns int64 ``[batch_size]`` on ``device``.
        """
        u = torch.rand(batch_size, generator=generator, device=self.device, dtype=torch.float64)
        if self._np:
            u_np = u.numpy()
            u_np *= self._top_np[-1]
            return torch.from_numpy(self._find_np(u_np))
        return self.find(u * self.total())

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The leaves (the sums are rebuilt on load)."""
        return {"leaves": self.leaves.clone().cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        leaves = state["leaves"]
        if leaves.numel() != self.capacity:
            raise ValueError(f"SumTree checkpoint has {leaves.numel()} leaves, this tree has capacity {self.capacity}.")
        if not bool(torch.isfinite(leaves).all()) or bool((leaves < 0).any()):
            raise ValueError("Corrupt SumTree checkpoint: priorities must be finite and non-negative.")
        self.set_leaves(leaves)
