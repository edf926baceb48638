"""Fixed-length sequence replay for recurrent agents (DRQN, R2D2).

Transitions arrive one vector-env step at a time (one row per env); the
buffer assembles them per env and stores *windows* of ``T = sequence_length``
consecutive transitions of one episode, like Acme's ``SequenceAdder`` with
``EndBehavior.ZERO_PAD`` (deepmind/acme ``adders/reverb/sequence.py``):

* windows start at episode steps ``0, P, 2P, ...`` (``P = period``;
  ``P < T`` overlaps adjacent windows, as R2D2's 80-step sequences with
  period 40; ``P = T`` tiles the episode; ``P = 1`` makes every step a start,
  DRQN's "random point in a random episode");
* a window is written once its ``T`` steps exist; when an episode ends with
  steps no written window covers, one last window (the first start ``kP``
  whose window reaches the end) is written with its tail zero-padded and
  ``mask`` False there. A window never crosses an episode boundary, so a
  sampled window never needs a recurrent reset inside it;
* with each window the buffer keeps the actor's recurrent state *before* the
  window's first step (R2D2's stored state), if the collector passes it to
  :meth:`SequenceReplay.add` as ``carry``. DRQN's default ignores it and
  starts from zeros.

Storage is preallocated, time-major ``[T, capacity]`` per key, on ``device``;
:meth:`SequenceReplay.sample` returns a ``TensorDict`` of batch size
``[T, B]`` without host round-trips (indices are drawn on ``device``).
Per-window data (the stored carry, the storage row) is broadcast along ``T``
in the sample as stride-0 views; read it at ``[0]``.

Extending for prioritized replay (R2D2): override :meth:`_sample_indices`
(draw rows from a sum-tree instead of uniformly) and :meth:`_on_insert`
(give freshly written rows the max priority), add an ``update_priorities``
method, and extend :meth:`state_dict` / :meth:`load_state_dict` with the tree.

Episode bookkeeping (per-env step counters) lives on the host: the collector
knows ``terminated``/``truncated`` on the host already, so :meth:`add` reads
them once per call; nothing else leaves ``device``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np
import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity, check_rows

__all__ = ["SequenceReplay"]

_REQUIRED_KEYS = ("terminated", "truncated")


def _as_td(x, batch: int, what: str) -> TensorDict:
    if isinstance(x, TensorDict):
        td = x
    elif isinstance(x, Mapping):
        td = TensorDict(dict(x), batch_size=[batch])
    else:
        raise TypeError(
            f"{what} must be a TensorDict or a dict of tensors with one row per env, got {type(x).__name__}; "
            "wrap an LSTM carry (h, c) as TensorDict({'h': h, 'c': c}, batch_size=[num_envs])."
        )
    if td.batch_dims != 1:
        td = TensorDict(td.to_dict(), batch_size=[batch])
    if td.batch_size[0] != batch:
        raise ValueError(f"{what} must have one row per added env ({batch}), got batch_size {list(td.batch_size)}.")
    return td


class SequenceReplay:
    """Replay of fixed-length, episode-internal windows; uniform sampling.

    Args:
        capacity: number of windows kept (the oldest are overwritten). The
            buffer holds about ``capacity * period`` distinct env steps.
        sequence_length: ``T``, steps per window.
        num_envs: envs of the vector env feeding :meth:`add`.
        period: steps between window starts, ``1 <= period <= T``; default
            ``T`` (no overlap).
        device: where storage lives and where :meth:`sample` draws indices.
    """

    def __init__(
        self,
        capacity: int,
        sequence_length: int,
        num_envs: int = 1,
        *,
        period: int | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        where = type(self).__name__
        capacity = check_capacity(where, capacity, unit=" window")
        sequence_length = check_capacity(where, sequence_length, "sequence_length")
        num_envs = check_capacity(where, num_envs, "num_envs")
        period = sequence_length if period is None else check_capacity(where, period, "period")
        if not 1 <= period <= sequence_length:
            raise ValueError(
                f"period must be between 1 and sequence_length ({sequence_length}), got {period}; "
                "a longer period would leave steps that no window covers."
            )
        self.capacity = int(capacity)
        self.sequence_length = int(sequence_length)
        self.num_envs = int(num_envs)
        self.period = period
        self.device = torch.device(device)
        self._storage: TensorDict | None = None  # [T, C]: step keys + "mask"
        self._carry: TensorDict | None = None  # [C]: stored initial carry per window
        self._info: TensorDict | None = None  # [C]: "env", "start" of each window
        self._pending: TensorDict | None = None  # [N, T]: ring of each env's last T steps
        self._pending_carry: TensorDict | None = None  # [N, T]: carry before each pending step
        self._ep_len = np.zeros(self.num_envs, dtype=np.int64)  # steps so far in current episode
        self._covered = np.zeros(self.num_envs, dtype=np.int64)  # end of the last written window
        self._cursor = 0
        self._size = 0
        self._added = 0
        self._windows_added = 0
        self._drained = 0  # windows_added at the last drain()

    # ------------------------------------------------------------------ info
    def __len__(self) -> int:
        """Number of windows stored (sampleable)."""
        return self._size

    @property
    def storage(self) -> TensorDict | None:
        """The ``[T, capacity]`` storage (read-only use; ``None`` before the first add)."""
        return self._storage

    @property
    def steps_added(self) -> int:
        """Total env steps passed to :meth:`add` (all envs)."""
        return self._added

    @property
    def windows_added(self) -> int:
        """Total windows written since creation (overwritten ones included): a rate limiter's insert count."""
        return self._windows_added

    @property
    def stores_carry(self) -> bool:
        return self._carry is not None

    # ------------------------------------------------------------- allocate
    def _allocate(self, step: TensorDict, carry: TensorDict | None) -> None:
        self._bind(self._new_buffers(step, carry))

    def _new_buffers(self, step: TensorDict, carry: TensorDict | None, lead: tuple[int, ...] = ()) -> dict:
        """Zeroed buffers shaped from the first ``step``/``carry`` rows, with leading dims ``lead``
        (``()`` here; a population's ``(P,)``, see :mod:`rlfunc.replay.population_sequence`)."""
        T, C, N = self.sequence_length, self.capacity, self.num_envs
        row = step[0].to(self.device)
        storage = row.expand(*lead, T, C).clone().zero_()
        storage["mask"] = torch.zeros(*lead, T, C, dtype=torch.bool, device=self.device)
        out = {
            "storage": storage,
            "pending": row.expand(*lead, N, T).clone().zero_(),
            "info": TensorDict(
                {
                    "env": torch.zeros(*lead, C, dtype=torch.int64, device=self.device),
                    "start": torch.zeros(*lead, C, dtype=torch.int64, device=self.device),
                },
                batch_size=[*lead, C],
            ),
            "carry": None,
            "pending_carry": None,
        }
        if carry is not None:
            crow = carry[0].to(self.device)
            out["carry"] = crow.expand(*lead, C).clone().zero_()
            out["pending_carry"] = crow.expand(*lead, N, T).clone().zero_()
        return out

    def _bind(self, buffers: dict) -> None:
        """Use ``buffers`` (from :meth:`_new_buffers`, or views of a population's) as this buffer's storage."""
        self._storage, self._pending, self._info = buffers["storage"], buffers["pending"], buffers["info"]
        self._carry, self._pending_carry = buffers["carry"], buffers["pending_carry"]

    # ------------------------------------------------------------------ add
    def add(
        self,
        step: TensorDict,
        carry: TensorDict | Mapping | None = None,
        env_ids: Sequence[int] | torch.Tensor | np.ndarray | None = None,
    ) -> None:
        """Append one transition per env (``step`` batch ``[n]``).

        ``step`` holds any keys (e.g. ``obs``, ``action``, ``reward``,
        ``next_obs``, ``terminated``, ``truncated``); ``terminated`` and
        ``truncated`` are required and end the env's episode; every call passes the
        keys, per-row shapes and dtypes of the first (else one ``ValueError`` sentence). Row ``i`` belongs
        to env ``env_ids[i]`` (default: rows are envs ``0..num_envs-1``); pass
        a subset to skip envs this step -- e.g. the reset step of gymnasium's
        next-step autoreset, which must never be stored.

        ``carry`` (optional, batch ``[n]``): the actor's recurrent state
        *before* this step, e.g. ``TensorDict({"h": h, "c": c}, [n])``. Pass
        it on every call or on none: a window stores the carry of its first
        step.
        """
        if not isinstance(step, TensorDict) or step.batch_dims < 1:
            raise ValueError("add expects a TensorDict with one row per env (batch_size [n]).")
        n = step.batch_size[0]
        missing = [k for k in _REQUIRED_KEYS if k not in step.keys()]
        if missing:
            raise KeyError(f"Sequence replay needs keys {list(_REQUIRED_KEYS)} to find episode ends; missing {missing}.")
        if env_ids is None:
            if n != self.num_envs:
                raise ValueError(
                    f"add got {n} rows for {self.num_envs} envs; pass env_ids to add a subset of envs."
                )
            envs = np.arange(n)
        else:
            envs = np.asarray(env_ids.cpu() if isinstance(env_ids, torch.Tensor) else env_ids, dtype=np.int64)
            envs = envs.reshape(-1)
            if envs.shape[0] != n:
                raise ValueError(f"env_ids has {envs.shape[0]} entries but step has {n} rows.")
            if envs.size and (envs.min() < 0 or envs.max() >= self.num_envs):
                raise ValueError(f"env_ids must be in [0, {self.num_envs}), got {envs.tolist()}.")
            if len(set(envs.tolist())) != n:
                raise ValueError(f"env_ids must be distinct within one add, got {envs.tolist()}.")
        if n == 0:
            return
        if step.batch_dims > 1:
            step = TensorDict(dict(step.items()), batch_size=[n])
        carry_td = None if carry is None else _as_td(carry, n, "carry")
        if self._storage is None:
            self._allocate(step, carry_td)
        else:
            self._check_layout(step, carry_td)

        done = (step["terminated"].bool() | step["truncated"].bool()).reshape(n).cpu().numpy()
        T, P = self.sequence_length, self.period
        envs_t = torch.as_tensor(envs, device=self.device)
        pos = torch.as_tensor(self._ep_len[envs] % T, device=self.device)
        self._pending[envs_t, pos] = step.to(self.device)
        if carry_td is not None:
            self._pending_carry[envs_t, pos] = carry_td.to(self.device)
        self._ep_len[envs] += 1
        self._added += n

        length = self._ep_len[envs]
        full, emit_env, emit_start, emit_len = self._emissions(envs, length, done)
        self._covered[envs[full]] = length[full]
        ended = envs[done]
        self._ep_len[ended] = 0
        self._covered[ended] = 0
        if emit_env.size:
            self._write(emit_env, emit_start, emit_len)

    def _check_layout(self, step: TensorDict, carry_td: TensorDict | None) -> None:
        """Once allocated: ``step`` (and ``carry_td``) fit the first add's layout, else one ``ValueError``
        sentence, nothing written (a frame replay asks it before its frames enter the ring)."""
        if (carry_td is None) != (self._carry is None):
            raise ValueError(
                "Pass carry to every add or to none: this buffer "
                + ("stores" if self._carry is not None else "was created without")
                + " a recurrent state per window."
            )
        check_rows("SequenceReplay.add", self._pending, step, 2, 1)
        if carry_td is not None:
            check_rows("SequenceReplay.add (carry)", self._pending_carry, carry_td, 2, 1)

    def _emissions(self, envs: np.ndarray, length: np.ndarray, done: np.ndarray):
        """``(full, env, start, valid)``: the windows an :meth:`add` of ``envs`` writes, given their episode
        lengths ``length`` after the step and their ``done`` flags (host only; changes nothing)."""
        T, P = self.sequence_length, self.period
        full = (length >= T) & ((length - T) % P == 0)
        covered = np.where(full, length, self._covered[envs])
        tail = done & (length > covered)
        tail_start = np.maximum(0, -((T - length) // P) * P)  # first kP with kP + T >= length
        emit_env = np.concatenate([envs[full], envs[tail]])
        emit_start = np.concatenate([length[full] - T, tail_start[tail]])
        emit_len = np.concatenate([np.full(int(full.sum()), T), length[tail] - tail_start[tail]])
        return full, emit_env, emit_start, emit_len

    def flush(self, env_ids: Sequence[int] | None = None) -> None:
        """End the current episode of ``env_ids`` (default all) without a final step.

        Writes the uncovered tail of each such episode as a padded window and
        resets its counters -- for a collector that resets envs itself (e.g.
        after resuming from a checkpoint). The last stored transition keeps
        its own ``terminated`` flag, so targets bootstrap through the cut, as
        through a time limit.
        """
        envs = np.arange(self.num_envs) if env_ids is None else np.asarray(env_ids, dtype=np.int64).reshape(-1)
        if self._storage is None or envs.size == 0:
            self._ep_len[envs] = 0
            self._covered[envs] = 0
            return
        T, P = self.sequence_length, self.period
        length = self._ep_len[envs]
        tail = (length > 0) & (length > self._covered[envs])
        tail_start = np.maximum(0, -((T - length) // P) * P)
        if tail.any():
            self._write(envs[tail], tail_start[tail], length[tail] - tail_start[tail])
        self._ep_len[envs] = 0
        self._covered[envs] = 0

    def _write(self, env: np.ndarray, start: np.ndarray, valid: np.ndarray) -> None:
        """Copy windows (env, episode start step, valid length) from the pending rings."""
        T, C = self.sequence_length, self.capacity
        k = env.shape[0]
        if k > C:  # more windows at once than the whole buffer: keep the last C
            env, start, valid = env[-C:], start[-C:], valid[-C:]
            k = C
        dev = self.device
        offs = torch.arange(T, device=dev)
        start_t = torch.as_tensor(start, device=dev)
        t_idx = (start_t.unsqueeze(0) + offs.unsqueeze(1)) % T  # [T, K]
        e_idx = torch.as_tensor(env, device=dev).unsqueeze(0).expand(T, k)
        mask = offs.unsqueeze(1) < torch.as_tensor(valid, device=dev).unsqueeze(0)  # [T, K]
        windows = self._pending[e_idx, t_idx]  # [T, K]
        # Zero the padding only where a window is short (host numpy `valid`, no sync): full windows, every
        # window of a sequence_length-1 (DQN) replay, would pay one where + zeros_like per key per add
        # (~75 us of ~1 ms per MinAtar vector step) to select the gathered values unchanged.
        if int(np.min(valid)) < T:
            windows = windows.apply(lambda x: torch.where(mask.view(T, k, *([1] * (x.dim() - 2))), x, torch.zeros_like(x)))
        windows["mask"] = mask
        carry = self._pending_carry[e_idx[0], t_idx[0]] if self._carry is not None else None
        info = TensorDict({"env": e_idx[0].clone(), "start": start_t.clone()}, batch_size=[k], device=dev)
        self._store(windows, carry, info)

    def _store(self, windows: TensorDict, carry: TensorDict | None, info: TensorDict) -> torch.Tensor:
        """Write ``k`` finished windows (``[T, k]``, with ``mask``), their stored carries ``[k]`` and
        ``info [k]`` (``env``, ``start``) at the cursor; returns the storage rows written."""
        C, k = self.capacity, windows.batch_size[1]
        rows = (torch.arange(k, device=self.device) + self._cursor) % C
        self._storage[:, rows] = windows
        if self._carry is not None:
            self._carry[rows] = carry
        self._info[rows] = info
        self._cursor = (self._cursor + k) % C
        self._size = min(self._size + k, C)
        self._windows_added += k
        self._on_insert(rows)
        return rows

    # --------------------------------------------------- windows cut elsewhere
    def drain(self) -> TensorDict:
        """Hand out the stored windows, oldest first, and empty the storage (the pending episode
        parts stay). A distributed actor cuts windows in a small buffer of its own exactly as
        :meth:`add` does and sends what this returns to the learner's :meth:`add_windows`.

        Returns a TensorDict ``[k]`` with ``steps`` (``[k, T]``: every added key and ``mask``),
        ``env``, ``start`` and, when carries are stored, ``init_carry``. The storage must not
        have wrapped since the last drain (capacity at least the windows written in between).
        """
        k = self._size
        if self._storage is None or k == 0:
            return TensorDict({}, batch_size=[0])
        if self._windows_added - self._drained > self.capacity:
            raise RuntimeError(
                f"{self._windows_added - self._drained} windows were written since the last drain into a buffer of "
                f"{self.capacity}; drain more often or raise the capacity."
            )
        rows = (torch.arange(k, device=self.device) + self._cursor - k) % self.capacity
        out = TensorDict(
            {"steps": self._storage[:, rows].transpose(0, 1).clone(), **self._info[rows].clone().to_dict()},
            batch_size=[k],
        )
        if self._carry is not None:
            out["init_carry"] = self._carry[rows].clone()
        self._size = 0
        self._drained = self._windows_added
        return out

    def add_windows(self, windows: TensorDict) -> torch.Tensor:
        """Store windows :meth:`drain` handed out (of a buffer with this layout); returns their storage rows."""
        k = windows.batch_size[0]
        if k == 0:
            return torch.zeros(0, dtype=torch.int64, device=self.device)
        steps = windows["steps"].transpose(0, 1).to(self.device)
        if steps.batch_size[0] != self.sequence_length:
            raise ValueError(
                f"add_windows got windows of {steps.batch_size[0]} steps for a replay of sequence_length "
                f"{self.sequence_length}; cut them with the same sequence_length."
            )
        carry = windows.get("init_carry").to(self.device) if "init_carry" in windows.keys() else None
        if self._storage is None:
            self._allocate(steps[0].exclude("mask"), carry)
        elif (carry is None) != (self._carry is None):
            raise ValueError("add_windows: pass init_carry with every window or with none, as the buffer stores.")
        if k > self.capacity:  # keep the last ``capacity``, as _write does
            steps, windows = steps[:, -self.capacity:], windows[-self.capacity:]
            carry = None if carry is None else carry[-self.capacity:]
            k = self.capacity
        info = TensorDict({"env": windows["env"], "start": windows["start"]}, batch_size=[k]).to(self.device)
        return self._store(steps, carry, info)

    # --------------------------------------------------------------- hooks
    def _on_insert(self, rows: torch.Tensor) -> None:
        """Called with the storage rows just written (prioritized subclasses set priorities)."""

    def _sample_indices(self, batch_size: int, generator: torch.Generator | None) -> torch.Tensor:
        """Storage rows to sample, ``[batch_size]`` int64 on ``device``; uniform here."""
        return torch.randint(self._size, (batch_size,), generator=generator, device=self.device)

    # --------------------------------------------------------------- sample
    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """``batch_size`` windows drawn uniformly with replacement, time-major.

        Returns a TensorDict of batch size ``[T, batch_size]`` with every added
        key, ``mask [T, B]`` (False on padding), ``window [T, B]`` (storage
        row, constant along T), ``episode_start [T, B]`` (the episode step of
        the window's first transition, constant along T) and, when carries were
        added, ``init_carry`` (the stored state before the first step, constant
        along T; read ``batch["init_carry"][0]``). ``generator`` must live on
        ``device``.
        """
        if self._size == 0 or self._storage is None:
            raise RuntimeError(
                "Cannot sample from an empty sequence replay; add steps until at least one window is complete."
            )
        T = self.sequence_length
        idx = self._sample_indices(batch_size, generator)
        out = self._storage[:, idx]
        out["window"] = idx.unsqueeze(0).expand(T, batch_size)
        out["episode_start"] = self._info["start"][idx].unsqueeze(0).expand(T, batch_size)
        if self._carry is not None:
            out["init_carry"] = self._carry[idx].unsqueeze(0).expand(T, batch_size)
        return out

    # ----------------------------------------------------------- checkpoint
    def state_dict(self) -> TensorDict:
        """Tensors that restore the buffer exactly, pending episode parts included."""
        td = TensorDict(
            {
                "capacity": torch.tensor(self.capacity),
                "sequence_length": torch.tensor(self.sequence_length),
                "num_envs": torch.tensor(self.num_envs),
                "period": torch.tensor(self.period),
                "cursor": torch.tensor(self._cursor),
                "size": torch.tensor(self._size),
                "added": torch.tensor(self._added),
                "windows_added": torch.tensor(self._windows_added),
                "ep_len": torch.as_tensor(self._ep_len.copy()),
                "covered": torch.as_tensor(self._covered.copy()),
            },
            batch_size=[],
        )
        if self._storage is not None:
            # Only the filled rows (row 0 always kept as a shape template).
            n = max(self._size, 1)
            td["storage"] = self._storage[:, :n].to("cpu")
            td["info"] = self._info[:n].to("cpu")
            td["pending"] = self._pending.clone().to("cpu")
            if self._carry is not None:
                td["carry"] = self._carry[:n].to("cpu")
                td["pending_carry"] = self._pending_carry.clone().to("cpu")
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        """Restore from :meth:`state_dict`; the layout must match this buffer's."""
        for name in ("capacity", "sequence_length", "num_envs", "period"):
            if name not in td.keys():
                raise ValueError(f"Not a sequence replay checkpoint: key {name!r} is missing.")
            saved, mine = int(td[name]), getattr(self, name)
            if saved != mine:
                raise ValueError(
                    f"Checkpointed sequence replay has {name}={saved} but this buffer has {mine}; "
                    f"create the buffer with {name}={saved}."
                )
        self._cursor = int(td["cursor"])
        self._size = int(td["size"])
        self._added = int(td["added"])
        self._windows_added = int(td["windows_added"]) if "windows_added" in td.keys() else self._size
        self._ep_len = td["ep_len"].cpu().numpy().astype(np.int64).copy()
        self._covered = td["covered"].cpu().numpy().astype(np.int64).copy()
        if "storage" in td.keys():
            T, C = self.sequence_length, self.capacity
            saved = td["storage"].to(self.device)
            n = saved.batch_size[1]
            if saved.batch_size[0] != T or n > C or self._size > n:
                raise ValueError(
                    f"Corrupt sequence replay checkpoint: storage has batch_size {list(saved.batch_size)} "
                    f"for sequence_length {T}, capacity {C} and size {self._size}."
                )
            self._storage = saved[:, :1].expand(T, C).clone().zero_()
            self._storage[:, :n] = saved
            info = td["info"].to(self.device)
            self._info = info[:1].expand(C).clone().zero_()
            self._info[:n] = info
            self._pending = td["pending"].clone().to(self.device)
            if "carry" in td.keys():
                carry = td["carry"].to(self.device)
                self._carry = carry[:1].expand(C).clone().zero_()
                self._carry[:n] = carry
                self._pending_carry = td["pending_carry"].clone().to(self.device)
            else:
                self._carry = self._pending_carry = None
        else:
            self._storage = self._info = self._pending = self._carry = self._pending_carry = None
