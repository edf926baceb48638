"""``rlfunc eval --max-episode-steps N`` / ``evaluate(max_episode_steps=N)``: each episode ends after at most N
steps, so evaluating a run of an env without a time limit (or with a huge stored one) ends."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import rlfunc
from rlfunc.algos import redq
from rlfunc.runtime.policy import Policy

BOX = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
VEC = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)


class Endless(gym.Env):
    """Reward 1 per step, never terminated nor truncated."""

    observation_space = VEC
    action_space = BOX

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 1.0, False, False, {}


gym.register("RlfuncTestEndless-v0", entry_point=Endless)  # no max_episode_steps: no TimeLimit


def _policy():
    config = redq.Config(hidden_sizes=(8,), num_critics=2)
    return Policy("redq", redq.init(config, VEC, BOX, seed=0)["params"], config, BOX.low, BOX.high, (3,))


def test_each_episode_ends_after_max_episode_steps():
    out = rlfunc.evaluate(_policy(), episodes=3, env_id="RlfuncTestEndless-v0", max_episode_steps=7)
    assert out["returns"] == [7.0, 7.0, 7.0]


def test_a_shorter_own_time_limit_still_ends_the_episode_first():
    out = rlfunc.evaluate(_policy(), episodes=1, env_id="Pendulum-v1", max_episode_steps=10_000)
    ref = rlfunc.evaluate(_policy(), episodes=1, env_id="Pendulum-v1")
    assert out["returns"] == ref["returns"]  # Pendulum's own 200-step limit


@pytest.mark.parametrize("bad", [0, -1, 2.5, True, "7"])
def test_a_bad_limit_is_one_sentence(bad):
    with pytest.raises(ValueError, match=r"^max_episode_steps must be an integer"):
        rlfunc.evaluate(_policy(), episodes=1, env_id="RlfuncTestEndless-v0", max_episode_steps=bad)


def test_the_cli_flag_reaches_evaluate(tmp_path, capsys):
    from rlfunc.runtime.cli import main

    run = tmp_path / "run"
    rlfunc.train(None, overrides={"env.id": "Pendulum-v1", "train.total_steps": 60, "train.learning_starts": 50,
                                  "train.eval_every": 60, "train.eval_episodes": 1, "agent.hidden_sizes": [8],
                                  "agent.num_critics": 2, "agent.batch_size": 8, "train.threads": 1}, run_dir=run)
    main(["eval", str(run), "--episodes", "1", "--max-episode-steps", "5"])
    five = capsys.readouterr().out
    main(["eval", str(run), "--episodes", "1"])
    full = capsys.readouterr().out
    mean = [float(text.split("mean return ")[1].split()[0]) for text in (five, full)]
    assert -16.3 * 5 <= mean[0] <= 0 and mean[1] < -16.3 * 5  # Pendulum's cost per step is at most ~16.3
