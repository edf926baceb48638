"""Sequence replays that store each observation frame once (pixel DRQN and R2D2).

:class:`rlfunc.replay.sequence.SequenceReplay` copies every step into each
window that covers it, with both ``obs`` and ``next_obs``: with R2D2's
overlapping windows (period 40 of 120 steps) an Atari frame would be stored
six times, with DRQN's windows starting at every step (period 1, 10 steps)
twenty times. :class:`FrameSequenceReplay` (uniform) and
:class:`PrioritizedFrameSequenceReplay` (R2D2's priorities) keep the same
windows, sampled the same way -- the same storage rows, the same random draws,
the same batches -- but hold the observations in one ring of frames, as
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
frames suffice. A smaller ring is refused in one sentence by :meth:`add` when it would
overwrite a frame a stored window reads.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay

__all__ = ["FrameSequenceReplay", "PrioritizedFrameSequenceReplay", "default_frame_capacity", "frame_replay_bytes"]

_STEP_BYTES = 8 + 4 + 1 + 1 + 1 + 2 * 8  # action int64, reward f32, terminated, truncated, mask, two frame numbers
"""Bytes per step of a window besides the frames (the learners' step keys and the storage's mask)."""


def default_frame_capacity(capacity: int, sequence_length: int, num_envs: int, period: int) -> int:
    """Frames the ring needs so that no stored or pending window reads an overwritten frame (module doc)."""
    return int(capacity) * (int(period) + 1) + int(num_envs) * (3 * int(sequence_length) + int(period) + 2)


def frame_replay_bytes(
    capacity: int,
    sequence_length: int,
    num_envs: int,
    period: int,
    frame_bytes: int,
    *,
    frame_capacity: int | None = None,
    window_extra: int = 0,
    pending_extra: int = 0,
) -> int:
    """Bytes a frame sequence replay allocates: the frame ring, the windows' per-step entries
    (:data:`_STEP_BYTES`, frame numbers included), each window's env and start (16), each
    pending step, ``window_extra`` per window (a stored carry, the sum-tree's 16) and
    ``pending_extra`` per pending step (the carry before it, when carries are stored)."""
    frames = default_frame_capacity(capacity, sequence_length, num_envs, period) if frame_capacity is None else frame_capacity
    windows = capacity * (sequence_length * _STEP_BYTES + 16 + window_extra)
    pending = num_envs * sequence_length * (_STEP_BYTES - 1 + pending_extra)  # no mask there
    return int(frames) * int(frame_bytes) + windows + pending


class _FrameStore:
    """The frame ring and the ``obs``/``next_obs`` <-> frame-number translation (mixed into the replays)."""

    def _init_frames(self, frame_capacity: int | None) -> None:
        cap = default_frame_capacity(self.capacity, self.sequence_length, self.num_envs, self.period)
        self.frame_capacity = cap if frame_capacity is None else int(frame_capacity)
        if self.frame_capacity < self.sequence_length + 1:
            raise ValueError(
                f"frame_capacity must hold at least one window's sequence_length + 1 = {self.sequence_length + 1} "
                f"frames, got {self.frame_capacity}."
            )
        self._frames: torch.Tensor | None = None  # [frame_capacity, *frame shape]
        self._frames_written = 0  # absolute number of the next frame
        self._last_frame = np.zeros(self.num_envs, dtype=np.int64)  # each env's latest observation frame
        self._first_frame = np.full(self.capacity, -1, dtype=np.int64)  # each stored window's first frame (host)

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
        if self._frames is None:
            self._frames = torch.empty(  # pages are committed as frames are written
                (self.frame_capacity, *obs.shape[1:]), dtype=obs.dtype, device=self.device
            )
        if tuple(obs.shape[1:]) != tuple(self._frames.shape[1:]) or obs.dtype != self._frames.dtype:
            raise ValueError(
                f"Observations of shape {tuple(obs.shape[1:])} and dtype {obs.dtype} do not match the stored frames "
                f"({tuple(self._frames.shape[1:])}, {self._frames.dtype})."
            )
        starts = self._ep_len[envs] == 0  # these envs' obs is an episode's first frame: write it too
        new = torch.cat([obs[torch.as_tensor(starts)], next_obs], dim=0)
        k = new.shape[0]
        first = self._frames_written
        self._check_overwrite(first + k)
        numbers = first + np.arange(k, dtype=np.int64)
        slots = torch.as_tensor(numbers % self.frame_capacity, device=self.device)
        self._frames.index_copy_(0, slots, new.to(self.device))
        obs_frame = self._last_frame[envs].copy()
        obs_frame[starts] = numbers[: int(starts.sum())]
        next_frame = numbers[int(starts.sum()):]
        self._last_frame[envs] = next_frame
        self._frames_written += k
        rows = step.exclude("obs", "next_obs")
        rows["obs_frame"] = torch.as_tensor(obs_frame, device=rows.device)
        rows["next_frame"] = torch.as_tensor(next_frame, device=rows.device)
        super().add(rows, carry, env_ids)

    def _check_overwrite(self, end: int) -> None:
        """Refuse to write frames up to ``end`` (absolute) if a stored window still reads one of them."""
        oldest_kept = end - self.frame_capacity
        if oldest_kept <= 0 or self._size == 0:
            return
        live = self._first_frame[: self._size]
        if live.min() < oldest_kept:
            raise RuntimeError(
                f"The frame ring of {self.frame_capacity} frames would overwrite a frame a stored window reads; "
                f"use a frame_capacity of at least {default_frame_capacity(self.capacity, self.sequence_length, self.num_envs, self.period)}."
            )

    def _on_insert(self, rows: torch.Tensor) -> None:
        self._first_frame[rows.cpu().numpy()] = self._storage["obs_frame"][0, rows].cpu().numpy()
        super()._on_insert(rows)

    def _frames_at(self, numbers: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        frames = self._frames.index_select(0, (numbers % self.frame_capacity).reshape(-1))
        frames = frames.reshape(*numbers.shape, *self._frames.shape[1:])
        keep = mask.reshape(*mask.shape, *([1] * (frames.dim() - mask.dim())))
        return torch.where(keep, frames, torch.zeros((), dtype=frames.dtype, device=frames.device))

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """The parent replay's sample, with ``obs`` and ``next_obs`` gathered from the frame ring (frame dtype)."""
        out = super().sample(batch_size, generator)
        mask = out["mask"]
        out["obs"] = self._frames_at(out["obs_frame"], mask)
        out["next_obs"] = self._frames_at(out["next_frame"], mask)
        return out.exclude("obs_frame", "next_frame")

    def state_dict(self) -> TensorDict:
        """The parent's tensors plus the frames still referenced and the frame counters."""
        td = super().state_dict()
        td["frame_capacity"] = torch.tensor(self.frame_capacity)
        td["frames_written"] = torch.tensor(self._frames_written)
        td["last_frame"] = torch.as_tensor(self._last_frame.copy())
        td["first_frame"] = torch.as_tensor(self._first_frame.copy())
        if self._frames is not None:
            n = min(self._frames_written, self.frame_capacity)
            td["frames"] = self._frames[:max(n, 1)].clone().cpu()
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; ``frame_capacity`` must match."""
        if "frame_capacity" not in td.keys():
            raise ValueError("Not a frame sequence replay checkpoint (no 'frame_capacity'); it was saved by another replay.")
        if int(td["frame_capacity"]) != self.frame_capacity:
            raise ValueError(
                f"Checkpointed replay has frame_capacity={int(td['frame_capacity'])} but this buffer has "
                f"{self.frame_capacity}; create the buffer with frame_capacity={int(td['frame_capacity'])}."
            )
        super().load_state_dict(td)
        self._frames_written = int(td["frames_written"])
        self._last_frame = td["last_frame"].cpu().numpy().astype(np.int64).copy()
        self._first_frame = td["first_frame"].cpu().numpy().astype(np.int64).copy()
        if "frames" in td.keys():
            saved = td["frames"].to(self.device)
            self._frames = torch.empty((self.frame_capacity, *saved.shape[1:]), dtype=saved.dtype, device=self.device)
            self._frames[: saved.shape[0]] = saved
        else:
            self._frames = None


class FrameSequenceReplay(_FrameStore, SequenceReplay):
    """:class:`SequenceReplay` (uniform windows; DRQN) storing each frame once (module doc).

    Args: those of :class:`SequenceReplay`, and ``frame_capacity`` (frames in the ring;
    default :func:`default_frame_capacity`).
    """

    def __init__(self, capacity: int, sequence_length: int, num_envs: int = 1, *, period: int | None = None,
                 frame_capacity: int | None = None, device: torch.device | str = "cpu") -> None:
        super().__init__(capacity, sequence_length, num_envs, period=period, device=device)
        self._init_frames(frame_capacity)


class PrioritizedFrameSequenceReplay(_FrameStore, PrioritizedSequenceReplay):
    """:class:`PrioritizedSequenceReplay` (R2D2) storing each frame once (module doc).

    Args: those of :class:`PrioritizedSequenceReplay`, and ``frame_capacity``.
    """

    def __init__(self, capacity: int, sequence_length: int, num_envs: int = 1, *, period: int | None = None,
                 frame_capacity: int | None = None, **kwargs) -> None:
        super().__init__(capacity, sequence_length, num_envs, period=period, **kwargs)
        self._init_frames(frame_capacity)
