"""Networks as parameter TensorDicts with pure ``apply`` functions.

A network is a ``TensorDict`` of parameters and a pure function
``apply(params, x) -> y``; nothing else. Layer ``i`` of an MLP lives at
``params[str(i)]`` with ``weight`` of shape ``[out, in]`` (the ``nn.Linear``
layout, so ``F.linear`` and parity tests against ``nn.Module`` code need no
transposes) and ``bias`` of shape ``[out]``. An optional LayerNorm after hidden
layer ``i`` lives at ``params["norm" + str(i)]`` (RLPD, Ball et al. 2023).

Ensembles stack member parameters on a leading dimension ``N``
(``batch_size == [N]``). :func:`ensemble_apply` evaluates all members and can
do so in three numerically equivalent ways (``mode``), because which one is
fastest depends on the device (see ``benchmarks/run.py update``):

* ``"loop"``: unbind the stacked leaves and run each member with ``F.linear``
  (what the official REDQ code does with ten modules, but on one parameter
  tensor per layer, so the optimizer and target updates stay batched);
* ``"bmm"``: batched matrix multiplies over the stacked weights;
* ``"vmap"``: ``torch.func.vmap`` over :func:`mlp_apply`.
"""

from __future__ import annotations

import math
from typing import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from tensordict import TensorDict

__all__ = [
    "linear_init",
    "mlp_init",
    "mlp_apply",
    "num_linear_layers",
    "ensemble_init",
    "ensemble_apply",
    "ENSEMBLE_MODES",
]

ENSEMBLE_MODES = ("loop", "bmm", "vmap")

_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": torch.relu,
    "tanh": torch.tanh,
    "elu": F.elu,
    "gelu": F.gelu,
}


def linear_init(
    in_features: int,
    out_features: int,
    *,
    init: str = "xavier_uniform",
    gain: float = 1.0,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """Parameters of one linear layer: ``weight [out, in]``, ``bias [out]``.

    ``init`` is one of:

    * ``"xavier_uniform"``: U(-a, a), a = gain * sqrt(6 / (in + out)), zero
      bias -- REDQ's ``weights_init_`` (watchernyu/REDQ ``redq/algos/core.py``);
    * ``"orthogonal"``: orthogonal rows/columns scaled by ``gain``, zero bias --
      DrQ-v2's ``utils.weight_init`` and Acme/flax defaults;
    * ``"torch_default"``: ``nn.Linear``'s own kaiming-uniform(a=sqrt(5)) weight
      and U(-1/sqrt(in), 1/sqrt(in)) bias.
    """
    weight = torch.empty(out_features, in_features, device=device, dtype=dtype)
    bias = torch.zeros(out_features, device=device, dtype=dtype)
    if init == "xavier_uniform":
        bound = gain * math.sqrt(6.0 / (in_features + out_features))
        weight.uniform_(-bound, bound, generator=generator)
    elif init == "orthogonal":
        rows, cols = out_features, in_features
        flat = torch.empty(max(rows, cols), min(rows, cols), dtype=torch.float32, device=device)
        flat.normal_(generator=generator)
        q, r = torch.linalg.qr(flat)
        q = q * torch.sign(torch.diagonal(r)).unsqueeze(0)
        if rows < cols:
            q = q.T
        weight.copy_(gain * q[:rows, :cols])
    elif init == "torch_default":
        bound = 1.0 / math.sqrt(in_features) if in_features > 0 else 0.0
        weight.uniform_(-bound, bound, generator=generator)
        bias.uniform_(-bound, bound, generator=generator)
    else:
        raise ValueError(
            f"Unknown init {init!r}; use one of 'xavier_uniform', 'orthogonal', 'torch_default'."
        )
    return TensorDict({"weight": weight, "bias": bias}, batch_size=[])


def mlp_init(
    sizes: Sequence[int],
    *,
    layer_norm: bool = False,
    init: str = "xavier_uniform",
    gain: float = 1.0,
    last_gain: float | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """Parameters of an MLP with layer sizes ``sizes`` (input first, output last).

    With ``layer_norm=True`` every *hidden* layer gets a LayerNorm (gain 1,
    bias 0) between its Linear and its activation, and the output layer none:
    the RLPD critic (Linear -> LayerNorm -> ReLU; ikostrikov/rlpd ``MLP`` with
    ``use_layer_norm=True``).
    """
    if len(sizes) < 2:
        raise ValueError(f"An MLP needs at least an input and an output size, got sizes={list(sizes)}.")
    layers: dict[str, TensorDict] = {}
    n_linear = len(sizes) - 1
    for i in range(n_linear):
        is_last = i == n_linear - 1
        g = last_gain if (is_last and last_gain is not None) else gain
        layers[str(i)] = linear_init(
            sizes[i], sizes[i + 1], init=init, gain=g, generator=generator, device=device, dtype=dtype
        )
        if layer_norm and not is_last:
            layers["norm" + str(i)] = TensorDict(
                {
                    "weight": torch.ones(sizes[i + 1], device=device, dtype=dtype),
                    "bias": torch.zeros(sizes[i + 1], device=device, dtype=dtype),
                },
                batch_size=[],
            )
    return TensorDict(layers, batch_size=[])


def num_linear_layers(params: Mapping) -> int:
    """Number of linear layers of an MLP parameter TensorDict (static: from keys)."""
    n = 0
    while str(n) in params.keys():
        n += 1
    return n


def mlp_apply(
    params: Mapping,
    x: torch.Tensor,
    *,
    activation: str = "relu",
    activate_last: bool = False,
    ln_eps: float = 1e-5,
) -> torch.Tensor:
    """Apply an MLP made by :func:`mlp_init` to ``x [..., in]`` -> ``[..., out]``.

    ``params`` may be a ``TensorDict`` or a plain mapping with tuple keys
    ``(layer, "weight")``. LayerNorm is applied after hidden layer ``i`` iff
    ``"norm<i>"`` parameters exist. ``ln_eps`` is 1e-5 in PyTorch and 1e-6 in
    flax (the official RLPD code).
    """
    act = _ACTIVATIONS[activation]
    keys = _top_keys(params)
    n = 0
    while str(n) in keys:
        n += 1
    h = x
    for i in range(n):
        h = F.linear(h, params[str(i), "weight"], params[str(i), "bias"])
        if i < n - 1 or activate_last:
            norm = "norm" + str(i)
            if norm in keys:
                h = F.layer_norm(
                    h, (h.shape[-1],), params[norm, "weight"], params[norm, "bias"], eps=ln_eps
                )
            h = act(h)
    return h


def _top_keys(params: Mapping) -> set:
    if isinstance(params, TensorDict):
        return set(params.keys())
    return {k[0] if isinstance(k, tuple) else k for k in params.keys()}


def ensemble_init(n: int, init_member: Callable[[], TensorDict]) -> TensorDict:
    """Stack ``n`` independently initialised members on a new leading dim."""
    if n < 1:
        raise ValueError(f"An ensemble needs at least one member, got n={n}.")
    return torch.stack([init_member() for _ in range(n)], dim=0)


def _unbind_members(params: TensorDict) -> list[dict]:
    """Per-member views ``{(layer, name): tensor}`` of stacked parameters.

    Unbinding each leaf once (rather than indexing ``params[i]``) keeps the
    backward pass to one ``stack`` per leaf instead of ``N`` full-size scatters.
    """
    leaves = list(params.items(include_nested=True, leaves_only=True))
    n = params.batch_size[0]
    members: list[dict] = [dict() for _ in range(n)]
    for key, value in leaves:
        for i, v in enumerate(value.unbind(0)):
            members[i][key] = v
    return members


def ensemble_apply(
    params: TensorDict,
    x: torch.Tensor,
    *,
    mode: str = "loop",
    activation: str = "relu",
    ln_eps: float = 1e-5,
) -> torch.Tensor:
    """Apply every member of stacked MLP ``params`` (batch ``[N]``) to ``x``.

    ``x`` is either shared by all members (``[B, in]``) or per member
    (``[N, B, in]``). Returns ``[N, B, out]``. All modes compute the same
    function; ``mode`` only picks the kernel layout (module docstring).
    """
    if params.batch_dims != 1:
        raise ValueError(
            f"ensemble_apply expects parameters stacked on one leading dim, got batch_size={list(params.batch_size)}."
        )
    n = params.batch_size[0]
    shared = x.dim() == 2
    if not shared and x.shape[0] != n:
        raise ValueError(f"Per-member input must have leading dim {n}, got shape {tuple(x.shape)}.")
    if mode == "loop":
        members = _unbind_members(params)
        outs = [
            mlp_apply(p, x if shared else x[i], activation=activation, ln_eps=ln_eps)
            for i, p in enumerate(members)
        ]
        return torch.stack(outs, dim=0)
    if mode == "vmap":
        fn = lambda p, xi: mlp_apply(p, xi, activation=activation, ln_eps=ln_eps)  # noqa: E731
        return torch.func.vmap(fn, in_dims=(0, None if shared else 0))(params, x)
    if mode == "bmm":
        return _ensemble_bmm(params, x, activation=activation, ln_eps=ln_eps)
    raise ValueError(f"Unknown ensemble mode {mode!r}; use one of {ENSEMBLE_MODES}.")


def _ensemble_bmm(params: TensorDict, x: torch.Tensor, *, activation: str, ln_eps: float) -> torch.Tensor:
    act = _ACTIVATIONS[activation]
    keys = set(params.keys())
    n_layers = 0
    while str(n_layers) in keys:
        n_layers += 1
    h = x
    for i in range(n_layers):
        w = params[str(i), "weight"]  # [N, out, in]
        b = params[str(i), "bias"].unsqueeze(1)  # [N, 1, out]
        if h.dim() == 2:
            h = torch.matmul(h, w.transpose(1, 2)) + b
        else:
            h = torch.baddbmm(b, h, w.transpose(1, 2))
        if i < n_layers - 1:
            norm = "norm" + str(i)
            if norm in keys:
                h = F.layer_norm(h, (h.shape[-1],), eps=ln_eps)
                h = h * params[norm, "weight"].unsqueeze(1) + params[norm, "bias"].unsqueeze(1)
            h = act(h)
    return h
