"""``P`` sum-trees in one set of tensors: :class:`rlfunc.replay.sumtree.SumTree` with a member dim.

Issue #24 §5 ("a vectorized sum-tree over members is fine"): member ``k`` of a
population keeps its own priorities, but all members' two-level trees live in
``[P, ...]`` tensors (leaves and in-block prefix sums ``[P, num_blocks, F]``,
block prefix sums ``[P, num_blocks]``), so one update writes any members' leaves
and one :meth:`PopulationSumTree.find` serves every member's batch.

The layout and arithmetic are the single tree's: a touched block's prefix row is
recomputed from its leaves with ``cumsum`` and the block prefix with one more
``cumsum`` (both sequential float64 sums on CPU, as the single tree's), and the
search is the single tree's (:func:`rlfunc.replay.sumtree.find_in_blocks` on
an accelerator; on CPU numpy views of the same buffers, as :class:`SumTree` does,
with one ``np.searchsorted`` per member for the block -- numpy has no batched
one -- and every other step batched). So row ``k`` holds bit for bit the sums of
a :class:`SumTree` given member ``k``'s leaves, and member ``k``'s draws from
generator ``k`` are that tree's draws.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from rlfunc.replay._layout import check_capacity
from rlfunc.replay.sumtree import _auto_fanout, find_in_blocks

__all__ = ["PopulationSumTree", "SumTreeRow"]


class PopulationSumTree:
    """``members`` sum-trees over ``capacity`` non-negative priorities each.

    Args:
        members: ``P``, the number of trees.
        capacity: leaves per tree.
        fanout: leaves per block; ``None`` picks the single tree's default.
        device: where the sums live.
        backend: ``"numpy"`` (CPU only) or ``"torch"``; ``None`` picks numpy on CPU
            and torch elsewhere, as :class:`SumTree`. Both give the same indices.
    """

    def __init__(
        self,
        members: int,
        capacity: int,
        *,
        fanout: int | None = None,
        device: torch.device | str = "cpu",
        backend: str | None = None,
    ) -> None:
        members = check_capacity("PopulationSumTree", members, "members")
        capacity = check_capacity("PopulationSumTree", capacity)
        fanout = _auto_fanout(int(capacity)) if fanout is None else check_capacity("PopulationSumTree", fanout, "fanout")
        self.members = int(members)
        self.capacity = int(capacity)
        self.fanout = fanout
        self.num_blocks = -(-self.capacity // fanout)
        self.device = torch.device(device)
        P, nb, f64 = self.members, self.num_blocks, dict(dtype=torch.float64, device=self.device)
        self._leaves = torch.zeros(P, nb, fanout, **f64)  # padded with zeros
        self._prefix = torch.zeros(P, nb, fanout, **f64)  # in-block inclusive cumsum
        self._sums = torch.zeros(P, nb, **f64)  # block sums
        self._top = torch.zeros(P, nb, **f64)  # inclusive cumsum of block sums (contiguous for searchsorted)
        self._cum = torch.zeros(P, nb + 1, **f64)  # [0, top]: sum of the blocks before each block
        if backend not in (None, "numpy", "torch"):
            raise ValueError(f"SumTree backend must be 'numpy', 'torch' or None, got {backend!r}.")
        if backend == "numpy" and self.device.type != "cpu":
            raise ValueError(f"The numpy SumTree backend needs device='cpu', got {self.device}.")
        # numpy views: ~1-3 us per small call against ~5-20 us for torch
        self._np = self.device.type == "cpu" if backend is None else backend == "numpy"
        if self._np:
            self._leaves_np, self._prefix_np = self._leaves.numpy(), self._prefix.numpy()
            self._sums_np, self._top_np, self._cum_np = self._sums.numpy(), self._top.numpy(), self._cum.numpy()

    # ----------------------------------------------------------------- read
    def total(self) -> torch.Tensor:
        """Each member's sum of priorities, ``[P]`` on ``device``."""
        return self._top[:, -1]

    @property
    def leaves(self) -> torch.Tensor:
        """All leaves, ``[P, capacity]`` (a view; write through :meth:`update`)."""
        return self._leaves.view(self.members, -1)[:, : self.capacity]

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        """Leaf values at ``indices [P, S]`` (member ``k``'s leaves in row ``k``)."""
        return self._leaves.view(self.members, -1).gather(1, indices)

    def probabilities(self, indices: torch.Tensor) -> torch.Tensor:
        """``p_i / total_k`` at ``indices [P, S]`` (float64)."""
        if self._np:
            i = indices.numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
            leaf = np.take_along_axis(self._leaves_np.reshape(self.members, -1), i, axis=1)
            return torch.from_numpy(leaf / self._top_np[:, -1:])
        return self.get(indices) / self.total().unsqueeze(1)

    # ---------------------------------------------------------------- write
    def update(self, members: torch.Tensor, indices: torch.Tensor, values: torch.Tensor | float) -> None:
        """Set leaf ``indices[i]`` of member ``members[i]`` to ``values[i]`` (or a scalar), each >= 0.

        ``indices`` and ``values`` have one entry per leaf written (any shape, flattened),
        ``members`` one per leaf or one for all. With repeated (member, index) pairs one
        of the values is kept; the sums stay consistent with the leaves.
        """
        if self._np:
            idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64).reshape(-1)
            mem = np.asarray(members.cpu() if isinstance(members, torch.Tensor) else members, dtype=np.int64).reshape(-1)
            self._write(mem, idx, values)
            return
        idx = torch.as_tensor(indices, device=self.device).reshape(-1).long()
        self._write(torch.as_tensor(members, device=self.device).reshape(-1).long(), idx, values)

    def update_rows(self, indices: torch.Tensor, values: torch.Tensor) -> None:
        """Set member ``k``'s leaves ``indices[k]`` to ``values[k]``, both ``[P, S]`` (e.g. priorities
        written back for every member's sampled batch in one call)."""
        if self._np:
            idx = np.asarray(indices.cpu() if isinstance(indices, torch.Tensor) else indices, dtype=np.int64)
            mem = np.arange(self.members)[:, None].repeat(idx.shape[1], axis=1)
            self._write(mem.reshape(-1), idx.reshape(-1), values)
            return
        idx = torch.as_tensor(indices, device=self.device).long()
        mem = torch.arange(self.members, device=self.device).unsqueeze(1).expand(idx.shape)
        self._write(mem.reshape(-1), idx.reshape(-1), values)

    def _write(self, mem, idx, values) -> None:
        """Leaves at (member ``mem``, index ``idx``), both flat (``mem`` may have one entry), then
        the touched blocks' prefix rows and every member's block prefix, recomputed."""
        width, F = self.num_blocks * self.fanout, self.fanout
        if self._np:
            if idx.size == 0:
                return
            vals = values.detach().cpu().numpy() if isinstance(values, torch.Tensor) else np.asarray(values)
            self._leaves_np.reshape(-1)[mem * width + idx] = vals.reshape(-1) if vals.ndim else vals
            blocks = mem * self.num_blocks + idx // F
            # torch's CPU cumsum, as SumTree.update: the same sequential float64 sums
            rows = torch.cumsum(torch.from_numpy(self._leaves_np.reshape(-1, F)[blocks]), dim=1).numpy()
            self._prefix_np.reshape(-1, F)[blocks] = rows
            self._sums_np.reshape(-1)[blocks] = rows[:, -1]
            self._rebuild_top()
            return
        if idx.numel() == 0:
            return
        vals = torch.as_tensor(values, dtype=torch.float64, device=self.device)
        self._leaves.view(-1).index_put_((mem * width + idx,), vals.reshape(-1) if vals.dim() else vals)
        blocks = mem * self.num_blocks + torch.div(idx, F, rounding_mode="floor")
        rows = self._leaves.view(-1, F)[blocks].cumsum(dim=1)
        self._prefix.view(-1, F).index_put_((blocks,), rows)
        self._sums.view(-1).index_put_((blocks,), rows[:, -1])
        self._rebuild_top()

    def _rebuild_top(self) -> None:
        torch.cumsum(self._sums, dim=1, out=self._top)
        self._cum[:, 1:] = self._top

    def set_leaves(self, values: torch.Tensor) -> None:
        """Replace all leaves with ``values [P, n]`` (``n <= capacity``; the rest become 0) and rebuild the sums."""
        values = torch.as_tensor(values, dtype=torch.float64)
        if values.dim() != 2 or values.shape[0] != self.members or values.shape[1] > self.capacity:
            raise ValueError(
                f"PopulationSumTree.set_leaves needs values [{self.members}, n <= {self.capacity}], "
                f"got shape {tuple(values.shape)}."
            )
        self._leaves.zero_()
        self._leaves.view(self.members, -1)[:, : values.shape[1]] = values.to(self.device)
        torch.cumsum(self._leaves, dim=2, out=self._prefix)
        self._sums.copy_(self._prefix[:, :, -1])
        self._rebuild_top()

    # --------------------------------------------------------------- sample
    def find(self, u: torch.Tensor) -> torch.Tensor:
        """Member ``k``'s leaf for each ``u[k, s]`` in ``[0, total_k)``, as :meth:`SumTree.find` (int64 ``[P, S]``)."""
        if self._np:
            u_np = u.detach().cpu().numpy() if isinstance(u, torch.Tensor) else np.asarray(u)
            return torch.from_numpy(self._find_np(np.array(u_np, dtype=np.float64)))
        u = torch.as_tensor(u, dtype=torch.float64, device=self.device)
        return find_in_blocks(self._top, self._cum, self._prefix, u).clamp_(max=self.capacity - 1)

    def _find_np(self, u: np.ndarray, members: np.ndarray | None = None) -> np.ndarray:
        """:meth:`SumTree._find_np` over members (all, or rows ``members [R]``); ``u [R, S]`` is overwritten."""
        nb = self.num_blocks
        member = np.arange(self.members) if members is None else np.asarray(members, dtype=np.int64)
        top = self._top_np if members is None else self._top_np[member]
        np.minimum(u, np.nextafter(top[:, -1:], 0.0), out=u)
        block = np.empty(u.shape, dtype=np.int64)
        for r in range(top.shape[0]):  # numpy's searchsorted takes one sorted row
            block[r] = np.searchsorted(top[r], u[r], side="right")
        np.minimum(block, nb - 1, out=block)
        member = member[:, None]
        u -= self._cum_np.reshape(-1)[member * (nb + 1) + block]  # sum of the blocks before
        rows = self._prefix_np.reshape(-1, self.fanout)[member * nb + block]  # [R, S, F]
        np.minimum(u, np.nextafter(rows[..., -1], 0.0), out=u)
        j = (rows <= u[..., None]).sum(axis=-1)
        return np.minimum(block * self.fanout + j, self.capacity - 1)  # a member's leaves all zero: past the end

    def row(self, k: int) -> "SumTreeRow":
        """Member ``k``'s tree with :class:`SumTree`'s interface (sample, update, probabilities...)."""
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        return SumTreeRow(self, k)

    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """``batch_size`` leaves per member (``[P, batch_size]``), member ``k``'s uniforms from
        ``generators[k]`` drawn as :meth:`SumTree.sample` draws them, then one batched search."""
        if len(generators) != self.members:
            raise ValueError(f"sample needs one generator per member ({self.members}), got {len(generators)}.")
        u = torch.stack(
            [torch.rand(batch_size, generator=g, device=self.device, dtype=torch.float64) for g in generators]
        )
        if self._np:
            u_np = u.numpy()
            u_np *= self._top_np[:, -1:]
            return torch.from_numpy(self._find_np(u_np))
        return self.find(u * self.total().unsqueeze(1))

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> dict[str, torch.Tensor]:
        """The leaves ``[P, capacity]`` (the sums are rebuilt on load)."""
        return {"leaves": self.leaves.clone().cpu()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        leaves = state["leaves"]
        if tuple(leaves.shape) != (self.members, self.capacity):
            raise ValueError(
                f"Population sum-tree checkpoint has leaves of shape {tuple(leaves.shape)}, "
                f"this tree has [{self.members}, {self.capacity}]."
            )
        if not bool(torch.isfinite(leaves).all()) or bool((leaves < 0).any()):
            raise ValueError("Corrupt sum-tree checkpoint: priorities must be finite and non-negative.")
        self.set_leaves(leaves)


class SumTreeRow:
    """Row ``k`` of a :class:`PopulationSumTree` behaving as a :class:`SumTree` (what
    :class:`~rlfunc.replay.prioritized.PrioritizedSequenceReplay` calls): member ``k`` alone
    samples, reads and writes its priorities with the single tree's arithmetic."""

    def __init__(self, tree: PopulationSumTree, k: int) -> None:
        self._tree, self._k = tree, k
        self.capacity, self.fanout, self.device = tree.capacity, tree.fanout, tree.device

    def total(self) -> torch.Tensor:
        return self._tree.total()[self._k]

    @property
    def leaves(self) -> torch.Tensor:
        return self._tree.leaves[self._k]

    def get(self, indices: torch.Tensor) -> torch.Tensor:
        return self._tree._leaves[self._k].view(-1)[indices]

    def probabilities(self, indices: torch.Tensor) -> torch.Tensor:
        t, k = self._tree, self._k
        if t._np:
            i = indices.numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
            return torch.from_numpy(t._leaves_np[k].reshape(-1)[i] / t._top_np[k, -1])
        return self.get(indices) / self.total()

    def update(self, indices: torch.Tensor, values: torch.Tensor | float) -> None:
        self._tree.update([self._k], indices, values)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """As :meth:`SumTree.sample` on member ``k``'s leaves."""
        t, k = self._tree, self._k
        u = torch.rand(batch_size, generator=generator, device=self.device, dtype=torch.float64)
        if t._np:
            u_np = u.numpy()
            u_np *= t._top_np[k, -1]
            return torch.from_numpy(t._find_np(u_np[None], [k])[0])
        rows = slice(k, k + 1)
        found = find_in_blocks(t._top[rows], t._cum[rows], t._prefix[rows], (u * self.total()).unsqueeze(0))[0]
        return found.clamp_(max=self.capacity - 1)
