"""Acme's (haiku's) initialisation: ``init``/``lstm_init`` ``"haiku"`` (hk.Linear/hk.Conv2D's default
``TruncatedNormal(1/sqrt(fan_in))``, hk.LSTM one such linear over [x, h]) and ``forget_bias`` (hk.LSTM adds 1 to
the forget gate): R2D2's default (Acme is its reference), an option of DRQN (whose default stays PyTorch's).
``"lecun_normal"`` is flax's (variance exactly 1/fan_in), an option."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfunc.algos import drqn, r2d2
from rlfunc.core import nets


def test_lecun_normal_has_fan_in_variance_and_two_sigma_bounds():
    g = torch.Generator().manual_seed(0)
    w = nets.lecun_normal_(torch.empty(4096, 256), 256, g)
    target = math.sqrt(1 / 256)
    assert abs(w.std().item() / target - 1) < 0.02
    assert w.abs().max().item() <= 2 * target / nets.TRUNCATED_NORMAL_STD + 1e-6
    layer = nets.linear_init(256, 64, init="lecun_normal", generator=g)
    assert torch.count_nonzero(layer["bias"]) == 0


def test_haiku_init_is_truncated_normal_times_one_over_sqrt_fan_in_not_variance_scaling():
    """haiku's hk.Linear/hk.Conv2D default: ``TruncatedNormal(stddev=1/sqrt(fan_in))`` = stddev * (a unit normal cut
    at +-2), so the standard deviation is 0.8796/sqrt(fan_in) and every weight within 2/sqrt(fan_in)."""
    g = torch.Generator().manual_seed(0)
    w = nets.haiku_normal_(torch.empty(4096, 256), 256, g)
    scale = 1 / math.sqrt(256)
    assert abs(w.std().item() / (nets.TRUNCATED_NORMAL_STD * scale) - 1) < 0.02
    assert w.abs().max().item() <= 2 * scale + 1e-6 and w.abs().max().item() > 1.9 * scale
    layer = nets.linear_init(256, 64, init="haiku", generator=g)
    assert torch.count_nonzero(layer["bias"]) == 0
    assert abs(layer["weight"].std().item() / (nets.TRUNCATED_NORMAL_STD * scale) - 1) < 0.05
    conv = nets.conv_init(16, 32, 3, init="haiku", generator=g)  # hk.Conv2D: fan-in in * k * k
    assert abs(conv["weight"].std().item() / (nets.TRUNCATED_NORMAL_STD / math.sqrt(16 * 9)) - 1) < 0.05
    assert conv["weight"].abs().max().item() <= 2 / math.sqrt(16 * 9) + 1e-6
    lstm = nets.lstm_init(300, 512, init="haiku", generator=g)
    joint = torch.cat([lstm["weight_ih"], lstm["weight_hh"]], dim=1)  # hk.LSTM's hk.Linear over concat([x, h])
    assert abs(joint.std().item() / (nets.TRUNCATED_NORMAL_STD / math.sqrt(812)) - 1) < 0.02
    assert torch.count_nonzero(lstm["bias_ih"]) == 0 and torch.count_nonzero(lstm["bias_hh"]) == 0


def test_lecun_normal_lstm_is_one_linear_over_input_and_hidden_with_zero_biases():
    g = torch.Generator().manual_seed(0)
    p = nets.lstm_init(300, 512, init="lecun_normal", generator=g)
    joint = torch.cat([p["weight_ih"], p["weight_hh"]], dim=1)  # hk.LSTM's Linear over concat([x, h])
    assert abs(joint.std().item() / math.sqrt(1 / 812) - 1) < 0.02
    assert torch.count_nonzero(p["bias_ih"]) == 0 and torch.count_nonzero(p["bias_hh"]) == 0


def test_forget_bias_is_haikus_constant_added_to_the_forget_gate():
    """hk.LSTM: f = sigmoid(f_pre + 1) with learned biases starting at zero; rlfunc's bias starting at 1 is
    the same function (and the same gradients)."""
    g = torch.Generator().manual_seed(1)
    H, D = 8, 5
    p = nets.lstm_init(D, H, init="haiku", forget_bias=1.0, generator=g)
    assert torch.equal(p["bias_ih"][H:2 * H], torch.ones(H))
    assert torch.count_nonzero(p["bias_ih"][:H]) == 0 and torch.count_nonzero(p["bias_ih"][2 * H:]) == 0
    x, h, c = torch.randn(3, D, generator=g), torch.randn(3, H, generator=g), torch.randn(3, H, generator=g)
    out, (h1, c1) = nets.lstm_apply(p, x, (h, c))
    pre = x @ p["weight_ih"].T + h @ p["weight_hh"].T  # haiku's gates with zero biases
    i, f, gg, o = pre.split(H, dim=-1)
    c_ref = torch.sigmoid(f + 1.0) * c + torch.sigmoid(i) * torch.tanh(gg)
    torch.testing.assert_close(c1, c_ref)
    torch.testing.assert_close(h1, torch.sigmoid(o) * torch.tanh(c_ref))


def test_r2d2_defaults_to_acmes_init_zero_biases_but_the_forget_gate():
    config = r2d2.Config(encoder="minatar", encoder_sizes=(), lstm_size=32, head_sizes=(16,))
    assert (config.init, config.lstm_init, config.forget_bias) == ("haiku", "haiku", 1.0)
    obs = gym.spaces.Box(0, 1, (10, 10, 4), np.float32)
    state = r2d2.init(config, obs, gym.spaces.Discrete(3), seed=0)
    params = state["params"]
    for key, value in params.items(True, True):
        name = key if isinstance(key, str) else ".".join(key)
        if name.endswith("bias_ih"):
            assert torch.equal(value[32:64], torch.ones(32)) and torch.count_nonzero(value[:32]) == 0
            assert torch.count_nonzero(value[64:]) == 0
        elif name.endswith("bias") or name.endswith("bias_hh"):
            assert torch.count_nonzero(value) == 0, name
    joint = torch.cat([params["lstm", "weight_ih"], params["lstm", "weight_hh"]], dim=1)
    assert joint.abs().max().item() <= 2 / math.sqrt(joint.shape[1]) + 1e-6  # haiku's bound, not lecun_normal's
    torch_init = r2d2.Config(encoder="minatar", encoder_sizes=(), lstm_size=32, head_sizes=(16,),
                             init="torch_default", lstm_init="torch_default", forget_bias=0.0)
    pytorch = r2d2.init(torch_init, obs, gym.spaces.Discrete(3), seed=0)["params"]
    assert torch.count_nonzero(pytorch["lstm", "bias_hh"]) > 0  # PyTorch's own stays an option
    assert (drqn.Config().init, drqn.Config().lstm_init, drqn.Config().forget_bias) == ("torch_default",) * 2 + (0.0,)


def test_drqn_takes_the_forget_bias_too():
    config = drqn.Config(lstm_size=16, forget_bias=1.0)
    state = drqn.init(config, gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), seed=0)
    b = state["params", "lstm", "bias_ih"] if "lstm" in state["params"].keys() else state["params", "core", "bias_ih"]
    ref = drqn.init(drqn.Config(lstm_size=16), gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Discrete(2), seed=0)
    ref_b = ref["params", "lstm", "bias_ih"] if "lstm" in ref["params"].keys() else ref["params", "core", "bias_ih"]
    torch.testing.assert_close(b[16:32], ref_b[16:32] + 1.0)
    torch.testing.assert_close(b[:16], ref_b[:16])


@pytest.mark.parametrize("module", [r2d2, drqn])
def test_unknown_inits_and_a_non_finite_forget_bias_are_one_sentence(module):
    with pytest.raises(ValueError, match="haiku"):
        module.Config(lstm_init="he_normal")
    with pytest.raises(ValueError, match="haiku"):
        module.Config(init="he_normal")
    with pytest.raises(ValueError, match="forget_bias"):
        module.Config(forget_bias=float("nan"))

