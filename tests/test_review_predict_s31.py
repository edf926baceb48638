"""Review of ``rlfunc.load(...).predict`` against Stable-Baselines3's contract (session 31)."""

import gymnasium as gym
import numpy as np
import pytest

from rlfunc.algos import drqv2, r2d2, redq
from rlfunc.runtime.policy import Policy

VEC = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)


@pytest.mark.parametrize("name", ["redq", "drqv2"])
def test_saturated_continuous_actions_stay_within_odd_env_bounds(name):
    """low + (a + 1) / 2 * (high - low) at a = 1 rounds one float32 ulp outside bounds such as
    [-4.8, 0.09] (0.09000015 > 0.09); the env's Box then refuses the action. Clipped now."""
    low = np.array([-4.8, -0.3], dtype=np.float32)
    high = np.array([0.09, 0.7], dtype=np.float32)
    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    if name == "redq":
        config = redq.Config(hidden_sizes=(8, 8), num_critics=2)
        params = redq.init(config, VEC, box, seed=0)["params"]
        params["actor", "mean", "weight"].zero_()
        params["actor", "mean", "bias"].fill_(50.0)  # tanh(50) == 1 in float32
        policy, obs = Policy(name, params, config, low, high, (4,)), np.zeros((3, 4), np.float32)
    else:
        config = drqv2.Config(feature_dim=8, hidden_dim=8, encoder_channels=(4, 4), encoder_strides=(2, 1), pad=2,
                              frame_stack=2)
        pix = (6, 16, 16)
        params = drqv2.init(config, gym.spaces.Box(0, 255, pix, np.uint8), box, seed=0)["params"]
        last = [k for k in params["actor"].keys(True, True) if k[-1] == "bias"][-1]
        params["actor"][last].fill_(50.0)
        policy, obs = Policy(name, params, config, low, high, pix), np.zeros((3, *pix), np.uint8)
    space = gym.spaces.Box(low, high, dtype=np.float32)
    det, _ = policy.predict(obs)
    policy.seed(0)
    sto, _ = policy.predict(obs, deterministic=False)
    for actions in (det, sto, policy.act(obs)):
        assert actions.dtype == np.float32
        assert np.all(actions >= low) and np.all(actions <= high), actions
        assert all(space.contains(a) for a in actions)
    np.testing.assert_array_equal(det, np.broadcast_to(high, det.shape))


def test_r2d2_reward_is_ignored_when_state_is_none():
    """state=None is an episode start, so the previous reward is 0 as in training: a loop that sets
    state = None after env.reset() but still passes the last episode's final reward must not feed it."""
    config = r2d2.Config(lstm_size=8, encoder_sizes=(8,), head_sizes=(8,), reward_input=True)
    params = r2d2.init(config, VEC, gym.spaces.Discrete(3), seed=0)["params"]
    policy = Policy("r2d2", params, config, None, None, (4,))
    obs = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    fresh_a, fresh = policy.predict(obs)
    with_reward_a, with_reward = policy.predict(obs, None, reward=np.array([1.0, 5.0]))
    np.testing.assert_array_equal(with_reward_a, fresh_a)
    for got, want in zip(with_reward, fresh):
        np.testing.assert_array_equal(got, want)
    # the same as episode_start=True, which already ignored it
    _, started = policy.predict(obs, None, episode_start=np.array([True, True]), reward=np.array([1.0, 5.0]))
    for got, want in zip(started, fresh):
        np.testing.assert_array_equal(got, want)
    # continued, the reward is still written in
    _, cont = policy.predict(obs, fresh, reward=np.array([1.0, 5.0]))
    np.testing.assert_array_equal(cont[3], [1.0, 5.0])


def test_predict_docstring_names_the_differences_from_sb3():
    doc = Policy.predict.__doc__
    assert "Differences from Stable-Baselines3" in doc and "SB3: False" in doc
