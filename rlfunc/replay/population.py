"""Uniform transition replay for a population: one storage ``[P, capacity, ...]``.

Issue #24 §5 ("Replay batched over members"): each member of a population
(:mod:`rlfunc.core.population`) has its own replay -- its own ring buffer,
insertion counter and fill level -- but all of them live in one preallocated
TensorDict with a leading member dimension, so one update's batches for every
member are one gather. Member ``k``'s sampling indices come from member ``k``'s
own generator, drawn exactly as :class:`rlfunc.replay.uniform.UniformReplay`
draws them (``torch.randint(size_k, (n,), generator=g_k)``, uniform with
replacement like the official REDQ/SAC buffers), so a member samples the rows
its single run samples, whatever ``P``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity, check_rows

__all__ = ["PopulationReplay", "gather_rows"]


class PopulationReplay:
    """``P`` ring buffers of ``capacity`` transitions each, in one TensorDict ``[P, capacity]``.

    Storage is allocated on the first :meth:`add` from the rows' shapes and dtypes,
    on ``device``. :meth:`add` appends one member's rows; :meth:`sample` draws every
    member's indices from its own generator and gathers all members' rows at once.
    :meth:`state_dict` holds tensors only (no pickle in checkpoints).

    Writes are batched: :meth:`add` moves the member's cursor and size at once (so
    ``len`` and the sampling ranges are exact) and queues the rows; the queue is
    written in one indexed copy per key before anything reads the storage
    (:meth:`flush`, called by every reader), or when it holds :data:`FLUSH_ROWS` rows.
    Each member adds one row per env step, so a population of ``P`` pays one copy per
    key (one host-to-device transfer on a GPU) per step instead of ``P``: on the
    2026-11-28 H200 lease, ten members' collectors, writes and logs took 7.3 ms an env
    step before learning, about what ten single runs take. A queued row never shares its
    slot with another queued row (the queue is written first when a member would wrap
    onto its own queued rows), so the order of the writes does not matter.
    """

    FLUSH_ROWS = 4096

    def __init__(self, members: int, capacity: int, device: torch.device | str = "cpu") -> None:
        self.members = check_capacity("PopulationReplay", members, "members")
        self.capacity = check_capacity("PopulationReplay", capacity)
        self.device = torch.device(device)
        self._storage: TensorDict | None = None
        self.cursors = [0] * self.members
        self.sizes = [0] * self.members
        self._queued: list[tuple[torch.Tensor, torch.Tensor, TensorDict]] = []  # (members, row slots on the CPU, rows)
        self._queued_rows = [0] * self.members

    def __len__(self) -> int:
        """The fewest transitions any member holds."""
        return min(self.sizes)

    def member(self, k: int) -> "_Member":
        """Member ``k``'s replay with :class:`~rlfunc.replay.uniform.UniformReplay`'s interface (``add``,
        ``len``, ``sample`` with one generator, ``state_dict``) over row ``k`` of this storage."""
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        return _Member(self, k)

    @property
    def storage(self) -> TensorDict | None:
        """The ``[P, capacity]`` storage, every queued row written."""
        self.flush()
        return self._storage

    def flush(self) -> None:
        """Write every queued row: one indexed copy per key for all members."""
        if not self._queued:
            return
        queued, self._queued, self._queued_rows = self._queued, [], [0] * self.members
        members = torch.cat([members for members, _, _ in queued])
        slots = torch.cat([slots for _, slots, _ in queued])
        rows = queued[0][2] if len(queued) == 1 else torch.cat([r for _, _, r in queued])
        self._storage[members.to(self.device), slots.to(self.device)] = rows.to(self.device)

    def _allocate(self, rows: TensorDict) -> None:
        self._storage = self._zeros(rows[0])

    def _zeros(self, example: TensorDict) -> TensorDict:
        """Zeroed storage ``[P, capacity]`` with ``example``'s keys, shapes and dtypes, allocated on
        ``device`` itself (the one row moves there first: a GPU replay is never built in host memory)."""
        return example.to(self.device).expand(self.members, self.capacity).clone().zero_()

    def add(self, k: int, rows: TensorDict) -> None:
        """Append ``rows`` (batch ``[n]``) to member ``k``'s buffer, overwriting its oldest when full."""
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        self.add_rows([len(rows) if rows.batch_dims == 1 and i == k else 0 for i in range(self.members)], rows)

    def add_rows(self, counts: Sequence[int], rows: TensorDict) -> None:
        """Append every member's rows at once: ``rows`` (batch ``[n]``) member-major, the first
        ``counts[0]`` member 0's, the next ``counts[1]`` member 1's, ...; the same as :meth:`add` of
        each member's rows in turn, queued as one write."""
        if rows.batch_dims != 1:
            raise ValueError(f"add expects rows with batch_size [n], got {list(rows.batch_size)}.")
        counts = [int(c) for c in counts]
        if len(counts) != self.members or min(counts) < 0 or sum(counts) != rows.batch_size[0]:
            raise ValueError(
                f"add_rows needs {self.members} non-negative counts summing to the {rows.batch_size[0]} rows, got {counts}."
            )
        n = rows.batch_size[0]
        if n == 0:
            return
        if self._storage is None:
            self._allocate(rows)
        else:
            check_rows("PopulationReplay.add", self._storage, rows, 2, 1)
        if max(counts) > self.capacity:  # only a member's newest `capacity` rows are kept
            keep, start = [], 0
            for c in counts:
                keep.append(torch.arange(start + max(c - self.capacity, 0), start + c))
                start += c
            rows, counts = rows[torch.cat(keep)], [min(c, self.capacity) for c in counts]
            n = sum(counts)
        if any(q + c > self.capacity for q, c in zip(self._queued_rows, counts)) or sum(self._queued_rows) + n > self.FLUSH_ROWS:
            self.flush()  # no two queued rows in one slot; a bounded queue
        members = np.repeat(np.arange(self.members), counts)
        first = np.cumsum(counts) - counts  # each member's first row in `rows`
        slots = (np.asarray(self.cursors)[members] + np.arange(n) - first[members]) % self.capacity
        for k, c in enumerate(counts):
            if c:
                self._queued_rows[k] += c
                self.cursors[k] = (self.cursors[k] + c) % self.capacity
                self.sizes[k] = min(self.sizes[k] + c, self.capacity)
        # rows.clone(): a copy, the caller may reuse its buffers
        self._queued.append((torch.from_numpy(members), torch.from_numpy(slots), rows.clone()))

    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> TensorDict:
        """``batch_size`` rows per member (batch ``[P, batch_size]``): member ``k``'s indices drawn
        uniformly with replacement from its own ``generators[k]``, then one gather for all members."""
        return self.gather(self.draw_indices(batch_size, generators))

    def draw_indices(self, batch_size: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Member ``k``'s ``batch_size`` row indices (``[P, batch_size]``, int64) from ``generators[k]``,
        drawn as :meth:`UniformReplay.sample <rlfunc.replay.uniform.UniformReplay.sample>` draws them."""
        if len(generators) != self.members:
            raise ValueError(f"sample needs one generator per member ({self.members}), got {len(generators)}.")
        if self._storage is None or min(self.sizes) == 0:
            raise RuntimeError("Cannot sample from an empty replay buffer; add transitions to every member first.")
        draws = [torch.randint(size, (batch_size,), generator=g, device=self.device) for size, g in zip(self.sizes, generators)]
        return draws[0].unsqueeze(0) if self.members == 1 else torch.stack(draws)

    def gather(self, idx: torch.Tensor) -> TensorDict:
        """Rows ``idx[k, i]`` of member ``k``'s buffer (batch ``idx.shape``, ``[P, n]``): one
        ``index_select`` per stored key over the flattened ``[P * capacity]`` storage (cheaper on a
        CPU than advanced indexing with a member and a row index)."""
        self.flush()
        flat = idx if self.members == 1 else idx + self._offsets(idx)
        return gather_rows(self._storage, flat.reshape(-1), idx.shape, lead=2)

    def _offsets(self, idx: torch.Tensor) -> torch.Tensor:
        return (torch.arange(self.members, device=self.device) * self.capacity).reshape(-1, *([1] * (idx.dim() - 1)))

    def state_dict(self) -> TensorDict:
        """Tensors that restore the buffers exactly (the filled part, ``[P, max size]``)."""
        td = TensorDict(
            {
                "cursor": torch.tensor(self.cursors),
                "size": torch.tensor(self.sizes),
                "capacity": torch.tensor(self.capacity),
            },
            batch_size=[],
        )
        if self.storage is not None:
            td["storage"] = self._storage[:, : max(self.sizes)].to("cpu")
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        capacity, sizes = int(td["capacity"]), [int(s) for s in td["size"].tolist()]
        if capacity != self.capacity:
            raise ValueError(
                f"Checkpointed replay has capacity {capacity} but this buffer has {self.capacity}; "
                "use the run's original replay_size."
            )
        if len(sizes) != self.members:
            raise ValueError(f"Checkpointed replay has {len(sizes)} members but this population has {self.members}.")
        self._queued, self._queued_rows = [], [0] * self.members
        self.cursors = [int(c) for c in td["cursor"].tolist()]
        self.sizes = sizes
        if "storage" in td.keys() and max(sizes):
            rows = td["storage"]
            self._storage = self._zeros(rows[0, 0])
            self._storage[:, : rows.batch_size[1]] = rows.to(self.device)
        else:
            self._storage = None


class _Member:
    """Row ``k`` of a :class:`PopulationReplay` as a single uniform replay: what member ``k``'s learner
    adds and, when it samples alone, draws (``torch.randint(size_k, (n,), generator)``, as
    :meth:`UniformReplay.sample <rlfunc.replay.uniform.UniformReplay.sample>`)."""

    def __init__(self, population: PopulationReplay, k: int) -> None:
        self._population, self._k = population, k
        self.capacity, self.device = population.capacity, population.device

    def __len__(self) -> int:
        return self._population.sizes[self._k]

    def add(self, rows: TensorDict) -> None:
        self._population.add(self._k, rows)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        pop, size = self._population, len(self)
        if size == 0 or pop.storage is None:
            raise RuntimeError("Cannot sample from an empty replay buffer; add transitions first.")
        idx = torch.randint(size, (batch_size,), generator=generator, device=pop.device)
        return pop.storage[self._k][idx]

    def state_dict(self) -> TensorDict:
        """Row ``k`` in :class:`~rlfunc.replay.uniform.UniformReplay`'s checkpoint format."""
        pop, size = self._population, len(self)
        td = TensorDict(
            {"cursor": torch.tensor(pop.cursors[self._k]), "size": torch.tensor(size), "capacity": torch.tensor(self.capacity)},
            batch_size=[],
        )
        if pop.storage is not None:
            td["storage"] = pop.storage[self._k, :size].to("cpu")
        return td


def gather_rows(storage: TensorDict, flat: torch.Tensor, shape: torch.Size, lead: int = 1) -> TensorDict:
    """Rows ``flat`` (1-D int64) of ``storage`` (a TensorDict whose first ``lead`` batch dimensions,
    flattened, are the rows), as a TensorDict of batch ``shape``: one ``index_select`` per leaf,
    exact (a gather). Used by the population replays and RLPD's shared prior data."""
    out = {}
    for key, t in storage.items(include_nested=True, leaves_only=True):
        rows = t.reshape(-1, *t.shape[lead:]).index_select(0, flat)
        out[key] = rows.reshape(*shape, *t.shape[lead:])
    if all(isinstance(k, str) for k in out) and type(storage) is TensorDict and hasattr(TensorDict, "_new_unsafe"):
        return TensorDict._new_unsafe(out, batch_size=torch.Size(shape), device=storage.device)
    return TensorDict(out, batch_size=shape, device=storage.device)
