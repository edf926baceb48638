"""Partial-observability wrappers and the cue-memory task."""

import gymnasium as gym
import numpy as np
import pytest

import rlfunc.envs  # noqa: F401  (registers rlfunc/CueMemory-v0)
from rlfunc.envs.memory import CueMemory
from rlfunc.envs import build_wrappers, make_env
from rlfunc.envs.wrappers import FlickerObservation, MaskVelocity, ScaleObservation


def test_mask_velocity_zeroes_cartpole_velocities():
    env = MaskVelocity(gym.make("CartPole-v1"))
    assert env.indices == (1, 3)
    obs, _ = env.reset(seed=0)
    for _ in range(5):
        obs, *_ = env.step(env.action_space.sample())
        assert obs[1] == 0 and obs[3] == 0 and obs[0] != 0 and obs[2] != 0
        assert obs.dtype == np.float32 and env.observation_space.contains(obs)


def test_mask_velocity_generic_indices_and_errors():
    env = MaskVelocity(gym.make("Pendulum-v1"))
    assert env.indices == (2,)
    obs, _ = env.reset(seed=0)
    assert obs[2] == 0
    env = MaskVelocity(gym.make("CartPole-v1"), indices=[0])
    obs, _ = env.reset(seed=0)
    assert obs[0] == 0 and obs[2] != 0
    with pytest.raises(ValueError, match="pass indices"):
        MaskVelocity(gym.make("rlfunc/CueMemory-v0"))
    with pytest.raises(ValueError, match="out of range"):
        MaskVelocity(gym.make("CartPole-v1"), indices=[7])


def test_scale_obs_is_affine_per_entry_and_maps_bounds():
    raw = gym.make("CartPole-v1")
    scaled = ScaleObservation(gym.make("CartPole-v1"), scale=[2.0, 1.0, 10.0, 1.0], offset=[0.5, 0.0, 0.0, 0.0])
    o_raw, _ = raw.reset(seed=3)
    o_scl, _ = scaled.reset(seed=3)
    for _ in range(20):
        np.testing.assert_allclose(o_scl, (o_raw - [0.5, 0, 0, 0]) * [2.0, 1.0, 10.0, 1.0], rtol=1e-6)
        assert o_scl.dtype == np.float32 and scaled.observation_space.contains(o_scl)
        o_raw, _, term, trunc, _ = raw.step(1)
        o_scl, *_ = scaled.step(1)
        if term or trunc:
            break
    np.testing.assert_allclose(scaled.observation_space.high[[0, 2]], (raw.observation_space.high[[0, 2]] - [0.5, 0]) * [2, 10])
    assert np.isinf(scaled.observation_space.high[1])  # infinite bounds stay infinite
    # From a config, after masking: the velocity entries stay zero.
    env = make_env("CartPole-v1", wrappers=build_wrappers(["mask_velocity", {"scale_obs": {"scale": 10.0}}]))
    obs, _ = env.reset(seed=0)
    np.testing.assert_allclose(obs[[1, 3]], 0.0)
    assert np.abs(obs[[0, 2]]).max() > 0.05  # reset draws entries in +-0.05, now scaled by 10


def test_scale_obs_rejects_bad_constants():
    with pytest.raises(ValueError, match="list of 4 numbers"):
        ScaleObservation(gym.make("CartPole-v1"), scale=[1.0, 2.0])
    with pytest.raises(ValueError, match="positive"):
        ScaleObservation(gym.make("CartPole-v1"), scale=[1.0, 0.0, 1.0, 1.0])
    with pytest.raises(ValueError, match="finite"):
        ScaleObservation(gym.make("CartPole-v1"), offset=float("nan"))


def _flicker_run(seed, steps=400):
    env = FlickerObservation(gym.make("CartPole-v1"), p=0.5)
    obs, _ = env.reset(seed=seed)
    blank = [not obs.any()]
    for _ in range(steps):
        obs, _, term, trunc, _ = env.step(0 if len(blank) % 2 else 1)
        blank.append(not obs.any())
        if term or trunc:
            obs, _ = env.reset()
            blank.append(not obs.any())
    return np.array(blank)


def test_flicker_blanks_with_probability_p_reproducibly():
    a, b, c = _flicker_run(0), _flicker_run(0), _flicker_run(1)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert 0.4 < a.mean() < 0.6
    never = FlickerObservation(gym.make("CartPole-v1"), p=0.0)
    obs, _ = never.reset(seed=0)
    assert obs.any()
    with pytest.raises(ValueError, match="probability"):
        FlickerObservation(gym.make("CartPole-v1"), p=1.5)


def test_cue_memory_rewards_recall_after_delay():
    env = gym.make("rlfunc/CueMemory-v0", delay=3)
    assert env.action_space.n == 2 and env.observation_space.shape == (3,)
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        cue = info["cue"]
        assert obs[cue] == 1 and obs.sum() == 1  # cue shown at step 0 only
        for t in range(3):
            obs, r, term, trunc, _ = env.step(1 - cue)  # actions before the query are ignored
            assert r == 0 and not term and not trunc
            assert obs[:2].sum() == 0 and obs[2] == (1 if t == 2 else 0)  # blank, then the query flag
        _, r, term, _, info = env.step(cue if seed % 2 else 1 - cue)
        assert term and r == (1.0 if seed % 2 else -1.0) and info["correct"] == bool(seed % 2)


def test_cue_memory_zero_delay_and_cues_are_seeded():
    env = CueMemory(delay=0, num_cues=3, wrong_reward=0.0)
    obs, info = env.reset(seed=0)
    assert obs[info["cue"]] == 1 and obs[-1] == 1
    _, r, term, _, _ = env.step((info["cue"] + 1) % 3)
    assert term and r == 0.0
    cues = [CueMemory().reset(seed=s)[1]["cue"] for s in range(20)]
    assert cues == [CueMemory().reset(seed=s)[1]["cue"] for s in range(20)] and len(set(cues)) == 2
    with pytest.raises(ValueError, match="delay"):
        CueMemory(delay=-1)


def test_wrappers_compose_in_a_vector_env():
    def make():
        return FlickerObservation(MaskVelocity(gym.make("CartPole-v1")), p=0.5)

    venv = gym.vector.SyncVectorEnv([make, make])
    obs, _ = venv.reset(seed=3)
    for _ in range(10):
        obs, *_ = venv.step(venv.action_space.sample())
        assert (obs[:, 1] == 0).all() and (obs[:, 3] == 0).all()


# -- gymnasium's wrappers and the user's own, by name ---------------------------------------


def test_flatten_one_hots_discrete_and_concatenates_dict_observations():
    env = make_env("FrozenLake-v1", wrappers=build_wrappers(["flatten"]))
    assert isinstance(env.observation_space, gym.spaces.Box) and env.observation_space.shape == (16,)
    obs, _ = env.reset(seed=0)
    assert obs.tolist() == [1] + [0] * 15  # state 0, one-hot
    env = make_env("pkg_envs_example:PkgReach-v0", wrappers=build_wrappers(["flatten"]))
    assert env.observation_space.shape == (4,)  # position (1) + target one-hot (3), keys in order
    obs, _ = env.reset(seed=1)
    raw = env.unwrapped._obs()
    assert obs[0] == pytest.approx(float(raw["position"][0])) and obs[1:].tolist() == np.eye(3)[raw["target"]].tolist()


def test_reward_and_time_limit_wrappers_are_gymnasiums():
    env = make_env(
        "Pendulum-v1",
        wrappers=build_wrappers([{"clip_reward": {"min_reward": -1, "max_reward": 1}}, {"time_limit": {"max_episode_steps": 5}}]),
    )
    assert isinstance(env.env, gym.wrappers.TimeLimit) and isinstance(env.env.env, gym.wrappers.ClipReward)
    env.reset(seed=0)
    rewards, truncated = [], False
    for t in range(5):
        _, r, term, truncated, _ = env.step(np.ones(1, np.float32))
        rewards.append(r)
        assert not term and truncated == (t == 4)
    assert min(rewards) == -1.0  # Pendulum's rewards start near -9 from a random angle: clipped
    env = make_env("Pendulum-v1", wrappers=build_wrappers([{"normalize_reward": {"gamma": "0.9"}}]))
    assert isinstance(env.env, gym.wrappers.NormalizeReward) and env.env.gamma == 0.9


def test_any_gymnasium_wrapper_class_and_the_users_own_by_name():
    (wrap,) = build_wrappers([{"gymnasium.wrappers.NormalizeObservation": {"epsilon": "1e-6"}}])
    env = make_env("Pendulum-v1", wrappers=[wrap])
    assert isinstance(env.env, gym.wrappers.NormalizeObservation) and env.env.epsilon == 1e-6
    (wrap,) = build_wrappers([{"pkg_envs_example:ScaleReward": {"factor": 2, "offset": 1}}])
    env = make_env("pkg_envs_example:PkgReachBox-v0", wrappers=[wrap])
    env.reset(seed=0)
    _, r, *_ = env.step(np.zeros(1, np.float32))
    dist = abs(float(env.unwrapped._pos[0]) - env.unwrapped.TARGETS[env.unwrapped._target])
    assert r == pytest.approx(2 * -10.0 * dist + 1)
    (wrap,) = build_wrappers(["gymnasium.wrappers:ClipAction"])  # gymnasium's module named as module:Class
    assert wrap.func is gym.wrappers.ClipAction


@pytest.mark.parametrize(
    "spec, message",
    [
        (["time_limit"], "'time_limit' needs argument(s) max_episode_steps; write it as {time_limit: {max_episode_steps: ...}}."),
        ([{"time_limit": {"steps": 5}}], "'time_limit' has no argument 'steps'; its arguments are max_episode_steps."),
        ([{"time_limit": {"max_episode_steps": 2.5}}], "'time_limit' argument 'max_episode_steps' must be an integer, got 2.5."),
        ([{"clip_reward": {"max_reward": "high"}}], "'clip_reward' argument 'max_reward' must be a number or a list of numbers or null"),
        (["gymnasium.wrappers.TransformReward"], "needs a Python function (func), which a config cannot hold"),
        ([{"gymnasium.wrappers.TransformReward": {"func": "abs"}}], "argument 'func' must be a Python function"),
        (["gymnasium.wrappers.NormaliseObservation"], "has no wrapper class 'NormaliseObservation'; did you mean 'gymnasium.wrappers.NormalizeObservation'?"),
        (["gymnasium.wrappers.vector"], "gymnasium.wrappers has no wrapper class 'vector'."),
        (["FlattenObservation"], "gymnasium's wrapper is named 'gymnasium.wrappers.FlattenObservation'."),
        (["flaten"], "did you mean 'flatten'?"),
        (["normalise_reward"], "did you mean 'normalize_reward'?"),
        (["collections:OrderedDict"], "'collections:OrderedDict' is not a gymnasium.Wrapper class"),
        (["surely_absent_mod:Wrap"], "names module 'surely_absent_mod', which is not installed"),
        (["pkg_envs_example:NoSuchWrapper"], "module 'pkg_envs_example' has no 'NoSuchWrapper'."),
        ([{"pkg_envs_example:ScaleReward": {"scale": 2}}], "has no argument 'scale'; its arguments are factor, offset."),
        (["pkg_envs_example:"], "must be module:ClassName"),
    ],
)
def test_wrapper_faults_are_one_sentence_before_any_env(spec, message):
    from rlfunc.runtime.config import ConfigError, build_config

    with pytest.raises(ValueError) as info:
        build_wrappers(spec)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="env.wrappers|Unknown env wrapper"):
        build_config({"algo": "sac", "env": {"id": "Pendulum-v1", "wrappers": spec}})
