"""DQN's and MinAtar's epsilon schedule starts decaying at the replay start (``agent.eps_decay_delay``)."""

import math
from pathlib import Path

import pytest
import torch

from helpers_configs import missing_env_module

from rlfunc.algos import drqn
from rlfunc.runtime.config import build_config, load_config

ROOT = Path(__file__).resolve().parents[1]


def test_epsilon_holds_eps_start_for_the_delay_then_decays_as_before_shifted():
    base = drqn.Config(eps_start=1.0, eps_end=0.1, eps_decay_steps=100_000)
    delayed = drqn.Config(eps_start=1.0, eps_end=0.1, eps_decay_steps=100_000, eps_decay_delay=5_000)
    for step in (0, 1, 2_500, 4_999, 5_000):
        assert float(drqn.epsilon(delayed, step)) == 1.0
    for step in (5_001, 30_000, 104_999, 105_000, 500_000):
        assert math.isclose(float(drqn.epsilon(delayed, step)), float(drqn.epsilon(base, step - 5_000)), abs_tol=1e-7)
    # MinAtar's examples/dqn.py: ((END - START) / FIRST_N) * (t - replay_start) + START
    assert math.isclose(float(drqn.epsilon(delayed, 55_000)), (0.1 - 1.0) / 100_000 * 50_000 + 1.0, rel_tol=1e-6)
    # a tensor step (as a compiled caller passes it) gives the same value
    assert float(drqn.epsilon(delayed, torch.tensor(55_000))) == float(drqn.epsilon(delayed, 55_000))


def test_default_delay_keeps_the_schedule_of_every_earlier_run():
    config = drqn.Config(eps_start=1.0, eps_end=0.05, eps_decay_steps=10_000)
    assert config.eps_decay_delay == 0
    assert math.isclose(float(drqn.epsilon(config, 2_000)), 1.0 - 0.95 * 0.2, rel_tol=1e-6)


def test_negative_delay_is_refused_in_one_sentence():
    with pytest.raises(ValueError, match=r"^eps_decay_delay must be an integer >= 0, got -1\.$"):
        drqn.Config(eps_decay_delay=-1)


@pytest.mark.parametrize("name", ["dqn/minatar_breakout", "dqn/minatar_seaquest_flicker", "drqn/minatar_breakout",
                                  "drqn/minatar_seaquest_flicker", "drqn/atari_pong_flicker"])
def test_paper_configs_start_the_decay_at_their_replay_start(name):
    raw = load_config(ROOT / "configs" / f"{name}.yaml")
    if missing_env_module(raw):
        pytest.skip(f"{name} needs {missing_env_module(raw)} (the atari extra)")
    config = build_config(raw)
    assert config.agent.eps_decay_delay == config.train.learning_starts
