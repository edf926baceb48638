import math

import pytest
import torch
from tensordict import TensorDict

from rlfunc.core.dists import clipped_normal_sample, tanh_gaussian, tanh_gaussian_mode
from rlfunc.core.targets import periodic_copy, polyak


def test_polyak_is_lerp_and_pure():
    target = TensorDict({"a": {"w": torch.zeros(3)}}, [])
    online = TensorDict({"a": {"w": torch.ones(3)}}, [])
    out = polyak(target, online, 0.005)
    torch.testing.assert_close(out["a", "w"], torch.full((3,), 0.005))
    assert float(target["a", "w"].sum()) == 0.0


def test_periodic_copy_on_tensor_step():
    target = TensorDict({"w": torch.zeros(2)}, [])
    online = TensorDict({"w": torch.ones(2)}, [])
    assert float(periodic_copy(target, online, torch.tensor(10), 5)["w"].sum()) == 2.0
    assert float(periodic_copy(target, online, torch.tensor(11), 5)["w"].sum()) == 0.0


def test_tanh_gaussian_log_prob_matches_change_of_variables():
    gen = torch.Generator().manual_seed(0)
    mean = torch.randn(64, 3, generator=gen) * 0.5
    log_std = torch.randn(64, 3, generator=gen) * 0.3 - 0.5
    noise = torch.randn(64, 3, generator=gen)
    action, log_prob = tanh_gaussian(mean, log_std, noise, epsilon=0.0)
    base = torch.distributions.Normal(mean, log_std.exp())
    u = mean + log_std.exp() * noise
    expected = (base.log_prob(u) - torch.log(1 - torch.tanh(u) ** 2)).sum(-1)
    torch.testing.assert_close(action, torch.tanh(u))
    torch.testing.assert_close(log_prob, expected, rtol=1e-4, atol=1e-4)


def test_tanh_gaussian_clamps_log_std():
    mean = torch.zeros(1, 1)
    noise = torch.ones(1, 1)
    a_hi, _ = tanh_gaussian(mean, torch.full((1, 1), 10.0), noise)
    assert math.isclose(float(a_hi), math.tanh(math.exp(2.0)), rel_tol=1e-6)
    assert float(tanh_gaussian_mode(torch.tensor([0.0]))) == 0.0


def test_clipped_normal_straight_through():
    mean = torch.tensor([0.95, -0.2], requires_grad=True)
    noise = torch.tensor([10.0, 0.1])
    x = clipped_normal_sample(mean, 0.5, noise, clip=0.3)
    assert 0.99 < float(x[0].detach()) < 1.0
    torch.testing.assert_close(x[1], torch.tensor(-0.15))
    x.sum().backward()
    torch.testing.assert_close(mean.grad, torch.ones(2))


def test_a_zero_tanh_epsilon_is_refused_naming_the_exact_formula():
    """log(1 - tanh(u)^2 + 0) is -inf once float32 tanh rounds to +-1 (|u| >= ~9): a NaN loss at the first such
    action. ``None`` is the exact formula that 0 would mean (review of the numerical core)."""
    from rlfunc.algos import redq
    from rlfunc.core import dists

    u = torch.tensor([[10.0]], requires_grad=True)
    _, log_prob = dists.tanh_gaussian(u, torch.zeros(1, 1), torch.zeros(1, 1), epsilon=0.0)
    assert not torch.isfinite(log_prob).all()  # why 0 is refused
    with pytest.raises(ValueError, match="null for the exact formula"):
        redq.Config(tanh_epsilon=0.0)
    assert redq.Config(tanh_epsilon=None).tanh_epsilon is None
