"""Numerics review of the functional core against its reference definitions.

Each test pins an equality with a reference that was checked in the review and was not
pinned before (the looser checks in test_optim.py, test_lr_schedules.py, test_nets.py,
test_lstm.py, test_acme_init.py and test_targets_dists.py stay as they are):

* the eager Adam/AdamW step is PyTorch's fused kernel bit for bit, clipping included, and
  its ``eps`` is added after the bias-corrected square root (torch's ``eps``; optax's
  ``eps`` with ``eps_root=0``, what RLPD's and Acme's ``optax.adam`` use);
* :func:`clip_by_global_norm` is ``torch.nn.utils.clip_grad_norm_`` bit for bit, its
  ``1e-6`` included (a gradient exactly at ``max_norm`` is still scaled);
* :class:`Schedule` is optax's ``linear_schedule`` / ``cosine_decay_schedule`` /
  ``warmup_cosine_decay_schedule`` (transcribed from optax's source in float64, the
  join at the warm-up boundary included), read at the optimizer's step before the
  update as optax's ``count`` and ``LambdaLR``'s ``last_epoch``;
* Adam's float32 step counter stops at 2**24 and the step there is plain Adam;
* ``torch_default`` inits are ``nn.Linear``/``nn.Conv2d``/``nn.LSTM``'s, ``xavier_uniform``
  is ``nn.init.xavier_uniform_`` (REDQ), ``orthogonal`` is ``nn.init.orthogonal_`` where
  ``out >= in``; the truncated-normal constant is the std of a unit normal cut at +-2;
* the exact tanh log-determinant is ``TanhTransform``'s; polyak is ``torch.lerp``.
"""

from __future__ import annotations

import math

import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlfunc.core import nets
from rlfunc.core.dists import tanh_gaussian
from rlfunc.core.optim import Adam, LRSchedule, Schedule, clip_by_global_norm, global_norm
from rlfunc.core.targets import polyak

torch.set_num_threads(1)


def _params(gen: torch.Generator) -> TensorDict:
    return TensorDict(
        {"a": {"weight": torch.randn(7, 5, generator=gen), "bias": torch.randn(7, generator=gen)},
         "c": torch.randn(3, 4, 2, generator=gen)},
        batch_size=[],
    )


def _leaves(td: TensorDict) -> list[torch.Tensor]:
    return [td[k] for k in sorted(td.keys(True, True), key=str)]


# --------------------------------------------------------------------------- Adam
@pytest.mark.parametrize(
    "ours, cls, theirs, clip",
    [
        (dict(lr=1e-2), torch.optim.Adam, dict(lr=1e-2), None),
        (dict(lr=1e-4, eps=1e-3), torch.optim.Adam, dict(lr=1e-4, eps=1e-3), None),  # R2D2's eps
        (dict(lr=3e-3, weight_decay=0.1), torch.optim.Adam, dict(lr=3e-3, weight_decay=0.1), None),
        (dict(lr=3e-3, weight_decay=0.1, decoupled=True), torch.optim.AdamW, dict(lr=3e-3, weight_decay=0.1), None),
        (dict(lr=3e-3, max_grad_norm=1.0), torch.optim.Adam, dict(lr=3e-3), 1.0),
    ],
    ids=["adam", "eps1e-3", "l2", "adamw", "clip"],
)
def test_eager_adam_is_torchs_fused_adam_bit_for_bit(ours, cls, theirs, clip):
    gen = torch.Generator().manual_seed(0)
    params = _params(gen)
    ref = [p.clone().requires_grad_(True) for p in _leaves(params)]
    ref_opt = cls(ref, **theirs, fused=True)
    opt = Adam(**ours)
    state = opt.init(params)
    for i in range(25):  # gradients of very different sizes: clipping both on and off
        grads = params.apply(lambda p: torch.randn(p.shape, generator=gen) * (10.0 if i % 2 else 1e-2))
        params, state = opt.step(grads, state, params)
        for r, g in zip(ref, _leaves(grads)):
            r.grad = g.clone()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(ref, clip)
        ref_opt.step()
    for r, p in zip(ref, _leaves(params)):
        assert torch.equal(p, r.detach())
    assert float(state["step"]) == 25.0


def test_adam_adds_eps_after_the_bias_corrected_sqrt():
    """torch: ``p -= lr/bc1 * m / (sqrt(v)/sqrt(bc2) + eps)``; optax ``scale_by_adam``: ``m_hat / (sqrt(v_hat +
    eps_root) + eps)`` with ``eps_root=0``: the same. With R2D2's eps=1e-3 and small gradients the other placement
    (eps under the root) would move the parameters ~30x less; the step follows the first, in float64."""
    gen = torch.Generator().manual_seed(1)
    lr, b1, b2, eps = 1e-4, 0.9, 0.999, 1e-3
    p = torch.randn(50, dtype=torch.float64, generator=gen)
    params = TensorDict({"w": p.clone()}, [])
    opt = Adam(lr=lr, eps=eps)
    state = opt.init(params)
    m = torch.zeros_like(p)
    v = torch.zeros_like(p)
    outside, inside = p.clone(), p.clone()
    for t in range(1, 4):
        g = torch.randn(50, dtype=torch.float64, generator=gen) * 1e-4
        params, state = opt.step(TensorDict({"w": g}, []), state, params)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**t), v / (1 - b2**t)
        outside = outside - lr * m_hat / (v_hat.sqrt() + eps)
        inside = inside - lr * m_hat / (v_hat + eps).sqrt()
    torch.testing.assert_close(params["w"], outside, rtol=0, atol=1e-15)
    assert (inside - p).abs().max() < (params["w"] - p).abs().max() / 10


def test_adam_counter_stops_at_2_to_the_24_and_the_step_there_is_plain_adam():
    """float32, as torch.optim's: 2**24 + 1 rounds back to 2**24. Both bias corrections are exactly 1 long before
    (1 - 0.999**t is 1.0 in float64 from t = 37,412), so the step is ``p - lr * m / (sqrt(v) + eps)``."""
    params = TensorDict({"w": torch.tensor([1.0, -2.0, 3.0])}, [])
    opt = Adam(lr=1e-2)
    state = opt.init(params)
    state["step"] = torch.tensor(float(2**24 - 1))
    state["exp_avg"]["w"] = torch.tensor([0.1, -0.2, 0.0])
    state["exp_avg_sq"]["w"] = torch.tensor([0.01, 0.04, 1e-6])
    grads = TensorDict({"w": torch.tensor([0.5, 0.5, -0.5])}, [])
    for want_step in (2**24, 2**24):  # the second step does not advance it
        m = 0.9 * state["exp_avg", "w"].double() + 0.1 * grads["w"].double()
        v = 0.999 * state["exp_avg_sq", "w"].double() + 0.001 * grads["w"].double() ** 2
        expected = params["w"].double() - 1e-2 * m / (v.sqrt() + 1e-8)
        params, state = opt.step(grads, state, params)
        assert float(state["step"]) == float(want_step)
        torch.testing.assert_close(params["w"].double(), expected, rtol=1e-6, atol=1e-7)
    assert torch.isfinite(params["w"]).all()


# --------------------------------------------------------------------------- clipping
@pytest.mark.parametrize("scale", [1e-6, 0.3, 1.0, 1e3])
@pytest.mark.parametrize("max_norm", [0.5, 10.0, 40.0])
def test_clip_by_global_norm_is_clip_grad_norm_bit_for_bit(scale, max_norm):
    gen = torch.Generator().manual_seed(2)
    grads = _params(gen).apply(lambda t: t * scale)
    clipped, norm = clip_by_global_norm(grads, max_norm)
    for foreach in (True, False):
        ref = [nn.Parameter(torch.zeros_like(g)) for g in _leaves(grads)]
        for r, g in zip(ref, _leaves(grads)):
            r.grad = g.clone()
        ref_norm = torch.nn.utils.clip_grad_norm_(ref, max_norm, foreach=foreach)
        assert torch.equal(norm, ref_norm)
        assert all(torch.equal(r.grad, c) for r, c in zip(ref, _leaves(clipped)))


def test_clip_at_exactly_max_norm_still_scales_by_the_1e_6_denominator():
    grads = TensorDict({"a": torch.tensor([3.0, 0.0]), "b": torch.tensor([4.0])}, [])  # norm 5 exactly
    clipped, norm = clip_by_global_norm(grads, 5.0)
    assert float(norm) == 5.0
    coef = 5.0 / (torch.tensor(5.0) + 1e-6)  # clip_grad_norm_'s max_norm / (total_norm + 1e-6)
    assert float(coef) < 1.0
    assert torch.equal(clipped["a"], grads["a"] * coef) and torch.equal(clipped["b"], grads["b"] * coef)
    assert float(global_norm(clipped)) < 5.0


# --------------------------------------------------------------------------- schedules
def _optax_linear(init, end, steps, begin=0):
    """optax ``polynomial_schedule(power=1)`` (``linear_schedule``), float64."""
    if steps <= 0:
        return lambda c: init
    return lambda c: (init - end) * (1 - min(max(c - begin, 0), steps) / steps) + end


def _optax_cosine(init, decay_steps, alpha=0.0):
    """optax ``cosine_decay_schedule`` (exponent 1), float64."""
    return lambda c: init * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * min(c, decay_steps) / decay_steps)) + alpha)


def _optax_join(first, second, boundary):
    """optax ``join_schedules([first, second], [boundary])``: ``second(c - boundary)`` from ``boundary`` on."""
    return lambda c: first(c) if c < boundary else second(c - boundary)


SCHEDULES = [(k, w, s) for k in ("linear", "cosine", "constant") for w, s in ((0, 0.0), (6, 0.0), (6, 0.3))
             if k != "constant" or w]  # a constant rate without warm-up is the float itself (test_lr_schedules.py)


@pytest.mark.parametrize("kind,warmup,start", SCHEDULES)
def test_schedules_are_optax_schedules_at_every_step(kind, warmup, start):
    lr, decay, end_factor = 3e-4, 20, 0.1
    spec = LRSchedule(kind, warmup_updates=warmup, decay_updates=None if kind == "constant" else decay,
                      end_factor=None if kind == "constant" else end_factor, warmup_start_factor=start)
    sched = spec.at(lr)
    end = lr * end_factor
    if kind == "linear":
        after = _optax_linear(lr, end, decay)  # linear_schedule(v, e, D, transition_begin=W) joined at W
    elif kind == "cosine":
        after = _optax_cosine(lr, decay, alpha=end / lr)  # warmup_cosine_decay_schedule(w0, v, W, W + D, e)
    else:
        after = lambda c: lr  # noqa: E731  warmup_constant_schedule
    ref = _optax_join(_optax_linear(lr * start, lr, warmup), after, warmup) if warmup else after
    for c in range(0, warmup + decay + 10):
        assert float(sched(torch.tensor(float(c)))) == pytest.approx(ref(c), rel=1e-6, abs=1e-12), c
    assert float(sched(torch.tensor(0.0))) == pytest.approx(lr * start if warmup else lr)
    if warmup:
        assert float(sched(torch.tensor(float(warmup)))) == pytest.approx(lr)  # the peak at W, as optax's join
    if kind != "constant":
        assert float(sched(torch.tensor(float(warmup + decay)))) == pytest.approx(end)


def test_the_first_step_reads_the_schedule_at_zero_as_lambda_lr():
    """``LambdaLR``: the k-th ``optimizer.step()`` (0-based, ``scheduler.step()`` after each) runs at
    ``lr * f(k)``; optax reads ``count`` before incrementing it. Adam reads its schedule at ``opt_state["step"]``
    before the update: the same rates, and the same parameters as torch's fused Adam driven by LambdaLR."""
    lr = 1e-2
    sched = LRSchedule("cosine", warmup_updates=3, decay_updates=8, end_factor=0.1).at(lr)
    gen = torch.Generator().manual_seed(3)
    params = _params(gen)
    ref = [p.clone().requires_grad_(True) for p in _leaves(params)]
    ref_opt = torch.optim.Adam(ref, lr=lr)
    lam = torch.optim.lr_scheduler.LambdaLR(ref_opt, lambda k: float(sched(torch.tensor(float(k)))) / lr)
    opt = Adam(lr=sched)
    state = opt.init(params)
    for k in range(14):
        assert float(opt.learning_rate(state)) == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-6, abs=1e-12), k
        grads = params.apply(lambda p: torch.randn(p.shape, generator=gen))
        params, state = opt.step(grads, state, params)
        for r, g in zip(ref, _leaves(grads)):
            r.grad = g.clone()
        ref_opt.step()
        lam.step()
    for r, p in zip(ref, _leaves(params)):
        torch.testing.assert_close(p, r.detach(), rtol=1e-5, atol=1e-6)


def test_a_schedule_built_directly_reads_the_same_as_its_lrschedule():
    direct = Schedule("cosine", 3e-4, 3e-5, decay_steps=20, warmup_steps=6, warmup_init_value=0.0)
    via = LRSchedule("cosine", warmup_updates=6, decay_updates=20, end_factor=0.1).at(3e-4)
    steps = torch.arange(0, 40, dtype=torch.float32)
    torch.testing.assert_close(direct(steps), via(steps), rtol=1e-6, atol=1e-12)


# --------------------------------------------------------------------------- initialisers
@pytest.mark.parametrize("shape", [(17, 64), (256, 256), (300, 20)])
def test_torch_default_and_xavier_linear_are_torchs_bit_for_bit(shape):
    fan_in, fan_out = shape
    torch.manual_seed(0)
    ref = nn.Linear(fan_in, fan_out)
    torch.manual_seed(0)
    ours = nets.linear_init(fan_in, fan_out, init="torch_default")
    assert torch.equal(ours["weight"], ref.weight.data) and torch.equal(ours["bias"], ref.bias.data)
    w = torch.empty(fan_out, fan_in)
    nn.init.xavier_uniform_(w, gain=1.0, generator=torch.Generator().manual_seed(1))  # REDQ's weights_init_
    ours = nets.linear_init(fan_in, fan_out, init="xavier_uniform", generator=torch.Generator().manual_seed(1))
    assert torch.equal(ours["weight"], w) and torch.count_nonzero(ours["bias"]) == 0


@pytest.mark.parametrize("c_in,c_out,k", [(4, 32, 8), (32, 64, 4), (9, 32, 3)])
def test_torch_default_conv_is_nn_conv2d_bit_for_bit(c_in, c_out, k):
    torch.manual_seed(0)
    ref = nn.Conv2d(c_in, c_out, k)
    torch.manual_seed(0)
    ours = nets.conv_init(c_in, c_out, k, init="torch_default")
    assert torch.equal(ours["weight"], ref.weight.data) and torch.equal(ours["bias"], ref.bias.data)


def test_torch_default_lstm_is_nn_lstm_bit_for_bit():
    torch.manual_seed(0)
    ref = nn.LSTM(10, 16)
    torch.manual_seed(0)
    ours = nets.lstm_init(10, 16)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        assert torch.equal(ours[name], getattr(ref, name + "_l0").data)


@pytest.mark.parametrize("rows,cols,gain", [(64, 17, 1.0), (256, 256, math.sqrt(2.0)), (1024, 50, 1.0)])
def test_orthogonal_is_nn_init_orthogonal_where_out_is_at_least_in(rows, cols, gain):
    w = torch.empty(rows, cols)
    nn.init.orthogonal_(w, gain=gain, generator=torch.Generator().manual_seed(4))
    ours = nets.linear_init(cols, rows, init="orthogonal", gain=gain, generator=torch.Generator().manual_seed(4))
    assert torch.equal(ours["weight"], w)
    conv = torch.empty(32, 1, 3, 3)  # out 32 >= 1 * 3 * 3
    nn.init.orthogonal_(conv, gain=nn.init.calculate_gain("relu"), generator=torch.Generator().manual_seed(5))
    assert torch.equal(nets.conv_init(1, 32, 3, generator=torch.Generator().manual_seed(5))["weight"], conv)


def test_orthogonal_with_fewer_outputs_than_inputs_has_orthonormal_rows():
    """``out < in`` (DrQ-v2's trunk, its convolutions): the same distribution as ``nn.init.orthogonal_``, another
    sample (see :func:`rlfunc.core.nets.linear_init`); the rows are orthonormal times the gain."""
    w = nets.linear_init(288, 32, init="orthogonal", gain=math.sqrt(2.0), generator=torch.Generator().manual_seed(6))
    torch.testing.assert_close(w["weight"] @ w["weight"].T, 2.0 * torch.eye(32), atol=1e-5, rtol=0)


def test_truncated_normal_std_is_the_std_of_a_unit_normal_cut_at_two():
    phi = math.exp(-2.0) / math.sqrt(2.0 * math.pi)  # density at 2
    mass = math.erf(2.0 / math.sqrt(2.0))  # P(|z| < 2)
    assert nets.TRUNCATED_NORMAL_STD == pytest.approx(math.sqrt(1.0 - 2.0 * 2.0 * phi / mass), rel=1e-15)


# --------------------------------------------------------------------------- distributions, targets
def test_exact_tanh_log_det_is_torchs_tanh_transform_bit_for_bit():
    gen = torch.Generator().manual_seed(7)
    mean = torch.randn(500, 6, generator=gen) * 5.0
    log_std = torch.randn(500, 6, generator=gen) * 3.0  # some outside [-20, 2]: clamped
    noise = torch.randn(500, 6, generator=gen)
    action, log_prob = tanh_gaussian(mean, log_std, noise, epsilon=None)
    clamped = log_std.clamp(-20.0, 2.0)
    u = mean + clamped.exp() * noise
    log_det = torch.distributions.transforms.TanhTransform().log_abs_det_jacobian(u, torch.tanh(u))
    assert torch.equal(action, torch.tanh(u))
    gauss = -0.5 * noise.pow(2) - clamped - 0.5 * math.log(2.0 * math.pi)
    assert torch.equal(log_prob, (gauss - log_det).sum(-1))
    # The official codes' Normal(mean, std).log_prob(u) recomputes (u - mean) / std, which float32 rounds where
    # std << |mean| (the noise itself is exact): the same value where std is not tiny.
    rows = (clamped > -4.0).all(-1)
    assert int(rows.sum()) > 100
    ref = torch.distributions.Normal(mean, clamped.exp()).log_prob(u) - log_det
    torch.testing.assert_close(log_prob[rows], ref.sum(-1)[rows], rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("tau", [0.005, 0.01, torch.tensor(0.005)])
def test_polyak_is_torch_lerp_bit_for_bit_eager_and_under_vmap(tau):
    gen = torch.Generator().manual_seed(8)
    target = _params(gen)
    online = target.apply(lambda t: t + torch.randn(t.shape, generator=gen))
    want = target.apply(lambda t, o: torch.lerp(t, o, tau), online)
    got = polyak(target, online, tau)
    stacked = torch.vmap(lambda t, o: polyak(t, o, tau))(torch.stack([target, target]), torch.stack([online, online]))
    for k in want.keys(True, True):
        assert torch.equal(got[k], want[k]) and torch.equal(stacked[k][1], want[k])
