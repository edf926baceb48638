"""Under ``torch.vmap`` Adam runs PyTorch's fused kernel on each member's slice
(:func:`rlfunc.core.optim.fused_adam`'s batching rule): each member's step is bit for bit its
own single step, with one rate for all, a rate per member and decoupled weight decay."""

from __future__ import annotations

import pytest
import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam


@pytest.mark.parametrize("opt", [Adam(lr=1e-3), Adam(lr=1e-3, weight_decay=0.1, decoupled=True),
                                 Adam(lr=1e-3, weight_decay=0.01)])
def test_vmapped_adam_is_each_members_fused_step_bit_for_bit(opt):
    gen = torch.Generator().manual_seed(0)
    P = 3
    params = TensorDict({"w": torch.randn(P, 37, 19, generator=gen), "b": torch.randn(P, 5, generator=gen)}, [P])
    states = torch.stack([opt.init(params[k]) for k in range(P)])
    singles = [(params[k].clone(), states[k].clone()) for k in range(P)]
    rates = torch.tensor([1e-3, 3e-4, 1e-2])
    step = torch.vmap(lambda g, s, p, lr: opt.step(g, s, p, lr=lr))
    for i in range(20):
        grads = TensorDict({"w": torch.randn(P, 37, 19, generator=gen), "b": torch.randn(P, 5, generator=gen)}, [P])
        if i % 2:  # a rate per member (settings as data)
            params, states = step(grads, states, params, rates)
            singles = [opt.step(grads[k], s, p, lr=rates[k]) for k, (p, s) in enumerate(singles)]
        else:
            params, states = torch.vmap(opt.step)(grads, states, params)
            singles = [opt.step(grads[k], s, p) for k, (p, s) in enumerate(singles)]
    for k, (p, s) in enumerate(singles):
        for key in ("w", "b"):
            assert torch.equal(params[k][key], p[key])
            assert torch.equal(states[k]["exp_avg"][key], s["exp_avg"][key])
            assert torch.equal(states[k]["exp_avg_sq"][key], s["exp_avg_sq"][key])
        assert float(states[k]["step"]) == float(s["step"]) == 20.0
