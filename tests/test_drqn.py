"""DRQN pure pieces: loss by hand, masking, target copies, acting, compile parity."""

import math

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict
from torch import nn

from rlfunc.algos import drqn

torch.set_num_threads(1)

OBS = gym.spaces.Box(-1.0, 1.0, (2,))
ACT = gym.spaces.Discrete(2)


def _tiny(**overrides):
    values = dict(encoder_sizes=(3,), lstm_size=2, sequence_length=3, target_period=3, batch_size=2)
    values.update(overrides)
    return drqn.Config(**values)


def _batch(T=3, B=2, O=2, A=2, seed=0, pad=((2, 1),)):
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, B, O, generator=g)
    next_obs = torch.randn(T, B, O, generator=g)
    next_obs[:-1] = obs[1:]  # consecutive steps of one episode
    mask = torch.ones(T, B, dtype=torch.bool)
    for t, b in pad:
        mask[t:, b] = False
    terminated = torch.zeros(T, B, dtype=torch.bool)
    terminated[1, 1] = True  # column 1 terminates at t = 1, then padding
    batch = TensorDict(
        {
            "obs": obs,
            "next_obs": next_obs,
            "action": torch.randint(A, (T, B), generator=g),
            "reward": torch.randn(T, B, generator=g),
            "terminated": terminated,
            "truncated": torch.zeros(T, B, dtype=torch.bool),
            "mask": mask,
        },
        batch_size=[T, B],
    )
    # padding is zeros, as SequenceReplay writes it
    for key in ("obs", "next_obs", "action", "reward", "terminated"):
        x = batch[key]
        batch[key] = torch.where(mask.view(T, B, *([1] * (x.dim() - 2))), x, torch.zeros_like(x))
    return batch


def _modules(p):
    enc = nn.Linear(*p["encoder", "0", "weight"].shape[::-1])
    cell = nn.LSTMCell(p["lstm", "weight_ih"].shape[1], p["lstm", "weight_hh"].shape[1])
    with torch.no_grad():
        enc.weight.copy_(p["encoder", "0", "weight"])
        enc.bias.copy_(p["encoder", "0", "bias"])
        for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, n).copy_(p["lstm", n])
    if "advantage" in p["head"].keys():  # dueling: q = v + a - mean_a a (Wang et al. 2016)
        value, adv = (_linear_module(p["head", k, "0"]) for k in ("value", "advantage"))

        def head(h):
            a = adv(h)
            return value(h) + a - a.mean(dim=-1, keepdim=True)

        return enc, cell, head
    return enc, cell, _linear_module(p["head"])


def _linear_module(p):
    layer = nn.Linear(*p["weight"].shape[::-1])
    with torch.no_grad():
        layer.weight.copy_(p["weight"])
        layer.bias.copy_(p["bias"])
    return layer


def _h(x, eps=1e-3):
    """R2D2's value rescaling, textbook form, in float64."""
    return math.copysign(math.sqrt(abs(x) + 1.0) - 1.0, x) + eps * x


def _h_inv(y, eps=1e-3):
    z = (math.sqrt(1.0 + 4.0 * eps * (abs(y) + 1.0 + eps)) - 1.0) / (2.0 * eps)
    return math.copysign(z * z - 1.0, y)


def _hand_loss(state, batch, gamma, double_q, n_step=1, rescale=False):
    """Per-sequence, per-step Python loops with nn modules: what the paper describes
    (``n_step > 1``: the return summed over up to n valid steps of the window;
    ``rescale``: R2D2's ``h(return with bootstrap h^-1(Q'))``)."""
    online, target = _modules(state["params"]), _modules(state["target"])
    T, B = batch.batch_size
    H = state["params", "lstm", "weight_hh"].shape[1]

    def unroll(mods, xs):
        enc, cell, head = mods
        h = c = torch.zeros(1, H)
        out = []
        for x in xs:
            h, c = cell(torch.relu(enc(x[None])), (h, c))
            out.append(head(h)[0])
        return out

    total, count = 0.0, 0
    for b in range(B):
        seq = [batch["obs"][0, b]] + [batch["next_obs"][t, b] for t in range(T)]
        q_on = unroll(online, seq)
        q_tg = unroll(target, seq)
        last_valid = max(t for t in range(T) if batch["mask"][t, b])
        for t in range(T):
            if not batch["mask"][t, b]:
                continue
            a = int(batch["action"][t, b])
            y, scale = 0.0, 1.0
            for k in range(t, min(t + n_step - 1, last_valid) + 1):
                y = y + scale * batch["reward"][k, b]
                scale = scale * gamma * (1.0 - float(batch["terminated"][k, b]))
            if double_q:
                boot = q_tg[k + 1][int(torch.argmax(q_on[k + 1]))]
            else:
                boot = q_tg[k + 1].max()
            if rescale:
                y = torch.tensor(_h(float(y) + float(scale) * _h_inv(float(boot))))
            else:
                y = y + scale * boot
            td = y.detach() - q_on[t][a]
            total = total + (0.5 * td**2 if abs(td.item()) <= 1 else abs(td) - 0.5)
            count += 1
    return total / count


@pytest.mark.parametrize(
    "double_q,dueling,n_step,rescale",
    [
        (False, False, 1, False),
        (True, False, 1, False),
        (True, True, 1, False),
        (False, False, 3, False),
        (True, False, 2, False),
        (False, False, 1, True),
        (True, False, 3, True),
    ],
)
def test_loss_equals_hand_computation(double_q, dueling, n_step, rescale):
    config = _tiny(double_q=double_q, dueling=dueling, gamma=0.9, n_step=n_step, value_rescaling=rescale)
    state = drqn.init(config, OBS, ACT, seed=0)
    # a target network that differs from the online one
    state["target"] = state["target"].apply(lambda x: x + 0.3 * torch.randn_like(x))
    batch = _batch()
    batch["reward"] = batch["reward"] * 3  # some TD errors beyond the Huber threshold
    value, aux = drqn.loss(state["params"], state["target"], config, batch)
    expected = _hand_loss(state, batch, 0.9, double_q, n_step, rescale)
    torch.testing.assert_close(value, expected.detach().reshape(()), rtol=1e-5, atol=1e-6)
    assert aux["td_error"].shape == (3, 2) and float(aux["td_error"][2, 1]) == 0.0


def test_padded_steps_carry_no_loss_or_gradient():
    config = _tiny()
    state = drqn.init(config, OBS, ACT, seed=1)
    batch = _batch(T=4, B=3, pad=((2, 0), (1, 2)))
    grad = torch.func.grad_and_value(drqn.loss, has_aux=True)
    g1, (l1, _) = grad(state["params"], state["target"], config, batch)
    junk = batch.clone()
    pad = ~batch["mask"]
    junk["obs"][pad] = 1e3
    junk["next_obs"][pad] = -1e3
    junk["reward"][pad] = 1e6
    junk["action"][pad] = 1
    junk["terminated"][pad] = True
    g2, (l2, _) = grad(state["params"], state["target"], config, junk)
    torch.testing.assert_close(l1, l2)
    for k in g1.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(g1[k], g2[k])


def test_terminated_steps_do_not_bootstrap_truncated_ones_do():
    config = _tiny(gamma=0.5)
    state = drqn.init(config, OBS, ACT, seed=2)
    batch = _batch(pad=())
    batch["terminated"][:] = False
    _, aux_cont = drqn.loss(state["params"], state["target"], config, batch)
    batch["terminated"][2, 0] = True
    _, aux_term = drqn.loss(state["params"], state["target"], config, batch)
    q_tm1, _ = drqn.q_unroll(state["params"], batch["obs"], drqn.initial_carry(config, 2))
    q_sa = q_tm1[2, 0, batch["action"][2, 0]]
    torch.testing.assert_close(aux_term["td_error"][2, 0], batch["reward"][2, 0] - q_sa.detach())
    assert not torch.isclose(aux_cont["td_error"][2, 0], aux_term["td_error"][2, 0])
    torch.testing.assert_close(aux_term["td_error"][:2], aux_cont["td_error"][:2])


def test_update_steps_adam_and_copies_target_every_period():
    config = _tiny(target_period=3)
    state = drqn.init(config, OBS, ACT, seed=0)
    batch = _batch()
    first_target = state["target"].clone()
    for k in range(1, 7):
        state, metrics = drqn.update(state, batch)
        assert int(state["step"]) == k
        same_as_online = (state["target"] == state["params"]).all()
        if k % 3 == 0:
            assert same_as_online
            copied = state["target"].clone()
        else:
            assert not same_as_online
            reference = first_target if k < 3 else copied
            assert (state["target"] == reference).all()
    assert all(v.dim() == 0 for v in metrics.values())
    assert set(metrics.keys()) >= {"loss", "q", "td_abs", "grad_norm"}


def test_stored_initial_state_option():
    config = _tiny(initial_state="stored")
    state = drqn.init(config, OBS, ACT, seed=0)
    batch = _batch()
    with pytest.raises(KeyError, match="init_carry"):
        drqn.loss(state["params"], state["target"], config, batch)
    zeros = TensorDict({"h": torch.zeros(3, 2, 2), "c": torch.zeros(3, 2, 2)}, [3, 2])
    batch["init_carry"] = zeros
    l_zero, _ = drqn.loss(state["params"], state["target"], config, batch)
    l_default, _ = drqn.loss(state["params"], state["target"], _tiny(), batch)
    torch.testing.assert_close(l_zero, l_default)
    batch["init_carry"] = zeros.apply(lambda x: x + 0.5)
    l_stored, _ = drqn.loss(state["params"], state["target"], config, batch)
    assert not torch.isclose(l_stored, l_zero)


def test_act_is_epsilon_greedy_from_given_noise():
    config = _tiny()
    params = drqn.init(config, OBS, ACT, seed=0)["params"]
    obs = torch.randn(5, 2)
    carry = drqn.initial_carry(config, 5)
    q, expected_carry = drqn.q_step(params, obs, carry)
    noise = torch.stack([torch.full((5,), 0.5), torch.tensor([0.0, 0.49, 0.5, 0.99, 0.2])])
    greedy, new_carry = drqn.act(params, obs, carry, 0.0, noise)
    assert torch.equal(greedy, q.argmax(-1))
    torch.testing.assert_close(new_carry[0], expected_carry[0])
    random, _ = drqn.act(params, obs, carry, torch.tensor(1.0), noise)
    assert random.tolist() == [0, 0, 1, 1, 0]
    # reset zeroes the carry of envs whose episode starts now
    h = (torch.ones(5, 2), torch.ones(5, 2))
    reset = torch.tensor([True, False, True, False, False])
    _, c_reset = drqn.act(params, obs, h, 0.0, noise, reset=reset)
    _, c_zero = drqn.act(params, obs, carry, 0.0, noise)
    _, c_keep = drqn.act(params, obs, h, 0.0, noise)
    torch.testing.assert_close(c_reset[0][reset], c_zero[0][reset])
    torch.testing.assert_close(c_reset[0][~reset], c_keep[0][~reset])


def test_q_unroll_reset_matches_fresh_start():
    config = _tiny()
    params = drqn.init(config, OBS, ACT, seed=0)["params"]
    obs = torch.randn(4, 1, 2)
    reset = torch.tensor([[False], [False], [True], [False]])
    q, _ = drqn.q_unroll(params, obs, drqn.initial_carry(config, 1), reset)
    fresh, _ = drqn.q_unroll(params, obs[2:], drqn.initial_carry(config, 1))
    torch.testing.assert_close(q[2:], fresh)


def test_epsilon_schedule_and_config_errors():
    config = drqn.Config(eps_start=1.0, eps_end=0.1, eps_decay_steps=100)
    assert float(drqn.epsilon(config, 0)) == 1.0
    assert abs(float(drqn.epsilon(config, 50)) - 0.55) < 1e-6
    assert abs(float(drqn.epsilon(config, torch.tensor(1000))) - 0.1) < 1e-6
    with pytest.raises(ValueError, match="Discrete action space"):
        drqn.init(drqn.Config(), OBS, gym.spaces.Box(-1.0, 1.0, (2,)))
    with pytest.raises(ValueError, match="sequence_period"):
        drqn.Config(sequence_length=4, sequence_period=5)
    with pytest.raises(ValueError, match="n_step must be between 1 and sequence_length"):
        drqn.Config(sequence_length=4, n_step=5)
    with pytest.raises(ValueError, match=r"\[T, B\]"):
        drqn.update(drqn.init(_tiny(), OBS, ACT), _batch()[0])


def test_learns_from_sequence_replay_batches():
    """End-to-end pure pieces: replay windows -> update reduces the loss on a fixed batch."""
    from rlfunc.replay.sequence import SequenceReplay

    config = _tiny(lstm_size=8, encoder_sizes=(8,), sequence_length=4, lr=1e-2, gamma=0.5, target_period=10)
    rb = SequenceReplay(200, 4, num_envs=2, period=1)
    g = torch.Generator().manual_seed(0)
    for i in range(40):
        obs = torch.randn(2, 2, generator=g)
        rb.add(
            TensorDict(
                {
                    "obs": obs,
                    "action": torch.randint(2, (2,), generator=g),
                    "reward": obs[:, 0],
                    "next_obs": torch.randn(2, 2, generator=g),
                    "terminated": torch.tensor([i % 5 == 4, i % 7 == 6]),
                    "truncated": torch.zeros(2, dtype=torch.bool),
                },
                [2],
            )
        )
    batch = rb.sample(16, generator=g)
    state = drqn.init(config, OBS, ACT, seed=0)
    state, first = drqn.update(state, batch)
    for _ in range(60):
        state, metrics = drqn.update(state, batch)
    assert float(metrics["loss"]) < 0.5 * float(first["loss"])


@pytest.mark.compile
@pytest.mark.parametrize("dueling,n_step,rescale", [(False, 1, False), (True, 1, False), (False, 3, True)])
def test_update_compiles_fullgraph_and_matches_eager(dueling, n_step, rescale):
    config = _tiny(double_q=True, dueling=dueling, target_period=2, n_step=n_step, value_rescaling=rescale)
    state = drqn.init(config, OBS, ACT, seed=0)
    batches = [_batch(seed=s) for s in range(3)]
    compiled = torch.compile(drqn.update, fullgraph=True)
    s_eager, s_comp = state, state.clone()
    for b in batches:
        s_eager, m_eager = drqn.update(s_eager, b)
        s_comp, m_comp = compiled(s_comp, b)
    for k in ("loss", "q", "td_abs", "grad_norm"):
        torch.testing.assert_close(m_comp[k], m_eager[k], rtol=1e-4, atol=1e-5)
    for k in s_eager.keys(include_nested=True, leaves_only=True):
        torch.testing.assert_close(s_comp[k], s_eager[k], rtol=1e-4, atol=1e-5)
    assert int(s_comp["step"]) == 3


def test_lr_decay_option_reaches_lr_end_and_defaults_to_the_constant_rate():
    config = drqn.Config(lstm_size=8, encoder_sizes=(8,), sequence_length=3, batch_size=2, lr=1e-3,
                         lr_decay_updates=2, lr_end=1e-4)
    obs, act = gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Discrete(2)
    state = drqn.init(config, obs, act, seed=0)
    batch = TensorDict({"obs": torch.randn(3, 2, 3), "action": torch.randint(2, (3, 2)),
                        "reward": torch.randn(3, 2), "next_obs": torch.randn(3, 2, 3),
                        "terminated": torch.zeros(3, 2, dtype=torch.bool),
                        "mask": torch.ones(3, 2, dtype=torch.bool)}, batch_size=[3, 2])
    lrs = []
    for _ in range(4):
        state, m = drqn.update(state, batch)
        lrs.append(float(m["lr"]))
    assert lrs == pytest.approx([1e-3, 5.5e-4, 1e-4, 1e-4])
    _, m = drqn.update(drqn.init(drqn.Config(lstm_size=8, encoder_sizes=(8,), sequence_length=3, batch_size=2), obs, act), batch)
    assert float(m["lr"]) == pytest.approx(drqn.Config().lr)
