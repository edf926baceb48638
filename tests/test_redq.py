"""REDQ's defining rules, each checked directly (FIDELITY.md, REDQ table)."""

import gymnasium as gym
import pytest
import torch
from tensordict import TensorDict

from rlfunc.algos import redq
from rlfunc.core import nets

OBS, ACT = 3, 2


def _spaces():
    return gym.spaces.Box(-1, 1, (OBS,)), gym.spaces.Box(-1, 1, (ACT,))


def _batch(g, b, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return TensorDict(
        {
            "obs": torch.randn(g, b, OBS, generator=gen),
            "action": torch.rand(g, b, ACT, generator=gen) * 2 - 1,
            "reward": torch.randn(g, b, generator=gen),
            "next_obs": torch.randn(g, b, OBS, generator=gen),
            "terminated": (torch.rand(g, b, generator=gen) < 0.2).float(),
        },
        batch_size=[g, b],
    )


def _tiny(**kw):
    base = dict(num_critics=5, subset_size=2, hidden_sizes=(8, 8), batch_size=4, updates_per_step=3)
    base.update(kw)
    return redq.Config(**base)


def test_defaults_are_the_official_ones():
    c = redq.Config()
    assert (c.num_critics, c.subset_size, c.updates_per_step) == (10, 2, 20)
    assert c.hidden_sizes == (256, 256) and c.batch_size == 256
    assert (c.gamma, c.tau, c.actor_lr, c.critic_lr, c.alpha_lr) == (0.99, 0.005, 3e-4, 3e-4, 3e-4)
    assert c.init_alpha == 1.0 and c.auto_alpha and c.target_entropy == "mbpo"  # the official table, -|A| off it
    assert c.lr_schedule is c.actor_lr_schedule is c.critic_lr_schedule is c.alpha_lr_schedule is None  # constant
    assert (c.log_std_min, c.log_std_max) == (-20.0, 2.0) and c.init == "xavier_uniform"
    st = redq.init(c, *_spaces())
    assert float(st["target_entropy"]) == -ACT  # no env id: -|A| (tests/test_redq_target_entropy.py: the table)
    assert st["params", "critic"].batch_size == torch.Size([10])
    assert float(st["params", "log_alpha"]) == 0.0
    # target critics start as exact copies
    for k in st["params", "critic"].keys(True, True):
        assert torch.equal(st["params", "critic"][k], st["target", "critic"][k])


def test_discrete_action_space_is_rejected_clearly():
    with pytest.raises(ValueError, match="continuous 1-D Box action space.*DRQN or R2D2"):
        redq.init(redq.Config(), gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2))


def test_subset_has_m_distinct_members_and_changes_between_updates():
    cfg = redq.Config()
    noise = redq.draw_noise(cfg, 50, 4, ACT, generator=torch.Generator().manual_seed(0))
    subsets = [tuple(sorted(torch.topk(noise["subset"][g], cfg.subset_size).indices.tolist())) for g in range(50)]
    assert all(len(set(s)) == cfg.subset_size for s in subsets)
    assert len(set(subsets)) > 10  # redrawn per critic update, not once per env step
    members = torch.tensor([m for s in subsets for m in s])
    assert torch.bincount(members, minlength=10).min() > 0


def test_target_uses_min_over_the_drawn_subset_only():
    cfg = _tiny(num_critics=4, backup_entropy=False)
    st = redq.init(cfg, *_spaces(), seed=1)
    mini = _batch(1, 6)[0]
    subset_noise = torch.tensor([0.9, 0.1, 0.8, 0.2])  # picks critics 0 and 2
    nxt = torch.zeros(6, ACT)
    y = redq.compute_target(cfg, st["params", "actor"], st["target", "critic"], torch.tensor(1.0), mini, nxt, subset_noise)
    a_next, _ = redq._sample(cfg, st["params", "actor"], mini["next_obs"], nxt)
    x = torch.cat([mini["next_obs"], a_next], -1)
    q = torch.stack([nets.mlp_apply(st["target", "critic"][i], x).squeeze(-1) for i in range(4)])
    expected = mini["reward"] + 0.99 * (1 - mini["terminated"]) * torch.minimum(q[0], q[2])
    torch.testing.assert_close(y, expected)


def test_critic_loss_is_sum_of_per_critic_mse_hand_computed():
    cfg = _tiny(num_critics=2, hidden_sizes=(3,))
    critic = nets.ensemble_init(2, lambda: nets.mlp_init((OBS + ACT, 3, 1), generator=torch.Generator().manual_seed(5)))
    critic = critic.apply(lambda t: t + torch.arange(t.numel(), dtype=t.dtype).reshape(t.shape) * 0.01)
    obs, act = torch.randn(4, OBS), torch.rand(4, ACT)
    y = torch.randn(4)
    loss, _ = redq.critic_loss(critic, cfg, obs, act, y)
    total = 0.0
    for i in range(2):
        w0, b0 = critic[i]["0", "weight"], critic[i]["0", "bias"]
        w1, b1 = critic[i]["1", "weight"], critic[i]["1", "bias"]
        for j in range(4):
            x = torch.cat([obs[j], act[j]])
            h = torch.clamp(w0 @ x + b0, min=0)
            q = float(w1 @ h + b1)
            total += (q - float(y[j])) ** 2 / 4
    assert float(loss) == pytest.approx(total, rel=1e-5)


def test_update_counts_and_polyak_after_every_critic_step():
    cfg = _tiny(updates_per_step=4)
    st = redq.init(cfg, *_spaces())
    batch = _batch(4, 4)
    noise = redq.draw_noise(cfg, 4, 4, ACT, generator=torch.Generator().manual_seed(0))
    new, metrics = redq.update(st, batch, noise)
    assert int(new["opt", "critic", "step"]) == 4  # G critic steps per env step
    assert int(new["opt", "actor", "step"]) == 1  # one actor step per env step
    assert int(new["opt", "alpha", "step"]) == 1
    assert int(new["step"]) == 1
    # replay the critic steps by hand to check the target after 4 polyak steps
    from rlfunc.core.optim import Adam
    from rlfunc.core.targets import polyak

    critic, target, ostate = st["params", "critic"], st["target", "critic"], Adam(lr=cfg.critic_lr).init(st["params", "critic"])
    alpha = st["params", "log_alpha"].exp()
    for g in range(4):
        y = redq.compute_target(cfg, st["params", "actor"], target, alpha, batch[g], noise["next_action"][g], noise["subset"][g])
        grads = torch.func.grad(lambda c: redq.critic_loss(c, cfg, batch[g]["obs"], batch[g]["action"], y)[0])(critic)
        critic, ostate = Adam(lr=cfg.critic_lr).step(grads, ostate, critic)
        target = polyak(target, critic, cfg.tau)
    for k in critic.keys(True, True):
        torch.testing.assert_close(new["params", "critic"][k], critic[k])
        torch.testing.assert_close(new["target", "critic"][k], target[k])
    assert set(metrics.keys()) >= {"critic_loss", "actor_loss", "alpha", "entropy", "q"}
    # the input state is untouched (pure)
    assert int(st["opt", "critic", "step"]) == 0


def test_actor_uses_mean_of_all_critics_before_last_critic_step():
    cfg = _tiny(updates_per_step=2)
    st = redq.init(cfg, *_spaces(), seed=3)
    batch = _batch(2, 4, seed=3)
    noise = redq.draw_noise(cfg, 2, 4, ACT, generator=torch.Generator().manual_seed(1))
    new, _ = redq.update(st, batch, noise)
    # critics after the first of two critic steps
    one, _ = redq.update(st, batch[:1], TensorDict({"next_action": noise["next_action"][:1], "subset": noise["subset"][:1], "action": noise["action"]}, []))
    critic_before_last = one["params", "critic"]
    alpha = st["params", "log_alpha"].exp()

    def loss(actor):
        a, logp = redq._sample(cfg, actor, batch[1]["obs"], noise["action"])
        q = torch.stack([nets.mlp_apply(critic_before_last[i], torch.cat([batch[1]["obs"], a], -1)).squeeze(-1) for i in range(cfg.num_critics)])
        return (alpha * logp - q.mean(0)).mean()

    grads = torch.func.grad(loss)(st["params", "actor"])
    from rlfunc.core.optim import Adam

    expected, _ = Adam(lr=cfg.actor_lr).step(grads, Adam(lr=cfg.actor_lr).init(st["params", "actor"]), st["params", "actor"])
    for k in expected.keys(True, True):
        torch.testing.assert_close(new["params", "actor"][k], expected[k], rtol=1e-5, atol=1e-6)


def test_terminated_blocks_bootstrap():
    cfg = _tiny(num_critics=2)
    st = redq.init(cfg, *_spaces())
    mini = _batch(1, 4)[0]
    mini["terminated"] = torch.ones(4)
    y = redq.compute_target(cfg, st["params", "actor"], st["target", "critic"], torch.tensor(1.0), mini, torch.zeros(4, ACT), torch.rand(2))
    torch.testing.assert_close(y, mini["reward"])


def test_act_deterministic_and_bounded():
    cfg = _tiny()
    st = redq.init(cfg, *_spaces())
    obs = torch.randn(7, OBS) * 10
    a = redq.act(st["params"], obs, deterministic=True)
    assert a.shape == (7, ACT) and float(a.abs().max()) <= 1.0
    torch.testing.assert_close(a, redq.act(st["params"], obs, deterministic=True))
    noisy = redq.act(st["params"], obs, torch.randn(7, ACT))
    assert float(noisy.abs().max()) <= 1.0


@pytest.mark.compile
@pytest.mark.parametrize("mode", ["full", "step"])
def test_update_compiles_fullgraph_and_matches_eager(mode):
    """torch.compile(fullgraph=True) over the whole env-step update ("full", G=2:
    compile is slow on CPU) and over its critic/policy steps ("step")."""
    cfg = _tiny(updates_per_step=2)
    st = redq.init(cfg, *_spaces())
    batch = _batch(2, 4)
    noise = redq.draw_noise(cfg, 2, 4, ACT, generator=torch.Generator().manual_seed(0))
    eager_state, eager_metrics = redq.update(st, batch, noise)
    compiled = redq.make_update(mode)
    comp_state, comp_metrics = compiled(st, batch, noise)
    comp_state2, _ = compiled(comp_state, batch, noise)  # second call: no recompilation error
    eager_state2, _ = redq.update(eager_state, batch, noise)
    for k in eager_state.exclude("config").keys(True, True):
        torch.testing.assert_close(comp_state[k], eager_state[k], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(comp_state2[k], eager_state2[k], rtol=1e-4, atol=1e-5)
    for k in eager_metrics.keys():
        torch.testing.assert_close(comp_metrics[k], eager_metrics[k], rtol=1e-4, atol=1e-5)
