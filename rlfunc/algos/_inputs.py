"""One-sentence checks of what a researcher passes to the pure functions (``init``, ``update``, ``act``).

DESIGN.md, "Bad input gets a clear error, early": a batch of the wrong rank,
width or dtype, a missing key, noise drawn for another batch, a state made by
another algorithm (or loaded from a checkpoint without its config) stops at the
top of the public function with one sentence naming what to change, instead of
a matrix-product error deep inside a loss or, worse, a silent broadcast. Every
check here reads only shapes, dtypes, devices and keys -- per-member under
``torch.vmap`` -- never tensor values,
so they add no host syncs. Under ``torch.compile`` they are skipped (traced,
a shape comparison under dynamic shapes adds guards or fails spuriously, and a
raised sentence would only reach dynamo's debug context): run one call eagerly
to have them (``tests/test_review_pure_api.py``). Value checks (an action index out of
range, a non-finite reward) are the replay's and the runtime's, outside the
compiled path.
"""

from __future__ import annotations

import numbers
from typing import Iterable, Mapping, Sequence

import torch
from tensordict import TensorDict

__all__ = [
    "NoiseUnderVmapError", "MissingKeyError", "state_config", "check_tensor", "check_keys", "check_noise",
    "check_device", "check_seed", "check_per_env", "check_epsilon", "check_finite_bounds", "under_vmap", "MAX_SEED",
]


def state_config(state, config_type: type, where: str, made_by: str):
    """``state["config"]`` when it is a ``config_type``; else one ``ValueError`` sentence.

    A state loaded from a checkpoint (:func:`rlfunc.runtime.checkpoint.load_checkpoint`)
    holds only tensors: the message says how to put the config back.
    """
    if not isinstance(state, TensorDict):
        raise ValueError(f"{where}: state must be the TensorDict {made_by} returns, got a {type(state).__name__}.")
    if "config" not in state.keys():
        raise ValueError(
            f"{where}: the state has no 'config' entry (a checkpoint stores only tensors); pass a state made by "
            f"{made_by}, or put the config back with state.set_non_tensor('config', config)."
        )
    config = state.get_non_tensor("config")
    if isinstance(config, list) and config and all(isinstance(c, config_type) for c in config):
        raise ValueError(  # torch.stack keeps each member's config, a list, where the update needs one
            f"{where}: the state holds {len(config)} configs (states stacked with torch.stack); stack the members' "
            "states with rlfunc.core.population.stack(states), which keeps one config and the settings as data."
        )
    if not isinstance(config, config_type):
        raise ValueError(
            f"{where}: the state was made with a {type(config).__module__}.{type(config).__name__}, not a "
            f"{config_type.__module__}.{config_type.__name__}; pass a state made by {made_by}."
        )
    return config


def _dims(shape: Sequence) -> str:
    """``[2, 4, 3]`` (labels as they are)."""
    return "[" + ", ".join(s if isinstance(s, str) else str(int(s)) for s in shape) + "]"


def check_tensor(
    where: str,
    name: str,
    value,
    shapes: Sequence[Sequence],
    *,
    dtype: torch.dtype | str | None = None,
    labels: Sequence[str] | None = None,
) -> None:
    """``value`` is a tensor of one of ``shapes`` (ints; labels for the message) and of ``dtype``.

    ``dtype``: a ``torch.dtype`` (exactly that one), ``"float"`` (any floating dtype),
    ``"integer"`` (an integer dtype, not bool), ``"real"`` (not complex) or ``None``.
    """
    if torch.compiler.is_compiling():  # see the module docstring: checked eagerly only
        return
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{where}: {name} must be a tensor, got a {type(value).__name__}.")
    if tuple(value.shape) not in [tuple(int(s) for s in shape) for shape in shapes]:
        shown = " or ".join(_dims(s) for s in shapes)
        if labels is not None:
            shown = f"{' or '.join(_dims(l) for l in labels)} = {shown}" if isinstance(labels[0], (list, tuple)) else f"{_dims(labels)} = {shown}"
        raise ValueError(f"{where}: {name} must have shape {shown}, got {_dims(value.shape)}.")
    if dtype is not None and not _dtype_ok(value, dtype):
        raise ValueError(
            f"{where}: {name} must have dtype {_dtype_wanted(dtype)}, got {value.dtype}; convert it before the call."
        )


def _dtype_ok(value: torch.Tensor, dtype: torch.dtype | str) -> bool:
    """Whether ``value`` has ``dtype`` (a ``torch.dtype`` exactly, or ``"float"``, ``"integer"``, ``"real"``)."""
    if isinstance(dtype, torch.dtype):
        return value.dtype == dtype
    if dtype == "float":
        return value.is_floating_point()
    if dtype == "integer":
        return not value.is_floating_point() and not value.is_complex() and value.dtype != torch.bool
    return not value.is_complex()


def _dtype_wanted(dtype: torch.dtype | str, integer: str = "integer (action indices)") -> str:
    """The dtype :func:`_dtype_ok` wants, in words."""
    if isinstance(dtype, torch.dtype):
        return f"{dtype} (the parameters' dtype)"
    return {"float": "floating point", "integer": integer, "real": "real (not complex)"}[dtype]


class MissingKeyError(ValueError, KeyError):
    """A TensorDict argument without an entry the function reads. A ``ValueError`` (bad input, one
    sentence) that is also the ``KeyError`` DRQN and R2D2 raised for it before :func:`check_keys`
    did, so code that caught that keeps working; shown as its sentence (``KeyError`` would quote it)."""

    __str__ = ValueError.__str__


def check_keys(where: str, td, required: Iterable[str], hint: str, *, name: str = "the batch") -> None:
    """``td`` is a TensorDict holding every key of ``required`` (``name``: what the message calls it)."""
    if torch.compiler.is_compiling():  # see the module docstring: checked eagerly only
        return
    if not isinstance(td, TensorDict):
        said = "expected a TensorDict" if name == "the batch" else f"{name} must be a TensorDict"
        raise ValueError(f"{where}: {said}, got a {type(td).__name__}; {hint}")
    missing = [k for k in required if k not in td.keys()]
    if missing:
        raise MissingKeyError(f"{where}: {name} is missing {', '.join(repr(k) for k in missing)}; {hint}")


def check_noise(
    where: str,
    noise,
    expected: Mapping[str, tuple],
    drawn_by: str,
    dtypes: Mapping[str, torch.dtype | str] | None = None,
) -> None:
    """``noise`` holds each key of ``expected`` with exactly that shape (noise drawn for another
    batch size, ensemble or action width would otherwise be sliced or broadcast silently) and,
    for each key of ``dtypes``, that dtype (as :func:`check_tensor`'s ``dtype``: float64 noise
    for float32 parameters failed deep inside a matrix product)."""
    if torch.compiler.is_compiling():  # see the module docstring: checked eagerly only
        return
    if not isinstance(noise, TensorDict):
        raise ValueError(f"{where}: noise must be the TensorDict {drawn_by} returns, got a {type(noise).__name__}.")
    for key, shape in expected.items():
        if key not in noise.keys():
            raise ValueError(f"{where}: noise is missing {key!r}; draw it with {drawn_by}.")
        got = tuple(noise[key].shape)
        if got != tuple(shape):
            raise ValueError(
                f"{where}: noise[{key!r}] has shape {_dims(got)} but this batch needs {_dims(shape)}; draw the noise "
                f"for this batch and config with {drawn_by}."
            )
        want = (dtypes or {}).get(key)
        if want is not None and not _dtype_ok(noise[key], want):
            raise ValueError(
                f"{where}: noise[{key!r}] must have dtype {_dtype_wanted(want, 'integer')}, got {noise[key].dtype}; "
                f"draw it with {drawn_by} or convert it before the call."
            )


def check_per_env(where: str, name: str, value, num_envs: int, dtype: str, device: torch.device) -> torch.Tensor:
    """``value`` (a tensor, array or list: one entry per env, ``[B]`` or ``[B, 1]``; a 0-d one for one env)
    as a tensor on ``device``, else one sentence naming ``name`` (``dtype``: as :func:`check_tensor`'s).
    Another number of entries failed inside ``reshape``/``where`` or broadcast silently."""
    if not isinstance(value, torch.Tensor):
        try:
            value = torch.as_tensor(value, device=device)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{where}: {name} must be a tensor [B] = [{num_envs}], got {value!r}.") from None
    if value.dim() == 0 and num_envs == 1:
        value = value.reshape(1)
    check_tensor(where, name, value, [(num_envs,), (num_envs, 1)], dtype=dtype, labels=[["B"], ["B", 1]])
    return value.to(device)


def check_epsilon(where: str, epsilon, num_envs: int) -> None:
    """An exploration rate: a number from 0 to 1, or a tensor ``[]`` or ``[B]`` (one per env; a
    ``[2]`` for 3 envs failed inside the comparison with the noise, a ``[B, B]`` broadcast the
    actions to ``[B, B]``). A tensor's values are not read (no host sync)."""
    if torch.compiler.is_compiling():  # see the module docstring: checked eagerly only
        return
    if isinstance(epsilon, numbers.Real) and not isinstance(epsilon, bool):
        if not 0.0 <= float(epsilon) <= 1.0:
            raise ValueError(f"{where}: epsilon must be a number from 0 to 1, got {epsilon!r}.")
        return
    if not isinstance(epsilon, torch.Tensor):
        raise ValueError(
            f"{where}: epsilon must be a number from 0 to 1 or a tensor [B] = [{num_envs}] of them, got {epsilon!r}."
        )
    check_tensor(where, "epsilon", epsilon, [(), (num_envs,)], dtype="real", labels=[[], ["B"]])


def check_device(where: str, like: torch.Tensor, tds: Mapping[str, object]) -> None:
    """Every tensor of the TensorDicts in ``tds`` lives on ``like``'s device (the state's)."""
    if torch.compiler.is_compiling():  # see the module docstring: checked eagerly only
        return
    for label, td in tds.items():
        if td is None:
            continue
        items = td.items(include_nested=True, leaves_only=True) if isinstance(td, TensorDict) else [(label, td)]
        for key, value in items:
            if isinstance(value, torch.Tensor) and value.device != like.device:
                name = label if key == label else f"{label}[{key!r}]"
                raise ValueError(
                    f"{where}: {name} is on {value.device} but the state is on {like.device}; move it with .to()."
                )


def check_device_arg(device, where: str | None = None, *, allow_meta: bool = True) -> torch.device:
    """``device`` as a ``torch.device``; one sentence (prefixed ``where: `` if given) for a bad string,
    a CUDA or MPS device this machine lacks, or a device type rlfunc does not run on. The one device
    check: :func:`rlfunc.runtime.api.check_device` (loading, evaluating; no ``meta``) calls it too."""
    at = f"{where}: " if where else ""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(f"{at}device must be a torch device such as 'cpu' or 'cuda:0', got {device!r}.") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{at}device {str(device)!r} asks for CUDA, but CUDA is not available here; use 'cpu'.")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"{at}device {str(device)!r} does not exist; this machine has {torch.cuda.device_count()} CUDA "
                "device(s): use 'cuda:0' or 'cpu'."
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"{at}device {str(device)!r} asks for MPS, but MPS is not available here; use 'cpu'.")
    elif dev.type not in ("cpu", "cuda", "mps", *(("meta",) if allow_meta else ())):
        raise ValueError(f"{at}device {str(device)!r} is not supported; use 'cpu', 'cuda' or 'cuda:N'.")
    return dev


MAX_SEED = 2**63 - 1
"""The largest seed ``init`` takes (a non-negative int64)."""


def check_seed(seed, where: str) -> int:
    """An integer seed from 0 to :data:`MAX_SEED` (a bool, a float such as ``1.5`` or a string is refused:
    it would be truncated or fail later; a negative seed was silently another one, a larger one overflowed)."""
    if isinstance(seed, torch.Tensor) and seed.dim() == 0 and not seed.is_floating_point() and seed.dtype != torch.bool:
        seed = int(seed)
    if not isinstance(seed, numbers.Integral) or isinstance(seed, bool):
        raise ValueError(f"{where}: seed must be an integer, got {seed!r}.")
    if not 0 <= int(seed) <= MAX_SEED:
        raise ValueError(f"{where}: seed must be an integer from 0 to 2**63 - 1, got {int(seed)}.")
    return int(seed)


class NoiseUnderVmapError(ValueError, RuntimeError):
    """An update that would draw its own noise inside ``torch.vmap``. A ``ValueError`` (bad
    input, one sentence) that is also the ``RuntimeError`` torch's ``randomness="error"`` raised
    there before this check existed, so code that caught that keeps working."""


def under_vmap(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is batched by an enclosing ``torch.vmap`` (eager only: ``False`` while compiling)."""
    if torch.compiler.is_compiling():
        return False
    try:
        return bool(torch._C._functorch.is_batchedtensor(tensor))
    except (AttributeError, RuntimeError):  # pragma: no cover - older torch
        return False


def check_finite_bounds(algos: str, act_space, verb: str = "squash") -> None:
    """A Box action space with finite bounds, else one sentence: the policy squashes actions into
    ``[-1, 1]`` and rescales them to ``[low, high]``, which an infinite bound turns into inf or NaN."""
    import numpy as np

    low, high = np.asarray(act_space.low, dtype=np.float64), np.asarray(act_space.high, dtype=np.float64)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ValueError(
            f"{algos} {verb} actions into the action space's bounds, which must be finite, got low {low.tolist()} and "
            f"high {high.tolist()}; give the env's action space finite bounds (the range of actions that make sense)."
        )
