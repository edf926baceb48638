"""Sequence replays for a population: one storage ``[P, T, capacity]``, sampled with one gather.

Issue #24 §5 ("Replay batched over members") for the recurrent agents (DRQN,
R2D2): each member of a population (:mod:`rlfunc.core.population`) keeps its own
:class:`rlfunc.replay.sequence.SequenceReplay` -- its own pending episode parts,
window ring, cursor and fill level -- but every member's tensors are row ``k``
of one preallocated TensorDict with a leading member dim (windows
``[P, T, capacity]`` time-major like the single buffer's ``[T, capacity]``,
pending rings ``[P, num_envs, T]``, stored carries ``[P, capacity]``).

Member ``k``'s bookkeeping *is* a :class:`SequenceReplay` whose buffers are views
of row ``k`` (:meth:`SequenceReplay._bind`), so its windows are cut and written by
the single buffer's own code and member ``k``'s storage row equals a single
buffer's storage given the same steps. :meth:`PopulationSequenceReplay.sample`
draws member ``k``'s rows from ``generators[k]`` exactly as the single buffer
draws them, then gathers all members' windows with one ``index_select`` per
stored tensor, so row ``k`` of the ``[P, T, B]`` batch is the single buffer's
``[T, B]`` sample for that generator, whatever ``P``.

:class:`PopulationPrioritizedSequenceReplay` adds R2D2's proportional priorities
(:mod:`rlfunc.replay.prioritized`) in a
:class:`rlfunc.replay.population_sumtree.PopulationSumTree`: per-member max
priority on insert, priorities ``[P, B]`` written back in one update, member
``k``'s indices, probabilities and importance weights those of a single
:class:`~rlfunc.replay.prioritized.PrioritizedSequenceReplay` fed the same data.
Its ``member(k)`` is such a replay over row ``k`` of the storage and of the tree
(:meth:`PopulationSumTree.row`), so a member can also sample and write its
priorities alone (a step where only some members learn) with the single code.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity
from rlfunc.replay.population_sumtree import PopulationSumTree
from rlfunc.replay.prioritized import (
    PrioritizedSequenceReplay,
    _normalised_weights,
    check_prioritized_checkpoint,
    check_priority_total,
)
from rlfunc.replay.sequence import SequenceReplay

__all__ = ["PopulationSequenceReplay", "PopulationPrioritizedSequenceReplay"]

_COUNTERS = ("cursor", "size", "added", "windows_added")


class _RowOfPopulation:
    """Mixed into a single replay class: member ``k``'s replay, whose buffers the population allocates
    (row ``k`` of its storage)."""

    def __init__(self, population: "PopulationSequenceReplay", k: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self._population = population
        self._k = k

    def _allocate(self, step: TensorDict, carry: TensorDict | None) -> None:
        self._population._allocate(step, carry)


class _Member(_RowOfPopulation, SequenceReplay):
    """Member ``k``'s sequence replay: its buffers are row ``k`` of the population's."""


class _PrioritizedMember(_RowOfPopulation, PrioritizedSequenceReplay):
    """Member ``k``'s prioritized replay: storage row ``k``, priorities row ``k`` of the population's
    sum-tree (bound by :class:`PopulationPrioritizedSequenceReplay`), so it samples and writes
    priorities alone with the single buffer's code (e.g. a member updating while others wait)."""


class PopulationSequenceReplay:
    """``P`` uniform sequence replays (see module doc); arguments as
    :class:`rlfunc.replay.sequence.SequenceReplay`'s plus ``members``."""

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        num_envs: int = 1,
        *,
        members: int,
        period: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        self.members = check_capacity(type(self).__name__, members, "members")
        capacity = check_capacity(type(self).__name__, capacity, unit=" window")  # named as the population
        self._members = [
            self._new_member(k, dict(capacity=capacity, sequence_length=sequence_length, num_envs=num_envs, period=period, device=device))
            for k in range(self.members)
        ]
        one = self._members[0]
        self.capacity, self.sequence_length, self.num_envs = one.capacity, one.sequence_length, one.num_envs
        self.period, self.device = one.period, one.device
        self._buffers: dict | None = None
        self._offsets: tuple[torch.Tensor, torch.Tensor] | None = None  # flat row offsets for _gather

    # ------------------------------------------------------------------ info
    def __len__(self) -> int:
        """The fewest windows any member holds."""
        return min(self.sizes)

    @property
    def sizes(self) -> list[int]:
        """Windows stored per member."""
        return [len(m) for m in self._members]

    @property
    def windows_added(self) -> list[int]:
        """Windows written per member since creation (a rate limiter's insert counts)."""
        return [m.windows_added for m in self._members]

    @property
    def steps_added(self) -> list[int]:
        return [m.steps_added for m in self._members]

    @property
    def storage(self) -> TensorDict | None:
        """The ``[P, T, capacity]`` window storage (``None`` before the first add)."""
        return None if self._buffers is None else self._buffers["storage"]

    @property
    def stores_carry(self) -> bool:
        return self._buffers is not None and self._buffers["carry"] is not None

    def member(self, k: int) -> SequenceReplay:
        """Member ``k``'s single replay over row ``k`` (a :class:`SequenceReplay`, or a
        :class:`PrioritizedSequenceReplay` whose priorities are row ``k`` of :attr:`tree`):
        adding, flushing or sampling through it is the same as through :meth:`add` and row ``k``."""
        return self._members[self._check(k)]

    def nbytes(self) -> int:
        """Bytes of all storage tensors (windows, carries, pending rings)."""
        if self._buffers is None:
            return 0
        total = 0
        for name, td in self._buffers.items():
            if td is not None:
                total += sum(x.numel() * x.element_size() for x in td.values(include_nested=True, leaves_only=True))
        return total

    # ------------------------------------------------------------- allocate
    def _check(self, k: int) -> int:
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        return k

    def _allocate(self, step: TensorDict, carry: TensorDict | None) -> None:
        self._bind_all(self._members[0]._new_buffers(step, carry, (self.members,)))

    def _bind_all(self, buffers: dict) -> None:
        self._buffers = buffers
        for k, m in enumerate(self._members):
            m._bind({name: None if b is None else b[k] for name, b in buffers.items()})
            m._leaves_tag = None  # a prioritized member's cache of storage leaves: rebuild (ids may be reused)

    def _new_member(self, k: int, kwargs: dict) -> SequenceReplay:
        return _Member(self, k, **kwargs)

    # ------------------------------------------------------------------ add
    def add(
        self,
        k: int,
        step: TensorDict,
        carry: TensorDict | Mapping | None = None,
        env_ids: Sequence[int] | torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Member ``k``'s :meth:`SequenceReplay.add`: one transition per env of member ``k``."""
        self._members[self._check(k)].add(step, carry=carry, env_ids=env_ids)

    def flush(self, k: int, env_ids: Sequence[int] | None = None) -> None:
        """Member ``k``'s :meth:`SequenceReplay.flush`: write the open episode tails of ``env_ids`` (default all)."""
        self._members[self._check(k)].flush(env_ids)

    # --------------------------------------------------------------- sample
    def _sample_indices(self, batch_size: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Storage rows ``[P, batch_size]``: member ``k``'s drawn as the single buffer draws them."""
        return torch.stack(
            [torch.randint(n, (batch_size,), generator=g, device=self.device) for n, g in zip(self.sizes, generators)]
        )

    def _check_sample(self, generators: Sequence[torch.Generator]) -> None:
        if len(generators) != self.members:
            raise ValueError(f"sample needs one generator per member ({self.members}), got {len(generators)}.")
        if self._buffers is None or min(self.sizes) == 0:
            raise RuntimeError(
                "Cannot sample from an empty sequence replay; add steps to every member until each has a complete window."
            )

    def _gather(self, idx: torch.Tensor) -> dict:
        """Every stored tensor at member rows ``idx [P, B]``: one ``index_select`` each, ``[P, T, B, ...]``."""
        P, T, C, B = self.members, self.sequence_length, self.capacity, idx.shape[1]
        if self._offsets is None:  # where member k's row 0 (and step t's) starts, flat
            member = torch.arange(P, device=self.device)
            steps = (member.view(P, 1, 1) * T + torch.arange(T, device=self.device).view(1, T, 1)) * C
            self._offsets = (member.unsqueeze(1) * C, steps)
        member_rows, step_rows = self._offsets
        flat_w = (member_rows + idx).reshape(-1)  # [P * B] rows of [P * C]
        flat_s = (step_rows + idx.unsqueeze(1)).reshape(-1)  # [P * T * B] rows of [P * T * C]
        data: dict = {}
        for key, x in self._buffers["storage"].items(include_nested=True, leaves_only=True):
            data[key] = x.flatten(0, 2).index_select(0, flat_s).view(P, T, B, *x.shape[3:])
        data["window"] = idx.unsqueeze(1).expand(P, T, B)
        window = [("episode_start", self._buffers["info"]["start"])]
        if self._buffers["carry"] is not None:
            for key, x in self._buffers["carry"].items(include_nested=True, leaves_only=True):
                window.append((("init_carry", *key) if isinstance(key, tuple) else ("init_carry", key), x))
        for key, x in window:
            y = x.flatten(0, 1).index_select(0, flat_w).view(P, B, *x.shape[2:])
            data[key] = y.unsqueeze(1).expand(P, T, *y.shape[1:])
        return data

    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> TensorDict:
        """``batch_size`` windows per member, ``[P, T, batch_size]``: row ``k`` is
        :meth:`SequenceReplay.sample` of member ``k`` with ``generators[k]`` (same keys:
        every added key, ``mask``, ``window``, ``episode_start``, ``init_carry``)."""
        self._check_sample(generators)
        idx = self._sample_indices(batch_size, generators)
        P, T = self.members, self.sequence_length
        return TensorDict(self._gather(idx), batch_size=[P, T, batch_size], device=self.device)

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> TensorDict:
        """Tensors only: every member's counters ``[P]``/``[P, num_envs]`` and the filled part of the storage."""
        ms = self._members
        td = TensorDict(
            {
                "members": torch.tensor(self.members),
                "capacity": torch.tensor(self.capacity),
                "sequence_length": torch.tensor(self.sequence_length),
                "num_envs": torch.tensor(self.num_envs),
                "period": torch.tensor(self.period),
                "cursor": torch.tensor([m._cursor for m in ms]),
                "size": torch.tensor([m._size for m in ms]),
                "added": torch.tensor([m._added for m in ms]),
                "windows_added": torch.tensor([m._windows_added for m in ms]),
                "ep_len": torch.as_tensor(np.stack([m._ep_len for m in ms])),
                "covered": torch.as_tensor(np.stack([m._covered for m in ms])),
            },
            batch_size=[],
        )
        if self._buffers is not None:
            n = max(max(self.sizes), 1)  # filled rows; row 0 always kept as a shape template
            b = self._buffers
            td["storage"] = b["storage"][:, :, :n].cpu()
            td["info"] = b["info"][:, :n].cpu()
            td["pending"] = b["pending"].clone().cpu()
            if b["carry"] is not None:
                td["carry"] = b["carry"][:, :n].cpu()
                td["pending_carry"] = b["pending_carry"].clone().cpu()
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; members and layout must match this buffer's."""
        for name in ("members", "capacity", "sequence_length", "num_envs", "period"):
            if name not in td.keys():
                raise ValueError(f"Not a population sequence replay checkpoint: key {name!r} is missing.")
            saved, mine = int(td[name]), getattr(self, name)
            if saved != mine:
                raise ValueError(
                    f"Checkpointed population sequence replay has {name}={saved} but this buffer has {mine}; "
                    f"create the buffer with {name}={saved}."
                )
        P, T, C = self.members, self.sequence_length, self.capacity
        sizes = [int(s) for s in td["size"].tolist()]
        if "storage" in td.keys():
            saved = td["storage"].to(self.device)
            n = saved.batch_size[2]
            if tuple(saved.batch_size[:2]) != (P, T) or n > C or max(sizes) > n:
                raise ValueError(
                    f"Corrupt population sequence replay checkpoint: storage has batch_size {list(saved.batch_size)} "
                    f"for {P} members, sequence_length {T}, capacity {C} and sizes {sizes}."
                )

            def grow(x, dim):  # zeroed [.., C, ..] buffer with the saved rows in front
                lead = (slice(None),) * dim
                full = x[lead + (slice(0, 1),)].expand(*x.batch_size[:dim], C).clone().zero_()
                full[lead + (slice(0, n),)] = x
                return full

            carry = td["carry"].to(self.device) if "carry" in td.keys() else None
            self._bind_all(
                {
                    "storage": grow(saved, 2),
                    "info": grow(td["info"].to(self.device), 1),
                    "pending": td["pending"].clone().to(self.device),
                    "carry": None if carry is None else grow(carry, 1),
                    "pending_carry": None if carry is None else td["pending_carry"].clone().to(self.device),
                }
            )
        else:
            self._buffers = None
            for m in self._members:
                m._bind(dict.fromkeys(("storage", "pending", "info", "carry", "pending_carry")))
        for k, m in enumerate(self._members):
            m._cursor, m._size = int(td["cursor"][k]), sizes[k]
            m._added, m._windows_added = int(td["added"][k]), int(td["windows_added"][k])
            m._ep_len = td["ep_len"][k].cpu().numpy().astype(np.int64).copy()
            m._covered = td["covered"][k].cpu().numpy().astype(np.int64).copy()


class PopulationPrioritizedSequenceReplay(PopulationSequenceReplay):
    """``P`` prioritized sequence replays (R2D2); arguments as
    :class:`rlfunc.replay.prioritized.PrioritizedSequenceReplay`'s plus ``members``."""

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        num_envs: int = 1,
        *,
        members: int,
        period: int | None = None,
        priority_exponent: float = 0.9,
        importance_exponent: float = 0.6,
        initial_priority: float | None = None,
        fanout: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if priority_exponent < 0:
            raise ValueError(f"priority_exponent must be >= 0, got {priority_exponent}.")
        if importance_exponent < 0:
            raise ValueError(f"importance_exponent must be >= 0, got {importance_exponent}.")
        if initial_priority is not None and not initial_priority > 0:
            raise ValueError(f"initial_priority must be positive (or None for the max so far), got {initial_priority}.")
        self.priority_exponent = float(priority_exponent)
        self.importance_exponent = float(importance_exponent)
        self.initial_priority = None if initial_priority is None else float(initial_priority)
        self._prioritized_kwargs = dict(
            priority_exponent=self.priority_exponent,
            importance_exponent=self.importance_exponent,
            initial_priority=self.initial_priority,
            fanout=1,  # each member's own tree is replaced by its row of the population's below
        )
        super().__init__(capacity, sequence_length, num_envs, members=members, period=period, device=device)
        self._tree = PopulationSumTree(self.members, self.capacity, fanout=fanout, device=self.device)
        self._max_priority = torch.ones(self.members, dtype=torch.float64, device=self.device)
        for k, m in enumerate(self._members):  # member k samples, inserts and reprioritizes through row k
            m._tree = self._tree.row(k)
            m._max_priority = self._max_priority[k]  # a view: either path raises the same maximum
            m._max_np = m._max_priority.numpy() if self.device.type == "cpu" else None

    # ------------------------------------------------------------------ info
    @property
    def tree(self) -> PopulationSumTree:
        """The ``[P, capacity]`` sum-trees of ``priority ** priority_exponent`` per storage row."""
        return self._tree

    @property
    def max_priority(self) -> torch.Tensor:
        """Each member's largest priority written so far, ``[P]`` (before the exponent)."""
        return self._max_priority.clone()

    def priorities(self, indices: torch.Tensor) -> torch.Tensor:
        """Current priorities (before the exponent) of member rows ``indices [P, S]``."""
        leaf = self._tree.get(indices.to(self.device))
        return leaf if self.priority_exponent == 0 else leaf.pow(1.0 / self.priority_exponent)

    # --------------------------------------------------------------- hooks
    def _new_member(self, k: int, kwargs: dict) -> SequenceReplay:
        return _PrioritizedMember(self, k, **kwargs, **self._prioritized_kwargs)

    def _sample_indices(self, batch_size: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
        return self._tree.sample(batch_size, generators)

    # --------------------------------------------------------------- sample
    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> TensorDict:
        """``batch_size`` windows per member drawn in proportion to ``priority ** alpha``, ``[P, T, B]``:
        row ``k`` is :meth:`PrioritizedSequenceReplay.sample` of member ``k`` with ``generators[k]``
        (its keys plus ``probability`` float64 and ``weight`` float32, max 1 per member)."""
        self._check_sample(generators)
        if self.device.type == "cpu":  # a host check only where it costs no sync
            check_priority_total(self._tree.total().numpy())
        idx = self._sample_indices(batch_size, generators)
        P, T = self.members, self.sequence_length
        data = self._gather(idx)
        prob = self._tree.probabilities(idx)
        if self.device.type == "cpu":
            sizes = np.asarray(self.sizes, dtype=np.float64)[:, None]
        else:
            sizes = torch.tensor(self.sizes, dtype=torch.float64, device=self.device).unsqueeze(1)
        weight = _normalised_weights(prob, sizes, self.importance_exponent)
        data["probability"] = prob.unsqueeze(1).expand(P, T, batch_size)
        data["weight"] = weight.to(self.device).unsqueeze(1).expand(P, T, batch_size)
        return TensorDict(data, batch_size=[P, T, batch_size], device=self.device)

    # --------------------------------------------------------- priorities
    def update_priorities(self, indices: torch.Tensor, priorities: torch.Tensor) -> None:
        """Set member ``k``'s rows ``indices[k]`` (``batch["window"][:, 0]``) to ``priorities[k]``, both ``[P, B]``.

        As :meth:`PrioritizedSequenceReplay.update_priorities`, for all members in one
        tree update: on CPU, negative or non-finite priorities and rows a member does
        not hold raise; on an accelerator nothing is checked (a host sync).
        """
        idx = torch.as_tensor(indices, device=self.device).detach()
        p = torch.as_tensor(priorities, device=self.device).detach()
        if idx.dim() != 2 or idx.shape[0] != self.members or idx.shape != p.shape:
            raise ValueError(
                f"update_priorities needs indices and priorities of shape [{self.members}, B], "
                f"got {tuple(idx.shape)} and {tuple(p.shape)}."
            )
        if idx.numel() == 0:
            return
        if self.device.type == "cpu":  # numpy as the single buffer, so the leaves are bit-identical
            i = idx.numpy().astype(np.int64, copy=False)
            q = p.numpy().astype(np.float64)
            if not np.isfinite(q).all() or (q < 0).any():
                raise ValueError(f"Priorities must be finite and non-negative, got {q.reshape(-1)[:8].tolist()}...")
            sizes = np.asarray(self.sizes)[:, None]
            if i.min() < 0 or (i >= sizes).any():
                raise IndexError(
                    f"update_priorities: member k's indices must be its stored rows [0, size_k) with sizes "
                    f"{self.sizes}, got {i.reshape(-1)[:8].tolist()}..."
                )
            max_np = self._max_priority.numpy()
            np.maximum(max_np, q.max(axis=1), out=max_np)
            vals = q**self.priority_exponent if self.priority_exponent != 1 else q
            self._tree.update_rows(i, vals)
            return
        p = p.to(torch.float64)
        self._max_priority.copy_(torch.maximum(self._max_priority, p.amax(dim=1)))
        self._tree.update_rows(idx, p.pow(self.priority_exponent))

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> TensorDict:
        """:meth:`PopulationSequenceReplay.state_dict` plus every member's priorities."""
        td = super().state_dict()
        n = max(max(self.sizes), 1)
        td["priority_leaves"] = self._tree.leaves[:, :n].clone().cpu()
        td["max_priority"] = self._max_priority.clone().cpu()
        td["priority_exponent"] = torch.tensor(self.priority_exponent, dtype=torch.float64)
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; layout and ``priority_exponent`` must match."""
        check_prioritized_checkpoint(td, self.priority_exponent, "prioritized population replay", "PopulationSequenceReplay")
        super().load_state_dict(td)
        leaves = td["priority_leaves"].to(torch.float64)
        if leaves.dim() != 2 or leaves.shape[0] != self.members or leaves.shape[1] > self.capacity:
            raise ValueError(f"Corrupt prioritized population replay checkpoint: priorities of shape {tuple(leaves.shape)}.")
        self._tree.load_state_dict({"leaves": torch.nn.functional.pad(leaves, (0, self.capacity - leaves.shape[1]))})
        self._max_priority.copy_(td["max_priority"].to(dtype=torch.float64).reshape(self.members))
