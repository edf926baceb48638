import math

import pytest
import torch
from torch import nn

from rlfunc.core import nets


def test_mlp_matches_nn_sequential():
    gen = torch.Generator().manual_seed(0)
    params = nets.mlp_init((5, 16, 16, 3), generator=gen)
    seq = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 3))
    with torch.no_grad():
        for i, layer in enumerate([seq[0], seq[2], seq[4]]):
            layer.weight.copy_(params[str(i), "weight"])
            layer.bias.copy_(params[str(i), "bias"])
    x = torch.randn(7, 5)
    torch.testing.assert_close(nets.mlp_apply(params, x), seq(x))


def test_layer_norm_only_in_hidden_layers():
    params = nets.mlp_init((4, 8, 8, 1), layer_norm=True, generator=torch.Generator().manual_seed(0))
    keys = set(params.keys())
    assert {"norm0", "norm1"} <= keys and "norm2" not in keys
    x = torch.randn(3, 4)
    h = nn.functional.linear(x, params["0", "weight"], params["0", "bias"])
    h = torch.relu(nn.functional.layer_norm(h, (8,), eps=1e-6))
    h = nn.functional.linear(h, params["1", "weight"], params["1", "bias"])
    h = torch.relu(nn.functional.layer_norm(h, (8,), eps=1e-6))
    expected = nn.functional.linear(h, params["2", "weight"], params["2", "bias"])
    torch.testing.assert_close(nets.mlp_apply(params, x, ln_eps=1e-6), expected)


def test_xavier_and_orthogonal_init():
    gen = torch.Generator().manual_seed(0)
    lin = nets.linear_init(300, 200, init="xavier_uniform", generator=gen)
    bound = math.sqrt(6.0 / 500)
    assert float(lin["weight"].abs().max()) <= bound
    assert float(lin["weight"].abs().max()) > 0.95 * bound
    assert float(lin["bias"].abs().sum()) == 0.0
    orth = nets.linear_init(32, 64, init="orthogonal", gain=2.0, generator=gen)["weight"]
    torch.testing.assert_close(orth.T @ orth, 4.0 * torch.eye(32), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("layer_norm", [False, True])
@pytest.mark.parametrize("shared", [True, False])
def test_ensemble_modes_agree(layer_norm, shared):
    gen = torch.Generator().manual_seed(1)
    ens = nets.ensemble_init(4, lambda: nets.mlp_init((6, 12, 12, 2), layer_norm=layer_norm, generator=gen))
    ens = ens.apply(lambda t: t + 0.1 * torch.randn(t.shape, generator=gen))  # non-trivial norms
    x = torch.randn(5, 6) if shared else torch.randn(4, 5, 6)
    ref = torch.stack([nets.mlp_apply(ens[i], x if shared else x[i]) for i in range(4)])
    for mode in nets.ENSEMBLE_MODES:
        out = nets.ensemble_apply(ens, x, mode=mode)
        assert out.shape == (4, 5, 2)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_ensemble_gradients_agree_across_modes():
    gen = torch.Generator().manual_seed(2)
    ens = nets.ensemble_init(3, lambda: nets.mlp_init((4, 8, 1), generator=gen))
    x = torch.randn(6, 4)
    grads = {}
    for mode in nets.ENSEMBLE_MODES:
        g = torch.func.grad(lambda p: nets.ensemble_apply(p, x, mode=mode).pow(2).sum())(ens)
        grads[mode] = g
    for mode in ("bmm", "vmap"):
        for k in grads["loop"].keys(True, True):
            torch.testing.assert_close(grads[mode][k], grads["loop"][k], rtol=1e-5, atol=1e-6)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="Unknown init"):
        nets.linear_init(2, 2, init="he")
    ens = nets.ensemble_init(2, lambda: nets.mlp_init((3, 4, 1)))
    with pytest.raises(ValueError, match="leading dim 2"):
        nets.ensemble_apply(ens, torch.randn(3, 5, 3))
    with pytest.raises(ValueError, match="Unknown ensemble mode"):
        nets.ensemble_apply(ens, torch.randn(5, 3), mode="fast")
