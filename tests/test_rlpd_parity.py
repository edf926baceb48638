"""Parity: rlfunc's functional RLPD vs the imperative baseline (benchmarks/baselines/rlpd.py).

Same parameters, batch and noise -> same critic loss and gradients (LayerNorm
critics, mean-over-critics loss) and the same critics, targets, actor and
temperature after full updates (G critic steps, then one actor step with the
updated critics and one temperature step).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines.rlpd import ImperativeRLPD  # noqa: E402
from rlfunc.algos import redq, rlpd  # noqa: E402

torch.set_num_threads(1)

OBS, ACT, N, M, G, B = 5, 2, 4, 2, 3, 16
HIDDEN = (32, 32)


def _setup(mode: str = "loop", seed: int = 0, **overrides):
    config = rlpd.Config(num_critics=N, subset_size=M, hidden_sizes=HIDDEN, batch_size=B, ensemble_mode=mode, **overrides)
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
    state = rlpd.init(config, obs_space, act_space, seed=seed)
    # LayerNorm gains/biases away from (1, 0), so a wrong placement or eps shows
    gen = torch.Generator().manual_seed(seed + 1)
    for key in list(state["params", "critic"].keys(True, True)):
        if str(key[0]).startswith("norm"):
            noise = 0.3 * torch.randn(state["params", "critic"][key].shape, generator=gen)
            state["params", "critic"][key] = state["params", "critic"][key] + noise
            state["target", "critic"][key] = state["params", "critic"][key].clone()
    batch = TensorDict(
        {
            "obs": torch.randn(G, B, OBS, generator=gen),
            "action": (torch.rand(G, B, ACT, generator=gen) * 2 - 1) * 0.99,
            "reward": torch.randn(G, B, generator=gen),
            "next_obs": torch.randn(G, B, OBS, generator=gen),
            "terminated": (torch.rand(G, B, generator=gen) < 0.2).float(),
        },
        batch_size=[G, B],
    )
    noise = rlpd.draw_noise(config, G, B, ACT, generator=gen)
    return config, state, batch, noise


def _assert_td_close(actual, expected, *, atol, rtol, what):
    keys = sorted(expected.keys(include_nested=True, leaves_only=True), key=str)
    assert sorted(actual.keys(include_nested=True, leaves_only=True), key=str) == keys
    for k in keys:
        torch.testing.assert_close(actual[k], expected[k], atol=atol, rtol=rtol, msg=lambda m, k=k: f"{what} {k}: {m}")


@pytest.mark.parametrize("g", [0, G - 1])
def test_critic_loss_and_grads_match_baseline(g):
    config, state, batch, noise = _setup()
    rc = state.get_non_tensor("config")
    agent = ImperativeRLPD.from_functional_state(state)
    mini = batch[g]
    params = state["params"]
    alpha = params["log_alpha"].exp()
    y = redq.compute_target(rc, params["actor"], state["target", "critic"], alpha, mini, noise["next_action"][g], noise["subset"][g])
    grads, (loss, _) = torch.func.grad_and_value(redq.critic_loss, has_aux=True)(
        params["critic"], rc, mini["obs"], mini["action"], y
    )
    y_ref = agent.compute_target(
        mini["next_obs"], mini["reward"], mini["terminated"], noise["next_action"][g], agent.subset_indices(noise["subset"][g])
    )
    torch.testing.assert_close(y, y_ref.squeeze(1), rtol=1e-5, atol=1e-5)
    loss_ref = agent.critic_loss(mini["obs"], mini["action"], y_ref)
    for opt in agent.q_optimizer_list:
        opt.zero_grad()
    loss_ref.backward()
    torch.testing.assert_close(loss, loss_ref.detach(), rtol=1e-5, atol=1e-6)
    _assert_td_close(grads, agent.critic_grads_td(), rtol=1e-5, atol=1e-6, what="critic grad")
    assert any(str(k[0]).startswith("norm") for k in grads.keys(True, True))


def test_exact_tanh_log_prob_matches_baseline_policy():
    config, state, batch, noise = _setup()
    agent = ImperativeRLPD.from_functional_state(state)
    obs = batch[0]["obs"] * 5.0  # large inputs: saturated actions, where the exact log-det matters
    a, logp = redq._sample(state.get_non_tensor("config"), state["params", "actor"], obs, noise["action"] * 4.0)
    a_ref, logp_ref = agent.policy_net(obs, noise["action"] * 4.0)
    torch.testing.assert_close(a, a_ref, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(logp, logp_ref.squeeze(1), rtol=1e-5, atol=1e-4)
    assert torch.isfinite(logp).all()


@pytest.mark.parametrize("mode", ["loop", "bmm", "vmap"])
def test_full_update_matches_baseline(mode):
    config, state, batch, noise = _setup(mode)
    state["params", "log_alpha"] = torch.tensor(-0.3)
    agent = ImperativeRLPD.from_functional_state(state)
    new_state, metrics = rlpd.update(state, batch, noise)
    ref_metrics = agent.update(batch, noise)
    atol, rtol = 1e-5, 1e-4
    ref = agent.params_td()
    _assert_td_close(new_state["params", "critic"], ref["critic"], atol=atol, rtol=rtol, what="critic")
    _assert_td_close(new_state["target", "critic"], agent.target_td()["critic"], atol=atol, rtol=rtol, what="target")
    _assert_td_close(new_state["params", "actor"], ref["actor"], atol=atol, rtol=rtol, what="actor")
    torch.testing.assert_close(new_state["params", "log_alpha"], ref["log_alpha"], atol=atol, rtol=rtol)
    torch.testing.assert_close(metrics["actor_loss"], ref_metrics["actor_loss"], atol=atol, rtol=rtol)
    torch.testing.assert_close(metrics["alpha_loss"], ref_metrics["alpha_loss"], atol=atol, rtol=rtol)
    for key in (("params", "critic"), ("target", "critic"), ("params", "actor")):
        moved = [not torch.equal(state[key][k], new_state[key][k]) for k in state[key].keys(True, True)]
        assert all(moved), f"{key}: some leaves did not change"


def test_two_updates_match_baseline_without_backup_entropy():
    config, state, batch, noise = _setup("bmm", seed=3, backup_entropy=False)
    agent = ImperativeRLPD.from_functional_state(state)
    gen = torch.Generator().manual_seed(7)
    for _ in range(2):
        state, _ = rlpd.update(state, batch, noise)
        agent.update(batch, noise)
        noise = rlpd.draw_noise(config, G, B, ACT, generator=gen)
    _assert_td_close(state["params"], agent.params_td(), atol=2e-5, rtol=1e-4, what="params")
    _assert_td_close(state["target"], agent.target_td(), atol=2e-5, rtol=1e-4, what="target")


def test_redq_order_differs_from_rlpd_order():
    """The actor step sees the critics after the G-th step in RLPD, before it in REDQ."""
    config, state, batch, noise = _setup()
    new_rlpd, _ = rlpd.update(state, batch, noise)
    redq_cfg = config.redq_config(ACT)
    redq_state = state.clone()
    redq_state.set_non_tensor("config", dataclasses.replace(redq_cfg, actor_after_critics=False))
    new_redq, _ = redq.update(redq_state, batch, noise)
    _assert_td_close(new_rlpd["params", "critic"], new_redq["params", "critic"], atol=0, rtol=0, what="critic")
    diff = [not torch.allclose(new_rlpd["params", "actor"][k], new_redq["params", "actor"][k]) for k in new_rlpd["params", "actor"].keys(True, True)]
    assert any(diff)
