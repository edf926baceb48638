"""Parity of the conv-LSTM agents: rlfunc's functional DRQN and R2D2 with a pixel torso
(``agent.encoder: minatar | nature``) against the imperative baselines of ``benchmarks/baselines/``
with the ``nn.Conv2d`` torsos of ``benchmarks/baselines/conv.py``: the same loss, gradients
(torso included), priorities and Adam updates for the same parameters and uint8 frame batches."""

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
from benchmarks.baselines.r2d2 import ImperativeR2D2  # noqa: E402
from rlfunc.algos import drqn, r2d2  # noqa: E402

torch.set_num_threads(1)

SHAPES = {"minatar": (10, 10, 4), "nature": (44, 44)}  # a small frame for the Nature torso: 1x1 after its convs
ACT = 3


def _frames(shape, T, B, gen, mask):
    high = 2 if len(shape) == 3 else 256  # MinAtar's 0/1 planes, 0..255 pixels
    x = torch.randint(0, high, (T, B, *shape), generator=gen, dtype=torch.uint8)
    return x * mask.reshape(T, B, *([1] * len(shape))).to(torch.uint8)


def _batch(shape, T, B, seed, carry=None):
    gen = torch.Generator().manual_seed(seed)
    valid = torch.randint(1, T + 1, (B,), generator=gen)
    mask = torch.arange(T).unsqueeze(1) < valid.unsqueeze(0)
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[valid[:2] - 1, torch.arange(2)] = True
    td = {
        "obs": _frames(shape, T, B, gen, mask),
        "action": torch.randint(0, ACT, (T, B), generator=gen) * mask,
        "reward": torch.randn(T, B, generator=gen) * mask,
        "next_obs": _frames(shape, T, B, gen, mask),
        "terminated": terminated,
        "mask": mask,
    }
    if carry is not None:
        td["init_carry"] = carry.expand(T, B)
        td["weight"] = torch.rand(B, generator=gen).expand(T, B)
    return TensorDict(td, batch_size=[T, B])


def _close(actual: TensorDict, expected: TensorDict, atol=1e-5, rtol=1e-4):
    keys = sorted(expected.keys(True, True), key=str)
    assert sorted(actual.keys(True, True), key=str) == keys
    for k in keys:
        torch.testing.assert_close(actual[k], expected[k], atol=atol, rtol=rtol, msg=lambda m: f"{k}: {m}")


def _perturbed_target(state, seed):
    gen = torch.Generator().manual_seed(seed)
    state["target"] = state["target"].apply(lambda x: x + 0.02 * torch.randn(x.shape, generator=gen))
    return state


@pytest.mark.parametrize("encoder", ["minatar", "nature"])
def test_drqn_conv_lstm_loss_gradients_and_updates_match(encoder):
    shape, T, B = SHAPES[encoder], 5, 4
    config = drqn.Config(encoder=encoder, encoder_sizes=(), lstm_size=8, sequence_length=T, batch_size=B,
                         target_period=2, lr=1e-2)
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    state = _perturbed_target(drqn.init(config, space, gym.spaces.Discrete(ACT), seed=0), 1)
    assert "torso" in state["params"].keys()
    batch = _batch(shape, T, B, seed=2)
    imp = ImperativeDRQN.from_functional(state, config, obs_shape=shape)
    loss_f, _ = drqn.loss(state["params"], state["target"], config, batch)
    grads_f, _ = grad(drqn.loss, has_aux=True)(state["params"], state["target"], config, batch)
    loss_i = imp.loss(batch)
    loss_i.backward()
    torch.testing.assert_close(loss_f, loss_i.detach(), atol=1e-6, rtol=1e-5)
    _close(grads_f, imp.q.functional_grads())
    for _ in range(3):  # Adam steps and the target copy at update 2
        state, metrics = drqn.update(state, batch)
        torch.testing.assert_close(metrics["loss"], imp.update(batch), atol=1e-5, rtol=1e-4)
    loss_now, _ = drqn.loss(state["params"], state["target"], config, batch)
    torch.testing.assert_close(loss_now, imp.loss(batch).detach(), atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("encoder", ["minatar", "nature"])
def test_r2d2_conv_lstm_loss_gradients_priorities_and_updates_match(encoder):
    shape, burn, L, B = SHAPES[encoder], 2, 4, 3
    config = r2d2.Config(encoder=encoder, encoder_sizes=(), lstm_size=8, head_sizes=(8,), burn_in=burn,
                         sequence_length=L, sequence_period=2, n_step=2, batch_size=B, target_period=2, lr=1e-3)
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    state = _perturbed_target(r2d2.init(config, space, gym.spaces.Discrete(ACT), seed=0), 1)
    gen = torch.Generator().manual_seed(4)
    carry = r2d2.carry_to_td(r2d2.Carry(torch.randn(B, 8, generator=gen), torch.randn(B, 8, generator=gen),
                                        torch.randint(0, ACT, (B,), generator=gen), torch.randn(B, generator=gen)))
    batch = _batch(shape, burn + L, B, seed=3, carry=carry)
    imp = ImperativeR2D2.from_functional(state, config, obs_shape=shape)
    loss_f, aux = r2d2.loss(state["params"], state["target"], config, batch)
    grads_f, _ = grad(r2d2.loss, has_aux=True)(state["params"], state["target"], config, batch)
    loss_i, prio_i = imp.loss(batch)
    loss_i.backward()
    torch.testing.assert_close(loss_f, loss_i.detach(), atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(aux["priorities"], prio_i, atol=1e-5, rtol=1e-4)
    _close(grads_f, imp.q.functional_grads())
    for _ in range(3):
        state, metrics = r2d2.update(state, batch)
        loss_imp, _ = imp.update(batch)
        torch.testing.assert_close(metrics["loss"], loss_imp, atol=1e-5, rtol=1e-4)


def _members(module, config, shape, batches):
    space = gym.spaces.Box(0, 255, shape, np.uint8)
    return [module.init(config, space, gym.spaces.Discrete(ACT), seed=k) for k in range(len(batches))]


@pytest.mark.parametrize("algo", ["drqn", "r2d2"])
def test_conv_updates_vmap_over_members(algo):
    """A population (torch.vmap over stacked member states, rlfunc.core.population) of conv-LSTM
    agents computes each member's single update."""
    from rlfunc.core import population

    shape = SHAPES["minatar"]
    if algo == "drqn":
        module, T = drqn, 4
        config = drqn.Config(encoder="minatar", encoder_sizes=(8,), lstm_size=8, sequence_length=T, batch_size=3)
        batches = [_batch(shape, T, 3, seed=k) for k in range(2)]
    else:
        module, T = r2d2, 4
        config = r2d2.Config(encoder="minatar", encoder_sizes=(), lstm_size=8, head_sizes=(8,), burn_in=1,
                             sequence_length=3, sequence_period=1, n_step=2, batch_size=3)
        carry = r2d2.carry_to_td(r2d2.initial_carry(config, 3))
        batches = [_batch(shape, T, 3, seed=k, carry=carry) for k in range(2)]
    states = _members(module, config, shape, batches)
    pop, _ = population.vmap_update(module.update)(population.stack(states), torch.stack(batches))
    for k in range(2):
        single, _ = module.update(states[k], batches[k])
        _close(population.member(pop, k)["params"], single["params"], atol=1e-6, rtol=1e-5)


@pytest.mark.compile
def test_conv_drqn_update_compiles_fullgraph():
    shape, T, B = SHAPES["minatar"], 3, 2
    config = drqn.Config(encoder="minatar", encoder_sizes=(), lstm_size=8, sequence_length=T, batch_size=B)
    state = _members(drqn, config, shape, [None])[0]
    batch = _batch(shape, T, B, seed=0)
    compiled = torch.compile(drqn.update, fullgraph=True)
    new_c, m_c = compiled(state, batch)
    new_e, m_e = drqn.update(state, batch)
    torch.testing.assert_close(m_c["loss"], m_e["loss"], atol=1e-5, rtol=1e-4)
    _close(new_c["params"], new_e["params"], atol=1e-5, rtol=1e-4)


def test_a_pixel_encoder_on_the_wrong_observations_is_one_sentence():
    with pytest.raises(ValueError, match="minatar encoder needs \\[H, W, C\\]"):
        drqn.init(drqn.Config(encoder="minatar"), gym.spaces.Box(0, 255, (84, 84), np.uint8), gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="too small for the nature encoder"):
        r2d2.init(r2d2.Config(encoder="nature"), gym.spaces.Box(0, 255, (20, 20), np.uint8), gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="or set agent.encoder to 'nature'"):
        drqn.init(drqn.Config(), gym.spaces.Box(0, 1, (10, 10, 4), bool), gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="encoder must be one of"):
        drqn.Config(encoder="resnet")
