"""One-sentence check that rows added to a preallocated replay fit its storage.

Storage is allocated from the first rows' keys, shapes and dtypes. Rows added
later with a key missing would leave that slot's old value in place (a stale or
zero entry sampled as if it were data), and a new key would silently grow the
storage with zeros in every other slot; another shape or dtype fails deep
inside tensor indexing. Host-side metadata only (keys, shapes, dtypes), no sync.
"""

from __future__ import annotations

from tensordict import TensorDict

__all__ = ["check_rows"]


def check_rows(where: str, storage: TensorDict, rows: TensorDict, storage_dims: int, row_dims: int) -> None:
    """``rows`` (``row_dims`` batch dims) hold exactly ``storage``'s keys (``storage_dims`` batch dims),
    each with the same per-row shape and dtype; else one ``ValueError`` sentence."""
    have = {k: v for k, v in storage.items(include_nested=True, leaves_only=True)}
    got = {k: v for k, v in rows.items(include_nested=True, leaves_only=True)}
    missing = [k for k in have if k not in got]
    extra = [k for k in got if k not in have]
    if missing or extra:
        parts = ([f"lack {missing}"] if missing else []) + ([f"have keys {extra} the stored rows lack"] if extra else [])
        raise ValueError(
            f"{where}: the added rows {' and '.join(parts)}; every add must pass the keys of the first one, {sorted(map(str, have))}."
        )
    for key, value in got.items():
        want = have[key]
        if tuple(value.shape[row_dims:]) != tuple(want.shape[storage_dims:]) or value.dtype != want.dtype:
            raise ValueError(
                f"{where}: rows[{key!r}] has per-row shape {list(value.shape[row_dims:])} and dtype {value.dtype}, "
                f"but the stored rows have {list(want.shape[storage_dims:])} and {want.dtype}; convert it before adding."
            )
