"""One-sentence check that rows added to a preallocated replay fit its storage.

Storage is allocated from the first rows' keys, shapes and dtypes. Rows added
later with a key missing would leave that slot's old value in place (a stale or
zero entry sampled as if it were data), and a new key would silently grow the
storage with zeros in every other slot; another shape or dtype fails deep
inside tensor indexing. Host-side metadata only (keys, shapes, dtypes), no sync.
"""

from __future__ import annotations

import numbers

import torch
from tensordict import TensorDict

__all__ = ["check_rows", "check_capacity"]


def check_capacity(where: str, value, name: str = "capacity", minimum: int = 1, unit: str = "") -> int:
    """``value`` as an ``int`` of at least ``minimum`` (a Python or numpy integer, or a 0-d integer tensor),
    else one ``ValueError`` sentence naming ``where`` and the argument ``name``: a bool, a string or a float --
    ``2.5`` would be truncated to 2, and a whole ``3.0`` is refused too, as the algorithms' configs and the
    Python API's counts refuse floats (the run config already turns YAML's ``1e6`` into an int). The one
    capacity check of every replay constructor."""
    if isinstance(value, torch.Tensor) and value.dim() == 0 and not value.is_floating_point() and value.dtype != torch.bool:
        value = int(value)
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or int(value) < minimum:
        raise ValueError(f"{where}: {name} must be an integer of at least {minimum}{unit}, got {value!r}.")
    return int(value)


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
