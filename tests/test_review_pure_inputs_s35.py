"""Review (session 35) of the pure functions' input checks: noise of another dtype, seeds out of
range, per-env ``reset``/``epsilon``/``prev_*`` of another length, DRQN batches without a key and
R2D2's stored carry. Each is one ``ValueError`` sentence at the top of the public function, not a
torch/tensordict error deep inside or a silently wrong result."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from test_review_pure_api import _window  # a [T, B] window batch (keys set to None are left out)

from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd

BOX3, BOX1 = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))
OBS4, ACT2 = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)


def _raises(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(ValueError, match=match) as exc:
        fn(*args, **kwargs)
    msg = str(exc.value)
    assert "\n" not in msg and msg.endswith("."), msg
    return msg


# 1. noise of another dtype: was torch's "expected m1 and m2 to have the same dtype" inside the nets
def test_update_refuses_noise_of_another_dtype():
    config = redq.Config(hidden_sizes=(8, 8), num_critics=3, updates_per_step=2, batch_size=4)
    state = redq.init(config, BOX3, BOX1, seed=0)
    batch = TensorDict({"obs": torch.randn(2, 4, 3), "action": torch.rand(2, 4, 1) * 2 - 1, "reward": torch.randn(2, 4),
                        "next_obs": torch.randn(2, 4, 3), "terminated": torch.zeros(2, 4)}, [2, 4])
    noise = redq.draw_noise(config, 2, 4, 1, generator=torch.Generator().manual_seed(0))
    redq.update(state, batch, noise)
    _raises(r"^redq\.update: noise\['next_action'\] must have dtype torch\.float32 \(the parameters' dtype\), got torch\.float64;",
            redq.update, state, batch, noise.apply(lambda t: t.double()))
    dconfig = drqv2.Config(feature_dim=8, hidden_dim=8, encoder_channels=(4, 4), encoder_strides=(2, 1), batch_size=4,
                           frame_stack=1, pad=2)
    dstate = drqv2.init(dconfig, gym.spaces.Box(0, 255, (3, 16, 16), dtype=np.uint8), gym.spaces.Box(-1, 1, (2,)), seed=0)
    pixels = TensorDict({"obs": torch.randint(0, 255, (4, 3, 16, 16), dtype=torch.uint8), "action": torch.rand(4, 2),
                         "reward": torch.randn(4), "discount": torch.full((4,), 0.99),
                         "next_obs": torch.randint(0, 255, (4, 3, 16, 16), dtype=torch.uint8)}, [4])
    dnoise = drqv2.draw_noise(dconfig, 4, 2)
    dnoise["action"] = dnoise["action"].double()
    _raises(r"^drqv2\.update: noise\['action'\] must have dtype torch\.float32", drqv2.update, dstate, pixels, dnoise)


# 2. seeds: 2**70 was "Overflow when unpacking long long", -1 silently the seed 2**64 - 1
@pytest.mark.parametrize("module, config, spaces", [
    (redq, redq.Config(hidden_sizes=(8,)), (BOX3, BOX1)),
    (rlpd, rlpd.Config(hidden_sizes=(8,)), (BOX3, BOX1)),
    (drqn, drqn.Config(encoder_sizes=(8,), lstm_size=8), (OBS4, ACT2)),
    (r2d2, r2d2.Config(encoder_sizes=(8,), lstm_size=8), (OBS4, ACT2)),
    (drqv2, drqv2.Config(feature_dim=8, hidden_dim=8, encoder_channels=(4,), encoder_strides=(2,)),
     (gym.spaces.Box(0, 255, (3, 16, 16), dtype=np.uint8), gym.spaces.Box(-1, 1, (2,)))),
])
def test_init_refuses_seeds_out_of_range(module, config, spaces):
    name = module.__name__.rsplit(".", 1)[-1]
    for seed in (2**70, 2**63, -1, torch.tensor(-3)):
        _raises(rf"^{name}\.init: seed must be an integer from 0 to 2\*\*63 - 1, got -?\d+\.$", module.init, config, *spaces, seed=seed)
    _raises(rf"^{name}\.init: seed must be an integer, got True\.$", module.init, config, *spaces, seed=True)
    module.init(config, *spaces, seed=2**63 - 1)


# 3. per-env reset / epsilon of another length: was "The size of tensor a (2) must match ..."
def test_act_refuses_reset_and_epsilon_for_another_number_of_envs():
    obs = torch.randn(3, 4)
    dconfig = drqn.Config(encoder_sizes=(8,), lstm_size=8)
    dparams = drqn.init(dconfig, OBS4, ACT2, seed=0)["params"]
    dcarry = drqn.initial_carry(dconfig, 3)
    rconfig = r2d2.Config(encoder_sizes=(8,), lstm_size=8)
    rparams = r2d2.init(rconfig, OBS4, ACT2, seed=0)["params"]
    rcarry = r2d2.initial_carry(rconfig, 3)
    two = torch.tensor([True, False])
    _raises(r"^drqn\.act: reset must have shape \[B\] or \[B, 1\] = \[3\] or \[3, 1\], got \[2\]\.$",
            drqn.act, dparams, obs, dcarry, 0.1, reset=two)
    _raises(r"^r2d2\.act: reset must have shape \[B\] or \[B, 1\] = \[3\] or \[3, 1\], got \[2\]\.$",
            r2d2.act, rparams, obs, None, None, rcarry, 0.1, reset=two)
    for eps in (torch.tensor([0.1, 0.2]), torch.full((3, 3), 0.1)):  # [3, 3] broadcast the actions to [3, 3]
        _raises(r"^drqn\.act: epsilon must have shape \[\] or \[B\] = \[\] or \[3\], got \[\d(, 3)?\]\.$",
                drqn.act, dparams, obs, dcarry, eps)
        _raises(r"^r2d2\.act: epsilon must have shape \[\] or \[B\] = \[\] or \[3\]", r2d2.act, rparams, obs, None, None, rcarry, eps)
    _raises(r"^drqn\.act: epsilon must be a number from 0 to 1, got 1\.5\.$", drqn.act, dparams, obs, dcarry, 1.5)
    action, _ = drqn.act(dparams, obs, dcarry, torch.full((3,), 0.1), reset=np.array([True, False, True]))
    assert action.shape == (3,)


def test_act_checks_shapes_per_member_under_vmap():
    """A population vmaps act: the checks see each member's shapes (and read no values)."""
    config = drqn.Config(encoder_sizes=(8,), lstm_size=8)
    params = torch.stack([drqn.init(config, OBS4, ACT2, seed=s)["params"] for s in (0, 1)])
    h, c = drqn.initial_carry(config, 3)
    carry = (h.expand(2, 3, 8), c.expand(2, 3, 8))
    obs, noise = torch.randn(2, 3, 4), torch.rand(2, 2, 3)
    act = torch.vmap(drqn.act, in_dims=(0, 0, 0, 0, 0))
    action, _ = act(params, obs, carry, torch.full((2, 3), 0.1), noise)
    assert action.shape == (2, 3)
    _raises(r"^drqn\.act: epsilon must have shape \[\] or \[B\] = \[\] or \[3\], got \[2\]\.$",
            act, params, obs, carry, torch.full((2, 2), 0.1), noise)


# 4. DRQN batch without a key: was a KeyError
def test_drqn_update_refuses_a_batch_missing_keys_with_a_value_error():
    config = drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=3)
    state = drqn.init(config, OBS4, ACT2, seed=0)
    _raises(r"^drqn\.update: the batch is missing 'terminated', 'mask'; sample it from SequenceReplay",
            drqn.update, state, _window(3, mask=None, terminated=None))
    stored = drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=3, initial_state="stored")
    _raises(r"^drqn\.loss: the batch is missing 'init_carry'; initial_state='stored'",
            drqn.loss, state["params"], state["target"], stored, _window(3))


# 5. R2D2's stored carry and its act's previous action / reward
def test_r2d2_refuses_bad_stored_carry_and_previous_action_or_reward():
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=3, burn_in=1, sequence_period=2)
    state = r2d2.init(config, OBS4, ACT2, seed=0)
    carry = r2d2.carry_to_td(r2d2.initial_carry(config, 4)).unsqueeze(0).expand(4, 4)
    r2d2.update(state, _window(4, init_carry=carry))
    _raises(r"^r2d2\.update: batch\['init_carry'\] is missing 'prev_action'; initial_state='stored'",
            r2d2.update, state, _window(4, init_carry=carry.exclude("prev_action")))
    _raises(r"^r2d2\.loss: batch\['init_carry', 'prev_action'\] must have dtype integer \(action indices\), got torch\.float32;",
            r2d2.update, state, _window(4, init_carry=carry.set("prev_action", torch.ones(4, 4))))
    obs, carry3 = torch.randn(3, 4), r2d2.initial_carry(config, 3)
    params = state["params"]
    _raises(r"^r2d2\.act: prev_reward must have shape \[B\] or \[B, 1\] = \[3\] or \[3, 1\], got \[5\]\.$",
            r2d2.act, params, obs, None, torch.zeros(5), carry3, 0.1)
    for bad in (7, -1):  # 7 with 2 actions was an all-zero one-hot input
        _raises(rf"^r2d2\.act: prev_action must hold action indices from 0 to 1, got {bad}\.$",
                r2d2.act, params, obs, torch.tensor([0, bad, 1]), None, carry3, 0.1)
    _raises(r"^r2d2\.act: prev_action must have dtype integer \(action indices\), got torch\.float32;",
            r2d2.act, params, obs, torch.tensor([0.0, 1.0, 1.0]), None, carry3, 0.1)
    _raises(r"^r2d2\.prepare_carry: prev_action must have shape \[B\] or \[B, 1\] = \[3\] or \[3, 1\], got \[2\]\.$",
            r2d2.prepare_carry, carry3, prev_action=torch.tensor([0, 1]))
    action, new = r2d2.act(params, obs, torch.tensor([0, 1, 1]), np.array([0.5, 0.0, 1.0]), carry3, 0.1)
    assert action.shape == (3,) and new.prev_reward.tolist() == [0.5, 0.0, 1.0]


def test_rlpd_init_with_a_redq_config_is_one_sentence():
    with pytest.raises(ValueError, match=r"rlpd.init: config must be an rlpd.Config \(redq.init takes a redq.Config\), "
                                         r"got a Config"):
        rlpd.init(redq.Config(), BOX3, BOX1)
