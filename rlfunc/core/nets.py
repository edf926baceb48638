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
    "lecun_normal_",
    "haiku_normal_",
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


TRUNCATED_NORMAL_STD = 0.87962566103423978
"""Standard deviation of a unit normal truncated to [-2, 2] (haiku's and flax's ``VarianceScaling`` divide by it)."""


def lecun_normal_(weight: torch.Tensor, fan_in: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Fill ``weight`` in place from N(0, s^2) truncated to [-2s, 2s], s = sqrt(1 / fan_in) / 0.8796...:
    variance 1 / ``fan_in`` after truncation, flax's and jax's ``lecun_normal``
    (``VarianceScaling(1.0, "fan_in", "truncated_normal")``)."""
    return _truncated_normal_(weight, math.sqrt(1.0 / max(fan_in, 1)) / TRUNCATED_NORMAL_STD, generator)


def haiku_normal_(weight: torch.Tensor, fan_in: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """Fill ``weight`` in place as haiku's default ``w_init`` of ``hk.Linear``, ``hk.Conv2D`` and so of
    ``hk.LSTM`` (Acme's R2D2 networks): ``hk.initializers.TruncatedNormal(stddev=1 / sqrt(fan_in))``, a unit
    normal truncated to [-2, 2] times 1 / sqrt(``fan_in``). Its variance is 0.774 / ``fan_in``: haiku's
    default is not ``VarianceScaling`` and does not undo the truncation (:func:`lecun_normal_` does)."""
    return _truncated_normal_(weight, math.sqrt(1.0 / max(fan_in, 1)), generator)


def _truncated_normal_(weight: torch.Tensor, std: float, generator: torch.Generator | None) -> torch.Tensor:
    """N(0, ``std``^2) truncated to two of its standard deviations, in place."""
    return torch.nn.init.trunc_normal_(weight, 0.0, std, -2.0 * std, 2.0 * std, generator=generator)


_TRUNCATED_NORMALS = {"lecun_normal": lecun_normal_, "haiku": haiku_normal_}
"""The fan-in truncated-normal inits by name (zero biases): flax's ``lecun_normal`` and haiku's default."""


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
      DrQ-v2's ``utils.weight_init``. For ``out >= in`` the same numbers as
      ``nn.init.orthogonal_`` from the same generator; for ``out < in`` (DrQ-v2's
      trunk and convolutions) the same (Haar) distribution but another sample:
      ``nn.init.orthogonal_`` draws the normal matrix ``[out, in]`` and transposes
      it, this draws ``[in, out]``;
    * ``"torch_default"``: ``nn.Linear``'s own kaiming-uniform(a=sqrt(5)) weight
      and U(-1/sqrt(in), 1/sqrt(in)) bias;
    * ``"haiku"``: haiku's default ``hk.Linear`` (Acme's R2D2 networks): a unit normal
      truncated to [-2, 2] times 1/sqrt(in) (:func:`haiku_normal_`), zero bias;
    * ``"lecun_normal"``: flax's ``lecun_normal``, the same truncated normal rescaled to
      variance 1/in (:func:`lecun_normal_`), zero bias.

    ``gain`` is not used by ``"haiku"`` and ``"lecun_normal"``.
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
    elif init in _TRUNCATED_NORMALS:
        _TRUNCATED_NORMALS[init](weight, in_features, generator)
    else:
        raise ValueError(
            f"Unknown init {init!r}; use one of 'xavier_uniform', 'orthogonal', 'torch_default', 'haiku', "
            "'lecun_normal'."
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


__all__ += ["dueling_init", "dueling_apply"]


def dueling_init(
    in_dim: int,
    hidden_sizes: Sequence[int],
    num_actions: int,
    *,
    init: str = "xavier_uniform",
    generator: torch.Generator | None = None,
) -> TensorDict:
    """Dueling Q head (Wang et al. 2016): ``value`` (``in -> hidden... -> 1``) and
    ``advantage`` (``in -> hidden... -> num_actions``) MLPs, initialised in that order."""
    return TensorDict(
        {
            "value": mlp_init((in_dim, *hidden_sizes, 1), init=init, generator=generator),
            "advantage": mlp_init((in_dim, *hidden_sizes, num_actions), init=init, generator=generator),
        },
        batch_size=[],
    )


def dueling_apply(head: Mapping, h: torch.Tensor) -> torch.Tensor:
    """``q = v(h) + a(h) - mean_a a(h)`` (Wang et al. 2016, eq. 9) for a head from :func:`dueling_init`."""
    value = mlp_apply(head["value"], h)
    advantage = mlp_apply(head["advantage"], h)
    return value + advantage - advantage.mean(dim=-1, keepdim=True)


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
    """Batched matmuls in feature-major layout: activations are ``[N, features, B]``.

    ``h' = W h + b`` with ``W [N, out, in]`` as stored: neither the forward nor
    the backward pass needs a transposed copy, and the weight gradient
    ``g h^T`` comes out contiguous (the row-major ``h W^T`` form returns it as
    a transposed view that the optimizer must copy). Measured here at one CPU
    thread: forward + backward of ten 256-256 critics (batch 256) 24 -> 19 ms,
    a whole eager REDQ env step (G = 20) about 8% faster (A/B in one process).
    """
    act = _ACTIVATIONS[activation]
    keys = set(params.keys())
    n_layers = 0
    while str(n_layers) in keys:
        n_layers += 1
    h = x.transpose(-1, -2)  # [in, B] (shared input) or [N, in, B]
    for i in range(n_layers):
        w = params[str(i), "weight"]  # [N, out, in]
        b = params[str(i), "bias"].unsqueeze(-1)  # [N, out, 1]
        h = torch.matmul(w, h) + b if h.dim() == 2 else torch.baddbmm(b, w, h)
        if i < n_layers - 1:
            norm = "norm" + str(i)
            if norm in keys:  # LayerNorm over the features (dim -2 here)
                mean = h.mean(dim=-2, keepdim=True)
                var = (h - mean).pow(2).mean(dim=-2, keepdim=True)
                h = (h - mean) * torch.rsqrt(var + ln_eps)
                h = h * params[norm, "weight"].unsqueeze(-1) + params[norm, "bias"].unsqueeze(-1)
            h = act(h)
    return h.transpose(-1, -2)  # [N, B, out]


# --------------------------------------------------------------------------
# LSTM (Hochreiter & Schmidhuber 1997), functional, in ``torch.nn.LSTM``'s layout.
#
# Parameters: ``weight_ih [4H, in]``, ``weight_hh [4H, H]``, ``bias_ih [4H]``,
# ``bias_hh [4H]`` with the gates stacked in torch's order (input i, forget f,
# cell g, output o), so the weights of a one-layer ``nn.LSTM`` (``*_l0``) or an
# ``nn.LSTMCell`` copy over unchanged. The recurrent state ("carry") is a tuple
# ``(h, c)`` of ``[B, H]`` tensors -- ``nn.LSTMCell``'s convention (``nn.LSTM``
# adds a leading layer dimension). A tuple rather than a TensorDict keeps the
# per-step loop free of container overhead; wrap it as
# ``TensorDict({"h": h, "c": c}, [B])`` to store it (sequence replay).
# --------------------------------------------------------------------------

__all__ += ["lstm_init", "lstm_apply", "lstm_unroll", "lstm_zero_carry"]


def lstm_init(
    input_size: int,
    hidden_size: int,
    *,
    generator: torch.Generator | None = None,
    init: str = "torch_default",
    forget_bias: float = 0.0,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """Parameters of one LSTM layer in ``torch.nn.LSTM``'s layout (see above).

    ``init`` is one of:

    * ``"torch_default"``: every weight and bias U(-k, k), k = 1/sqrt(H), as
      ``nn.LSTM.reset_parameters``;
    * ``"orthogonal"``: orthogonal ``weight_hh`` blocks (one per gate),
      xavier-uniform ``weight_ih``, zero biases (a common RL choice);
    * ``"haiku"``: haiku's ``hk.LSTM`` (Acme's R2D2 networks): its one
      ``hk.Linear`` over ``[x, h]`` with haiku's default init (:func:`haiku_normal_`,
      fan-in ``input_size + hidden_size``), zero biases;
    * ``"lecun_normal"``: the same layout with flax's ``lecun_normal``
      (:func:`lecun_normal_`).

    ``forget_bias`` is added to the forget-gate slice ``[H:2H]`` of ``bias_ih``:
    ``hk.LSTM`` adds 1 to the forget gate's pre-activation (a constant, the same
    function and gradients as a learned bias starting 1 higher; Jozefowicz et al.
    2015 recommend 1.0); default 0 keeps torch's init. Only what reads the stored
    value sees the difference: weight decay on biases (rlfunc's Q-learners use
    none), parameter norms, and a checkpoint (``bias_ih[H:2H]`` holds
    ``forget_bias``: subtract it, and reorder the gates to haiku's i, g, f, o, to
    load the weights into ``hk.LSTM``).
    """
    if input_size < 1 or hidden_size < 1:
        raise ValueError(
            f"LSTM sizes must be positive, got input_size={input_size}, hidden_size={hidden_size}."
        )
    h4 = 4 * hidden_size
    w_ih = torch.empty(h4, input_size, device=device, dtype=dtype)
    w_hh = torch.empty(h4, hidden_size, device=device, dtype=dtype)
    b_ih = torch.zeros(h4, device=device, dtype=dtype)
    b_hh = torch.zeros(h4, device=device, dtype=dtype)
    if init == "torch_default":
        k = 1.0 / math.sqrt(hidden_size)
        for t in (w_ih, w_hh, b_ih, b_hh):
            t.uniform_(-k, k, generator=generator)
    elif init == "orthogonal":
        w_ih.copy_(
            torch.cat(
                [
                    linear_init(input_size, hidden_size, generator=generator, device=device, dtype=dtype)["weight"]
                    for _ in range(4)
                ]
            )
        )
        w_hh.copy_(
            torch.cat(
                [
                    linear_init(
                        hidden_size, hidden_size, init="orthogonal", generator=generator, device=device, dtype=dtype
                    )["weight"]
                    for _ in range(4)
                ]
            )
        )
    elif init in _TRUNCATED_NORMALS:
        fan_in = input_size + hidden_size
        w = _TRUNCATED_NORMALS[init](torch.empty(h4, fan_in, device=device, dtype=dtype), fan_in, generator)
        w_ih.copy_(w[:, :input_size])
        w_hh.copy_(w[:, input_size:])
    else:
        raise ValueError(
            f"Unknown LSTM init {init!r}; use 'torch_default', 'orthogonal', 'haiku' or 'lecun_normal'."
        )
    if forget_bias:
        b_ih[hidden_size : 2 * hidden_size] += forget_bias
    return TensorDict(
        {"weight_ih": w_ih, "weight_hh": w_hh, "bias_ih": b_ih, "bias_hh": b_hh}, batch_size=[]
    )


def lstm_zero_carry(
    batch: int | Sequence[int],
    hidden_size: int,
    *,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero recurrent state ``(h, c)``, each ``[*batch, H]``."""
    shape = (batch,) if isinstance(batch, int) else tuple(batch)
    zeros = torch.zeros(*shape, hidden_size, device=device, dtype=dtype)
    return zeros, zeros.clone()


def _cell_tanh(x: torch.Tensor) -> torch.Tensor:
    """``tanh`` for the LSTM cell: ``torch.tanh``, except inside a ``torch.compile`` graph on a CPU,
    where it is ``2 sigmoid(2x) - 1`` (the same function).

    Why: inductor's C++ backend vectorizes ``tanh`` with Sleef's ``tanhf`` (1-ulp), about four
    times the cost of its exp-based sigmoid; the two tanh of a step were half of a compiled
    DRQN/R2D2 step's gate arithmetic on one CPU thread (measured here: a [32, 128] cell step
    27-36 us with tanh, 17 us with this form). Inductor itself lowered tanh this way on CPUs
    (pytorch#91687) until pytorch#148254 returned to Sleef for the *relative* accuracy of tiny
    outputs (tanhshrink then atan2, pytorch#148241), and keeps it as ``config.cpp.use_decompose_tanh``.
    Here the absolute error is what matters -- the cell adds and multiplies these values into
    O(1) states -- and it stays at float rounding: at most 1.8e-7 from float64 tanh (1.5 ulp of 1;
    float32 ``torch.tanh``: 3e-8), gradients 3.6e-7 (``tests/test_drqn_speed_s36.py``). Eager
    code (one MKL call) and compiled GPU code (Triton's tanh) keep ``torch.tanh``: the extra ops
    would only cost there, and an eager update stays unchanged bit for bit."""
    if torch.compiler.is_compiling() and x.device.type == "cpu":
        return 2.0 * torch.sigmoid(2.0 * x) - 1.0
    return torch.tanh(x)


def _recurrent_product(h: torch.Tensor, weight_hh: torch.Tensor) -> torch.Tensor:
    """``h @ weight_hh.T`` (``[B, H]`` -> ``[B, 4H]``): ``F.linear``, except inside a ``torch.compile``
    graph on a CPU, where it is ``(weight_hh @ h.T).T``, the same product.

    Why: inductor's C++ backend rewrites ``gates_x + h @ W.T`` into ``addmm(gates_x, h, W.T)``,
    which first copies ``gates_x[t]`` into the output buffer, and hands MKL the transposed
    ``[H, 4H]`` view of ``W`` (its slower small-GEMM layout here). ``W @ h.T`` reads ``W`` as
    stored and leaves the add to the fused gate kernel: measured on one CPU thread (in-process
    A/B), 3-4% off a compiled DRQN (T = 10 and 40) and R2D2 update. Eager code and GPUs keep
    ``F.linear`` (no rewrite there; an eager update is unchanged bit for bit)."""
    if torch.compiler.is_compiling() and h.device.type == "cpu" and h.dim() == 2:
        return torch.mm(weight_hh, h.t()).t()
    return F.linear(h, weight_hh)


def _lstm_cell(
    gates_x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, weight_hh: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """One LSTM step given the input projection ``gates_x = W_ih x + b_ih + b_hh``."""
    gates = gates_x + _recurrent_product(h, weight_hh)
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * _cell_tanh(g)
    h = torch.sigmoid(o) * _cell_tanh(c)
    return h, c


def _check_carry(params: Mapping, carry, batch_shape: tuple, where: str) -> int:
    hidden = params["weight_hh"].shape[-1]
    if not isinstance(carry, (tuple, list)) or len(carry) != 2:
        raise ValueError(f"{where}: carry must be a tuple (h, c), got {type(carry).__name__}.")
    h, c = carry
    want = (*batch_shape, hidden)
    if tuple(h.shape) != want or tuple(c.shape) != want:
        raise ValueError(
            f"{where}: carry (h, c) must both have shape {want}, got {tuple(h.shape)} and {tuple(c.shape)}."
        )
    return hidden


def lstm_apply(
    params: Mapping, x_t: torch.Tensor, carry: tuple[torch.Tensor, torch.Tensor]
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """One LSTM step: ``x_t [B, in]``, ``carry (h, c)`` -> ``(h_t [B, H], (h_t, c_t))``.

    Same equations and gate order as ``torch.nn.LSTMCell``::

        i, f, g, o = split(W_ih x + b_ih + W_hh h + b_hh)
        c' = sigmoid(f) * c + sigmoid(i) * tanh(g);  h' = sigmoid(o) * tanh(c')
    """
    if x_t.shape[-1] != params["weight_ih"].shape[-1]:
        raise ValueError(
            f"lstm_apply: input has {x_t.shape[-1]} features, the LSTM expects {params['weight_ih'].shape[-1]}."
        )
    _check_carry(params, carry, tuple(x_t.shape[:-1]), "lstm_apply")
    gates_x = F.linear(x_t, params["weight_ih"], params["bias_ih"] + params["bias_hh"])
    h, c = _lstm_cell(gates_x, carry[0], carry[1], params["weight_hh"])
    return h, (h, c)


def lstm_unroll(
    params: Mapping,
    xs: torch.Tensor,
    carry: tuple[torch.Tensor, torch.Tensor],
    reset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Run the LSTM over a time-major sequence ``xs [T, B, in]``.

    ``reset [T, B]`` (bool, optional) marks episode starts: where
    ``reset[t, b]`` is True the carry of row ``b`` is zeroed *before* step
    ``t`` (so a sequence that spans an episode boundary never leaks memory
    across it; Acme's ``ResetCore``). Returns ``(hs [T, B, H], final carry)``.

    The input projection ``W_ih x`` of all ``T`` steps is one matmul; only the
    recurrent part loops over time (a Python loop over the static ``T``,
    which ``torch.compile`` unrolls). Numerically it equals ``torch.nn.LSTM``
    (with ``reset=None``) to float rounding.
    """
    if xs.dim() != 3:
        raise ValueError(f"lstm_unroll: xs must be time-major [T, B, in], got shape {tuple(xs.shape)}.")
    steps, batch, features = xs.shape
    if features != params["weight_ih"].shape[-1]:
        raise ValueError(
            f"lstm_unroll: input has {features} features, the LSTM expects {params['weight_ih'].shape[-1]}."
        )
    _check_carry(params, carry, (batch,), "lstm_unroll")
    if reset is not None and tuple(reset.shape) != (steps, batch):
        raise ValueError(f"lstm_unroll: reset must have shape {(steps, batch)} (= [T, B]), got {tuple(reset.shape)}.")
    gates_x = F.linear(xs, params["weight_ih"], params["bias_ih"] + params["bias_hh"])
    w_hh = params["weight_hh"]
    h, c = carry
    if reset is not None:
        start = reset.bool().unsqueeze(-1)  # [T, B, 1]
    # unbind, not gates_x[t]: the backward of T selects adds T full-size [T, B, 4H] gradients (O(T^2)
    # memory traffic, the larger part of a paper-size R2D2 update on CPU), unbind's backward stacks once.
    gates_steps = gates_x.unbind(0)
    outs = []
    for t in range(steps):
        if reset is not None:
            h = torch.where(start[t], 0.0, h)
            c = torch.where(start[t], 0.0, c)
        h, c = _lstm_cell(gates_steps[t], h, c, w_hh)
        outs.append(h)
    return torch.stack(outs, dim=0), (h, c)


# --------------------------------------------------------------------------
# Convolutional encoder (DrQ-v2, Yarats et al. 2021; facebookresearch/drqv2
# ``Encoder``): ``x / 255 - 0.5``, then 3x3 convolutions (32 channels; stride 2
# for the first, 1 for the other three), ReLU after each, flattened. Layer
# ``i`` lives at ``params[str(i)]`` with ``weight [out, in, k, k]`` and
# ``bias [out]`` (the ``nn.Conv2d`` layout). Strides are static: they are an
# argument of :func:`conv_encoder_apply`, not data.
# --------------------------------------------------------------------------

__all__ += ["conv_init", "conv_encoder_init", "conv_encoder_apply", "conv_encoder_output_shape"]

RELU_GAIN = math.sqrt(2.0)  # nn.init.calculate_gain("relu")


def conv_init(
    in_channels: int,
    out_channels: int,
    kernel: int = 3,
    *,
    init: str = "orthogonal",
    gain: float = RELU_GAIN,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """One ``Conv2d`` layer: ``weight [out, in, k, k]``, zero ``bias [out]``.

    ``init="orthogonal"`` (DrQ-v2's ``utils.weight_init``: orthogonal on the
    weight viewed as ``[out, in * k * k]``, ReLU gain sqrt(2)),
    ``"torch_default"`` (``nn.Conv2d``'s own init), ``"haiku"`` (``hk.Conv2D``'s default) or
    ``"lecun_normal"`` (fan-in ``in * k * k`` for both, zero bias; ``gain`` not used).
    """
    fan_in = in_channels * kernel * kernel
    if init == "orthogonal":
        flat = linear_init(fan_in, out_channels, init="orthogonal", gain=gain, generator=generator, device=device, dtype=dtype)
        weight = flat["weight"].reshape(out_channels, in_channels, kernel, kernel)
        bias = flat["bias"]
    elif init in ("torch_default", *_TRUNCATED_NORMALS):
        flat = linear_init(fan_in, out_channels, init=init, generator=generator, device=device, dtype=dtype)
        weight = flat["weight"].reshape(out_channels, in_channels, kernel, kernel)
        bias = flat["bias"]
    else:
        raise ValueError(f"Unknown conv init {init!r}; use 'orthogonal', 'torch_default', 'haiku' or 'lecun_normal'.")
    return TensorDict({"weight": weight.contiguous(), "bias": bias}, batch_size=[])


def conv_encoder_output_shape(
    in_shape: Sequence[int], channels: Sequence[int] = (32, 32, 32, 32), strides: Sequence[int] = (2, 1, 1, 1), kernel: int = 3
) -> tuple[int, int, int]:
    """``(C, H, W)`` of the encoder's last feature map for input ``(C, H, W)``.

    84x84 with the DrQ-v2 layers gives ``(32, 35, 35)``: 39200 features.
    """
    if len(channels) != len(strides) or len(channels) < 1:
        raise ValueError(
            f"conv encoder: channels and strides need one entry per layer, got {list(channels)} and {list(strides)}."
        )
    _, h, w = in_shape
    for s in strides:
        h = (h - kernel) // s + 1
        w = (w - kernel) // s + 1
        if h < 1 or w < 1:
            raise ValueError(f"conv encoder: input {tuple(in_shape)} is too small for {len(strides)} {kernel}x{kernel} layers.")
    return int(channels[-1]), int(h), int(w)


def conv_encoder_init(
    in_channels: int,
    channels: Sequence[int] = (32, 32, 32, 32),
    *,
    kernel: int = 3,
    init: str = "orthogonal",
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """Parameters of the conv encoder (layer ``i`` at ``str(i)``); defaults are DrQ-v2's."""
    layers = {}
    c_in = in_channels
    for i, c_out in enumerate(channels):
        layers[str(i)] = conv_init(c_in, c_out, kernel, init=init, generator=generator, device=device, dtype=dtype)
        c_in = c_out
    return TensorDict(layers, batch_size=[])


def conv_encoder_apply(
    params: Mapping,
    obs: torch.Tensor,
    *,
    strides: Sequence[int] = (2, 1, 1, 1),
    normalize: bool = True,
) -> torch.Tensor:
    """Encode images ``obs [B, C, H, W]`` (0..255, any dtype) -> features ``[B, D]``.

    ``normalize=True`` applies DrQ-v2's ``obs / 255 - 0.5`` first. ReLU after
    every convolution, then flatten (``h.view(B, -1)``).
    """
    if obs.dim() != 4:
        raise ValueError(f"conv_encoder_apply: obs must be [B, C, H, W], got shape {tuple(obs.shape)}.")
    keys = _top_keys(params)
    n = 0
    while str(n) in keys:
        n += 1
    if n != len(strides):
        raise ValueError(f"conv_encoder_apply: {n} conv layers but {len(strides)} strides {list(strides)}.")
    h = obs.to(params["0", "weight"].dtype)
    if normalize:
        h = h / 255.0 - 0.5
    for i in range(n):
        h = torch.relu(F.conv2d(h, params[str(i), "weight"], params[str(i), "bias"], stride=int(strides[i])))
    return h.reshape(h.shape[0], -1)


# --------------------------------------------------------------------------
# Pixel torsos for the recurrent Q-networks (DRQN, R2D2, the DQN control): a
# conv stack, ReLU after every layer, flattened. Parameters live at
# ``params[kind][str(i)]`` (``nn.Conv2d`` layout), so the kind -- and with it the
# static kernels, strides and input layout -- is read from the key, as the MLP
# depth is read from the layer keys.
#
# * ``"minatar"``: MinAtar's DQN torso (Young & Tian 2019, ``examples/dqn.py``):
#   one 3x3 conv, 16 channels, stride 1, on the ``[10, 10, C]`` channels-last
#   boolean observation (no scaling);
# * ``"nature"``: the Nature DQN torso (Mnih et al. 2015), used by DRQN
#   (Hausknecht & Stone 2015) and R2D2 (Kapturowski et al. 2019): 32 8x8 /4,
#   64 4x4 /2, 64 3x3 /1 on ``[H, W]`` frames (one grayscale frame per step,
#   DRQN) or ``[S, H, W]`` stacks (channels first), scaled by 1/255.
# --------------------------------------------------------------------------

__all__ += ["TORSOS", "torso_init", "torso_apply", "torso_output_size", "torso_check"]

TORSOS: dict[str, dict] = {
    "minatar": {"channels": (16,), "kernels": (3,), "strides": (1,), "channels_last": True, "scale": 1.0},
    "nature": {"channels": (32, 64, 64), "kernels": (8, 4, 3), "strides": (4, 2, 1), "channels_last": False,
               "scale": 1.0 / 255.0},
}
"""The pixel torsos by name (see above)."""


def _torso_layout(kind: str, obs_shape: Sequence[int]) -> tuple[int, int, int]:
    """``(C, H, W)`` the convolutions see for one observation of ``obs_shape``."""
    shape = tuple(int(s) for s in obs_shape)
    if kind == "minatar":
        if len(shape) != 3:
            raise ValueError(
                f"The minatar encoder needs [H, W, C] channels-last observations (MinAtar's), got shape {shape}."
            )
        return shape[2], shape[0], shape[1]
    if len(shape) not in (2, 3):
        raise ValueError(
            f"The nature encoder needs [H, W] frames or [S, H, W] frame stacks (channels first), got shape {shape}."
        )
    return (1, *shape) if len(shape) == 2 else shape  # type: ignore[return-value]


def torso_check(kind: str, obs_shape: Sequence[int]) -> None:
    """Raise one ``ValueError`` sentence unless torso ``kind`` can encode observations of ``obs_shape``."""
    if kind not in TORSOS:
        raise ValueError(f"Unknown pixel encoder {kind!r}; use one of {sorted(TORSOS)}.")
    torso_output_size(kind, obs_shape)


def torso_output_size(kind: str, obs_shape: Sequence[int]) -> int:
    """Features out of torso ``kind`` for one observation of ``obs_shape`` (Nature on 84x84: 3136)."""
    spec = TORSOS[kind]
    _, h, w = _torso_layout(kind, obs_shape)
    for k, s in zip(spec["kernels"], spec["strides"]):
        h, w = (h - k) // s + 1, (w - k) // s + 1
        if h < 1 or w < 1:
            raise ValueError(
                f"Observations of shape {tuple(obs_shape)} are too small for the {kind} encoder's "
                f"{list(spec['kernels'])} kernels with strides {list(spec['strides'])}."
            )
    return int(spec["channels"][-1] * h * w)


def torso_init(
    kind: str,
    obs_shape: Sequence[int],
    *,
    init: str = "torch_default",
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> TensorDict:
    """Parameters of torso ``kind`` for observations of ``obs_shape``: ``{kind: {"0": conv, ...}}``.

    ``init``: ``"torch_default"`` (``nn.Conv2d``'s own, what the MinAtar and PyTorch DQN code
    get), ``"orthogonal"`` (ReLU gain), ``"haiku"`` (``hk.Conv2D``'s default, Acme's torsos) or ``"lecun_normal"``."""
    torso_check(kind, obs_shape)
    spec = TORSOS[kind]
    c_in = _torso_layout(kind, obs_shape)[0]
    layers = {}
    for i, (c_out, k) in enumerate(zip(spec["channels"], spec["kernels"])):
        layers[str(i)] = conv_init(c_in, c_out, k, init=init, generator=generator, device=device, dtype=dtype)
        c_in = c_out
    return TensorDict({kind: TensorDict(layers, batch_size=[])}, batch_size=[])


def torso_apply(params: Mapping, obs: torch.Tensor, lead: int) -> torch.Tensor:
    """Encode ``obs [*lead_dims, *obs_shape]`` (any dtype) -> features ``[*lead_dims, D]``.

    ``lead`` is the number of leading batch dims (2 for time-major ``[T, B]``, 1 for ``[B]``).
    """
    kind = next(k for k in TORSOS if k in _top_keys(params))
    spec, conv = TORSOS[kind], params[kind]
    lead_shape = tuple(obs.shape[:lead])
    frame = tuple(obs.shape[lead:])
    if kind == "minatar" and len(frame) != 3 or kind == "nature" and len(frame) not in (2, 3):
        raise ValueError(
            f"The {kind} encoder got observations of shape {tuple(obs.shape)}: expected {lead} batch dim(s) then "
            + ("[H, W, C]." if kind == "minatar" else "[H, W] or [S, H, W].")
        )
    weight0 = conv["0", "weight"]
    h = obs.reshape(-1, *frame).to(weight0.dtype)
    if spec["channels_last"]:
        h = h.permute(0, 3, 1, 2)
    elif h.dim() == 3:
        h = h.unsqueeze(1)
    if spec["scale"] != 1.0:
        h = h * spec["scale"]
    for i, s in enumerate(spec["strides"]):
        h = torch.relu(F.conv2d(h, conv[str(i), "weight"], conv[str(i), "bias"], stride=s))
    return h.reshape(*lead_shape, -1)
