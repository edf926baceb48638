"""The s36 speed-ups of the compiled recurrent update keep what it computes.

* :func:`rlfunc.core.nets._cell_tanh` is ``torch.tanh`` eagerly (bit for bit) and, inside a compiled
  CPU graph, ``2 sigmoid(2x) - 1``: within 2e-7 of float64 tanh (values) and 4e-7 (gradients)
  over [-20, 20] and over magnitudes down to 1e-30; with it and :func:`rlfunc.core.nets._recurrent_product`
  (``(W_hh @ h.T).T`` in a compiled CPU graph) a compiled LSTM unroll and its gradients stay within
  float rounding of ``nn.LSTM``.
* :class:`rlfunc.core.optim.Adam`'s compiled step stores its two bias-correction scalars once
  (``torch.stack``, so inductor does not re-evaluate ``pow(beta, step)`` in every parameter's
  element loop): the same results, bit for bit, as the expression written without it.
"""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlfunc.core import nets
from rlfunc.core.optim import Adam


def _grid() -> torch.Tensor:
    tiny = torch.logspace(-30, 1, 20_001)
    return torch.cat([torch.linspace(-20.0, 20.0, 400_001), tiny, -tiny, torch.zeros(1)])


def test_cell_tanh_is_torch_tanh_eagerly():
    x = _grid()
    assert torch.equal(nets._cell_tanh(x), torch.tanh(x))


@pytest.mark.compile
def test_compiled_cell_tanh_is_tanh_to_float_rounding():
    x = _grid()
    ref = torch.tanh(x.double())
    value_and_grad = torch.compile(
        lambda x: torch.func.grad_and_value(lambda x: nets._cell_tanh(x).sum())(x), fullgraph=True
    )
    grad, _ = value_and_grad(x)
    y = torch.compile(nets._cell_tanh, fullgraph=True)(x)
    assert (y.double() - ref).abs().max().item() < 2e-7
    assert (grad.double() - (1.0 - ref**2)).abs().max().item() < 4e-7
    assert torch.equal(y[x == 0], torch.zeros(1)) and (y.abs() <= 1).all()


@pytest.mark.compile
def test_compiled_lstm_unroll_matches_nn_lstm():
    torch.manual_seed(0)
    T, B, I, H = 6, 5, 7, 16
    lstm = torch.nn.LSTM(I, H)
    params = TensorDict({n: getattr(lstm, f"{n}_l0").detach().clone()
                         for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")}, batch_size=[])
    xs = torch.randn(T, B, I)
    carry = nets.lstm_zero_carry(B, H)

    def loss(p, xs):
        hs, (h, c) = nets.lstm_unroll(p, xs, carry)
        return (hs.square().sum() + c.sum()), hs

    grads, (_, hs) = torch.compile(torch.func.grad_and_value(loss, has_aux=True), fullgraph=True)(params, xs)
    ref_hs, (_, ref_c) = lstm(xs)
    (ref_hs.square().sum() + ref_c.sum()).backward()
    torch.testing.assert_close(hs, ref_hs.detach(), rtol=0, atol=2e-6)
    for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        torch.testing.assert_close(grads[n], getattr(lstm, f"{n}_l0").grad, rtol=1e-5, atol=2e-5)


def _unstacked_step(opt: Adam, grads, opt_state, params, lr):
    """The compiled Adam step as written before s36 (the scalars inline), for the bitwise comparison."""
    beta1, beta2 = opt.betas
    step = opt_state["step"] + 1
    keys = list(params.keys(include_nested=True, leaves_only=True))
    step_size = lr / (1.0 - beta1**step)
    bias_correction2_sqrt = torch.sqrt(1.0 - beta2**step)
    out = []
    for k in keys:
        g, m, v, p = grads[k], opt_state["exp_avg"][k], opt_state["exp_avg_sq"][k], params[k]
        m = torch.lerp(m, g, 1.0 - beta1)
        v = v * beta2 + (1.0 - beta2) * g * g
        out += [p - step_size * m / (torch.sqrt(v) / bias_correction2_sqrt + opt.eps), m, v]
    return out


@pytest.mark.compile
@pytest.mark.parametrize("lr", [1e-3, "tensor"])
def test_compiled_adam_step_is_unchanged_bit_for_bit(lr):
    gen = torch.Generator().manual_seed(0)
    shapes = {"w_ih": (512, 64), "w_hh": (512, 128), "b": (512,), "head": (2, 128), "hb": (2,)}
    params = TensorDict({k: torch.randn(*s, generator=gen) for k, s in shapes.items()}, batch_size=[])
    rate = torch.tensor(3e-4) if lr == "tensor" else lr
    opt = Adam(lr=1e-3, eps=1e-8)
    new = torch.compile(lambda g, s, p: opt.step(g, s, p, lr=rate), fullgraph=True)
    old = torch.compile(lambda g, s, p: _unstacked_step(opt, g, s, p, rate), fullgraph=True)
    state = opt.init(params)
    for _ in range(4):
        grads = params.apply(lambda t: torch.randn(t.shape, generator=gen))
        ref = old(grads, state, params)
        params, state = new(grads, state, params)
        got = []
        for k in params.keys(include_nested=True, leaves_only=True):
            got += [params[k], state["exp_avg"][k], state["exp_avg_sq"][k]]
        assert all(torch.equal(a, b) for a, b in zip(got, ref))
