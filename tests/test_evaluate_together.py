"""Evaluation of several stateless policies in lockstep (rlfunc.runtime.evaluate.run_episodes_together,
what a population's evaluation uses): each env's returns are exactly what run_episodes gives for it
and its own policy, with episodes of different lengths (members leave the batch as they finish)."""

import numpy as np
import pytest
import torch

from rlfunc.algos import redq
from rlfunc.envs import make_env
from rlfunc.runtime.evaluate import run_episodes, run_episodes_together
from rlfunc.runtime.policy import Policy

torch.set_num_threads(1)


@pytest.mark.parametrize("env_id", ["Pendulum-v1", "Hopper-v5"])
def test_lockstep_returns_equal_each_policys_own_episodes(env_id):
    if env_id == "Hopper-v5":
        pytest.importorskip("mujoco")  # random-init policies fall at different steps: envs leave the batch
    envs = [make_env(env_id) for _ in range(3)]
    obs_space, act_space = envs[0].observation_space, envs[0].action_space
    config = redq.Config(hidden_sizes=(16, 16), num_critics=2)
    policies = [Policy("redq", redq.init(config, obs_space, act_space, seed=s)["params"], config,
                       act_space.low, act_space.high, obs_space.shape) for s in range(3)]
    seeds = [10_000, 10_001, 10_007]
    calls = []

    def act(obs, running):
        calls.append(list(running))
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        return torch.stack([policies[i].action_tensor(obs_t[r]) for r, i in enumerate(running)]).numpy()

    together = run_episodes_together(act, envs, 3, seeds)
    alone = [run_episodes(p, make_env(env_id), 3, seed=s) for p, s in zip(policies, seeds)]
    assert together == alone  # bit for bit
    if env_id == "Hopper-v5":
        assert len(calls[-1]) < 3 and len(calls[0]) == 3


def test_action_tensor_is_the_evaluation_action_and_needs_a_stateless_policy():
    env = make_env("Pendulum-v1")
    config = redq.Config(hidden_sizes=(16, 16), num_critics=2)
    policy = Policy("redq", redq.init(config, env.observation_space, env.action_space)["params"], config,
                    env.action_space.low, env.action_space.high, env.observation_space.shape)
    obs = env.reset(seed=0)[0]
    assert np.array_equal(policy.action_tensor(torch.as_tensor(obs[None], dtype=torch.float32)).numpy()[0],
                          policy.act_normalized(obs))
    with pytest.raises(ValueError, match="one seed per env"):
        run_episodes_together(lambda o, r: None, [env], 1, [0, 1])
