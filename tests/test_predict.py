"""``Policy.predict``: Stable-Baselines3's signature for every algorithm (tiny untrained networks)."""

import re
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd
from rlfunc.runtime.policy import Policy

LOW = np.array([-2.0, 0.0], dtype=np.float32)  # native bounds of a 2-D continuous env
HIGH = np.array([2.0, 1.0], dtype=np.float32)
PIX = (6, 16, 16)  # 2 stacked RGB frames of 16x16


def _policy(name: str, **agent) -> Policy:
    """A Policy built from ``init`` (no checkpoint), as rlfunc.load builds it."""
    vec = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    disc = gym.spaces.Discrete(3)
    if name in ("redq", "sac"):
        config = redq.Config(hidden_sizes=(16, 16), num_critics=2, **agent)
        state = redq.init(config, vec, box, seed=0)
    elif name == "rlpd":
        config = rlpd.Config(hidden_sizes=(16, 16), num_critics=2, **agent)
        state = rlpd.init(config, vec, box, seed=0)
    elif name == "drqv2":
        config = drqv2.Config(feature_dim=8, hidden_dim=16, encoder_channels=(4, 4), encoder_strides=(2, 1), pad=2,
                              frame_stack=2, **agent)
        state = drqv2.init(config, gym.spaces.Box(0, 255, PIX, np.uint8), box, seed=0)
        return Policy(name, state["params"], config, LOW, HIGH, PIX)
    elif name in ("drqn", "dqn"):
        extra = {"core": "mlp", "sequence_length": 1} if name == "dqn" else {}
        config = drqn.Config(lstm_size=8, encoder_sizes=(8,), **extra, **agent)
        state = drqn.init(config, vec, disc, seed=0)
        return Policy(name, state["params"], config, None, None, (4,))
    elif name == "r2d2":
        config = r2d2.Config(lstm_size=8, encoder_sizes=(8,), head_sizes=(8,), **agent)
        state = r2d2.init(config, vec, disc, seed=0)
        return Policy(name, state["params"], config, None, None, (4,))
    else:
        raise AssertionError(name)
    return Policy(name, state["params"], config, LOW, HIGH, (4,))


def _obs(policy: Policy, n: int | None, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = policy.obs_shape if n is None else (n, *policy.obs_shape)
    if policy.algo_name == "drqv2":
        return rng.integers(0, 256, shape, dtype=np.uint8)
    return rng.standard_normal(shape).astype(np.float32)


ALL = ["redq", "sac", "rlpd", "drqv2", "drqn", "dqn", "r2d2"]
CONTINUOUS = ["redq", "sac", "rlpd", "drqv2"]


@pytest.mark.parametrize("name", ALL)
def test_predict_single_and_batch_in_the_envs_space(name):
    policy = _policy(name)
    action, state = policy.predict(_obs(policy, None))
    actions, states = policy.predict(_obs(policy, 5))
    if name in CONTINUOUS:
        assert action.shape == (2,) and actions.shape == (5, 2)
        assert np.all(actions >= LOW) and np.all(actions <= HIGH)
    else:
        assert np.shape(action) == () and actions.shape == (5,) and actions.dtype == np.int64
        assert set(actions.tolist()) <= {0, 1, 2}
    if name in ("drqn", "r2d2"):
        assert policy.recurrent and len(state) == (4 if name == "r2d2" else 2) and states[0].shape == (5, 8)
    else:
        assert not policy.recurrent and state is None and states is None


@pytest.mark.parametrize("name", ALL)
def test_deterministic_predict_is_the_evaluation_action(name):
    """predict(deterministic=True) threads the same state as act() with reset/observe_reward."""
    policy = _policy(name)
    obs = [_obs(policy, 3, seed=t) for t in range(4)]
    policy.reset(3)
    state = None
    for t, o in enumerate(obs):
        a_act = policy.act(o)
        a_pred, state = policy.predict(o, state, episode_start=np.full(3, t == 0), reward=np.full(3, 0.5))
        policy.observe_reward(np.full(3, 0.5))
        np.testing.assert_array_equal(a_act, a_pred)


@pytest.mark.parametrize("name", ALL)
def test_stochastic_predict_samples_and_is_reproducible_when_seeded(name):
    # DQN-family: force a visible exploration rate (eval_epsilon) so 64 envs must show it.
    policy = _policy(name, **({"eval_epsilon": 0.5} if name in ("drqn", "dqn", "r2d2") else {}))
    obs = _obs(policy, 64)
    greedy, _ = policy.predict(obs, deterministic=True)
    policy.seed(7)
    first, _ = policy.predict(obs, deterministic=False)
    policy.seed(7)
    again, _ = policy.predict(obs, deterministic=False)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, greedy)
    if name in CONTINUOUS:
        assert np.all(first >= LOW) and np.all(first <= HIGH)


def test_drqv2_samples_with_the_final_schedule_std():
    """Stochastic DrQ-v2: clamp(mean + stddev_final * noise), the official act after its schedule."""
    policy = _policy("drqv2", stddev_init=1.0, stddev_final=0.2, stddev_duration=1000)
    obs = _obs(policy, 4)
    policy.seed(3)
    sample = policy.act_normalized(obs, deterministic=False)
    noise = torch.randn((4, 2), generator=torch.Generator().manual_seed(3))
    mean = policy.act_normalized(obs, deterministic=True)
    np.testing.assert_allclose(sample, np.clip(mean + 0.2 * noise.numpy(), -1, 1), atol=1e-6)


def test_sac_samples_are_the_tanh_gaussian_policy():
    policy = _policy("sac")
    obs = _obs(policy, 4)
    policy.seed(5)
    sample = policy.act_normalized(obs, deterministic=False)
    noise = torch.randn((4, 2), generator=torch.Generator().manual_seed(5))
    expected = redq.act(policy.params, torch.as_tensor(obs), noise, deterministic=False, config=policy.config)
    np.testing.assert_allclose(sample, expected.numpy(), atol=1e-6)


def test_q_learning_exploration_epsilons():
    assert _policy("dqn", eps_end=0.07, exploration="schedule").exploration_epsilon() == pytest.approx(0.07)
    assert _policy("drqn", exploration="actor_ladder", epsilon_base=0.3).exploration_epsilon() == pytest.approx(0.3)
    assert _policy("r2d2").exploration_epsilon() == pytest.approx(0.4)  # epsilon_base: one Ape-X actor
    assert _policy("r2d2", eval_epsilon=0.05).exploration_epsilon() == pytest.approx(0.05)
    # eval_epsilon=1: every action uniform, whatever Q says
    policy = _policy("dqn", eval_epsilon=1.0).seed(0)
    actions, _ = policy.predict(_obs(policy, 300), deterministic=False)
    counts = np.bincount(actions, minlength=3)
    assert counts.min() > 60, counts
    # deterministic=True ignores eval_epsilon: argmax Q
    greedy, _ = policy.predict(_obs(policy, 300), deterministic=True)
    greedy2, _ = policy.predict(_obs(policy, 300), deterministic=True)
    np.testing.assert_array_equal(greedy, greedy2)


@pytest.mark.parametrize("name", ["drqn", "r2d2"])
def test_episode_start_resets_only_the_marked_envs(name):
    policy = _policy(name)
    obs0, obs1 = _obs(policy, 2, seed=0), _obs(policy, 2, seed=1)
    _, state = policy.predict(obs0, episode_start=np.array([True, True]), reward=np.zeros(2))
    assert np.abs(state[0]).sum() > 0, "the LSTM state moved"
    _, after = policy.predict(obs1, state, episode_start=np.array([True, False]), reward=np.ones(2))
    # env 0 restarted: as if obs1 were its first observation
    _, fresh = policy.predict(obs1[:1], None)
    np.testing.assert_allclose(after[0][0], fresh[0][0], atol=1e-6)
    # env 1 continued: as a single-env call with its own carried state
    own = tuple(s[1:] for s in state)
    _, cont = policy.predict(obs1[1:], own, episode_start=np.array([False]), reward=np.ones(1))
    np.testing.assert_allclose(after[0][1], cont[0][0], atol=1e-6)
    assert not np.allclose(after[0][1], fresh[0][0])


def test_r2d2_previous_reward_reaches_the_network():
    policy = _policy("r2d2")
    obs0, obs1 = _obs(policy, 1, seed=0), _obs(policy, 1, seed=1)
    _, state = policy.predict(obs0, episode_start=np.array([True]))
    _, with_zero = policy.predict(obs1, state, reward=np.array([0.0]))
    _, with_one = policy.predict(obs1, state, reward=np.array([1.0]))
    assert with_one[3][0] == 1.0 and with_zero[3][0] == 0.0  # prev_reward carried in the state
    assert not np.allclose(with_one[0], with_zero[0]), "tanh(reward) is an LSTM input"
    # A caller that continues an episode without reward= is warned once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy.predict(obs1, state)
        policy.predict(obs1, state)
    assert sum("reward=reward" in str(w.message) for w in caught) == 1
    # reward_input=False: nothing to pass, no warning
    blind = _policy("r2d2", reward_input=False)
    _, s = blind.predict(obs0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        blind.predict(obs1, s)


@pytest.mark.parametrize("name", ["redq", "drqv2", "drqn", "r2d2"])
def test_a_wrong_observation_shape_is_one_sentence_naming_the_expected_one(name):
    policy = _policy(name)
    bad = np.zeros((3, 5, 7) if name != "drqv2" else (5, 16, 16), dtype=np.float32)
    expected = ", ".join(map(str, policy.obs_shape))
    with pytest.raises(ValueError, match=re.escape(f"of shape {tuple(bad.shape)} does not fit")) as info:
        policy.predict(bad)
    msg = str(info.value)
    assert f"({expected}" in msg and "\n" not in msg and msg.count(". ") == 0
    with pytest.raises(ValueError, match="expects shape"):
        policy.act(bad)


def test_bad_state_and_episode_start_are_clear_errors():
    policy = _policy("r2d2")
    obs = _obs(policy, 2)
    _, state = policy.predict(obs)
    with pytest.raises(ValueError, match="episode_start has 3 entries for 2"):
        policy.predict(obs, state, episode_start=np.zeros(3, bool))
    with pytest.raises(ValueError, match=r"state\[0\] has shape \(2, 8\), but 1 observation"):
        policy.predict(obs[:1], state)
    with pytest.raises(ValueError, match="tuple of 4 arrays"):
        policy.predict(obs, state[:2])
    with pytest.raises(ValueError, match="deterministic must be True or False"):
        policy.predict(obs, deterministic="yes")


def test_predict_leaves_act_state_alone():
    """predict() holds no state in the policy: act()'s carry is untouched by it."""
    policy = _policy("drqn")
    obs = _obs(policy, 1)
    policy.reset(1)
    policy.act(obs)
    carry = tuple(t.clone() for t in policy._carry)
    policy.predict(obs, None)
    assert all(torch.equal(a, b) for a, b in zip(carry, policy._carry))
