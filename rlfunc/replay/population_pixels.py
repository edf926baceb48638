"""Pixel replay for a population: every member's frame ring in one storage ``[P, capacity, ...]``.

Issue #24 §5 ("Replay batched over members") for DrQ-v2: each member of a
population (:mod:`rlfunc.core.population`) keeps its own
:class:`rlfunc.replay.pixels.PixelReplay` -- its own ring of single frames,
episode bookkeeping and valid n-step starts -- but every member's tensors are row
``k`` of one preallocated set (frames ``[P, capacity, C, H, W]`` uint8, actions,
rewards, termination flags, episode starts and valid-start flags ``[P, capacity]``).

Member ``k``'s bookkeeping *is* a :class:`PixelReplay` bound to row ``k``
(:meth:`PixelReplay._bind`), so its frames and valid starts are written by the
single buffer's own code. :meth:`PopulationPixelReplay.sample` draws member
``k``'s starts from ``generators[k]`` by the single buffer's rejection sampling
(the same candidates, in the same order; the members' rounds run together, one
host check per round), then builds every member's frame stacks and n-step
rewards and discounts with one gather over the flattened storage
(:meth:`PixelReplay._gather_flat`), so row ``k`` of the ``[P, B]`` batch is the
single buffer's sample for that generator, whatever ``P``.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity
from rlfunc.replay.pixels import PixelReplay

__all__ = ["PopulationPixelReplay"]

_TENSORS = ("frames", "action", "reward", "terminated", "ep_start_t", "valid_t")


class _Member(PixelReplay):
    """Member ``k``'s pixel replay: its storage is row ``k`` of the population's."""

    def __init__(self, population: "PopulationPixelReplay", k: int, **kwargs) -> None:
        self._population, self._k = population, k
        super().__init__(**kwargs)

    def _new_storage(self, lead: tuple[int, ...] = ()) -> dict:
        return self._population._member_storage(self, self._k)


class PopulationPixelReplay:
    """``P`` pixel replays (see module doc); arguments as :class:`rlfunc.replay.pixels.PixelReplay`'s
    plus ``members``."""

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, int, int],
        action_dim: int,
        *,
        members: int,
        frame_stack: int = 3,
        nstep: int = 3,
        gamma: float = 0.99,
        device: torch.device | str = "cpu",
    ) -> None:
        self.members = check_capacity(type(self).__name__, members, "members")
        capacity = check_capacity(type(self).__name__, capacity, minimum=2, unit=" frames")  # named as the population
        self._storage: dict | None = None
        kw = dict(capacity=capacity, obs_shape=obs_shape, action_dim=action_dim, frame_stack=frame_stack, nstep=nstep, gamma=gamma, device=device)
        self._members = [_Member(self, k, **kw) for k in range(self.members)]
        one = self._members[0]
        self.capacity, self.obs_shape, self.frame_shape = one.capacity, one.obs_shape, one.frame_shape
        self.frame_stack, self.action_dim, self.nstep, self.gamma = one.frame_stack, one.action_dim, one.nstep, one.gamma
        self.device = one.device

    def _member_storage(self, member: PixelReplay, k: int) -> dict:
        if self._storage is None:  # the first member's constructor allocates everyone's
            self._storage = PixelReplay._new_storage(member, (self.members,))
        return {name: x[k] for name, x in self._storage.items()}

    # ------------------------------------------------------------------ info
    def __len__(self) -> int:
        """The fewest valid n-step starts any member holds."""
        return min(self.sizes)

    @property
    def sizes(self) -> list[int]:
        """Valid n-step starts per member (what :meth:`sample` draws from)."""
        return [len(m) for m in self._members]

    @property
    def storage(self) -> dict:
        """The ``[P, capacity, ...]`` tensors (``frames``, ``action``, ``reward``, ``terminated``, ...)."""
        return self._storage

    def member(self, k: int) -> PixelReplay:
        """Member ``k``'s replay (its storage is a view of row ``k``; add through :meth:`add`)."""
        return self._members[self._check(k)]

    def nbytes(self) -> int:
        """Bytes of all storage tensors and bookkeeping arrays, every member's."""
        return sum(x.nbytes if isinstance(x, np.ndarray) else x.numel() * x.element_size() for x in self._storage.values())

    def _check(self, k: int) -> int:
        if not 0 <= k < self.members:
            raise IndexError(f"member must be in [0, {self.members}), got {k}.")
        return k

    # ------------------------------------------------------------------ add
    def add(self, k: int, obs, action, reward: float, next_obs, terminated: bool, truncated: bool) -> None:
        """Member ``k``'s :meth:`PixelReplay.add`: one step ``(obs, action, reward, next_obs)`` of its env."""
        self._members[self._check(k)].add(obs, action, reward, next_obs, terminated, truncated)

    def flush(self, k: int) -> None:
        """Member ``k``'s :meth:`PixelReplay.flush`: close its running episode."""
        self._members[self._check(k)].flush()

    # --------------------------------------------------------------- sample
    def sample_indices(self, batch_size: int, generators: Sequence[torch.Generator]) -> torch.Tensor:
        """Absolute starts ``[P, B]``: member ``k``'s drawn from ``generators[k]`` exactly as
        :meth:`PixelReplay.sample_indices` draws them (one host check per rejection round)."""
        if len(generators) != self.members:
            raise ValueError(f"sample needs one generator per member ({self.members}), got {len(generators)}.")
        empty = [k for k, n in enumerate(self.sizes) if n == 0]
        if empty:
            raise RuntimeError(
                f"Members {empty} of the pixel replay have no complete n-step window yet; add more steps to "
                f"every member before sampling (n = {self.nstep})."
            )
        P, B, cap, dev = self.members, batch_size, self.capacity, self.device
        lo = [max(0, m._written - cap) for m in self._members]
        span = [m._written - lo[k] for k, m in enumerate(self._members)]
        idx = torch.empty(P, B, dtype=torch.int64, device=dev)
        todo = torch.ones(P, B, dtype=torch.bool, device=dev)
        valid = self._storage["valid_t"]
        active = list(range(P))
        for _ in range(10_000):
            cand = torch.stack([torch.randint(span[k], (B,), generator=generators[k], device=dev) + lo[k] for k in active])
            rows = torch.tensor(active, device=dev)
            ok = valid[rows.unsqueeze(1), cand % cap] & todo[rows]
            idx[rows] = torch.where(ok, cand, idx[rows])
            todo[rows] = todo[rows] & ~ok
            left = todo[rows].any(dim=1).tolist()
            active = [k for k, more in zip(active, left) if more]
            if not active:
                return idx
        raise RuntimeError("PixelReplay rejection sampling did not finish; too few valid starts.")

    def gather(self, g: torch.Tensor) -> TensorDict:
        """The batch ``[P, B]`` for member ``k``'s absolute starts ``g[k]``: one gather for all members."""
        P, B, cap = self.members, g.shape[1], self.capacity
        st = {name: self._storage[name].flatten(0, 1) for name in _TENSORS if name != "valid_t"}
        base = (torch.arange(P, device=self.device) * cap).repeat_interleave(B)
        return self._members[0]._gather_flat(st, g.reshape(-1), base).reshape(P, B)

    def sample(self, batch_size: int, generators: Sequence[torch.Generator]) -> TensorDict:
        """``batch_size`` transitions per member, ``[P, batch_size]``: row ``k`` is
        :meth:`PixelReplay.sample` of member ``k`` with ``generators[k]`` (``obs``/``next_obs``
        uint8 stacks, ``action``, n-step ``reward``, ``discount``)."""
        return self.gather(self.sample_indices(batch_size, generators))

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> TensorDict:
        """Tensors only: every member's counters ``[P]`` and the filled part of the storage ``[P, n]``."""
        ms = self._members
        n = max(m.frames_stored for m in ms)
        st = self._storage
        return TensorDict(
            {
                "members": torch.tensor(self.members),
                "capacity": torch.tensor(self.capacity),
                "written": torch.tensor([m._written for m in ms]),
                "episode_open": torch.tensor([m._episode_open for m in ms]),
                "cur_ep_start": torch.tensor([m._cur_ep_start for m in ms]),
                "frames": st["frames"][:, :n].cpu(),
                "action": st["action"][:, :n].cpu(),
                "reward": st["reward"][:, :n].cpu(),
                "terminated": st["terminated"][:, :n].cpu(),
                "ep_start": torch.from_numpy(st["ep_start"][:, :n].copy()),
                "valid": torch.from_numpy(st["valid"][:, :n].copy()),
            },
            batch_size=[],
        )

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; members, capacity and frame shape must match."""
        for name in ("members", "capacity"):
            saved, mine = int(td[name]), getattr(self, name)
            if saved != mine:
                raise ValueError(
                    f"Checkpointed population pixel replay has {name}={saved} but this buffer has {mine}; "
                    f"create the buffer with {name}={saved}."
                )
        frames = td["frames"]
        n = frames.shape[1]
        if n > 0 and tuple(frames.shape[2:]) != self.frame_shape:
            raise ValueError(f"Checkpointed frames have shape {tuple(frames.shape[2:])}, this buffer stores {self.frame_shape}.")
        st = self._storage
        for name in ("frames", "action", "reward", "terminated"):
            st[name][:, :n] = td[name].to(self.device)
        st["ep_start"][:, :n] = td["ep_start"].numpy()
        st["ep_start_t"][:, :n] = td["ep_start"].to(self.device)
        st["valid"][:] = False
        st["valid"][:, :n] = td["valid"].numpy()
        st["valid_t"].copy_(torch.from_numpy(st["valid"]))
        for k, m in enumerate(self._members):
            m._written = int(td["written"][k])
            m._episode_open = bool(td["episode_open"][k])
            m._cur_ep_start = int(td["cur_ep_start"][k])
            m._num_valid = int(st["valid"][k].sum())
