"""RLPD's pure pieces: official defaults, LayerNorm placement, update structure, compile."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import redq, rlpd

torch.set_num_threads(1)

OBS, ACT = 3, 2


def _spaces():
    return gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32), gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)


def _tiny(**kw):
    base = dict(num_critics=5, subset_size=2, hidden_sizes=(8, 8), batch_size=4, updates_per_step=3)
    base.update(kw)
    return rlpd.Config(**base)


def _batch(g, b, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(g, b, OBS, generator=gen),
            "action": torch.rand(g, b, ACT, generator=gen) * 2 - 1,
            "reward": torch.randn(g, b, generator=gen),
            "next_obs": torch.randn(g, b, OBS, generator=gen),
            "terminated": torch.zeros(g, b),
        },
        batch_size=[g, b],
    )


def test_defaults_are_the_official_ones():
    c = rlpd.Config()
    assert (c.num_critics, c.subset_size, c.updates_per_step) == (10, 2, 20)
    assert c.hidden_sizes == (256, 256) and c.batch_size == 256
    assert (c.gamma, c.tau, c.actor_lr, c.critic_lr, c.alpha_lr) == (0.99, 0.005, 3e-4, 3e-4, 3e-4)
    assert c.critic_layer_norm and c.layer_norm_eps == 1e-6
    assert c.alpha_loss == "alpha" and c.backup_entropy and c.init_alpha == 1.0
    assert c.actor_after_critics and c.critic_loss_reduction == "mean" and c.tanh_epsilon is None
    st = rlpd.init(c, *_spaces())
    assert float(st["target_entropy"]) == -ACT / 2
    assert float(st["params", "log_alpha"]) == 0.0  # temperature 1
    assert st["params", "critic"].batch_size == torch.Size([10])
    for k in st["params", "critic"].keys(True, True):
        assert torch.equal(st["params", "critic"][k], st["target", "critic"][k])
    # a REDQ config underneath: one implementation of the math
    assert isinstance(st.get_non_tensor("config"), redq.Config)


def test_layer_norm_in_every_critic_hidden_layer_only():
    for hidden in [(16, 16), (16, 16, 16)]:
        st = rlpd.init(_tiny(hidden_sizes=hidden), *_spaces())
        critic = st["params", "critic"]
        n_linear = len(hidden) + 1
        linear = sorted(k for k in critic.keys() if not k.startswith("norm"))
        norms = sorted(k for k in critic.keys() if k.startswith("norm"))
        assert linear == [str(i) for i in range(n_linear)]
        # Linear i -> LayerNorm i -> ReLU for each hidden layer, none after the output layer
        assert norms == ["norm" + str(i) for i in range(len(hidden))]
        for i, h in enumerate(hidden):
            assert critic["norm" + str(i), "weight"].shape == (5, h)
            assert torch.equal(critic["norm" + str(i), "weight"], torch.ones(5, h))
            assert torch.equal(critic["norm" + str(i), "bias"], torch.zeros(5, h))
        assert critic[str(n_linear - 1), "weight"].shape == (5, 1, hidden[-1])
        # none in the actor, none in the target's layout beyond the critic's
        actor_keys = ["/".join(k) for k in st["params", "actor"].keys(True, True)]
        assert not any("norm" in k for k in actor_keys)
        assert set(st["target", "critic"].keys()) == set(critic.keys())
    no_ln = rlpd.init(_tiny(critic_layer_norm=False), *_spaces())
    assert not any(k.startswith("norm") for k in no_ln["params", "critic"].keys())


def test_layer_norm_is_applied_with_flax_eps():
    cfg = _tiny(num_critics=2)
    st = rlpd.init(cfg, *_spaces())
    member = st["params", "critic"][0]
    x = torch.randn(7, OBS + ACT)
    h = x
    for i in range(3):
        h = torch.nn.functional.linear(h, member[str(i), "weight"], member[str(i), "bias"])
        if i < 2:
            mu, var = h.mean(-1, keepdim=True), h.var(-1, unbiased=False, keepdim=True)
            h = torch.relu((h - mu) / torch.sqrt(var + 1e-6))
    q = redq._q_values(st.get_non_tensor("config"), st["params", "critic"], x[:, :OBS], x[:, OBS:])
    torch.testing.assert_close(q[0], h.squeeze(-1), rtol=1e-5, atol=1e-5)


def test_one_actor_and_one_temperature_step_per_env_step():
    cfg = _tiny(updates_per_step=4)
    st = rlpd.init(cfg, *_spaces())
    noise = rlpd.draw_noise(cfg, 4, 4, ACT, generator=torch.Generator().manual_seed(0))
    new, metrics = rlpd.update(st, _batch(4, 4), noise)
    assert int(new["opt", "critic", "step"]) == 4
    assert int(new["opt", "actor", "step"]) == 1
    assert int(new["opt", "alpha", "step"]) == 1
    assert int(new["step"]) == 1
    new2, _ = rlpd.update(new, _batch(4, 4, seed=1), noise)
    assert (int(new2["opt", "critic", "step"]), int(new2["opt", "actor", "step"]), int(new2["opt", "alpha", "step"])) == (8, 2, 2)
    assert set(metrics.keys()) >= {"critic_loss", "actor_loss", "alpha_loss", "alpha", "entropy", "q"}


def test_target_subset_is_redrawn_for_every_critic_step():
    cfg = _tiny(num_critics=6, updates_per_step=3)
    st = rlpd.init(cfg, *_spaces())
    noise = rlpd.draw_noise(cfg, 3, 4, ACT, generator=torch.Generator().manual_seed(0))
    assert noise["subset"].shape == (3, 6)  # one independent draw per critic step
    # Each critic step g uses its own row: pick disjoint subsets per step, then
    # check that changing row g changes the update, and that the subsets differ.
    rows = [[0, 1], [2, 3], [4, 5]]
    subset = torch.zeros(3, 6)
    for g, idx in enumerate(rows):
        subset[g, idx] = 1.0
    noise["subset"] = subset
    # make the target critics distinguishable
    for i in range(6):
        st["target", "critic", "2", "bias"][i] += float(i)
    base, _ = rlpd.update(st, _batch(3, 4), noise)
    for g in range(3):
        changed = noise.clone()
        changed["subset"][g] = torch.roll(subset[g], 1)
        alt, _ = rlpd.update(st, _batch(3, 4), changed)
        assert not torch.allclose(alt["params", "critic", "0", "weight"], base["params", "critic", "0", "weight"]), g
    # statistically: the chosen members differ between critic steps
    many = rlpd.draw_noise(rlpd.Config(), 20, 2, ACT, generator=torch.Generator().manual_seed(1))["subset"]
    chosen = {tuple(sorted(torch.topk(r, 2).indices.tolist())) for r in many}
    assert len(chosen) > 5
    assert all(len(set(c)) == 2 for c in chosen)


def test_actor_uses_the_critics_after_all_critic_steps():
    cfg = _tiny(updates_per_step=2)
    st = rlpd.init(cfg, *_spaces(), seed=3)
    batch = _batch(2, 4, seed=3)
    noise = rlpd.draw_noise(cfg, 2, 4, ACT, generator=torch.Generator().manual_seed(1))
    new, _ = rlpd.update(st, batch, noise)
    rc = st.get_non_tensor("config")
    alpha = st["params", "log_alpha"].exp()

    def loss(actor):
        a, logp = redq._sample(rc, actor, batch[1]["obs"], noise["action"])
        q = redq._q_values(rc, new["params", "critic"], batch[1]["obs"], a)  # the updated critics
        return (alpha * logp - q.mean(0)).mean()

    grads = torch.func.grad(loss)(st["params", "actor"])
    from rlfunc.core.optim import Adam

    opt = Adam(lr=cfg.actor_lr)
    expected, _ = opt.step(grads, opt.init(st["params", "actor"]), st["params", "actor"])
    for k in expected.keys(True, True):
        torch.testing.assert_close(new["params", "actor"][k], expected[k], rtol=1e-5, atol=1e-6)


def test_temperature_loss_is_alpha_times_entropy_gap():
    cfg = _tiny()
    st = rlpd.init(cfg, *_spaces())
    st["params", "log_alpha"] = torch.tensor(-0.5)
    noise = rlpd.draw_noise(cfg, 3, 4, ACT, generator=torch.Generator().manual_seed(2))
    _, m = rlpd.update(st, _batch(3, 4), noise)
    expected = torch.tensor(-0.5).exp() * (m["entropy"] - (-ACT / 2))
    torch.testing.assert_close(m["alpha_loss"], expected, rtol=1e-5, atol=1e-6)


def test_backup_entropy_switch():
    cfg = _tiny(backup_entropy=False)
    st = rlpd.init(cfg, *_spaces())
    rc = st.get_non_tensor("config")
    mini = _batch(1, 4)[0]
    a = torch.tensor(1.0)
    sub = torch.rand(5, generator=torch.Generator().manual_seed(0))
    y0 = redq.compute_target(rc, st["params", "actor"], st["target", "critic"], a, mini, torch.zeros(4, ACT), sub)
    y1 = redq.compute_target(rc, st["params", "actor"], st["target", "critic"], a * 100, mini, torch.zeros(4, ACT), sub)
    torch.testing.assert_close(y0, y1)  # alpha does not enter the target
    rc_on = rlpd.Config(**{**cfg.__dict__, "backup_entropy": True}).redq_config(ACT)
    y2 = redq.compute_target(rc_on, st["params", "actor"], st["target", "critic"], a * 100, mini, torch.zeros(4, ACT), sub)
    assert not torch.allclose(y0, y2)


def test_act_and_bad_spaces():
    cfg = _tiny()
    st = rlpd.init(cfg, *_spaces())
    a = rlpd.act(st["params"], torch.randn(5, OBS) * 10, deterministic=True, config=cfg)
    assert a.shape == (5, ACT) and float(a.abs().max()) <= 1.0
    noisy = rlpd.act(st["params"], torch.randn(5, OBS), torch.randn(5, ACT), config=cfg)
    assert float(noisy.abs().max()) <= 1.0
    with pytest.raises(ValueError, match="continuous 1-D Box action space"):
        rlpd.init(cfg, _spaces()[0], gym.spaces.Discrete(3))
    with pytest.raises(ValueError, match="subset_size"):
        rlpd.Config(num_critics=2, subset_size=3)



def test_act_input_errors_name_rlpd_act():
    """rlpd.act shares redq's code; its errors still name the function the user called."""
    cfg = _tiny()
    params = rlpd.init(cfg, *_spaces())["params"]
    with pytest.raises(ValueError, match=r"^rlpd\.act: obs must be \[\.\.\., 3\]"):
        rlpd.act(params, torch.zeros(5, OBS + 1), config=cfg)
    with pytest.raises(ValueError, match=r"^rlpd\.act: noise"):
        rlpd.act(params, torch.zeros(5, OBS), torch.zeros(5, ACT, dtype=torch.float64), config=cfg)
    with pytest.raises(ValueError, match=r"^rlpd\.act: params"):
        rlpd.act(TensorDict({}), torch.zeros(5, OBS), config=cfg)
    with pytest.raises(ValueError, match=r"^redq\.act: obs"):
        redq.act(params, torch.zeros(5, OBS + 1))

@pytest.mark.compile
def test_update_compiles_fullgraph_and_matches_eager():
    cfg = _tiny(updates_per_step=2, num_critics=3)
    st = rlpd.init(cfg, *_spaces())
    batch = _batch(2, 4)
    noise = rlpd.draw_noise(cfg, 2, 4, ACT, generator=torch.Generator().manual_seed(0))
    eager_state, eager_metrics = rlpd.update(st, batch, noise)
    compiled = torch.compile(rlpd.update, fullgraph=True)
    comp_state, comp_metrics = compiled(st, batch, noise)
    for k in eager_state.exclude("config").keys(True, True):
        torch.testing.assert_close(comp_state[k], eager_state[k], rtol=1e-4, atol=1e-5)
    for k in eager_metrics.keys():
        torch.testing.assert_close(comp_metrics[k], eager_metrics[k], rtol=1e-4, atol=1e-5)
