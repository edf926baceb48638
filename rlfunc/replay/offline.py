"""Offline (prior) datasets and the offline/online mini-batch mixer (RLPD).

Two on-disk formats are read, both from local disk (nothing is downloaded):

* **npz** -- a plain ``numpy.savez`` file with the D4RL keys
  ``observations [N, *obs]``, ``actions [N, A]``, ``rewards [N]``,
  ``next_observations [N, *obs]``, ``terminals [N]`` and optionally
  ``timeouts [N]``. Optional metadata keys written by ``rlfunc dataset
  collect``: ``env_id``, ``env_kwargs`` and ``env_wrappers`` (the env's
  config as JSON text), ``action_low``, ``action_high``, ``policy``,
  ``noise``. Read
  with ``allow_pickle=False``.
* **minari** -- a Minari (>= 0.5) dataset directory: the folder holding
  ``metadata.json`` and the data file (``.../<name>-v0/data``) or its parent;
  or a Minari dataset id (``namespace/name-v0``) of a dataset in Minari's
  local store, found as Minari finds it (``minari.storage.get_dataset_path``:
  ``$MINARI_DATASETS_PATH/<id>``, else ``~/.minari/datasets/<id>``; never
  downloaded). A path that exists wins over an id. Needs the optional extra
  ``pip install -e ".[minari]"`` (Minari with its HDF5 and Arrow storages and
  Pillow, which both storages import). An episode that ends with neither a
  termination nor a truncation flag is read as cut (its last transition
  bootstraps) and the loader warns once per dataset, with their count and ids.

Conventions (after the official RLPD code's ``rlpd/data/d4rl_datasets.py``):

* actions are stored in the **env's own action bounds** (as D4RL and Minari
  record them); loading checks them against those bounds, rescales them to
  the ``[-1, 1]`` the policies use and clips them into ``(-1 + 1e-5, 1 - 1e-5)``,
  the open interval where the tanh policy's log-probability is finite (the
  official ``clip_to_eps``; it does not rescale: D4RL's locomotion actions are
  in ``[-1, 1]`` already);
* ``timeouts`` are not ``terminals``: only ``terminals`` stop the bootstrap;
  a time-limit cut bootstraps from ``next_observations`` like any other row.
  The official loader differs here: it reads ``d4rl.qlearning_dataset``, which
  *drops* every row whose ``timeouts`` flag is set (and the file's last row),
  because it takes each ``next_observations`` from the next row; this loader
  keeps those rows and uses the file's own ``next_observations`` (the true
  last observations in what ``rlfunc dataset collect`` and Minari write);
* rows are transitions; episodes need not be contiguous.

Every check runs when the dataset is loaded, before any training, and its
error (:class:`DatasetError`) names the key, the row and what to change:
missing file (naming both ways to make one), missing key (with the closest present one), wrong shape or
dtype against the env's spaces, NaN/inf values (and float64 values beyond
float32's range, which the float32 rows would turn into inf), actions outside
the env's bounds (which must be finite: the rescale needs them), a dataset
recorded for another env (an ``env_id`` stored as text or bytes), or for the
same env configured otherwise: ``env.kwargs`` (an ``.npz`` that records them,
a Minari dataset's env spec) and ``env.wrappers`` (an ``.npz`` that records
them) must be the run's, since a wrapper such as ``mask_velocity`` or
``clip_reward`` keeps the shapes but changes what the rows mean. A file that
records neither (D4RL's own, or one an earlier rlfunc wrote) is not
checked for them.
"""

from __future__ import annotations

import dataclasses
import difflib
import errno
import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = [
    "DatasetError",
    "DatasetNotFoundError",
    "DatasetWarning",
    "OfflineDataset",
    "MixedSampler",
    "load_dataset",
    "dataset_size",
    "read_npz",
    "read_minari",
    "validate_arrays",
    "write_npz",
    "dataset_checksum",
    "detect_format",
    "resolve_dataset_path",
    "same_env_id",
    "effective_env_kwargs",
    "check_env_config",
    "describe",
    "REQUIRED_KEYS",
    "ACTION_CLIP_EPS",
]

REQUIRED_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals")
OPTIONAL_KEYS = ("timeouts",)
METADATA_KEYS = ("env_id", "env_kwargs", "env_wrappers", "action_low", "action_high", "policy", "noise")
ACTION_CLIP_EPS = 1e-5
"""Dataset actions are clipped to ``(-1 + eps, 1 - eps)`` after rescaling (official RLPD ``clip_to_eps``)."""

_BOUND_TOL = 1e-3  # relative to the action range: float rounding of stored actions
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first entry, or an empty zip (numpy's own test)
_CHECK_CHUNK_ELEMENTS = 1 << 23  # the bounds check reads observations in float64 chunks of ~64 MB, not all at once
_F32_MAX = float(np.finfo(np.float32).max)  # rows are stored as float32: larger values would become inf


class DatasetError(ValueError):
    """A prior dataset cannot be used with this env; the message says what to change."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset path does not exist."""


class DatasetWarning(UserWarning):
    """A dataset is usable but something in it is probably not what its author meant."""


def same_env_id(recorded: str, env_id: str) -> bool:
    """Whether two env ids name the same env, ignoring a gymnasium ``module:`` prefix
    (``"my_pkg:MyEnv-v0"`` is ``"MyEnv-v0"``, which Minari records as the env spec's id)."""
    return recorded.rsplit(":", 1)[-1] == env_id.rsplit(":", 1)[-1]


def _same_setting(a: Any, b: Any) -> bool:
    """Whether two config values are equal as YAML/JSON read them: ``1 == 1.0``, tuples as lists,
    numpy scalars and arrays as Python numbers and lists (an env constructor's defaults may be arrays);
    a bool equals only a bool."""
    a = a.item() if isinstance(a, np.generic) else a.tolist() if isinstance(a, np.ndarray) else a
    b = b.item() if isinstance(b, np.generic) else b.tolist() if isinstance(b, np.ndarray) else b
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same_setting(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_setting(x, y) for x, y in zip(a, b))
    return a == b


# How an env draws itself, and gym.make's time limit (its cuts are timeouts, which bootstrap): neither
# changes what a transition means, so a dataset made with other values is still the run's env's data.
_NOT_DATA_KWARGS = ("render_mode", "max_episode_steps")


def effective_env_kwargs(env_id: str, kwargs: dict | None) -> dict:
    """The keyword arguments ``gym.make(env_id, **kwargs)`` builds its env with: the env
    constructor's defaults, then the registration's kwargs, then ``kwargs`` (``render_mode``
    left out). Where the registration or constructor cannot be read (an id this process has
    not registered), only what is known: the registration's kwargs and ``kwargs``."""
    import inspect

    import gymnasium as gym

    out: dict = {}
    try:
        spec = gym.spec(env_id.rsplit(":", 1)[-1])
    except Exception:  # noqa: BLE001 - an unregistered id: compare what was given
        spec = None
    if spec is not None:
        try:
            creator = spec.entry_point
            if isinstance(creator, str):
                from gymnasium.envs.registration import load_env_creator

                creator = load_env_creator(creator)
            for name, param in inspect.signature(creator).parameters.items():
                if param.default is not inspect.Parameter.empty and param.kind in (
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                    inspect.Parameter.KEYWORD_ONLY,
                ):
                    out[name] = param.default
        except Exception:  # noqa: BLE001 - no readable signature: the registration's kwargs still count
            pass
        out.update(spec.kwargs or {})
    out.update(kwargs or {})
    for key in _NOT_DATA_KWARGS:
        out.pop(key, None)
    return out


def _differing_kwargs(recorded: dict, run: dict) -> list[str]:
    """The keys whose values differ (a key only one side names is not compared: its default is unknown)."""
    return sorted(k for k in recorded.keys() & run.keys() if not _same_setting(recorded[k], run[k]))


def _recorded_json(arrays: dict[str, np.ndarray], key: str, source: str) -> Any:
    try:
        return json.loads(_recorded_text(arrays[key]))
    except (json.JSONDecodeError, TypeError, ValueError):
        raise DatasetError(
            f"{source}: {key!r} is not the JSON text rlfunc dataset collect writes; remove the key or collect the "
            "dataset again."
        ) from None


_COLLECT_IN_RUN_ENV = (
    "collect the dataset in the run's env (rlfunc dataset collect --checkpoint RUN uses the run's env.kwargs and "
    "env.wrappers, with --policy random too)"
)


def check_env_config(
    arrays: dict[str, np.ndarray],
    source: str,
    env_id: str | None,
    env_kwargs: dict | None,
    env_wrappers: list | None,
) -> None:
    """Refuse an ``.npz`` recorded with other ``env.kwargs`` or ``env.wrappers`` than the run's.

    Both keep the shapes a dataset is checked against, yet change what its rows mean (a masked
    observation, a clipped reward, another reward weight), so prior and online rows would be
    mixed from two different MDPs. ``None`` (the caller does not say) skips that check."""
    if env_wrappers is not None and "env_wrappers" in arrays:
        recorded = _recorded_json(arrays, "env_wrappers", source)
        run = json.loads(json.dumps(list(env_wrappers), default=str))
        if not _same_setting(recorded, run):
            raise DatasetError(
                f"{source} was collected with env.wrappers {recorded}, but the run's are {run}; its observations or "
                f"rewards would not be the run's, so {_COLLECT_IN_RUN_ENV}, or set env.wrappers to the dataset's."
            )
    if env_kwargs is not None and "env_kwargs" in arrays:
        recorded = _recorded_json(arrays, "env_kwargs", source)
        if not isinstance(recorded, dict):
            raise DatasetError(f"{source}: 'env_kwargs' must hold a JSON mapping; remove the key or collect the dataset again.")
        _refuse_other_kwargs(recorded, env_kwargs, env_id, source)


def _refuse_other_kwargs(recorded: dict, env_kwargs: dict, env_id: str | None, source: str) -> None:
    ours = effective_env_kwargs(env_id, env_kwargs) if env_id else dict(env_kwargs)
    theirs = effective_env_kwargs(env_id, recorded) if env_id else dict(recorded)
    differ = _differing_kwargs(theirs, ours)
    if differ:
        pairs = ", ".join(f"{k}={theirs[k]!r} (the run: {ours[k]!r})" for k in differ)
        raise DatasetError(
            f"{source} was collected with env.kwargs {pairs}; its transitions would not be the run's env's, so "
            f"{_COLLECT_IN_RUN_ENV}, or set env.kwargs to the dataset's."
        )


_MINARI_EXTRA = 'pip install -e ".[minari]" (or pip install "rlfunc[minari]")'


def _minari_id(text: str) -> bool:
    """Whether ``text`` parses as a Minari dataset id (Minari's own ``parse_dataset_id``)."""
    try:
        from minari.dataset.minari_dataset import parse_dataset_id
    except ImportError:
        return False
    try:
        parse_dataset_id(text)
    except Exception:  # noqa: BLE001 -- ValueError (malformed), TypeError (no version)
        return False
    return True


def _not_found(path: str | Path, detail: str = "") -> DatasetNotFoundError:
    text = str(path)
    out = text if text.endswith(".npz") else "FILE.npz"
    return DatasetNotFoundError(
        f"Dataset {text!r} does not exist{detail}; make one with `rlfunc dataset collect ... --out {out}` and set "
        "data.path to that file, or set data.path to a Minari dataset directory or the id of a dataset in Minari's "
        "local store (e.g. one written by minari.create_dataset_from_buffers)."
    )


def resolve_dataset_path(path: str | Path) -> Path:
    """Where ``path`` (``data.path``) is: itself when it exists, else the Minari dataset id it names.

    An id is resolved with Minari's own ``minari.storage.get_dataset_path`` (under
    ``$MINARI_DATASETS_PATH``, else ``~/.minari/datasets``) and must be there already: nothing
    is downloaded. Neither -> :class:`DatasetNotFoundError` naming both ways to make a dataset."""
    local = Path(path)
    if local.exists():
        return local
    text = str(path)
    if _minari_id(text):
        from minari.storage import get_dataset_path

        found = Path(get_dataset_path(text))
        if (found / "data").is_dir():
            return found
        raise _not_found(text, f" as a path, nor as a Minari dataset id in Minari's local store (no {str(found)!r})")
    try:
        import minari  # noqa: F401
    except ImportError:
        if "-v" in text and not text.endswith(".npz"):
            raise _not_found(
                text, f" as a path; if it is a Minari dataset id, reading one needs the optional extra: {_MINARI_EXTRA}"
            ) from None
    raise _not_found(text)


# --------------------------------------------------------------------------- reading


def detect_format(path: str | Path, fmt: str = "auto") -> str:
    """``"npz"`` or ``"minari"`` for ``path`` (``fmt="auto"`` looks at the path; a Minari dataset
    id is resolved first, :func:`resolve_dataset_path`)."""
    if fmt not in ("auto", "npz", "minari"):
        raise DatasetError(f"Unknown dataset format {fmt!r}; use 'npz', 'minari' or 'auto'.")
    path = resolve_dataset_path(path)
    if fmt == "npz" and path.is_dir():
        raise DatasetError(
            f"data.format is 'npz' but {str(path)!r} is a directory; point data.path at the .npz file, or set "
            "data.format to 'minari' (or 'auto') for a Minari dataset."
        )
    if fmt == "minari" and path.is_file():
        raise DatasetError(
            f"data.format is 'minari' but {str(path)!r} is a file; set data.format to 'npz' (or 'auto') for a "
            ".npz dataset, or point data.path at the Minari dataset's directory."
        )
    if fmt != "auto":
        return fmt
    if path.is_file():
        if path.suffix == ".npz":
            return "npz"
        raise DatasetError(
            f"Cannot tell the format of {str(path)!r}: expected a .npz file or a Minari dataset directory; "
            "set data.format."
        )
    if _minari_data_dir(path) is not None:
        return "minari"
    raise DatasetError(
        f"{str(path)!r} is a directory but not a Minari dataset (no metadata.json in it or in its data/ folder)."
    )


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """Raw arrays of a D4RL-style ``.npz`` (no pickle); missing file -> :class:`DatasetNotFoundError`."""
    path = Path(path)
    if not path.is_file():
        raise _not_found(path)
    with open(path, "rb") as fh:
        if fh.read(4) not in _ZIP_MAGIC:  # else np.load would take it for a pickle and refuse it as one
            raise DatasetError(f"Dataset {str(path)!r} is not a readable .npz file (not a zip archive of arrays).")
    _check_unpacked_size(path)
    try:
        with np.load(path, allow_pickle=False) as f:
            return {k: f[k] for k in f.files}
    except ValueError as exc:
        if "pickle" in str(exc).lower():
            raise DatasetError(
                f"Dataset {str(path)!r} stores Python objects (pickled arrays); save plain numeric arrays."
            ) from None
        raise DatasetError(f"Dataset {str(path)!r} is not a readable .npz file: {exc}") from None
    except Exception as exc:  # zipfile.BadZipFile, OSError, EOFError for damaged files
        raise DatasetError(f"Dataset {str(path)!r} is not a readable .npz file ({type(exc).__name__}: {exc}).") from None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, OSError, ValueError):
        return None


def _size(n: int) -> str:
    return f"{n / 1e9:.1f} GB" if n >= 1e9 else f"{n / 1e6:.1f} MB"


def _npz_unpacked_size(path: Path) -> int:
    """Bytes of an ``.npz``'s arrays once unpacked, from the zip's directory (which bounds what ``zipfile``
    inflates): nothing is decompressed. A file that is not a readable zip -> :class:`DatasetError`."""
    import zipfile

    try:
        with zipfile.ZipFile(path) as zf:
            return sum(info.file_size for info in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise DatasetError(f"Dataset {str(path)!r} is not a readable .npz file ({type(exc).__name__}: {exc}).") from None


def _npz_rows(path: Path) -> int | None:
    """Transitions in an ``.npz`` (the first dimension of its ``rewards`` array), from that array's
    ``.npy`` header alone; ``None`` where the header cannot be read."""
    import zipfile

    from numpy.lib import format as npy

    try:
        with zipfile.ZipFile(path) as zf, zf.open("rewards.npy") as fh:
            version = npy.read_magic(fh)
            read = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            shape, _, _ = read(fh)
    except Exception:  # noqa: BLE001 -- a missing key or a bad header is refused when the file is read
        return None
    return int(shape[0]) if shape else None


def dataset_size(path: str | Path, fmt: str = "auto") -> tuple[int, int | None]:
    """``(bytes, transitions)`` of the dataset ``path`` names (``data.path``, ``data.format``), before it
    is read: for an ``.npz`` the unpacked sizes of its arrays (the zip's directory) and the rows of its
    ``rewards`` (its ``.npy`` header); for a Minari dataset the sizes of its data files and the
    ``total_steps`` its ``metadata.json`` records. ``transitions`` is ``None`` where the file does not say.
    Nothing is decompressed or loaded; a path that is no dataset raises :func:`load_dataset`'s errors."""
    fmt = detect_format(path, fmt)
    path = resolve_dataset_path(path)
    if fmt == "npz":
        return _npz_unpacked_size(path), _npz_rows(path)
    data_dir = _minari_data_dir(path)
    if data_dir is None:
        raise DatasetError(f"{str(path)!r} is not a Minari dataset directory (no metadata.json in it or in data/).")
    nbytes = sum(f.stat().st_size for f in data_dir.rglob("*") if f.is_file())
    try:
        steps = json.loads((data_dir / "metadata.json").read_text()).get("total_steps")
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError):
        steps = None
    return nbytes, steps if isinstance(steps, int) and not isinstance(steps, bool) and steps >= 0 else None


def _check_unpacked_size(path: Path) -> None:
    """Refuse an ``.npz`` whose arrays, unpacked, exceed this machine's memory (a compressed "zip bomb"
    of a few kilobytes would otherwise be read until the process is killed). The sizes come from the
    zip's directory, which bounds what ``zipfile`` inflates, so nothing is decompressed here."""
    unpacked = _npz_unpacked_size(path)
    memory = _physical_memory()
    if memory is not None and unpacked > memory:
        raise DatasetError(
            f"Dataset {str(path)!r} unpacks to {_size(unpacked)}, more than this machine's {_size(memory)} of "
            "memory; use a smaller dataset or a machine with more memory."
        )


def _minari_data_dir(path: Path) -> Path | None:
    for candidate in (path, path / "data"):
        if (candidate / "metadata.json").is_file():
            return candidate
    return None


def _check_minari_metadata(data_dir: Path) -> None:
    """Refuse a Minari ``metadata.json`` that would make Minari run code.

    Minari (``MinariStorage.read``) rebuilds the dataset's env with
    ``gym.make(env_spec)`` when the file lacks ``observation_space`` or
    ``action_space``, and ``gym.make`` imports and calls the entry point the
    file names. A dataset rlfunc reads must carry both spaces (Minari >= 0.5
    writes them), so that never happens.
    """
    meta_path = data_dir / "metadata.json"
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"Minari metadata {str(meta_path)!r} is not readable JSON ({exc}).") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"Minari metadata {str(meta_path)!r} does not hold a mapping.")
    missing = [k for k in ("observation_space", "action_space") if not isinstance(meta.get(k), str)]
    if missing:
        raise DatasetError(
            f"Minari dataset {str(data_dir)!r} does not record its {' and '.join(missing)}; Minari would build the env "
            "its metadata names to recover them, which runs code from the file, so rlfunc refuses it; "
            "re-create the dataset with Minari >= 0.5, which records both spaces."
        )


def read_minari(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """Transitions of a local Minari dataset (a directory or a local id), in the npz keys, plus its spaces.

    Each episode's ``observations [T+1]`` give ``observations = obs[:-1]`` and
    ``next_observations = obs[1:]``; ``terminations`` become ``terminals`` and
    ``truncations`` become ``timeouts``. Returns ``(arrays, info)`` with
    ``info["action_space"]``, ``info["observation_space"]``, ``info["env_id"]`` and
    ``info["env_kwargs"]`` (its env spec's, or ``None``).
    """
    path = resolve_dataset_path(path)
    data_dir = _minari_data_dir(path)
    if data_dir is None:
        raise DatasetError(f"{str(path)!r} is not a Minari dataset directory (no metadata.json in it or in data/).")
    _check_minari_metadata(data_dir)
    try:
        import minari
    except ImportError:
        raise DatasetError(f"Reading Minari datasets needs the optional extra: {_MINARI_EXTRA} (or convert the dataset to .npz).") from None
    try:
        ds = minari.MinariDataset(str(data_dir))
    except ImportError as exc:  # a storage's own imports (h5py, PIL, pyarrow)
        raise DatasetError(
            f"Minari cannot open {str(data_dir)!r}: its storage needs {exc.name or str(exc)!r}, which is not installed; "
            f"{_MINARI_EXTRA} installs what Minari's storages need."
        ) from None
    except Exception as exc:
        raise DatasetError(f"Minari could not open {str(data_dir)!r} ({type(exc).__name__}: {exc}).") from None
    obs, acts, rews, nxt, terms, timeouts = [], [], [], [], [], []
    unflagged: list[int] = []
    episodes = 0
    for ep in ds.iterate_episodes():
        episodes += 1
        o = ep.observations
        if not isinstance(o, np.ndarray):
            raise DatasetError(
                f"Minari dataset {str(data_dir)!r} has structured (dict/tuple) observations; "
                "rlfunc's RLPD needs flat Box observations."
            )
        t = len(ep.actions)
        if len(o) != t + 1:
            raise DatasetError(
                f"Minari episode {ep.id} has {len(o)} observations for {t} actions; expected {t + 1}."
            )
        obs.append(o[:-1])
        nxt.append(o[1:])
        acts.append(np.asarray(ep.actions))
        rews.append(np.asarray(ep.rewards))
        terms.append(np.asarray(ep.terminations))
        timeouts.append(np.asarray(ep.truncations))
        if t and not (bool(terms[-1][-1]) or bool(timeouts[-1][-1])):
            unflagged.append(int(ep.id))
    if not obs:
        raise DatasetError(f"Minari dataset {str(data_dir)!r} holds no episodes.")
    if unflagged:
        shown = ", ".join(str(i) for i in unflagged[:5]) + (", ..." if len(unflagged) > 5 else "")
        warnings.warn(
            f"Minari dataset {str(data_dir)!r}: {len(unflagged)} of {episodes} episodes end with neither a termination "
            f"nor a truncation flag (episode {shown}); their last transitions are read as cut by a time limit "
            "(bootstrapped), so re-create the dataset with the flags if those episodes really terminated.",
            DatasetWarning,
            stacklevel=2,
        )
    arrays = {
        "observations": np.concatenate(obs),
        "actions": np.concatenate(acts),
        "rewards": np.concatenate(rews),
        "next_observations": np.concatenate(nxt),
        "terminals": np.concatenate(terms),
        "timeouts": np.concatenate(timeouts),
    }
    env_id, env_kwargs = None, None
    spec = getattr(ds, "env_spec", None)
    if spec is not None:
        env_id = spec.id
        env_kwargs = dict(spec.kwargs) if isinstance(getattr(spec, "kwargs", None), dict) else None
    info = {
        "action_space": ds.action_space,
        "observation_space": ds.observation_space,
        "env_id": env_id,
        "env_kwargs": env_kwargs,
    }
    return arrays, info


def write_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> Path:
    """Write a D4RL-style ``.npz`` atomically (temporary name, then rename).

    A write that fails (a full disk, a place that cannot be written) removes the temporary file
    and raises :class:`DatasetError`: one sentence naming ``path``, never the temporary name.
    """
    path = Path(path)
    if path.suffix != ".npz":
        raise DatasetError(f"Dataset output must end in .npz, got {str(path)!r}.")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}.npz")
    try:
        np.savez(tmp, **arrays)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass  # the error below says what went wrong; a leftover is the lesser harm
        if not isinstance(exc, OSError):
            raise
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise DatasetError(f"Cannot write the dataset to {str(path)!r}: the disk is full; free space and run again.") from None
        raise DatasetError(
            f"Cannot write the dataset to {str(path)!r} ({exc.strerror or str(exc).replace(str(tmp), str(path))}); "
            "pass an output path in a place you can write to."
        ) from None
    return path


def dataset_checksum(path: str | Path) -> str:
    """SHA-256 of a dataset file, or of every file (names and bytes) under a directory."""
    path = Path(path)
    h = hashlib.sha256()
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


# --------------------------------------------------------------------------- validation


def _recorded_text(a) -> str:
    """The env id a file recorded: a 0-d or one-element array of str or bytes (h5py and numpy write
    bytes for ``S`` strings) as text; anything else as ``str`` of it (it then fails the comparison)."""
    a = np.asarray(a)
    if a.size == 1 and a.dtype.kind in "SU":
        v = a.reshape(()).item()
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
    return str(a)


def _is_real(a: np.ndarray) -> bool:
    return a.dtype.kind in "fiu" or a.dtype == np.bool_


def _first_bad_row(mask: np.ndarray) -> int:
    flat = mask.reshape(mask.shape[0], -1).any(axis=1)
    return int(np.flatnonzero(flat)[0])


def validate_arrays(
    arrays: dict[str, np.ndarray],
    obs_space,
    act_space,
    *,
    source: str = "dataset",
    env_id: str | None = None,
    env_kwargs: dict | None = None,
    env_wrappers: list | None = None,
) -> int:
    """Check raw D4RL-style arrays against the env's (native) spaces; returns the row count.

    ``act_space`` is the env's own action ``Box`` (before rlfunc rescales it to
    ``[-1, 1]``). ``env_kwargs`` and ``env_wrappers`` (the run's ``env`` section), when
    given, are checked against the ones the file recorded, if any (:func:`check_env_config`).
    Raises :class:`DatasetError` with one sentence per problem.
    """
    present = list(arrays)
    missing = [k for k in REQUIRED_KEYS if k not in arrays]
    if missing:
        hints = []
        for k in missing:
            close = difflib.get_close_matches(k, present, n=1, cutoff=0.6)
            hints.append(f"{k!r}" + (f" (found {close[0]!r})" if close else ""))
        raise DatasetError(
            f"{source} is missing key(s) {', '.join(hints)}; a dataset needs {', '.join(REQUIRED_KEYS)} "
            f"(and optionally timeouts). It has: {', '.join(sorted(present))}."
        )
    if env_id is not None and "env_id" in arrays:
        recorded = _recorded_text(arrays["env_id"])
        if recorded and not same_env_id(recorded, env_id):
            raise DatasetError(
                f"{source} was recorded in {recorded!r}, but the run's env is {env_id!r}; "
                "use a dataset of the same env (or set env.id accordingly)."
            )
    check_env_config(arrays, source, env_id, env_kwargs, env_wrappers)
    n = None
    for k in REQUIRED_KEYS + tuple(k for k in OPTIONAL_KEYS if k in arrays):
        a = arrays[k]
        if not isinstance(a, np.ndarray) or a.ndim == 0:
            raise DatasetError(f"{source}: {k!r} must be an array with one row per transition, got a scalar.")
        if not _is_real(a):
            raise DatasetError(f"{source}: {k!r} has dtype {a.dtype}; it must hold real numbers (float, int or bool).")
        if n is None:
            n = a.shape[0]
        elif a.shape[0] != n:
            raise DatasetError(
                f"{source}: {k!r} has {a.shape[0]} rows but observations has {n}; every key needs one row per transition."
            )
    if not n:
        raise DatasetError(f"{source} holds no transitions.")
    obs_shape = tuple(obs_space.shape)
    for k in ("observations", "next_observations"):
        if tuple(arrays[k].shape[1:]) != obs_shape:
            raise DatasetError(
                f"{source}: {k!r} rows have shape {tuple(arrays[k].shape[1:])}, but the env's observations have "
                f"shape {obs_shape}; the dataset belongs to another env or observation wrapper."
            )
    act_shape = tuple(act_space.shape)
    if tuple(arrays["actions"].shape[1:]) != act_shape:
        raise DatasetError(
            f"{source}: 'actions' rows have shape {tuple(arrays['actions'].shape[1:])}, but the env's actions have "
            f"shape {act_shape}; the dataset belongs to another env."
        )
    for k in ("rewards", "terminals", "timeouts"):
        if k in arrays:
            a = arrays[k]
            if not (a.ndim == 1 or (a.ndim == 2 and a.shape[1] == 1)):
                raise DatasetError(f"{source}: {k!r} must have shape [N] (or [N, 1]), got {tuple(a.shape)}.")
    for k in ("observations", "actions", "rewards", "next_observations"):
        a = arrays[k]
        if a.dtype.kind == "f":
            bad = ~np.isfinite(a)
            if bad.any():
                row = _first_bad_row(bad)
                raise DatasetError(
                    f"{source}: {k!r} holds {int(bad.sum())} NaN/inf value(s) (first in row {row}); "
                    "clean or drop those transitions."
                )
        if a.dtype.kind == "f" and a.dtype.itemsize > 4:  # float64 beyond float32's range becomes inf in the rows
            big = np.abs(a) > _F32_MAX
            if big.any():
                row = _first_bad_row(big)
                raise DatasetError(
                    f"{source}: {k!r} holds {int(big.sum())} value(s) beyond float32's range (first in row {row}), "
                    "which would become inf in training; clean or rescale those transitions."
                )
    for k in ("terminals", "timeouts"):
        if k in arrays:
            a = arrays[k]
            if a.dtype != np.bool_ and not np.isin(a, (0, 1)).all():
                raise DatasetError(f"{source}: {k!r} must be booleans or 0/1, found other values.")
    low = np.asarray(act_space.low, dtype=np.float64)
    high = np.asarray(act_space.high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all() and (high > low).all()):
        raise DatasetError(  # the rescale to [-1, 1] would turn every action into NaN
            f"{source} cannot be rescaled to the env's action space {act_space}: its bounds must be finite with "
            "low < high; give the env a bounded Box action space."
        )
    for key, want in (("action_low", low), ("action_high", high)):
        if key in arrays:
            a = arrays[key]
            if not isinstance(a, np.ndarray) or not _is_real(a):  # a crafted file: strings, objects, complex
                raise DatasetError(
                    f"{source}: {key!r} has dtype {getattr(a, 'dtype', type(a).__name__)}; it must hold the env's "
                    "action bounds as real numbers."
                )
            got = np.asarray(arrays[key], dtype=np.float64).reshape(want.shape) if np.size(arrays[key]) == want.size else None
            if got is None or not np.allclose(got, want, rtol=1e-5, atol=1e-6):
                raise DatasetError(
                    f"{source} was recorded with action bounds {key}={np.asarray(arrays[key]).tolist()}, but the env's "
                    f"are {want.tolist()}; actions are stored in the env's own bounds, so use a dataset of this env."
                )
    tol = _BOUND_TOL * (high - low)
    acts = arrays["actions"].astype(np.float64)
    outside = (acts < low - tol) | (acts > high + tol)
    if outside.any():
        row = _first_bad_row(outside)
        raise DatasetError(
            f"{source}: {int(outside.any(axis=-1).sum())} action(s) lie outside the env's bounds "
            f"[{low.tolist()}, {high.tolist()}] (first in row {row}: {arrays['actions'][row].tolist()}); "
            "datasets store actions in the env's own bounds (not rescaled)."
        )
    olow = np.asarray(getattr(obs_space, "low", -np.inf), dtype=np.float64)
    ohigh = np.asarray(getattr(obs_space, "high", np.inf), dtype=np.float64)
    if not (np.isfinite(olow).any() or np.isfinite(ohigh).any()):
        return int(n)  # unbounded (MuJoCo's): nothing to check, and no float64 copy of every observation
    span = np.where(np.isfinite(ohigh - olow), ohigh - olow, 1.0)
    otol = _BOUND_TOL * span
    chunk = max(1, _CHECK_CHUNK_ELEMENTS // max(1, int(np.prod(obs_shape))))
    for k in ("observations", "next_observations"):
        for start in range(0, n, chunk):
            a = arrays[k][start : start + chunk].astype(np.float64)
            outside = (a < olow - otol) | (a > ohigh + otol)
            if outside.any():
                row = start + _first_bad_row(outside)
                raise DatasetError(
                    f"{source}: {k!r} row {row} lies outside the env's observation bounds; "
                    "the dataset belongs to another env or observation wrapper."
                )
    return int(n)


# --------------------------------------------------------------------------- the dataset


@dataclasses.dataclass
class OfflineDataset:
    """Prior transitions on tensor storage: ``rows [N]`` with the replay's keys.

    ``rows``: ``obs``, ``action`` (in ``[-1, 1]``, clipped), ``reward``,
    ``next_obs``, ``terminated`` (float 0/1), the keys and dtypes of
    :class:`~rlfunc.replay.uniform.UniformReplay` rows in the runtime.
    """

    rows: TensorDict
    path: str = ""
    format: str = "npz"
    checksum: str = ""

    def __len__(self) -> int:
        return int(self.rows.batch_size[0])

    @property
    def device(self) -> torch.device:
        return self.rows.device

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """``batch_size`` rows uniformly with replacement (official ``Dataset.sample``)."""
        return self.rows[self.draw_indices(batch_size, generator)]

    def draw_indices(self, batch_size: int, generator: torch.Generator | None = None) -> torch.Tensor:
        """The row indices :meth:`sample` gathers (``batch_size``, uniform with replacement)."""
        return torch.randint(len(self), (batch_size,), generator=generator, device=self.rows.device)

    @classmethod
    def from_arrays(
        cls,
        arrays: dict[str, np.ndarray],
        obs_space,
        act_space,
        *,
        source: str = "dataset",
        env_id: str | None = None,
        env_kwargs: dict | None = None,
        env_wrappers: list | None = None,
        clip_eps: float = ACTION_CLIP_EPS,
        device: torch.device | str = "cpu",
        path: str = "",
        fmt: str = "npz",
        checksum: str = "",
    ) -> "OfflineDataset":
        """Validate raw arrays (:func:`validate_arrays`) and convert them to training rows."""
        n = validate_arrays(
            arrays, obs_space, act_space, source=source, env_id=env_id, env_kwargs=env_kwargs, env_wrappers=env_wrappers
        )
        low = np.asarray(act_space.low, dtype=np.float64)
        high = np.asarray(act_space.high, dtype=np.float64)
        acts = arrays["actions"].astype(np.float64)
        acts = 2.0 * (acts - low) / (high - low) - 1.0  # env bounds -> [-1, 1] (identity for [-1, 1] envs)
        lim = 1.0 - clip_eps
        acts = np.clip(acts, -lim, lim)
        terminals = np.asarray(arrays["terminals"]).reshape(n).astype(bool)
        rows = TensorDict(
            {
                "obs": torch.as_tensor(np.asarray(arrays["observations"], dtype=np.float32)),
                "action": torch.as_tensor(acts.astype(np.float32)),
                "reward": torch.as_tensor(np.asarray(arrays["rewards"], dtype=np.float32).reshape(n)),
                "next_obs": torch.as_tensor(np.asarray(arrays["next_observations"], dtype=np.float32)),
                "terminated": torch.as_tensor(terminals.astype(np.float32)),
            },
            batch_size=[n],
        ).to(device)
        return cls(rows=rows, path=path, format=fmt, checksum=checksum)


def load_dataset(
    path: str | Path,
    obs_space,
    act_space,
    *,
    fmt: str = "auto",
    env_id: str | None = None,
    env_kwargs: dict | None = None,
    env_wrappers: list | None = None,
    clip_eps: float = ACTION_CLIP_EPS,
    device: torch.device | str = "cpu",
) -> OfflineDataset:
    """Load and validate a prior dataset for an env with these (native) spaces.

    ``path``: an ``.npz`` file, a Minari dataset directory, or the id of a dataset in Minari's
    local store (:func:`resolve_dataset_path`).

    ``act_space`` is the env's own action ``Box``; actions come back rescaled
    to ``[-1, 1]`` and clipped to ``(-1 + clip_eps, 1 - clip_eps)``. ``env_id``,
    ``env_kwargs`` and ``env_wrappers`` (optional: the run's ``env`` section) are checked
    against what the dataset recorded, if it did (a Minari dataset records its env spec's
    id and kwargs, no wrappers).
    """
    fmt = detect_format(path, fmt)
    named = str(path)
    path = resolve_dataset_path(path)
    source = f"Dataset {named!r}" if str(path) == named else f"Dataset {named!r} ({str(path)!r})"
    if fmt == "npz":
        arrays = read_npz(path)
    else:
        arrays, info = read_minari(path)
        _check_minari_spaces(info, obs_space, act_space, source)
        if env_id is not None and info.get("env_id") and not same_env_id(info["env_id"], env_id):
            raise DatasetError(
                f"{source} was recorded in {info['env_id']!r}, but the run's env is {env_id!r}; "
                "use a dataset of the same env."
            )
        if env_kwargs is not None and isinstance(info.get("env_kwargs"), dict):
            _refuse_other_kwargs(info["env_kwargs"], env_kwargs, env_id, source)
    return OfflineDataset.from_arrays(
        arrays,
        obs_space,
        act_space,
        source=source,
        env_id=env_id,
        env_kwargs=env_kwargs,
        env_wrappers=env_wrappers,
        clip_eps=clip_eps,
        device=device,
        path=str(path),
        fmt=fmt,
        checksum=dataset_checksum(path),
    )


def _check_minari_spaces(info: dict[str, Any], obs_space, act_space, source: str) -> None:
    a = info.get("action_space")
    if a is not None and hasattr(a, "low"):
        if tuple(a.shape) != tuple(act_space.shape) or not (
            np.allclose(a.low, act_space.low) and np.allclose(a.high, act_space.high)
        ):
            raise DatasetError(
                f"{source} has action space {a}, but the env's is {act_space}; use a dataset of this env."
            )
    o = info.get("observation_space")
    if o is not None and hasattr(o, "shape") and o.shape is not None and tuple(o.shape) != tuple(obs_space.shape):
        raise DatasetError(
            f"{source} has observation space {o}, but the env's is {obs_space}; use a dataset of this env."
        )


# --------------------------------------------------------------------------- the mixer


class MixedSampler:
    """Mini-batches of exactly ``round(B * ratio)`` prior rows and the rest online.

    RLPD's "symmetric sampling" (``offline_ratio = 0.5``): every mini-batch of
    ``B`` rows holds ``k = round(B * ratio)`` rows drawn uniformly from the
    prior ``dataset`` and ``B - k`` drawn uniformly from the ``online``
    replay, so prior data is never copied into the online buffer. One call
    draws a whole environment step's ``[G, B]`` batch: ``G * k`` prior and
    ``G * (B - k)`` online rows at once; mini-batch ``g`` is its ``k`` prior
    rows followed by its ``B - k`` online rows (the order of rows inside a
    mini-batch changes nothing: every loss averages over rows). The official
    code interleaves one combined ``G * B`` batch (``combine``: rows ``0::2``
    prior) and slices it into ``G`` contiguous mini-batches, which gives each
    mini-batch the same ``B/2 + B/2`` split.
    """

    def __init__(self, dataset: OfflineDataset, online, ratio: float = 0.5) -> None:
        if not 0.0 <= ratio <= 1.0:
            raise ValueError(f"offline ratio must be in [0, 1], got {ratio}.")
        self.dataset = dataset
        self.online = online
        self.ratio = float(ratio)

    def offline_rows(self, batch_size: int) -> int:
        """Prior rows per mini-batch of ``batch_size``: ``round(batch_size * ratio)``."""
        return int(round(batch_size * self.ratio))

    def ready(self) -> bool:
        """True once both sources can supply their share."""
        return self.ratio == 1.0 or len(self.online) >= 1

    def sample(self, updates: int, batch_size: int, generator: torch.Generator | None = None) -> TensorDict:
        """A ``[updates, batch_size]`` batch; rows ``[:, :k]`` prior, ``[:, k:]`` online."""
        k = self.offline_rows(batch_size)
        parts = []
        if k > 0:
            parts.append(self.dataset.sample(updates * k, generator=generator).reshape(updates, k))
        if k < batch_size:
            online = self.online.sample(updates * (batch_size - k), generator=generator)
            parts.append(online.reshape(updates, batch_size - k))
        if len(parts) == 1:
            return parts[0]
        return torch.cat(parts, dim=1)


def describe(dataset: OfflineDataset) -> dict[str, Any]:
    """JSON-safe summary of a dataset (for checkpoint meta and logs)."""
    rows = dataset.rows
    return {
        "path": dataset.path,
        "format": dataset.format,
        "sha256": dataset.checksum,
        "transitions": len(dataset),
        "terminals": int(rows["terminated"].sum()),
        "reward_mean": float(rows["reward"].mean()),
    }
