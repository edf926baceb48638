"""Runs close the envs they make: at the end, after a crash, and when refused after making them.

Unclosed, a pixel env keeps its renderer (about 2.4 MB per DMC cartpole at 84x84), which a process
that trains run after run -- a notebook, a sweep's reused Ray worker -- accumulates.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlfunc
from rlfunc.runtime.config import ConfigError
from rlfunc.runtime.trainer import NonFiniteLossError

ENV_ID = "rlfunc_test/Closing-v0"


class ClosingEnv(gym.Env):
    """A 1-D point that ends after 20 steps and records which of its instances are still open."""

    open_ids: set[int] = set()
    metadata = {"render_modes": []}

    def __init__(self, nan_reward_after: int | None = None, speed: float = 0.05):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.nan_reward_after, self.speed, self.steps, self.t = nan_reward_after, speed, 0, 0
        ClosingEnv.open_ids.add(id(self))

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        self.steps += 1
        reward = -float(np.abs(action).sum())
        if self.nan_reward_after is not None and self.steps > self.nan_reward_after:
            reward = float("nan")
        return np.array([self.t * float(self.speed), 0.0], np.float32), reward, False, self.t >= 20, {}

    def close(self):
        ClosingEnv.open_ids.discard(id(self))


TINY = {
    "algo": "sac",
    "env.id": ENV_ID,
    "agent.hidden_sizes": [8, 8],
    "agent.batch_size": 8,
    "train.total_steps": 120,
    "train.learning_starts": 40,
    "train.eval_every": 60,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 60,
    "train.progress": False,
    "train.threads": 1,
}


@pytest.fixture(autouse=True)
def _closing_env():
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=ClosingEnv)
    torch.set_num_threads(1)
    ClosingEnv.open_ids.clear()
    yield
    ClosingEnv.open_ids.clear()


@pytest.mark.parametrize("num_envs", [1, 2])
def test_a_finished_run_closes_its_training_and_evaluation_envs(tmp_path, num_envs):
    result = rlfunc.train(None, overrides={**TINY, "env.num_envs": num_envs}, run_dir=tmp_path / "run")
    assert result.env_steps == 120
    assert ClosingEnv.open_ids == set()
    rlfunc.resume(tmp_path / "run", total_steps=180)
    assert ClosingEnv.open_ids == set()


def test_a_run_that_stops_on_a_non_finite_loss_closes_its_envs(tmp_path):
    overrides = {**TINY, "train.total_steps": 400, "env.kwargs": {"nan_reward_after": 100}}
    with pytest.raises(NonFiniteLossError):
        rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "nan")
    assert ClosingEnv.open_ids == set()


def test_a_population_closes_every_members_envs(tmp_path):
    overrides = {**TINY, "env.num_envs": 2, "train.population": {"seeds": [0, 1]}}
    rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "pop")
    assert ClosingEnv.open_ids == set()


def test_a_run_refused_after_its_envs_were_made_closes_them(tmp_path, monkeypatch):
    """The replay's memory check runs once the envs exist (it needs their spaces); its refusal must not
    leave them open. The check is made to refuse here by pretending the machine has 1 MB free."""
    from rlfunc.runtime import memory

    monkeypatch.setattr(memory, "available_bytes", lambda device: 1 << 20)
    with pytest.raises(ConfigError, match="replay"):
        rlfunc.train(None, overrides={**TINY, "train.replay_size": 1_000_000}, run_dir=tmp_path / "big")
    assert ClosingEnv.open_ids == set()
    with pytest.raises(ConfigError, match="replay"):
        rlfunc.train(None, overrides={**TINY, "train.replay_size": 1_000_000, "train.population": {"seeds": [0, 1]}},
                     run_dir=tmp_path / "bigpop")
    assert ClosingEnv.open_ids == set()


def test_an_env_that_fails_its_first_step_leaves_no_copy_open(tmp_path):
    """A setting the env's constructor takes but its step cannot use (a string speed) is found at the
    throwaway first step, after the training and evaluation copies were made."""
    with pytest.raises(ConfigError, match="failed at its first step"):
        rlfunc.train(None, overrides={**TINY, "env.num_envs": 2, "env.kwargs": {"speed": "fast"}}, run_dir=tmp_path / "bad")
    assert ClosingEnv.open_ids == set()


def test_a_checkpoint_that_does_not_fit_closes_the_envs_its_trainer_made(tmp_path):
    """A resume builds the trainer (its envs) from the checkpoint's config, then restores; a restore that
    refuses the checkpoint must not leave them open (single run and population)."""
    from rlfunc.runtime import population as pr
    from rlfunc.runtime.checkpoint import CheckpointError, load_newest_good
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.trainer import Trainer

    rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "run")
    checkpoint, tensors, meta = load_newest_good(tmp_path / "run")
    trainer = Trainer(build_config(meta["config"], resolved=True), tmp_path / "again")
    assert ClosingEnv.open_ids
    with pytest.raises(CheckpointError, match="algo"):
        trainer.restore(checkpoint, tensors, {**meta, "algo": "redq"})
    assert ClosingEnv.open_ids == set()

    rlfunc.train(None, overrides={**TINY, "train.population": {"seeds": [0, 1]}}, run_dir=tmp_path / "pop")
    checkpoint, tensors, meta = load_newest_good(tmp_path / "pop")
    pop = pr.PopulationTrainer(build_config(meta["config"], resolved=True), tmp_path / "pop-again")
    assert ClosingEnv.open_ids
    with pytest.raises(CheckpointError):
        pop.restore(checkpoint, tensors, {**meta, "env_steps": [1, 2, 3]})
    assert ClosingEnv.open_ids == set()
