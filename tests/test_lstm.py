"""Functional LSTM: parity with torch.nn.LSTM / LSTMCell, resets inside an unroll."""

import pytest
import torch
from torch import nn

from rlfunc.core import nets

torch.set_num_threads(1)


def _torch_lstm(params, input_size, hidden):
    lstm = nn.LSTM(input_size, hidden)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(lstm, name + "_l0").copy_(params[name])
    return lstm


def test_init_layout_and_default_range():
    p = nets.lstm_init(5, 8, generator=torch.Generator().manual_seed(0))
    assert p["weight_ih"].shape == (32, 5) and p["weight_hh"].shape == (32, 8)
    assert p["bias_ih"].shape == (32,) and p["bias_hh"].shape == (32,)
    bound = 1 / 8**0.5
    for v in p.values():
        assert float(v.abs().max()) <= bound
    q = nets.lstm_init(5, 8, init="orthogonal", forget_bias=1.0, generator=torch.Generator().manual_seed(0))
    assert torch.equal(q["bias_ih"][8:16], torch.ones(8)) and float(q["bias_hh"].abs().sum()) == 0.0
    w = q["weight_hh"][:8]
    torch.testing.assert_close(w @ w.T, torch.eye(8), atol=1e-5, rtol=0)
    with pytest.raises(ValueError, match="Unknown LSTM init"):
        nets.lstm_init(5, 8, init="nope")


def test_apply_matches_lstm_cell():
    gen = torch.Generator().manual_seed(1)
    p = nets.lstm_init(4, 6, generator=gen)
    cell = nn.LSTMCell(4, 6)
    with torch.no_grad():
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(p[name])
    x = torch.randn(3, 4)
    h0, c0 = torch.randn(3, 6), torch.randn(3, 6)
    y, (h, c) = nets.lstm_apply(p, x, (h0, c0))
    h_ref, c_ref = cell(x, (h0, c0))
    torch.testing.assert_close(y, h_ref)
    torch.testing.assert_close(h, h_ref)
    torch.testing.assert_close(c, c_ref)


def test_unroll_matches_nn_lstm_values_and_grads():
    gen = torch.Generator().manual_seed(2)
    p = nets.lstm_init(4, 6, generator=gen)
    lstm = _torch_lstm(p, 4, 6)
    xs = torch.randn(7, 3, 4)
    h0, c0 = torch.randn(3, 6), torch.randn(3, 6)
    hs, (h, c) = nets.lstm_unroll(p, xs, (h0, c0))
    ref, (h_ref, c_ref) = lstm(xs, (h0[None], c0[None]))
    torch.testing.assert_close(hs, ref)
    torch.testing.assert_close(h, h_ref[0])
    torch.testing.assert_close(c, c_ref[0])

    grads = torch.func.grad(lambda q: nets.lstm_unroll(q, xs, (h0, c0))[0].pow(2).sum())(p)
    ref.pow(2).sum().backward()
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        torch.testing.assert_close(grads[name], getattr(lstm, name + "_l0").grad)


def test_unroll_resets_carry_at_episode_starts():
    gen = torch.Generator().manual_seed(3)
    p = nets.lstm_init(2, 5, generator=gen)
    xs = torch.randn(6, 2, 2)
    h0, c0 = torch.randn(2, 5), torch.randn(2, 5)
    reset = torch.zeros(6, 2, dtype=torch.bool)
    reset[3, 0] = True  # env 0 starts a new episode at t = 3
    hs, _ = nets.lstm_unroll(p, xs, (h0, c0), reset)
    # env 0: steps 0..2 from (h0, c0), steps 3..5 from zeros
    first, _ = nets.lstm_unroll(p, xs[:3, :1], (h0[:1], c0[:1]))
    zero = nets.lstm_zero_carry(1, 5)
    second, _ = nets.lstm_unroll(p, xs[3:, :1], zero)
    torch.testing.assert_close(hs[:, 0], torch.cat([first, second])[:, 0])
    # env 1 is untouched by env 0's reset
    plain, _ = nets.lstm_unroll(p, xs[:, 1:], (h0[1:], c0[1:]))
    torch.testing.assert_close(hs[:, 1], plain[:, 0])
    # a reset at t = 0 is the same as starting from zeros
    reset0 = torch.zeros(6, 2, dtype=torch.bool)
    reset0[0] = True
    torch.testing.assert_close(
        nets.lstm_unroll(p, xs, (h0, c0), reset0)[0], nets.lstm_unroll(p, xs, nets.lstm_zero_carry(2, 5))[0]
    )


def test_shape_errors_are_clear():
    p = nets.lstm_init(2, 5)
    with pytest.raises(ValueError, match=r"time-major \[T, B, in\]"):
        nets.lstm_unroll(p, torch.randn(3, 2), nets.lstm_zero_carry(3, 5))
    with pytest.raises(ValueError, match="expects 2"):
        nets.lstm_apply(p, torch.randn(3, 4), nets.lstm_zero_carry(3, 5))
    with pytest.raises(ValueError, match="carry"):
        nets.lstm_apply(p, torch.randn(3, 2), nets.lstm_zero_carry(4, 5))
    with pytest.raises(ValueError, match="reset"):
        nets.lstm_unroll(p, torch.randn(4, 3, 2), nets.lstm_zero_carry(3, 5), torch.zeros(4, 2, dtype=torch.bool))
