"""Review s35 of ``Policy``/evaluation: ``Discrete(n, start != 0)`` refused where every env is made,
float64 action spaces kept exact (Policy, the training env's rescaling, ``dataset collect``),
``rlfunc.evaluate`` leaving the caller's generator alone, and float64 observations beyond float32."""

from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlfunc
from rlfunc.algos import drqn, redq
from rlfunc.envs import make_env, make_vector_env
from rlfunc.runtime.policy import Policy

VEC = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)


class _StartDisc(gym.Env):
    """``Discrete(3, start=-1)``; counts its steps (a refusal must come before any)."""

    steps = 0

    def __init__(self):
        self.observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(3, start=-1)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        type(self).steps += 1
        assert self.action_space.contains(action)
        return np.zeros(2, np.float32), 0.0, False, True, {}


class _StrictBox(gym.Env):
    """A Box action space that asserts ``contains`` on every action (as a strict env does)."""

    low, high, dtype = -0.1, 0.1, np.float64

    def __init__(self):
        self.observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
        self.action_space = gym.spaces.Box(self.low, self.high, (1,), self.dtype)
        self.seen = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.seen.append(action)
        assert self.action_space.contains(action), f"{action!r} not in {self.action_space}"
        self.t += 1
        return np.zeros(2, np.float32), 0.0, False, self.t >= 3, {}


class _StrictBox32(_StrictBox):
    low, high, dtype = np.float32(-2.11), np.float32(0.15), np.float32  # gymnasium's rescaling gave 0.15000013


class _StrictBox64(_StrictBox):
    low, high, dtype = -4.8, 0.09, np.float64  # gymnasium's rescaling gave 0.09000000000000002


def _register():
    for name, cls in (("StartDisc-v0", _StartDisc), ("StrictF64-v0", _StrictBox), ("StrictF32-v0", _StrictBox32),
                      ("StrictF64b-v0", _StrictBox64)):
        if f"rlfunc_test_s35/{name}" not in gym.registry:
            gym.register(f"rlfunc_test_s35/{name}", entry_point=cls)


_register()


def _sac_policy(low, high) -> Policy:
    config = redq.Config(hidden_sizes=(8, 8), num_critics=2)
    state = redq.init(config, VEC, gym.spaces.Box(-1.0, 1.0, (1,), np.float32), seed=0)
    return Policy("sac", state["params"], config, low, high, (2,))


# -- 1. Discrete(n, start != 0) ------------------------------------------------------------------


def test_discrete_start_refused_when_the_env_is_made_before_any_step():
    _StartDisc.steps = 0
    for make in (
        lambda: make_env("rlfunc_test_s35/StartDisc-v0"),
        lambda: make_env("rlfunc_test_s35/StartDisc-v0", rescale_actions=False),
        lambda: make_vector_env("rlfunc_test_s35/StartDisc-v0", 2),
    ):
        with pytest.raises(ValueError, match=r"Discrete\(3, start=-1\).*indices 0 to 2; give the env a Discrete\(3\)"):
            make()
    assert _StartDisc.steps == 0


def test_discrete_start_refused_by_training_and_evaluate(tmp_path):
    _StartDisc.steps = 0
    overrides = {
        "env.id": "rlfunc_test_s35/StartDisc-v0", "env.wrappers": [], "env.num_envs": 1, "train.total_steps": 100,
        "train.learning_starts": 50, "agent.encoder_sizes": [8], "train.tensorboard": False, "train.progress": False,
    }
    with pytest.raises(ValueError, match=r"start=-1.*act with indices 0 to 2"):
        rlfunc.train("dqn/cartpole_novel", overrides=overrides, run_dir=tmp_path / "run")
    config = drqn.Config(lstm_size=8, encoder_sizes=(8,), core="mlp", sequence_length=1)
    state = drqn.init(config, VEC, gym.spaces.Discrete(3), seed=0)
    policy = Policy("dqn", state["params"], config, None, None, (2,))
    with pytest.raises(ValueError, match=r"start=-1.*act with indices 0 to 2"):
        rlfunc.evaluate(policy, episodes=1, env_id="rlfunc_test_s35/StartDisc-v0")
    assert _StartDisc.steps == 0


# -- 2. float64 action spaces --------------------------------------------------------------------


def test_policy_with_float64_bounds_returns_saturated_actions_inside_the_space():
    space = gym.spaces.Box(-0.1, 0.1, (1,), np.float64)
    policy = _sac_policy(space.low, space.high)  # as a learner builds it, from the env's own space
    assert policy.action_dtype == np.float64 and policy.action_low.dtype == np.float64
    for sign in (1.0, -1.0):
        native = policy._native(np.array([sign], np.float32))  # a saturated tanh action
        assert native.dtype == np.float64 and float(native[0]) == sign * 0.1 and space.contains(native)
    obs = np.array([[x, y] for x in (-1e6, -10.0, 0.0, 10.0, 1e6) for y in (-1e6, 0.0, 1e6)], np.float32)
    for deterministic in (True, False):
        actions, _ = policy.predict(obs, deterministic=deterministic)
        assert actions.dtype == np.float64 and all(space.contains(a) for a in actions)
        assert all(space.contains(policy.act(o)) for o in obs)
    # a float32 space's policy keeps float32 actions, saturated exactly at its bounds
    low, high = np.array([-2.11], np.float32), np.array([0.15], np.float32)
    native = _sac_policy(low, high)._native(np.array([[1.0], [-1.0]], np.float32))
    assert native.dtype == np.float32 and native.tolist() == [[float(high[0])], [float(low[0])]]


@pytest.mark.parametrize("env_id", ["rlfunc_test_s35/StrictF64b-v0", "rlfunc_test_s35/StrictF32-v0"])
def test_training_env_rescaling_clips_into_the_envs_own_bounds_and_dtype(env_id):
    env = make_env(env_id)
    env.reset(seed=0)
    for a in (1.0, -1.0, 0.5):
        env.step(np.array([a], np.float32))  # the env asserts contains
    inner = env.unwrapped
    assert [x.dtype for x in inner.seen] == [inner.action_space.dtype] * 3
    assert float(inner.seen[0][0]) == float(inner.action_space.high[0])
    assert float(inner.seen[1][0]) == float(inner.action_space.low[0])


def test_dataset_collect_steps_the_env_inside_its_float64_bounds(tmp_path, monkeypatch):
    from rlfunc.runtime import api, dataset

    class Saturated:
        run_config = SimpleNamespace(env=SimpleNamespace(id="rlfunc_test_s35/StrictF64-v0", kwargs={}, wrappers=[]))

        def act_normalized(self, obs):
            return np.ones(1, np.float32)

    monkeypatch.setattr(api, "load", lambda path: Saturated())
    out = dataset.collect(tmp_path / "d.npz", checkpoint="stub", steps=4)
    assert out["transitions"] == 4
    with np.load(tmp_path / "d.npz") as data:
        assert data["actions"].dtype == np.float32


# -- 3. evaluate leaves the caller's generator alone --------------------------------------------


def test_evaluate_leaves_the_callers_generator_and_stream_as_they_were():
    policy = _sac_policy(np.array([-2.0], np.float32), np.array([2.0], np.float32))
    obs = np.array([0.3, -0.2], np.float32)
    policy.seed(5)
    ref = [policy.predict(obs, deterministic=False)[0] for _ in range(2)]
    policy.seed(5)
    first = policy.predict(obs, deterministic=False)[0]
    rlfunc.evaluate(policy, episodes=1, env_id="rlfunc_test_s35/StrictF32-v0", stochastic=True, seed=3)
    second = policy.predict(obs, deterministic=False)[0]
    assert np.array_equal(first, ref[0]) and np.array_equal(second, ref[1])
    # still seeded by seed: the same evaluation twice gives the same returns, and an unseeded policy stays unseeded
    fresh = _sac_policy(np.array([-2.0], np.float32), np.array([2.0], np.float32))
    a = rlfunc.evaluate(fresh, episodes=1, env_id="rlfunc_test_s35/StrictF32-v0", stochastic=True, seed=3)
    b = rlfunc.evaluate(fresh, episodes=1, env_id="rlfunc_test_s35/StrictF32-v0", stochastic=True, seed=3)
    assert a["returns"] == b["returns"] and fresh._generator is None


# -- 4. float64 observations beyond float32's range ----------------------------------------------


@pytest.mark.parametrize("obs", [np.array([1e39, 0.0]), torch.tensor([0.0, -1e300], dtype=torch.float64)])
def test_observation_beyond_float32_range_is_one_sentence(obs):
    policy = _sac_policy(np.array([-2.0], np.float32), np.array([2.0], np.float32))
    with pytest.raises(ValueError, match=r"^Observation holds 1 value\(s\) beyond float32's range .*pass observations within"):
        policy.predict(obs)
    with pytest.raises(ValueError, match="beyond float32's range"):
        policy.act(obs)
    assert np.isfinite(policy.predict(np.array([3e38, 0.0]))[0]).all()  # inside the range: acted on


def test_a_loaded_policy_of_a_float64_space_returns_actions_inside_it(tmp_path):
    """meta.json's bounds were read back as float32, so a loaded policy's saturated action was -0.10000000149
    (outside Box(-0.1, 0.1, float64)); they are kept in float64 where float32 cannot hold them exactly."""
    overrides = {
        "env.id": "rlfunc_test_s35/StrictF64-v0", "train.total_steps": 60, "train.learning_starts": 30,
        "train.eval_every": 60, "train.eval_episodes": 1, "train.checkpoint_every": 60, "train.progress": False,
        "agent.hidden_sizes": [8, 8], "agent.batch_size": 8, "agent.updates_per_step": 1,
    }
    rlfunc.train("sac/pendulum", overrides=overrides, run_dir=tmp_path / "run")
    policy = rlfunc.load(tmp_path / "run")
    space = gym.spaces.Box(-0.1, 0.1, (1,), np.float64)
    assert policy.action_low.dtype == np.float64 and float(policy.action_low[0]) == -0.1
    native = policy._native(np.array([[1.0], [-1.0]], np.float32))  # saturated tanh actions
    assert native.tolist() == [[0.1], [-0.1]] and all(space.contains(a) for a in native)
    actions, _ = policy.predict(np.array([[1e6, -1e6], [-1e6, 1e6]], np.float32))
    assert all(space.contains(a) for a in actions)
