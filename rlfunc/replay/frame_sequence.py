"""Sequence replays that store each observation frame once (pixel DRQN and R2D2).

:class:`rlfunc.replay.sequence.SequenceReplay` copies every step into each
window that covers it, with both ``obs`` and ``next_obs``: with R2D2's
overlapping windows (period 40 of 120 steps) an Atari frame would be stored
six times, with DRQN's windows starting at every step (period 1, 10 steps)
twenty times. :class:`FrameSequenceReplay` (uniform) and
:class:`PrioritizedFrameSequenceReplay` (R2D2's priorities) keep the same
windows, sampled the same way -- the same storage rows, the same random draws,
the same batches, while no window is evicted (below) -- but hold the observations in one ring of frames, as
DrQ-v2's :class:`rlfunc.replay.pixels.PixelReplay` does for frame stacks:

* an episode of ``L`` steps writes ``L + 1`` frames (``o_0 .. o_L``; the last
  is the true final observation, so a truncated step still bootstraps);
* the windows store, per step, the absolute numbers of its ``obs`` and
  ``next_obs`` frames (int64) instead of the frames; :meth:`sample` gathers
  the frames (zeros on padded steps, as the copying replays store there);
* frames keep their dtype (uint8 for Atari; the learners give MinAtar's
  boolean planes as uint8): an 84x84 grayscale frame is 7,056 bytes, so a
  replay of 1M frames takes about 7.1 GB plus 16 bytes of frame numbers per
  step per window (:func:`frame_replay_bytes` counts it all).

The ring holds ``frame_capacity`` frames, by default enough that no stored
or pending window ever reaches an overwritten frame. The oldest stored window
was written at most ``capacity * period / num_envs + sequence_length`` env steps
ago (each env writes a window at least every ``period`` steps once
``sequence_length`` steps in), its first frame at most ``sequence_length`` steps
before that; each env step writes one frame plus one per episode start, and
each episode writes at least one window, so
``capacity * (period + 1) + num_envs * (3 * sequence_length + period + 2)``
frames suffice -- where episodes write at most ``period + 1`` frames per window. An episode of
``L >= sequence_length`` steps writes ``L + 1`` frames and about ``1 + (L - sequence_length) / period``
windows, so that holds from about ``L = sequence_length * (period + 1) - period**2`` steps on
(R2D2's 120/40: 3,320; the MinAtar config's 30/10: 230; DRQN's 10/1: 19); an episode of
exactly ``sequence_length`` steps writes one window of ``sequence_length + 1`` frames. A run sets
the ring's size with ``train.frame_capacity``. When the ring would overwrite a frame a stored window reads (a smaller ring, or
many short episodes), both replays evict those windows instead of stopping the run:
:class:`PrioritizedFrameSequenceReplay` gives them priority 0, :class:`FrameSequenceReplay` leaves them
out of its uniform draws. An evicted window is never sampled again; its storage row is, once a new
window takes it. ``windows_evicted`` counts the evictions, ``windows_sampleable`` the stored windows
that can still be sampled (the learners' ``replay_windows``). A window still pending when the ring came
round to its first frames (a ring smaller than the default) is stored evicted, never read with newer
frames. While no stored window is evicted, :class:`FrameSequenceReplay` draws exactly as
:class:`~rlfunc.replay.sequence.SequenceReplay` does (the same random draws, the same batches); with
evicted windows stored it draws uniformly among the others. It refuses in one sentence, naming
``train.frame_capacity``, only where evicting would leave no window to sample once the same add has
stored its own windows: both decide so at the write, on the host, so neither ever holds only evicted
windows (the prioritized one's accelerator ``sample`` does not check for an all-zero sum-tree).

Distributed actors (:mod:`rlfunc.scale.distributed`) cut windows in a small replay of this
kind of their own (the *outbox*, ring :func:`outbox_frame_capacity`) with the same :meth:`add`,
and send each chunk as the frames written since the previous chunk
(:meth:`~_FrameStore.drain_frames`, each frame once) plus the windows
(:meth:`~rlfunc.replay.sequence.SequenceReplay.drain`), which hold the outbox's frame numbers. An outbox
never hands out an evicted window: :meth:`FrameSequenceReplay.drain` refuses while it holds one (its ring,
sized for a chunk, was drained too rarely), as the outbox refused the write before evictions.
The learner's replay takes a chunk with :meth:`~_FrameStore.add_chunk`: it appends the frames to
its ring and renumbers the windows' frames into it (a window may read frames of an earlier
chunk of the same actor; the frames of different actors interleave in the ring). Its ring
counts every actor's envs (``frame_envs``) in :func:`default_frame_capacity`.

Frame-stacked observations (``frame_stack = k > 1``: gymnasium's ``FrameStackObservation``, e.g.
R2D2's 4 x 84 x 84 Atari stacks, whose consecutive observations share ``k - 1`` planes) are stored as
DrQ-v2's :class:`~rlfunc.replay.pixels.PixelReplay` stores its stacks: only the newest plane of
each observation (``obs[-1]``, 7,056 bytes for Atari instead of 28,224), and the stack is rebuilt
when frames are gathered, oldest plane first, the episode's first frame repeated at its start as
``FrameStackObservation``'s default ``padding_type="reset"`` pads. PixelReplay's ring holds one env's
episodes in consecutive slots (a stack is the slots ``max(t - j, episode start)``); here the envs'
frames interleave in the ring, so each frame keeps the number of the frame before it in its episode
(``prev``, itself at an episode start; 8 bytes per frame) and a stack is that chain followed
``k - 1`` times. :meth:`add` checks once per step that each new observation's older planes are the
stored stack of the env's previous observation (and that an episode's first observation is its
newest plane repeated), and refuses in one sentence where they are not (not a plain frame stack,
another padding): store whole observations with ``frame_stack=1`` there. A stored window's oldest
frame is the oldest plane of its first observation's stack, which the ring's overwrite check and
:func:`default_frame_capacity` (``k - 1`` more steps per env) count. A distributed outbox's
:meth:`~_FrameStore.drain_frames` then sends the new planes with their ``prev`` numbers, which
:meth:`~_FrameStore.add_chunk` renumbers like the windows' frame numbers.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay, _as_td

__all__ = [
    "FrameSequenceReplay",
    "PrioritizedFrameSequenceReplay",
    "default_frame_capacity",
    "frame_replay_bytes",
    "outbox_frame_capacity",
]

_STEP_BYTES = 8 + 4 + 1 + 1 + 1 + 2 * 8  # action int64, reward f32, terminated, truncated, mask, two frame numbers
"""Bytes per step of a window besides the frames (the learners' step keys and the storage's mask)."""


_LINK_BYTES = 8
"""Bytes per stored frame of a frame-stacked replay besides the plane: the number of the frame before it."""


_EVICTED = np.iinfo(np.int64).max
"""The first frame (``_first_frame``) of an evicted stored window: no frame of it is needed any more."""


def default_frame_capacity(capacity: int, sequence_length: int, num_envs: int, period: int, frame_stack: int = 1) -> int:
    """Frames the ring needs so that no stored or pending window reads an overwritten frame (module doc);
    a stack of ``frame_stack`` planes reaches ``frame_stack - 1`` steps (up to two frames each) further back."""
    reach = 3 * int(sequence_length) + int(period) + 2 + 2 * (int(frame_stack) - 1)
    return int(capacity) * (int(period) + 1) + int(num_envs) * reach


def outbox_frame_capacity(chunk_steps: int, sequence_length: int, num_envs: int, frame_stack: int = 1) -> int:
    """Frames a distributed actor's outbox ring needs between two drains of at most ``chunk_steps``
    env steps: at most two per env step (a step's next frame, and its first frame at an episode
    start), plus the frames the windows finished in the chunk read from before it (each starts at
    most ``sequence_length`` steps of its env before it is written, its first stack ``frame_stack - 1``
    steps before that)."""
    return 2 * (int(chunk_steps) + int(num_envs) * (int(sequence_length) + int(frame_stack)))


def frame_replay_bytes(
    capacity: int,
    sequence_length: int,
    num_envs: int,
    period: int,
    frame_bytes: int,
    *,
    frame_capacity: int | None = None,
    frame_stack: int = 1,
    window_extra: int = 0,
    pending_extra: int = 0,
) -> int:
    """Bytes a frame sequence replay allocates: the frame ring (``frame_bytes`` per stored frame: a
    whole observation, or one plane of a ``frame_stack`` > 1 stack plus its :data:`_LINK_BYTES`), the
    windows' per-step entries (:data:`_STEP_BYTES`, frame numbers included), each window's env and start
    (16), each pending step, ``window_extra`` per window (a stored carry, the sum-tree's 16) and
    ``pending_extra`` per pending step (the carry before it, when carries are stored)."""
    if frame_capacity is None:
        frame_capacity = default_frame_capacity(capacity, sequence_length, num_envs, period, frame_stack)
    per_frame = int(frame_bytes) + (_LINK_BYTES if int(frame_stack) > 1 else 0)
    windows = capacity * (sequence_length * _STEP_BYTES + 16 + window_extra)
    pending = num_envs * sequence_length * (_STEP_BYTES - 1 + pending_extra)  # no mask there
    return int(frame_capacity) * per_frame + windows + pending


class _FrameStore:
    """The frame ring and the ``obs``/``next_obs`` <-> frame-number translation (mixed into the replays)."""

    def _init_frames(self, frame_capacity: int | None, frame_envs: int | None = None, frame_stack: int = 1) -> None:
        # Envs whose frames share the ring: num_envs, or every actor's envs for a distributed learner.
        where = type(self).__name__
        self.frame_envs = self.num_envs if frame_envs is None else check_capacity(where, frame_envs, "frame_envs")
        self.frame_stack = check_capacity(where, frame_stack, "frame_stack")
        cap = default_frame_capacity(self.capacity, self.sequence_length, self.frame_envs, self.period, self.frame_stack)
        self.frame_capacity = cap if frame_capacity is None else check_capacity(type(self).__name__, frame_capacity, "frame_capacity")
        if self.frame_capacity < self.sequence_length + 1:
            raise ValueError(
                f"frame_capacity must hold at least one window's sequence_length + 1 = {self.sequence_length + 1} "
                f"frames, got {self.frame_capacity}."
            )
        self._frames: torch.Tensor | None = None  # [frame_capacity, *frame shape] (one plane each when stacked)
        # frame_stack > 1: each frame's previous frame in its episode (itself at an episode start)
        self._prev: torch.Tensor | None = None  # [frame_capacity] int64, absolute numbers
        self._frames_written = 0  # absolute number of the next frame
        self._last_frame = np.zeros(self.num_envs, dtype=np.int64)  # each env's latest observation frame
        self._first_frame = np.full(self.capacity, -1, dtype=np.int64)  # each stored window's first frame (host)
        self._frames_drained = 0  # number of the first frame drain_frames has not handed out
        self._sources: dict = {}  # add_chunk: source -> (its first frames, ours, its ends) per chunk

    @property
    def frames(self) -> torch.Tensor | None:
        """The frame ring ``[frame_capacity, *frame shape]`` (``None`` before the first add)."""
        return self._frames

    @property
    def frames_written(self) -> int:
        return self._frames_written

    def nbytes(self) -> int:
        """Bytes of every tensor this replay holds (frames, windows, pending steps, carries, priorities)."""
        total = 0 if self._frames is None else self._frames.numel() * self._frames.element_size()
        if self._prev is not None:
            total += self._prev.numel() * self._prev.element_size()
        for td in (self._storage, self._pending, self._info, self._carry, self._pending_carry):
            if td is not None:
                total += sum(v.numel() * v.element_size() for v in td.values(True, True))
        tree = getattr(self, "_tree", None)
        if tree is not None:
            total += self.capacity * 16  # the sum-tree's leaves and in-block prefix sums (float64)
        return total

    def add(
        self,
        step: TensorDict,
        carry: TensorDict | Mapping | None = None,
        env_ids: Sequence[int] | torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """:meth:`SequenceReplay.add` with ``obs`` and ``next_obs`` (required) written to the frame ring."""
        if not isinstance(step, TensorDict) or step.batch_dims < 1:
            raise ValueError("add expects a TensorDict with one row per env (batch_size [n]).")
        missing = [k for k in ("obs", "next_obs") if k not in step.keys()]
        if missing:
            raise KeyError(f"A frame sequence replay needs keys ['obs', 'next_obs'] to store frames; missing {missing}.")
        n = step.batch_size[0]
        if n == 0:
            return
        if env_ids is None:
            envs = np.arange(n) if n == self.num_envs else None
        else:
            raw = env_ids.cpu() if isinstance(env_ids, torch.Tensor) else env_ids
            envs = np.asarray(raw, dtype=np.int64).reshape(-1)
        if envs is None or envs.shape[0] != n or envs.min() < 0 or envs.max() >= self.num_envs:
            super().add(step.exclude("obs", "next_obs"), carry, env_ids)  # raises its sentence
            return
        obs, next_obs = step["obs"], step["next_obs"]
        starts = self._ep_len[envs] == 0  # these envs' obs is an episode's first frame: write it too
        k = int(starts.sum())
        if self.frame_stack > 1:
            obs, next_obs = self._check_stacks(obs, next_obs, starts, envs)
        new = torch.cat([obs[torch.as_tensor(starts)], next_obs], dim=0)
        first = self._frames_written
        numbers = first + np.arange(new.shape[0], dtype=np.int64)
        obs_frame = self._last_frame[envs].copy()
        obs_frame[starts] = numbers[:k]
        next_frame = numbers[k:]
        # each frame's previous one in its episode: an episode's first frame is its own (the padding)
        prev = np.concatenate([numbers[:k], obs_frame]) if self.frame_stack > 1 else None

        def incoming() -> np.ndarray:  # the windows this add stores (host; asked only where evicting would empty it)
            done = (step["terminated"].bool() | step["truncated"].bool()).reshape(n).cpu().numpy()
            now = self._ep_len[envs]  # each env's step index of this add
            _, env, start, _ = self._emissions(envs, now + 1, done)
            if not env.size:
                return np.zeros(0, dtype=bool)
            this = np.full(self.num_envs, -1, dtype=np.int64)
            this[envs] = obs_frame
            at_now = start == self._ep_len[env]  # a window starting at this step reads this add's obs frame
            first_num = this[env]
            if not at_now.all():
                e, pos = env[~at_now], start[~at_now] % self.sequence_length
                got = self._pending["obs_frame"][torch.as_tensor(e, device=self.device), torch.as_tensor(pos, device=self.device)]
                first_num[~at_now] = got.cpu().numpy()
            return self._oldest_before_write(first_num, first, prev) >= first + new.shape[0] - self.frame_capacity

        incoming.bound = n  # an add stores at most one window per env
        rows = step.exclude("obs", "next_obs")
        rows["obs_frame"] = torch.as_tensor(obs_frame, device=rows.device)
        rows["next_frame"] = torch.as_tensor(next_frame, device=rows.device)
        if self._pending is not None:  # rows (or a carry) SequenceReplay.add refuses: refused before their frames enter the ring
            self._check_layout(rows, None if carry is None else _as_td(carry, n, "carry"))
        self._write_frames(new, prev, incoming)
        self._last_frame[envs] = next_frame
        super().add(rows, carry, env_ids)

    def _check_stacks(self, obs: torch.Tensor, next_obs: torch.Tensor, starts: np.ndarray, envs: np.ndarray):
        """The newest planes ``obs[:, -1]`` and ``next_obs[:, -1]`` of frame-stacked observations, after
        checking that they are a plain frame stack of ``frame_stack`` padded by the reset frame: an
        episode's first observation is its newest plane repeated, and each ``next_obs``'s older planes are
        the stored stack of the env's observation before it (one comparison per step)."""
        S = self.frame_stack
        if obs.dim() < 2 or obs.shape[1] != S or next_obs.shape != obs.shape:
            raise ValueError(
                f"A replay of frame stacks of {S} takes observations [n, {S}, ...]; got obs {tuple(obs.shape)} and "
                f"next_obs {tuple(next_obs.shape)}."
            )
        obs, next_obs = obs.to(self.device), next_obs.to(self.device)
        start_t = torch.as_tensor(starts, device=self.device)
        before = obs  # the observation each next_obs follows: its own at an episode start, else the stored one
        if not starts.all():
            if self._frames is None:
                raise RuntimeError("add got a step that continues an episode before any episode started.")
            stored = self._frames_at(torch.as_tensor(self._last_frame[envs], device=self.device),
                                     torch.ones(envs.shape[0], dtype=torch.bool, device=self.device))
            before = torch.where(start_t.reshape(-1, *([1] * (obs.dim() - 1))), obs, stored)
        padded = (obs[:, :-1] == obs[:, -1:]).flatten(1).all(1) | ~start_t
        if not (bool(padded.all()) and torch.equal(next_obs[:, :-1], before[:, 1:])):
            raise ValueError(
                f"These observations are not a plain stack of {S} frames padded with the reset frame (gymnasium's "
                "FrameStackObservation with padding_type='reset'): an observation's older planes differ from the "
                "newer planes of the env's previous observation, or an episode's first observation is not its "
                "reset frame repeated, so store whole observations with frame_stack=1."
            )
        return obs[:, -1], next_obs[:, -1]

    def _write_frames(self, new: torch.Tensor, prev: np.ndarray | torch.Tensor | None = None, incoming=None) -> int:
        """Append frames ``[k, *frame shape]`` to the ring (allocated at the first call), with each one's
        previous frame ``prev [k]`` (absolute numbers; frame-stacked replays); returns the absolute number
        of the first. Before writing, evicts the stored windows that read a frame it overwrites
        (:meth:`_check_overwrite`; ``incoming``: the windows the same add then stores, there)."""
        if self._frames is None:
            self._frames = torch.empty(  # pages are committed as frames are written
                (self.frame_capacity, *new.shape[1:]), dtype=new.dtype, device=self.device
            )
            if self.frame_stack > 1:
                self._prev = torch.zeros(self.frame_capacity, dtype=torch.int64, device=self.device)
        if tuple(new.shape[1:]) != tuple(self._frames.shape[1:]) or new.dtype != self._frames.dtype:
            raise ValueError(
                f"Observations of shape {tuple(new.shape[1:])} and dtype {new.dtype} do not match the stored frames "
                f"({tuple(self._frames.shape[1:])}, {self._frames.dtype})."
            )
        k = new.shape[0]
        first = self._frames_written
        self._check_overwrite(first + k, incoming)
        slots = torch.arange(first, first + k, device=self.device) % self.frame_capacity
        self._frames.index_copy_(0, slots, new.to(self.device))
        if self._prev is not None:
            self._prev.index_copy_(0, slots, torch.as_tensor(prev, dtype=torch.int64).to(self.device))
        self._frames_written += k
        return first

    def _too_small(self) -> str:
        T, P, N, S = self.sequence_length, self.period, self.frame_envs, self.frame_stack
        need = default_frame_capacity(self.capacity, T, N, P, S)
        if self.frame_capacity < need:
            return f"use a frame_capacity of at least {need} (train.frame_capacity)."
        # the default assumes period + 1 frames per window; an episode of exactly T steps writes T + 1
        short = T * (P + 1) - P * P
        return (f"episodes shorter than about sequence_length x (period + 1) - period^2 = {short} steps write more than "
                f"period + 1 frames per window (up to {T + 1}), so use a frame_capacity of at least "
                f"{default_frame_capacity(self.capacity, T, N, T, S)} (train.frame_capacity).")

    def _oldest_before_write(self, first_num: np.ndarray, first: int, prev: np.ndarray | None) -> np.ndarray:
        """:meth:`_oldest_frame` of frames ``first_num`` (absolute) before the frames from number ``first`` on
        (with their ``prev``, frame-stacked replays) are in the ring: a window that reads them keeps its
        frames once ``m`` are written where this is at least ``first + m - frame_capacity``. Host
        bookkeeping plus, for stacks, a gather of the ring's ``prev`` (at a write, never at a sample)."""
        low, cur = first_num.copy(), first_num.copy()
        for _ in range(self.frame_stack - 1):
            nxt = cur.copy()  # a -1 (a frame never received) stays -1, as _stack_numbers keeps it
            new = cur >= first
            nxt[new] = np.asarray(prev, dtype=np.int64)[cur[new] - first]
            old = (cur >= 0) & ~new
            if old.any():
                nxt[old] = self._prev[torch.as_tensor(cur[old] % self.frame_capacity, device=self.device)].cpu().numpy()
            cur = nxt
            low = np.minimum(low, cur)
        return low

    def _check_overwrite(self, end: int, incoming=None) -> None:
        """Before writing frames up to ``end`` (absolute): stored windows that read a frame it would
        overwrite are evicted (:meth:`_evict`), or refused in one sentence, before anything is written,
        where no window would be left to sample once the same add has stored its windows
        (:meth:`_none_left`; ``incoming()``: whether each of them keeps its frames)."""
        oldest_kept = end - self.frame_capacity
        if oldest_kept <= 0 or self._size == 0:
            return
        # the stored rows: the last ``size`` before the cursor (a drained outbox holds fewer than capacity)
        ff, C, start = self._first_frame, self.capacity, (self._cursor - self._size) % self.capacity
        if self._size == C:
            live_min = ff.min()
        elif start + self._size <= C:
            live_min = ff[start : start + self._size].min()
        else:
            live_min = min(ff[start:].min(), ff[: start + self._size - C].min())
        if live_min >= oldest_kept:
            return
        rows = (start + np.arange(self._size)) % C
        stale = rows[ff[rows] < oldest_kept]  # evicted rows (first frame _EVICTED) are never stale again
        if self._none_left(stale, oldest_kept, incoming):
            raise RuntimeError(
                f"The frame ring of {self.frame_capacity} frames would overwrite a frame a stored window reads; "
                + self._too_small()
            )
        self._evict(stale)
        ff[stale] = _EVICTED  # evicted: no frame of theirs is needed any more

    windows_evicted = 0
    """Windows evicted so far (also those whose rows new windows have taken since); kept by checkpoints."""

    @property
    def windows_sampleable(self) -> int:
        """Stored windows that can still be sampled: ``len(self)`` less those evicted (their frames were
        about to be overwritten) that are still stored (``windows_evicted`` counts every eviction, also
        of rows new windows have replaced since)."""
        if self._size == 0:
            return 0
        rows = (self._cursor - self._size + np.arange(self._size)) % self.capacity
        return int(self._size - np.count_nonzero(self._first_frame[rows] == _EVICTED))

    def _evict(self, rows: np.ndarray) -> None:
        """Never sample the stored windows of storage ``rows`` again (their frames are about to be
        overwritten), until a new window takes the row; the caller marks their first frame ``_EVICTED``.
        Counts them here; each replay takes them out of its own sampling (and calls this)."""
        self.windows_evicted += int(rows.shape[0])

    def _none_left(self, stale: np.ndarray, oldest_kept: int, incoming=None) -> bool:
        """Whether evicting the stored rows ``stale`` (those reading a frame older than ``oldest_kept``)
        would leave no window to sample once the same add has stored its windows (``incoming()``: one
        bool per window it stores, in storage order, True where it keeps its frames; they take the rows
        from the cursor on). Both replays refuse the write then, decided on the host before anything is
        written, so neither ever holds only evicted windows (the prioritized one would then draw from an
        all-zero sum-tree, which only its CPU :meth:`sample` checks)."""
        C, ff = self.capacity, self._first_frame
        rows = (self._cursor - self._size + np.arange(self._size)) % C
        alive = np.zeros(C, dtype=bool)
        alive[rows] = (ff[rows] >= oldest_kept) & (ff[rows] != _EVICTED)
        alive[stale] = False
        if incoming is None:
            return not alive.any()
        # an add stores at most one window per env; a chunk its windows
        bound = getattr(incoming, "bound", None)
        if bound is not None and int(alive.sum()) > min(bound, C):
            return False
        intact = np.asarray(incoming(), dtype=bool)[-C:]
        alive[(self._cursor + np.arange(intact.size)) % C] = False  # rows the new windows take
        return not alive.any() and not intact.any()

    def _none_left_after_store(self, k: int) -> bool:
        """Whether storing ``k`` evicted windows (every window of a :meth:`_store`) would leave none to
        sample, which refuses the store (both replays): the sampleable stored windows whose rows the
        ``k`` new ones take are lost too."""
        C = self.capacity
        rows = (self._cursor + np.arange(min(k, C))) % C
        taken = rows[(self._cursor - 1 - rows) % C < self._size]  # those that hold a stored window
        return self.windows_sampleable - int(np.count_nonzero(self._first_frame[taken] != _EVICTED)) <= 0

    def _store(self, windows: TensorDict, carry: TensorDict | None, info: TensorDict) -> torch.Tensor:
        """The parent's ``_store``, for windows whose frames the ring still holds. A window still pending
        while the ring came round (a ``frame_capacity`` below :func:`default_frame_capacity`) would read
        newer frames, another env's or episode's, in place of its own: such windows are stored evicted
        (never sampled), or refused before anything is stored where no window would be left to sample
        (:meth:`_none_left_after_store`)."""
        oldest = self._oldest_frame(windows["obs_frame"][0])
        stale = oldest < self._frames_written - self.frame_capacity
        if stale.size and stale.all() and self._none_left_after_store(stale.size):
            raise RuntimeError(
                f"The frame ring of {self.frame_capacity} frames has overwritten frames of {int(stale.sum())} "
                "window(s) before they were complete; " + self._too_small()
            )
        rows = super()._store(windows, carry, info)
        if stale.any():
            gone = rows.cpu().numpy()[stale]
            self._evict(gone)
            self._first_frame[gone] = _EVICTED  # evicted: no frame of theirs is needed any more
        return rows

    # ------------------------------------------------ chunks of a distributed actor
    def drain_frames(self) -> tuple[int, torch.Tensor | TensorDict]:
        """``(number of the first, frames [m, ...])``: the frames written since the last call, oldest
        first, each once (an actor's outbox; :meth:`add_chunk` takes them with the windows of
        :meth:`drain`). The ring must still hold them (:func:`outbox_frame_capacity`). A frame-stacked
        replay's frames are a TensorDict ``[m]`` of the planes (``frames``) and the number of each one's
        previous frame (``prev``, this replay's numbers)."""
        first, end = self._frames_drained, self._frames_written
        if end - first > self.frame_capacity:
            raise RuntimeError(
                f"{end - first} frames were written since the last drain_frames into a ring of {self.frame_capacity}; "
                "drain more often or raise the frame_capacity."
            )
        self._frames_drained = end
        if self._frames is None or end == first:
            shape = () if self._frames is None else tuple(self._frames.shape[1:])
            dtype = torch.uint8 if self._frames is None else self._frames.dtype
            frames, slots = torch.zeros((0, *shape), dtype=dtype), None
        else:
            slots = torch.arange(first, end, device=self.device) % self.frame_capacity
            frames = self._frames.index_select(0, slots).cpu()
        if self.frame_stack == 1:
            return first, frames
        prev = torch.zeros(0, dtype=torch.int64) if slots is None else self._prev.index_select(0, slots).cpu()
        return first, TensorDict({"frames": frames, "prev": prev}, batch_size=[frames.shape[0]])

    def with_frames(self, td: TensorDict) -> TensorDict:
        """``td`` (any batch shape, with ``obs_frame``, ``next_frame`` and ``mask``) with ``obs`` and
        ``next_obs`` gathered from the ring (zeros where ``mask`` is False) instead of the numbers."""
        out = td.clone(False)
        mask = td["mask"].to(self.device)
        out["obs"] = self._frames_at(td["obs_frame"].to(self.device), mask)
        out["next_obs"] = self._frames_at(td["next_frame"].to(self.device), mask)
        return out.exclude("obs_frame", "next_frame")

    def add_chunk(self, source, frames_from: int, frames: torch.Tensor, windows: TensorDict,
                  priorities: torch.Tensor | None = None) -> torch.Tensor:
        """Store one chunk of another frame replay (a distributed actor's outbox): its new ``frames``
        (:meth:`drain_frames`: ``frames_from`` is the outbox's number of the first) and ``windows``
        (:meth:`drain`; with ``priorities [k]`` for a prioritized replay). ``source`` names the outbox
        (e.g. ``(actor, pid)``); its frame numbers are renumbered into this ring, where a window may read
        frames an earlier chunk of the same source brought. A source whose numbers start again at 0 is
        a new outbox. Windows that read a frame this replay never got (a lost chunk) are left out;
        a window that reads a frame the ring has overwritten is refused in one sentence. Returns the
        storage rows of the windows stored."""
        frames_from, m = int(frames_from), int(frames.shape[0])
        stacked = isinstance(frames, TensorDict)
        if stacked != (self.frame_stack > 1):
            raise ValueError(
                f"This replay stores {'planes of frame stacks' if self.frame_stack > 1 else 'whole observations'} but the "
                f"chunk's frames are {'planes with prev numbers' if stacked else 'whole observations'}; build the actor's "
                f"outbox with the learner's frame_stack={self.frame_stack}."
            )
        none = np.zeros(0, dtype=np.int64)
        src, dst, ends = self._sources.get(source, (none, none, none))
        if frames_from == 0:  # a new outbox (a restarted actor) numbers from 0 again
            src, dst, ends = none, none, none
        if m:
            ours = self._frames_written
            src, dst, ends = np.append(src, frames_from), np.append(dst, ours), np.append(ends, frames_from + m)
            self._sources[source] = (src, dst, ends)
            prev = None
            if stacked:  # renumbered like the windows' numbers; a previous frame never received: -1
                found, mapped = self._renumber(frames["prev"].cpu().numpy(), src, dst, ends)
                prev = np.where(found, mapped, -1)
                frames = frames["frames"]

            def incoming() -> np.ndarray:  # the chunk's windows stored below (asked only where evicting would empty it)
                if windows.batch_size[0] == 0:
                    return np.zeros(0, dtype=bool)
                st = windows["steps"]
                mask, keep = st["mask"].cpu().numpy(), np.ones(windows.batch_size[0], dtype=bool)
                for key in ("obs_frame", "next_frame"):
                    got, mapped = self._renumber(st[key].cpu().numpy(), src, dst, ends)
                    got &= mask
                    keep &= (got | ~mask).all(axis=1)
                    if key == "obs_frame":
                        first_num = np.where(got[:, 0], mapped[:, 0], 0)
                low = self._oldest_before_write(first_num, ours, prev)
                if stacked:  # windows whose first stack reaches a frame never received are left out
                    keep &= low >= 0
                return (low >= ours + m - self.frame_capacity)[keep]

            incoming.bound = windows.batch_size[0]
            self._write_frames(frames, prev, incoming)
            self._forget_old_chunks()
        k = windows.batch_size[0]
        if k == 0:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        steps = windows["steps"].clone(False)
        mask = steps["mask"].cpu().numpy()
        keep = np.ones(k, dtype=bool)
        for key in ("obs_frame", "next_frame"):
            found, mapped = self._renumber(steps[key].cpu().numpy(), src, dst, ends)
            found &= mask
            keep &= (found | ~mask).all(axis=1)
            steps[key] = torch.as_tensor(np.where(found, mapped, 0), dtype=torch.int64)  # 0 on padding, as add
        if self.frame_stack > 1 and keep.any():  # the first stack's older planes came too
            first = self._stack_numbers(steps["obs_frame"][:, 0].to(self.device)).cpu().numpy()
            keep &= (first >= 0).all(axis=1)
        oldest = self._frames_written - self.frame_capacity
        if keep.any() and self._oldest_frame(steps["obs_frame"][torch.as_tensor(keep), 0]).min() < oldest:
            raise RuntimeError(
                f"A window reads a frame the ring of {self.frame_capacity} frames has already overwritten; "
                + self._too_small()
            )
        windows = windows.clone(False)
        windows["steps"] = steps
        if not keep.all():
            sel = torch.as_tensor(keep)
            windows = windows[sel]
            priorities = None if priorities is None else torch.as_tensor(priorities).reshape(-1)[sel]
        if priorities is None:
            return self.add_windows(windows)
        return self.add_windows(windows, priorities)

    def _forget_old_chunks(self) -> None:
        """Drop the chunk map entries (:meth:`add_chunk`) whose frames are more than a ring's length past
        overwritten, and sources left with none (a restarted actor's old outbox): else the map grows by
        one entry per chunk for the whole run. A window of a chunk still to come reads frames of its
        source's last few chunks; one reading a frame the ring has just overwritten still finds its entry
        (refused in one sentence, as before), and the margin of one more ring keeps that so."""
        horizon = self._frames_written - 2 * self.frame_capacity
        for source, (src, dst, ends) in list(self._sources.items()):
            if dst.size and dst[0] + (ends[0] - src[0]) <= horizon:  # entries are in the order written
                live = dst + (ends - src) > horizon
                if live.any():
                    self._sources[source] = (src[live], dst[live], ends[live])
                else:
                    del self._sources[source]

    @staticmethod
    def _renumber(numbers: np.ndarray, src: np.ndarray, dst: np.ndarray, ends: np.ndarray):
        """``(found, mapped)``: which of a source's frame ``numbers`` came in a chunk, and their numbers here."""
        if not src.size:
            return np.zeros(numbers.shape, dtype=bool), numbers
        # the chunk (segment) each number came in: the last whose first number is at most it
        seg = np.maximum(np.searchsorted(src, numbers, side="right") - 1, 0)
        return (numbers >= src[seg]) & (numbers < ends[seg]), dst[seg] + numbers - src[seg]

    def _stack_numbers(self, numbers: torch.Tensor) -> torch.Tensor:
        """``[..., frame_stack]``: the frames of the stacks of frames ``numbers`` (absolute), oldest first
        (the chain of previous frames; -1 past a previous frame a chunk never brought)."""
        chain = [numbers]
        for _ in range(self.frame_stack - 1):
            p = self._prev.index_select(0, (chain[-1] % self.frame_capacity).reshape(-1)).reshape(numbers.shape)
            chain.append(torch.where(chain[-1] < 0, chain[-1], p))
        return torch.stack(chain[::-1], dim=-1)

    def _oldest_frame(self, numbers: torch.Tensor) -> np.ndarray:
        """The oldest frame the observations of frames ``numbers`` read (the oldest plane of a stack: the
        smallest number of the chain, which is below the ring's oldest frame where it passed an overwritten one)."""
        numbers = numbers.to(self.device)
        if self.frame_stack > 1:
            numbers = self._stack_numbers(numbers).min(dim=-1).values
        return numbers.cpu().numpy()

    def _on_insert(self, rows: torch.Tensor) -> None:
        self._first_frame[rows.cpu().numpy()] = self._oldest_frame(self._storage["obs_frame"][0, rows])
        super()._on_insert(rows)

    def _frames_at(self, numbers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """The observations of frames ``numbers`` (zeros where ``mask`` is False): frames, or stacks
        ``[..., frame_stack, *plane]`` rebuilt from the ring's planes."""
        if self.frame_stack > 1:
            numbers = self._stack_numbers(numbers)
        frames = self._frames.index_select(0, (numbers % self.frame_capacity).reshape(-1))
        frames = frames.reshape(*numbers.shape, *self._frames.shape[1:])
        keep = mask.reshape(*mask.shape, *([1] * (frames.dim() - mask.dim())))
        return torch.where(keep, frames, torch.zeros((), dtype=frames.dtype, device=frames.device))

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """The parent replay's sample, with ``obs`` and ``next_obs`` gathered from the frame ring (frame dtype)."""
        return self.with_frames(super().sample(batch_size, generator))

    def state_dict(self) -> TensorDict:
        """The parent's tensors plus the frames still referenced and the frame counters. Which stored
        windows are evicted is ``first_frame`` (``_EVICTED`` there); ``windows_evicted`` their count so far."""
        td = super().state_dict()
        td["frame_capacity"] = torch.tensor(self.frame_capacity)
        td["frame_stack"] = torch.tensor(self.frame_stack)
        td["frames_written"] = torch.tensor(self._frames_written)
        td["last_frame"] = torch.as_tensor(self._last_frame.copy())
        td["first_frame"] = torch.as_tensor(self._first_frame.copy())
        td["windows_evicted"] = torch.tensor(int(self.windows_evicted))
        if self._frames is not None:
            n = min(self._frames_written, self.frame_capacity)
            td["frames"] = self._frames[:max(n, 1)].cpu()
            if self._prev is not None:
                td["frame_prev"] = self._prev[:max(n, 1)].cpu()
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; ``frame_capacity`` must match. A checkpoint from before
        ``windows_evicted`` was saved counts 0 evictions; its evicted windows are those ``first_frame``
        marks (none in a uniform replay's: it refused instead of evicting then)."""
        if "frame_capacity" not in td.keys():
            raise ValueError("Not a frame sequence replay checkpoint (no 'frame_capacity'); it was saved by another replay.")
        saved_stack = int(td["frame_stack"]) if "frame_stack" in td.keys() else 1  # older checkpoints: whole observations
        if saved_stack != self.frame_stack:
            raise ValueError(
                f"Checkpointed replay stores observations as stacks of {saved_stack} frames (1: whole observations) but "
                f"this buffer as stacks of {self.frame_stack}; create the buffer with frame_stack={saved_stack}."
            )
        if int(td["frame_capacity"]) != self.frame_capacity:
            raise ValueError(
                f"Checkpointed replay has frame_capacity={int(td['frame_capacity'])} but this buffer has "
                f"{self.frame_capacity}; create the buffer with frame_capacity={int(td['frame_capacity'])}."
            )
        super().load_state_dict(td)
        self._frames_written = int(td["frames_written"])
        self._last_frame = td["last_frame"].cpu().numpy().astype(np.int64).copy()
        self._first_frame = td["first_frame"].cpu().numpy().astype(np.int64).copy()
        self.windows_evicted = int(td["windows_evicted"]) if "windows_evicted" in td.keys() else 0
        if "frames" in td.keys():
            saved = td["frames"].to(self.device)
            self._frames = torch.empty((self.frame_capacity, *saved.shape[1:]), dtype=saved.dtype, device=self.device)
            self._frames[: saved.shape[0]] = saved
            self._prev = None
            if self.frame_stack > 1:
                self._prev = torch.zeros(self.frame_capacity, dtype=torch.int64, device=self.device)
                self._prev[: saved.shape[0]] = td["frame_prev"].to(self.device)
        else:
            self._frames, self._prev = None, None


class FrameSequenceReplay(_FrameStore, SequenceReplay):
    """:class:`SequenceReplay` (uniform windows; DRQN) storing each frame once (module doc).

    Args: those of :class:`SequenceReplay`, ``frame_capacity`` (frames in the ring;
    default :func:`default_frame_capacity`), ``frame_envs`` (the envs whose frames the ring
    holds for that default: ``num_envs``, or every actor's envs for a distributed learner) and
    ``frame_stack`` (observations are stacks ``[frame_stack, ...]`` of gymnasium's
    ``FrameStackObservation``: only each one's newest plane is stored; 1: whole observations).

    Where the ring comes round to frames stored windows read (short episodes, a smaller
    ``frame_capacity``: module doc), those windows are evicted instead of stopping the run: left out
    of the uniform draws until a new window takes their row (``windows_evicted`` counts them,
    ``windows_sampleable`` the windows left). With no evicted window stored, :meth:`sample` draws
    exactly as :class:`SequenceReplay` does (``randint(len(self))`` over the rows); with some, it draws
    ``randint(windows_sampleable)`` into the ascending list of the other rows. It refuses in one sentence
    where evicting would leave no window to sample, and :meth:`drain` (a distributed outbox) while it
    holds an evicted window.
    """

    windows_evicted = 0

    def __init__(self, capacity: int, sequence_length: int, num_envs: int = 1, *, period: int | None = None,
                 frame_capacity: int | None = None, frame_envs: int | None = None, frame_stack: int = 1,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(capacity, sequence_length, num_envs, period=period, device=device)
        self._init_frames(frame_capacity, frame_envs, frame_stack)
        self._evicted_stored = 0  # stored windows that are evicted (first frame _EVICTED; only stored rows are)
        self._sampleable: torch.Tensor | None = None  # with evicted ones stored: the other rows, ascending, on device

    @property
    def windows_sampleable(self) -> int:
        """Stored windows that can still be sampled: ``len(self)`` less the evicted ones still stored."""
        return self._size - self._evicted_stored

    def _evict(self, rows: np.ndarray) -> None:
        super()._evict(rows)
        self._evicted_stored += int(rows.shape[0])
        self._sampleable = None

    def _on_insert(self, rows: torch.Tensor) -> None:
        if self._evicted_stored:  # new windows taking evicted rows make them sampleable again
            self._evicted_stored -= int(np.count_nonzero(self._first_frame[rows.cpu().numpy()] == _EVICTED))
        self._sampleable = None
        super()._on_insert(rows)

    def _sample_indices(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        if not self._evicted_stored:  # SequenceReplay's draws, exactly
            return super()._sample_indices(batch_size, generator)
        if self._sampleable is None:
            keep = np.flatnonzero(self._first_frame[: self._size] != _EVICTED)  # the stored rows are [0, size)
            self._sampleable = torch.as_tensor(keep, dtype=torch.int64).to(self.device)
        n = int(self._sampleable.shape[0])
        if n == 0:
            raise RuntimeError(
                f"Cannot sample: the frame ring of {self.frame_capacity} frames came round to the frames of every "
                f"stored window, so all {self._size} were evicted; " + self._too_small()
            )
        return self._sampleable[torch.randint(n, (batch_size,), generator=generator, device=self.device)]

    def drain(self) -> TensorDict:
        """:meth:`SequenceReplay.drain`, refused in one sentence while an evicted window is stored: a
        distributed outbox's ring (:func:`outbox_frame_capacity`) came round to frames of windows not yet
        handed out, whose priorities would be computed from other frames."""
        if self._evicted_stored:
            raise RuntimeError(
                f"{self._evicted_stored} of the {self._size} windows to drain were evicted because the frame ring of "
                f"{self.frame_capacity} frames came round to their frames first; drain more often or raise the "
                "frame_capacity."
            )
        return super().drain()

    def load_state_dict(self, td: TensorDict) -> None:
        super().load_state_dict(td)
        C, stored = self.capacity, np.zeros(self.capacity, dtype=bool)
        stored[(self._cursor - self._size + np.arange(self._size)) % C] = True
        self._first_frame[~stored & (self._first_frame == _EVICTED)] = -1  # only stored rows are marked
        self._evicted_stored = int(np.count_nonzero(self._first_frame[stored] == _EVICTED))
        self._sampleable = None


class PrioritizedFrameSequenceReplay(_FrameStore, PrioritizedSequenceReplay):
    """:class:`PrioritizedSequenceReplay` (R2D2) storing each frame once (module doc).

    Args: those of :class:`PrioritizedSequenceReplay`, ``frame_capacity``, ``frame_envs`` and ``frame_stack``.

    Where episodes are shorter than about ``sequence_length * (period + 1) - period**2`` steps (module
    doc), windows hold more than ``period + 1`` frames each (up to ``sequence_length + 1``, an episode of
    exactly one window) and
    the default ring can come round to frames the oldest stored windows read: those windows get
    priority 0 (never sampled again; ``windows_evicted`` counts them) before their frames are
    overwritten, instead of stopping the run. The uniform :class:`FrameSequenceReplay` leaves them out
    of its draws the same way.
    """

    windows_evicted = 0

    def _evict(self, rows: np.ndarray) -> None:
        super()._evict(rows)
        self._tree.update(torch.as_tensor(rows, device=self.device),
                          torch.zeros(rows.shape[0], dtype=torch.float64, device=self.device))

    def __init__(self, capacity: int, sequence_length: int, num_envs: int = 1, *, period: int | None = None,
                 frame_capacity: int | None = None, frame_envs: int | None = None, frame_stack: int = 1,
                 **kwargs) -> None:
        super().__init__(capacity, sequence_length, num_envs, period=period, **kwargs)
        self._init_frames(frame_capacity, frame_envs, frame_stack)
