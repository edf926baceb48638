"""Parity: rlfunc's functional DRQN vs the imperative baseline (benchmarks/baselines/drqn.py).

Same parameters and window batch (padding and terminations included) -> same
loss and gradients (``nn.LSTM`` + ``.backward()`` vs the functional LSTM +
``torch.func.grad``), and the same parameters after Adam steps and a target copy.
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

from benchmarks.baselines.drqn import ImperativeDRQN  # noqa: E402
from rlfunc.algos import drqn  # noqa: E402

torch.set_num_threads(1)

OBS, ACT, T, B = 4, 3, 6, 5


def _setup(seed: int = 0, **overrides):
    config = drqn.Config(encoder_sizes=(16,), lstm_size=12, sequence_length=T, batch_size=B, **overrides)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    state = drqn.init(config, obs_space, gym.spaces.Discrete(ACT), seed=seed)
    # a target that differs from the online network, so both are exercised
    gen = torch.Generator().manual_seed(seed + 1)
    state["target"] = state["target"].apply(lambda x: x + 0.05 * torch.randn(x.shape, generator=gen))
    valid = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[valid[:2] - 1, torch.arange(2)] = True  # two windows end their episode
    batch = TensorDict(
        {
            "obs": torch.randn(T, B, OBS, generator=gen) * mask.unsqueeze(-1),
            "action": torch.randint(0, ACT, (T, B), generator=gen) * mask,
            "reward": torch.randn(T, B, generator=gen) * mask,
            "next_obs": torch.randn(T, B, OBS, generator=gen) * mask.unsqueeze(-1),
            "terminated": terminated,
            "mask": mask,
        },
        batch_size=[T, B],
    )
    return config, state, batch


def _assert_close(actual: TensorDict, expected: TensorDict, atol=1e-6, rtol=1e-5):
    keys = sorted(expected.keys(True, True), key=str)
    assert sorted(actual.keys(True, True), key=str) == keys
    for k in keys:
        torch.testing.assert_close(actual[k], expected[k], atol=atol, rtol=rtol, msg=lambda m: f"{k}: {m}")


@pytest.mark.parametrize("double_q", [False, True])
@pytest.mark.parametrize("huber_delta", [1.0, None])
def test_loss_and_gradients_match(double_q, huber_delta):
    config, state, batch = _setup(double_q=double_q, huber_delta=huber_delta)
    imp = ImperativeDRQN.from_functional(state, config)
    loss_f, _ = drqn.loss(state["params"], state["target"], config, batch)
    grads_f, _ = grad(drqn.loss, has_aux=True)(state["params"], state["target"], config, batch)
    loss_i = imp.loss(batch)
    loss_i.backward()
    torch.testing.assert_close(loss_f, loss_i.detach(), atol=1e-6, rtol=1e-5)
    assert loss_f > 0
    _assert_close(grads_f, imp.q.functional_grads())


def test_updates_and_target_copy_match():
    config, state, batch = _setup(target_period=3, lr=1e-2)
    imp = ImperativeDRQN.from_functional(state, config)
    for i in range(4):
        state, metrics = drqn.update(state, batch)
        loss_i = imp.update(batch)
        torch.testing.assert_close(metrics["loss"], loss_i, atol=1e-5, rtol=1e-4)
    probe = type(imp.q)(OBS, ACT, config.encoder_sizes, config.lstm_size)
    _assert_close(
        TensorDict({k: v for k, v in imp.q.state_dict().items()}, []),
        TensorDict({k: v for k, v in probe.load_functional(state["params"]).state_dict().items()}, []),
        atol=1e-5,
        rtol=1e-4,
    )
    # the target was copied at update 3 and has not moved since
    _assert_close(
        TensorDict({k: v for k, v in imp.target.state_dict().items()}, []),
        TensorDict({k: v for k, v in probe.load_functional(state["target"]).state_dict().items()}, []),
        atol=1e-5,
        rtol=1e-4,
    )
