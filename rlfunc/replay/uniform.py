"""Preallocated uniform transition replay on tensor storage."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlfunc.replay._layout import check_capacity, check_rows

__all__ = ["UniformReplay"]


class UniformReplay:
    """Ring buffer of transitions in one preallocated TensorDict.

    Storage is allocated on the first :meth:`add` from the shapes and dtypes of
    the rows, on ``device`` (``"cuda"`` keeps sampling on the GPU, no host
    copies). :meth:`sample` draws indices uniformly with replacement, like the
    official REDQ/SAC buffers. :meth:`state_dict` holds tensors only, so
    checkpoints need no pickle.
    """

    def __init__(self, capacity: int, device: torch.device | str = "cpu") -> None:
        self.capacity = check_capacity("UniformReplay", capacity)
        self.device = torch.device(device)
        self._storage: TensorDict | None = None
        self._cursor = 0
        self._size = 0

    def __len__(self) -> int:
        return self._size

    @property
    def storage(self) -> TensorDict | None:
        return self._storage

    def _allocate(self, rows: TensorDict) -> None:
        self._storage = self._zeros(rows[0])

    def _zeros(self, example: TensorDict) -> TensorDict:
        """Zeroed storage ``[capacity]`` with ``example``'s keys, shapes and dtypes, allocated on
        ``device`` itself: the one row moves there first, so a GPU replay is never built full-size
        in host memory on its way."""
        return example.to(self.device).expand(self.capacity).clone().zero_()

    def add(self, rows: TensorDict) -> None:
        """Append ``rows`` (batch ``[n]``), overwriting the oldest when full.

        Every add passes the keys, per-row shapes and dtypes of the first (which allocated
        the storage); other rows are one ``ValueError`` sentence, nothing written."""
        if rows.batch_dims != 1:
            raise ValueError(f"add expects rows with batch_size [n], got {list(rows.batch_size)}.")
        n = rows.batch_size[0]
        if n == 0:
            return
        if self._storage is None:
            self._allocate(rows)
        else:
            check_rows("UniformReplay.add", self._storage, rows, 1, 1)
        if n > self.capacity:
            rows = rows[n - self.capacity :]
            n = self.capacity
        idx = (torch.arange(n, device=self.device) + self._cursor) % self.capacity
        self._storage[idx] = rows.to(self.device)
        self._cursor = (self._cursor + n) % self.capacity
        self._size = min(self._size + n, self.capacity)

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """``batch_size`` rows drawn uniformly with replacement (batch ``[batch_size]``)."""
        if self._size == 0 or self._storage is None:
            raise RuntimeError("Cannot sample from an empty replay buffer; add transitions first.")
        idx = torch.randint(self._size, (batch_size,), generator=generator, device=self.device)
        return self._storage[idx]

    def state_dict(self) -> TensorDict:
        """Tensors needed to restore the buffer exactly (filled part only)."""
        td = TensorDict(
            {
                "cursor": torch.tensor(self._cursor),
                "size": torch.tensor(self._size),
                "capacity": torch.tensor(self.capacity),
            },
            batch_size=[],
        )
        if self._storage is not None:
            td["storage"] = self._storage[: self._size].to("cpu")
        return td

    def load_state_dict(self, td: TensorDict) -> None:
        capacity = int(td["capacity"])
        if capacity != self.capacity:
            raise ValueError(
                f"Checkpointed replay has capacity {capacity} but this buffer has {self.capacity}; "
                "use the run's original replay_size."
            )
        self._cursor = int(td["cursor"])
        self._size = int(td["size"])
        if "storage" in td.keys():
            rows = td["storage"]
            self._storage = self._zeros(rows[0]) if self._size else None
            if self._size:
                self._storage[: self._size] = rows.to(self.device)
        else:
            self._storage = None
