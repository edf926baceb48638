"""Parity: rlfunc's functional R2D2 vs the imperative baseline (benchmarks/baselines/r2d2.py).

Same parameters and window batch (stored state, burn-in, padding, a termination,
a truncation, importance weights) -> same loss, gradients and priorities
(``nn.LSTM`` + ``.backward()`` + loops over time vs the functional LSTM +
``torch.func.grad`` + vectorised n-step returns), and the same parameters after
Adam steps and a target copy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.func import grad

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines.r2d2 import ImperativeR2D2, R2D2Network, h, h_inv  # noqa: E402
from rlfunc.algos import r2d2  # noqa: E402
from rlfunc.core import returns  # noqa: E402

torch.set_num_threads(1)

OBS, ACT, BURN, L, B, H = 4, 3, 3, 7, 6, 10


def _setup(seed: int = 0, **overrides):
    values = dict(
        encoder_sizes=(12,), lstm_size=H, head_sizes=(9,), burn_in=BURN, sequence_length=L,
        sequence_period=2, n_step=3, gamma=0.95, batch_size=B,
    )
    values.update(overrides)
    config = r2d2.Config(**values)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    state = r2d2.init(config, obs_space, gym.spaces.Discrete(ACT), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    state["target"] = state["target"].apply(lambda x: x + 0.05 * torch.randn(x.shape, generator=gen))
    T = BURN + L
    valid = torch.tensor([T, T, 6, T - 1, BURN + 2, T])[:B]
    mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[valid[2] - 1, 2] = True  # window 2 ends its episode
    terminated[T - 4, 5] = True  # window 5 ends its episode early... then padding
    mask[T - 3 :, 5] = False
    batch = TensorDict(
        {
            "obs": torch.randn(T, B, OBS, generator=gen) * mask.unsqueeze(-1),
            "action": torch.randint(0, ACT, (T, B), generator=gen) * mask,
            "reward": 3 * torch.randn(T, B, generator=gen) * mask,
            "next_obs": torch.randn(T, B, OBS, generator=gen) * mask.unsqueeze(-1),
            "terminated": terminated,
            "mask": mask,
            "weight": torch.rand(B, generator=gen).expand(T, B),
            "init_carry": TensorDict(
                {
                    "h": 0.5 * torch.randn(B, H, generator=gen),
                    "c": 0.5 * torch.randn(B, H, generator=gen),
                    "prev_action": torch.randint(0, ACT, (B,), generator=gen),
                    "prev_reward": torch.randn(B, generator=gen),
                },
                [B],
            ).expand(T, B),
        },
        batch_size=[T, B],
    )
    return config, state, batch


def _assert_close(actual: TensorDict, expected: TensorDict, atol=1e-6, rtol=1e-5):
    keys = sorted(expected.keys(True, True), key=str)
    assert sorted(actual.keys(True, True), key=str) == keys
    for k in keys:
        torch.testing.assert_close(actual[k], expected[k], atol=atol, rtol=rtol, msg=lambda m: f"{k}: {m}")


def test_value_rescaling_matches_rlfunc():
    x = torch.linspace(-300, 300, 1001)
    torch.testing.assert_close(h(x), returns.signed_hyperbolic(x))
    torch.testing.assert_close(h_inv(h(x)), x, rtol=2e-4, atol=1e-3)
    torch.testing.assert_close(h_inv(x), returns.signed_parabolic(x), rtol=2e-4, atol=1e-4)


def test_network_matches_q_unroll():
    config, state, batch = _setup()
    net = R2D2Network(OBS, ACT, config.encoder_sizes, H, config.head_sizes).load_functional(state["params"])
    ic = batch["init_carry"][0]
    q_f, (h_f, c_f) = r2d2.q_unroll(state["params"], batch["obs"], batch["action"], batch["reward"], (ic["h"], ic["c"]))
    with torch.no_grad():
        q_i, (h_i, c_i) = net(batch["obs"], batch["action"], batch["reward"], (ic["h"], ic["c"]))
    torch.testing.assert_close(q_f, q_i, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(h_f, h_i, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("n_step", [1, 3, 5])
def test_loss_priorities_and_gradients_match(n_step):
    config, state, batch = _setup(n_step=n_step)
    imp = ImperativeR2D2.from_functional(state, config)
    loss_f, aux = r2d2.loss(state["params"], state["target"], config, batch)
    grads_f, _ = grad(r2d2.loss, has_aux=True)(state["params"], state["target"], config, batch)
    loss_i, prio_i = imp.loss(batch)
    loss_i.backward()
    torch.testing.assert_close(loss_f, loss_i.detach(), atol=1e-5, rtol=1e-4)
    assert loss_f > 0
    torch.testing.assert_close(aux["priorities"], prio_i, atol=1e-5, rtol=1e-4)
    _assert_close(grads_f, imp.q.functional_grads(), atol=1e-5, rtol=1e-4)


def test_updates_and_target_copy_match():
    config, state, batch = _setup(target_period=3, lr=3e-3)
    imp = ImperativeR2D2.from_functional(state, config)
    for _ in range(4):
        state, metrics = r2d2.update(state, batch)
        loss_i, prio_i = imp.update(batch)
        torch.testing.assert_close(metrics["loss"], loss_i, atol=1e-4, rtol=1e-4)
        torch.testing.assert_close(metrics["priorities"], prio_i, atol=1e-4, rtol=1e-4)
    probe = R2D2Network(OBS, ACT, config.encoder_sizes, H, config.head_sizes)

    def as_td(module):
        return TensorDict({k: v.clone() for k, v in module.state_dict().items()}, [])

    _assert_close(as_td(imp.q), as_td(probe.load_functional(state["params"])), atol=1e-5, rtol=1e-4)
    # the target was copied at update 3 and has not moved since
    _assert_close(as_td(imp.target), as_td(probe.load_functional(state["target"])), atol=1e-5, rtol=1e-4)
