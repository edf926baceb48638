"""Parity: rlfunc's functional REDQ vs the imperative baseline (benchmarks/baselines/redq.py).

Same parameters, batch and noise -> same critic loss and gradients, and the same
critics, target critics, actor and log_alpha after one full ``update`` (G critic
updates + one actor and temperature update), for every ensemble mode.
"""

from __future__ import annotations

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

from benchmarks.baselines.redq import ImperativeREDQ  # noqa: E402
from rlfunc.algos import redq  # noqa: E402

torch.set_num_threads(1)

OBS, ACT, N, M, G, B = 5, 2, 4, 2, 3, 16
HIDDEN = (32, 32)


def _spaces():
    obs_space = gym.spaces.Box(-np.inf, np.inf, (OBS,), np.float32)
    act_space = gym.spaces.Box(-1.0, 1.0, (ACT,), np.float32)
    return obs_space, act_space


def _setup(mode: str = "loop", seed: int = 0, **overrides):
    config = redq.Config(
        num_critics=N, subset_size=M, hidden_sizes=HIDDEN, batch_size=B, ensemble_mode=mode, **overrides
    )
    state = redq.init(config, *_spaces(), seed=seed)
    gen = torch.Generator().manual_seed(seed + 1)
    batch = TensorDict(
        {
            "obs": torch.randn(G, B, OBS, generator=gen),
            "action": torch.rand(G, B, ACT, generator=gen) * 2 - 1,
            "reward": torch.randn(G, B, generator=gen),
            "next_obs": torch.randn(G, B, OBS, generator=gen),
            "terminated": torch.rand(G, B, generator=gen) < 0.2,
        },
        batch_size=[G, B],
    )
    noise = redq.draw_noise(config, G, B, ACT, generator=gen)
    return config, state, batch, noise


def _assert_td_close(actual: TensorDict, expected: TensorDict, *, atol: float, rtol: float, what: str):
    keys = sorted(expected.keys(include_nested=True, leaves_only=True), key=str)
    assert sorted(actual.keys(include_nested=True, leaves_only=True), key=str) == keys
    for k in keys:
        torch.testing.assert_close(
            actual[k], expected[k], atol=atol, rtol=rtol, msg=lambda m, k=k: f"{what} {k}: {m}"
        )


@pytest.mark.parametrize("g", [0, G - 1])
def test_critic_loss_and_grads_match_baseline(g):
    config, state, batch, noise = _setup()
    agent = ImperativeREDQ.from_functional_state(state)
    mini = batch[g]
    params = state["params"]
    alpha = params["log_alpha"].exp()

    y = redq.compute_target(
        config, params["actor"], state["target", "critic"], alpha, mini, noise["next_action"][g], noise["subset"][g]
    )
    grads, (loss, _) = torch.func.grad_and_value(redq.critic_loss, has_aux=True)(
        params["critic"], config, mini["obs"], mini["action"], y
    )

    y_ref = agent.compute_target(
        mini["next_obs"], mini["reward"], mini["terminated"], noise["next_action"][g],
        agent.subset_indices(noise["subset"][g]),
    )
    torch.testing.assert_close(y, y_ref.squeeze(1), rtol=1e-5, atol=1e-6)
    loss_ref = agent.critic_loss(mini["obs"], mini["action"], y_ref)
    for opt in agent.q_optimizer_list:
        opt.zero_grad()
    loss_ref.backward()

    torch.testing.assert_close(loss, loss_ref.detach(), rtol=1e-5, atol=1e-6)
    _assert_td_close(grads, agent.critic_grads_td(), rtol=1e-5, atol=1e-6, what="critic grad")


def test_target_uses_subset_of_target_critics():
    """Sanity: moving a non-selected target critic does not change y; moving a selected one does."""
    config, state, batch, noise = _setup()
    params = state["params"]
    alpha = params["log_alpha"].exp()
    mini = batch[0]
    chosen = set(torch.topk(noise["subset"][0], M).indices.tolist())
    other = next(i for i in range(N) if i not in chosen)
    args = (config, params["actor"])
    y = redq.compute_target(*args, state["target", "critic"], alpha, mini, noise["next_action"][0], noise["subset"][0])
    for idx, should_change in ((other, False), (min(chosen), True)):
        tgt = state["target", "critic"].clone()
        tgt["2", "bias"][idx] += 10.0
        y2 = redq.compute_target(*args, tgt, alpha, mini, noise["next_action"][0], noise["subset"][0])
        assert (not torch.allclose(y, y2)) == should_change


@pytest.mark.parametrize("mode", ["loop", "bmm", "vmap"])
def test_full_update_matches_baseline(mode):
    config, state, batch, noise = _setup(mode)
    # Make alpha and the temperature step non-trivial: alpha != 1 at the start.
    state["params", "log_alpha"] = torch.tensor(-0.3)
    agent = ImperativeREDQ.from_functional_state(state)

    new_state, metrics = redq.update(state, batch, noise)
    agent.update(batch, noise)

    atol, rtol = 1e-5, 1e-4
    _assert_td_close(new_state["params", "critic"], agent.params_td()["critic"], atol=atol, rtol=rtol, what="critic")
    _assert_td_close(new_state["target", "critic"], agent.target_td()["critic"], atol=atol, rtol=rtol, what="target")
    _assert_td_close(new_state["params", "actor"], agent.params_td()["actor"], atol=atol, rtol=rtol, what="actor")
    torch.testing.assert_close(new_state["params", "log_alpha"], agent.params_td()["log_alpha"], atol=atol, rtol=rtol)
    # Every parameter group actually moved (the comparison is not vacuous).
    for key in (("params", "critic"), ("target", "critic"), ("params", "actor")):
        before = state[key]
        after = new_state[key]
        moved = [not torch.equal(before[k], after[k]) for k in before.keys(include_nested=True, leaves_only=True)]
        assert all(moved), f"{key}: some leaves did not change"
    assert not torch.equal(state["params", "log_alpha"], new_state["params", "log_alpha"])
    assert torch.isfinite(metrics["critic_loss"])


def test_two_updates_match_baseline():
    """Second environment step: Adam moments, the new alpha and the moved targets carry over."""
    config, state, batch, noise = _setup("loop", seed=3)
    agent = ImperativeREDQ.from_functional_state(state)
    gen = torch.Generator().manual_seed(7)
    for _ in range(2):
        state, _ = redq.update(state, batch, noise)
        agent.update(batch, noise)
        noise = redq.draw_noise(config, G, B, ACT, generator=gen)
    params_ref = agent.params_td()
    _assert_td_close(state["params"], params_ref, atol=2e-5, rtol=1e-4, what="params")
    _assert_td_close(state["target"], agent.target_td(), atol=2e-5, rtol=1e-4, what="target")


def test_update_without_backup_entropy_matches_baseline():
    config, state, batch, noise = _setup("bmm", backup_entropy=False)
    agent = ImperativeREDQ.from_functional_state(state)
    new_state, _ = redq.update(state, batch, noise)
    agent.update(batch, noise)
    _assert_td_close(new_state["params"], agent.params_td(), atol=1e-5, rtol=1e-4, what="params")
    _assert_td_close(new_state["target"], agent.target_td(), atol=1e-5, rtol=1e-4, what="target")
