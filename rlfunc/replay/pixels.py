"""Pixel replay: every frame stored once, stacks and n-step targets built at sample time.

DrQ-v2's official replay (facebookresearch/drqv2 ``replay_buffer.py``) stores
each episode's *stacked* observations (3 frames per step) and samples a
uniformly random episode, then a start ``idx`` with a full n-step window
inside it::

    obs = ep.obs[idx - 1]; action = ep.action[idx]; next_obs = ep.obs[idx + n - 1]
    reward = sum_i gamma^i r[idx + i];  discount = gamma^n * prod_i env_discount[idx + i]

:class:`PixelReplay` gives the same samples while storing every RGB frame
only once (uint8, ``[C, H, W]`` per slot), so memory per transition is about
one frame (``C * H * W`` bytes plus ~20 bytes of action, reward and flags):

* an episode of ``T`` steps occupies ``T + 1`` consecutive slots of a ring
  (frames ``o_0 .. o_T``); slot ``s`` also holds the action, reward and
  ``terminated`` flag of the step taken from ``o_t``;
* a frame stack is assembled at sample time: the stack of step ``t`` is
  frames ``max(t - k, 0)`` for ``k = S - 1 .. 0`` (oldest first), which
  repeats the first frame at the start of an episode exactly as the official
  ``FrameStackWrapper`` does (it fills its deque with the reset frame);
* an n-step window never crosses an episode end: a start ``t`` is sampled
  only when ``o_{t+n}`` is in the same episode, or when the episode
  *terminated* inside the window (then the window stops there and
  ``discount = 0``); after a time-limit truncation the last ``n - 1`` steps
  are not starts (the official rule: ``idx`` stops ``n`` before the end);
* starts are drawn uniformly over all valid starts (rejection sampling on
  the device generator). The official code samples a uniform *episode*, then
  a uniform step; for equal-length episodes (DeepMind Control: 500 agent
  steps) this is the same distribution. The official code samples only
  episodes that have finished (its storage writes an episode to disk at its
  end); here a running episode's complete windows are sampled too.

One env only (``add`` takes one step at a time); the ring overwrites the
oldest frames, and a start whose frame stack would reach an overwritten frame
is dropped from the valid set.
"""

from __future__ import annotations

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity

__all__ = ["PixelReplay"]


class PixelReplay:
    """Ring of single frames with episode bookkeeping (see module doc).

    ``capacity`` counts frames (slots); an episode of ``T`` steps uses
    ``T + 1``. ``frame_shape`` is one frame's ``(C, H, W)``; observations
    given to :meth:`add` are stacks of ``frame_stack`` frames on the channel
    axis (``[S * C, H, W]``), of which only the newest frame is stored.
    """

    def __init__(
        self,
        capacity: int,
        obs_shape: tuple[int, int, int],
        action_dim: int,
        *,
        frame_stack: int = 3,
        nstep: int = 3,
        gamma: float = 0.99,
        device: torch.device | str = "cpu",
    ) -> None:
        capacity = check_capacity(type(self).__name__, capacity, minimum=2, unit=" frames")
        nstep = check_capacity(type(self).__name__, nstep, "nstep")
        frame_stack = check_capacity(type(self).__name__, frame_stack, "frame_stack")
        obs_shape = tuple(int(s) for s in obs_shape)
        if len(obs_shape) != 3 or obs_shape[0] % frame_stack != 0:
            raise ValueError(
                f"PixelReplay needs stacked image observations [S * C, H, W] with S = frame_stack = {frame_stack}, "
                f"got shape {obs_shape}."
            )
        self.capacity = int(capacity)
        self.obs_shape = obs_shape
        self.frame_stack = int(frame_stack)
        self.frame_shape = (obs_shape[0] // frame_stack, obs_shape[1], obs_shape[2])
        self.action_dim = int(action_dim)
        self.nstep = int(nstep)
        self.gamma = float(gamma)
        self.device = torch.device(device)
        self._bind(self._new_storage())
        self._num_valid = 0
        self._written = 0  # frames ever written (absolute index of the next slot)
        self._episode_open = False  # the last written frame ends a step that has not been followed yet
        self._cur_ep_start = 0
        self._discounts = torch.tensor([self.gamma**i for i in range(self.nstep)], device=self.device)

    def _new_storage(self, lead: tuple[int, ...] = ()) -> dict:
        """Storage tensors and bookkeeping arrays with leading dims ``lead`` (``()`` here; a
        population's ``(P,)``, see :mod:`rlfunc.replay.population_pixels`)."""
        cap, dev = (*lead, self.capacity), self.device
        return {
            # empty, not zeros: pages are committed only as frames are written (a 1M-frame ring is ~21 GB)
            "frames": torch.empty((*cap, *self.frame_shape), dtype=torch.uint8, device=dev),
            "action": torch.zeros((*cap, self.action_dim), dtype=torch.float32, device=dev),
            "reward": torch.zeros(cap, dtype=torch.float32, device=dev),
            "terminated": torch.zeros(cap, dtype=torch.bool, device=dev),
            # Host-side bookkeeping (absolute slot numbers, never wrapped).
            "ep_start": np.zeros(cap, dtype=np.int64),  # absolute index of the slot's episode's first frame
            "valid": np.zeros(cap, dtype=bool),  # slot may start an n-step window
            "ep_start_t": torch.zeros(cap, dtype=torch.int64, device=dev),  # device copy (no host sync)
            "valid_t": torch.zeros(cap, dtype=torch.bool, device=dev),
        }

    def _bind(self, st: dict) -> None:
        """Use ``st`` (from :meth:`_new_storage`, or row views of a population's) as this buffer's storage."""
        self.frames, self.action, self.reward, self.terminated = st["frames"], st["action"], st["reward"], st["terminated"]
        self.ep_start, self.valid = st["ep_start"], st["valid"]
        self._ep_start_t, self._valid_t = st["ep_start_t"], st["valid_t"]

    # -- sizes ------------------------------------------------------------------
    def __len__(self) -> int:
        """Number of valid n-step starts (what :meth:`sample` draws from)."""
        return self._num_valid

    @property
    def frames_stored(self) -> int:
        return min(self._written, self.capacity)

    def nbytes(self) -> int:
        """Bytes of all storage tensors and bookkeeping arrays."""
        tensors = (self.frames, self.action, self.reward, self.terminated, self._valid_t, self._ep_start_t)
        return sum(t.numel() * t.element_size() for t in tensors) + self.ep_start.nbytes + self.valid.nbytes

    # -- writing ------------------------------------------------------------------
    def _newest_frame(self, obs) -> torch.Tensor:
        obs = torch.as_tensor(np.asarray(obs))
        if tuple(obs.shape) != self.obs_shape:
            raise ValueError(f"PixelReplay.add: observation shape {tuple(obs.shape)}, expected {self.obs_shape}.")
        if obs.dtype != torch.uint8:
            raise ValueError(f"PixelReplay stores uint8 frames, got observations of dtype {obs.dtype}.")
        return obs[-self.frame_shape[0] :]

    def _set_valid(self, g: int, value: bool) -> None:
        s = g % self.capacity
        if self.valid[s] != value:
            self.valid[s] = value
            self._valid_t[s] = value
            self._num_valid += 1 if value else -1

    def _stack_live(self, g: int) -> bool:
        """Every frame of the stack of start ``g`` (same episode) is still in the ring."""
        oldest = max(g - (self.frame_stack - 1), self._cur_ep_start)
        return oldest >= self._written - self.capacity

    def _write_frame(self, frame: torch.Tensor, ep_start: int) -> int:
        g = self._written
        s = g % self.capacity
        if g >= self.capacity:
            # Overwriting absolute slot h = g - capacity: starts whose stack reaches it die.
            h = g - self.capacity
            for j in range(self.frame_stack):
                hj = h + j
                if hj < g and self.ep_start[hj % self.capacity] <= h:
                    self._set_valid(hj, False)
        self._set_valid(g, False)
        self.frames[s] = frame.to(self.device)
        self.ep_start[s] = ep_start
        self._ep_start_t[s] = ep_start
        self.reward[s] = 0.0
        self.terminated[s] = False
        self._written += 1
        return g

    def add(self, obs, action, reward: float, next_obs, terminated: bool, truncated: bool) -> None:
        """Store one step ``(obs, action, reward, next_obs)`` of the (single) env.

        A new episode starts at the first call and after every call with
        ``terminated`` or ``truncated``; its first ``obs`` is written then.
        """
        if not self._episode_open:
            self._cur_ep_start = self._written
            self._write_frame(self._newest_frame(obs), self._cur_ep_start)
            self._episode_open = True
        g = self._written - 1  # slot of obs o_t
        s = g % self.capacity
        self.action[s] = torch.as_tensor(np.asarray(action, dtype=np.float32), device=self.device).reshape(-1)
        self.reward[s] = float(reward)
        self.terminated[s] = bool(terminated)
        self._write_frame(self._newest_frame(next_obs), self._cur_ep_start)
        # o_{t+1} is now written: the start t + 1 - n has a full window.
        start = g + 1 - self.nstep
        if start >= self._cur_ep_start and self._stack_live(start):
            self._set_valid(start, True)
        if terminated:
            # Windows cut short by the termination (discount 0 after it).
            for k in range(max(start + 1, self._cur_ep_start), g + 1):
                if self._stack_live(k):
                    self._set_valid(k, True)
        if terminated or truncated:
            self._episode_open = False

    def flush(self) -> None:
        """Close the running episode (as if truncated): the next ``add`` starts a new one."""
        self._episode_open = False

    # -- sampling -------------------------------------------------------------------
    def sample_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """Absolute start indices ``[B]`` (int64) drawn uniformly over valid starts."""
        if self._num_valid == 0:
            raise RuntimeError(
                "PixelReplay has no complete n-step window yet; add more steps before sampling "
                f"(n = {self.nstep})."
            )
        lo = max(0, self._written - self.capacity)
        span = self._written - lo
        idx = torch.empty(batch_size, dtype=torch.int64, device=self.device)
        todo = torch.ones(batch_size, dtype=torch.bool, device=self.device)
        for _ in range(10_000):
            cand = torch.randint(span, (batch_size,), generator=generator, device=self.device) + lo
            ok = self._valid_t[cand % self.capacity] & todo
            idx = torch.where(ok, cand, idx)
            todo = todo & ~ok
            if not bool(todo.any()):
                return idx
        raise RuntimeError("PixelReplay rejection sampling did not finish; too few valid starts.")

    def _stack(self, st: dict, g: torch.Tensor, base) -> torch.Tensor:
        """Frame stacks ``[B, S * C, H, W]`` of absolute slots ``g [B]`` of the rings starting at
        row ``base`` (``[B]`` or 0) of the flat storage ``st`` (see :meth:`_gather_flat`)."""
        ep0 = st["ep_start_t"][base + g % self.capacity]
        back = torch.arange(self.frame_stack - 1, -1, -1, device=self.device)  # S-1 .. 0, oldest first
        slots = torch.maximum(g.unsqueeze(1) - back.unsqueeze(0), ep0.unsqueeze(1)) % self.capacity  # [B, S]
        if not isinstance(base, int):
            slots = slots + base.unsqueeze(1)
        # index_select, not frames[slots]: ~5x faster for uint8 images on CPU
        frames = st["frames"].index_select(0, slots.reshape(-1))  # [B * S, C, H, W]
        b = g.shape[0]
        return frames.reshape(b, self.frame_stack * self.frame_shape[0], *self.frame_shape[1:])

    def gather(self, g: torch.Tensor) -> TensorDict:
        """The batch for absolute start slots ``g [B]`` (see :meth:`sample`)."""
        st = {"frames": self.frames, "action": self.action, "reward": self.reward, "terminated": self.terminated}
        return self._gather_flat(dict(st, ep_start_t=self._ep_start_t), g, 0)

    def _gather_flat(self, st: dict, g: torch.Tensor, base) -> TensorDict:
        """The batch for absolute start slots ``g [B]``, slot ``s`` of row ``i`` read at ``base[i] + s``
        of the flat storage tensors ``st`` (this buffer's own with ``base = 0``; a population's
        ``[P * capacity, ...]`` with ``base = k * capacity`` for member ``k``'s rows)."""
        n = self.nstep
        steps = g.unsqueeze(1) + torch.arange(n, device=self.device).unsqueeze(0)  # [B, n]
        ring = steps % self.capacity
        if not isinstance(base, int):
            ring = ring + base.unsqueeze(1)
        term = st["terminated"][ring].float()  # [B, n]
        # alive[i]: no termination among steps 0 .. i-1 of the window.
        alive = torch.cumprod(torch.cat([torch.ones_like(term[:, :1]), 1.0 - term[:, :-1]], dim=1), dim=1)
        reward = (st["reward"][ring] * alive * self._discounts).sum(1)
        discount = self.gamma**n * alive[:, -1] * (1.0 - term[:, -1])
        length = alive.sum(1).to(torch.int64)  # steps up to and including a termination
        next_g = g + length
        return TensorDict(
            {
                "obs": self._stack(st, g, base),
                "action": st["action"][base + g % self.capacity],
                "reward": reward,
                "discount": discount,
                "next_obs": self._stack(st, next_g, base),
            },
            batch_size=[g.shape[0]],
            device=self.device,
        )

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """``batch_size`` transitions: ``obs``/``next_obs`` uint8 ``[B, S*C, H, W]``,
        ``action [B, A]``, ``reward [B]`` (``sum_i gamma^i r_{t+i}``, stopped at a
        termination), ``discount [B]`` (``gamma^n``, 0 if the window terminated)."""
        return self.gather(self.sample_indices(batch_size, generator))

    # -- checkpoints ---------------------------------------------------------------
    def state_dict(self) -> TensorDict:
        """Tensors that restore the buffer exactly (frames of the filled part only)."""
        n = self.frames_stored
        return TensorDict(
            {
                "capacity": torch.tensor(self.capacity),
                "written": torch.tensor(self._written),
                "episode_open": torch.tensor(self._episode_open),
                "cur_ep_start": torch.tensor(self._cur_ep_start),
                "frames": self.frames[:n].cpu(),
                "action": self.action[:n].cpu(),
                "reward": self.reward[:n].cpu(),
                "terminated": self.terminated[:n].cpu(),
                "ep_start": torch.from_numpy(self.ep_start[:n].copy()),
                "valid": torch.from_numpy(self.valid[:n].copy()),
            },
            batch_size=[],
        )

    def load_state_dict(self, td: TensorDict) -> None:
        capacity = int(td["capacity"])
        if capacity != self.capacity:
            raise ValueError(
                f"Checkpointed pixel replay has capacity {capacity} but this buffer has {self.capacity}; "
                "use the run's original replay_size."
            )
        if tuple(td["frames"].shape[1:]) != self.frame_shape and td["frames"].shape[0] > 0:
            raise ValueError(
                f"Checkpointed frames have shape {tuple(td['frames'].shape[1:])}, this buffer stores {self.frame_shape}."
            )
        n = td["frames"].shape[0]
        self._written = int(td["written"])
        self._episode_open = bool(td["episode_open"])
        self._cur_ep_start = int(td["cur_ep_start"])
        self.frames[:n] = td["frames"].to(self.device)
        self.action[:n] = td["action"].to(self.device)
        self.reward[:n] = td["reward"].to(self.device)
        self.terminated[:n] = td["terminated"].to(self.device)
        self.ep_start[:n] = td["ep_start"].numpy()
        self._ep_start_t[:n] = td["ep_start"].to(self.device)
        self.valid[:] = False
        self.valid[:n] = td["valid"].numpy()
        self._valid_t = torch.from_numpy(self.valid.copy()).to(self.device)
        self._num_valid = int(self.valid.sum())
