"""DrQ-v2 end to end on a tiny pixel task: the loop learns; frames are logged; resume works.

``PixelReach``: a point on a line, ``p`` in [-1, 1], starts uniformly at random; the action
moves it by ``0.25 a``; reward ``1 - |p|``; 20 steps per episode (truncated). It is seen only
through 12x12 RGB renders (a bright column at ``p`` on a grey background) via the `pixels`
wrapper with 2 stacked frames. A random policy scores about 10, the optimum about 18.5; this run reaches about 17.5 by 800
agent steps (seed 0).

Everything runs through ``rlfunc.train`` with DrQ-v2's structure (random-shift augmentation,
n = 3 returns, twin critics, clipped target noise, sigma schedule, uniform warm-up) at a size
that fits the suite budget. Deviations from the paper, named: tiny encoder (one 8-channel conv,
stride 2), trunk 16, heads 64-64, pad 1 (a 12-pixel image), batch 64, Adam 1e-3, gamma 0.9,
sigma linear(1.0 -> 0.1) over 400 agent steps, 150 random steps, one update per agent step.
"""

from __future__ import annotations

import csv

import gymnasium as gym
import numpy as np
import pytest
import torch

import rlfunc

torch.set_num_threads(1)

ENV_ID = "rlfunc_test/PixelReach-v0"


class PixelReach(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None, size: int = 12):
        self.render_mode = render_mode
        self.size = size
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
        self.p = 0.0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.p = float(self.np_random.uniform(-1.0, 1.0))
        return np.array([self.p], np.float32), {}

    def step(self, action):
        self.p = float(np.clip(self.p + 0.25 * float(np.asarray(action).reshape(-1)[0]), -1.0, 1.0))
        return np.array([self.p], np.float32), 1.0 - abs(self.p), False, False, {}

    def render(self):
        img = np.full((self.size, self.size, 3), 60, np.uint8)
        col = int(round((self.p + 1.0) / 2.0 * (self.size - 1)))
        img[:, col] = (255, 200, 40)
        return img


def _register():
    if ENV_ID not in gym.registry:
        gym.register(ENV_ID, entry_point=PixelReach, max_episode_steps=20)


CONFIG = {
    "algo": "drqv2",
    "env": {
        "id": ENV_ID,
        "kwargs": {"render_mode": "rgb_array"},
        "wrappers": [{"pixels": {"size": 12, "frame_stack": 2, "action_repeat": 1}}],
    },
    "train": {
        "total_steps": 800,
        "learning_starts": 150,
        "replay_size": 5000,
        "eval_every": 400,
        "eval_episodes": 10,
        "checkpoint_every": 800,
        "log_every": 250,
        "threads": 1,
        "progress": False,
    },
    "agent": {
        "lr": 1e-3,
        "batch_size": 64,
        "gamma": 0.9,
        "update_every": 1,
        "feature_dim": 16,
        "hidden_dim": 64,
        "encoder_channels": [8],
        "encoder_strides": [2],
        "pad": 1,
        "stddev_duration": 400,
        "frame_stack": 2,
    },
}


@pytest.mark.slow
def test_drqv2_learns_pixel_reach(tmp_path):
    _register()
    res = rlfunc.train(CONFIG, run_dir=tmp_path / "run")
    assert res.env_steps == 800
    assert res.final_return is not None and res.final_return > 15.0, res.evals
    with open(tmp_path / "run" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert "frames" not in rows[0]  # action repeat 1: frames == steps, no extra column
    assert float(rows[-1]["stddev"]) == pytest.approx(0.1)
    last = rows[-1]  # one update per agent step from step learning_starts on, before that step's env step (official order)
    assert int(float(last["learner_calls"])) == int(float(last["step"])) - 150


def test_drqv2_runtime_frames_checkpoint_resume(tmp_path):
    """Action repeat 2: `frames` = 2 x agent steps in both logs; resume continues from the checkpoint."""
    _register()
    raw = {
        **CONFIG,
        "env": {**CONFIG["env"], "wrappers": [{"pixels": {"size": 12, "frame_stack": 2, "action_repeat": 2}}]},
        "train": {**CONFIG["train"], "total_steps": 60, "learning_starts": 30, "eval_every": 40, "eval_episodes": 1,
                  "checkpoint_every": 40, "log_every": 20},
        "agent": {**CONFIG["agent"], "batch_size": 8, "hidden_dim": 16},
    }
    run_dir = tmp_path / "run"
    res = rlfunc.train(raw, run_dir=run_dir)
    assert res.env_steps == 60
    with open(run_dir / "eval.csv") as f:
        evals = list(csv.DictReader(f))
    assert [(int(r["step"]), int(r["frames"])) for r in evals] == [(40, 80), (60, 120)]
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert all(int(r["frames"]) == 2 * int(r["step"]) for r in rows)
    resumed = rlfunc.resume(run_dir, total_steps=80)
    assert resumed.env_steps == 80 and resumed.evals[:2] == res.evals
    policy = rlfunc.load(run_dir) if hasattr(rlfunc, "load") else None
    if policy is not None:
        obs = np.zeros((6, 12, 12), np.uint8)
        a = policy.act(obs)
        assert a.shape == (1,) and -1.0 <= float(a[0]) <= 1.0


def test_drqv2_updates_between_acting_and_the_env_step(tmp_path, monkeypatch):
    """The official order (drqv2 train.py: act, update, env.step): the update at agent step t
    sees the t steps stored before it and reads t for the sigma schedule, every update_every steps."""
    from rlfunc.runtime.learners import PixelLearner

    _register()
    seen = []
    real_observe, real_learn = PixelLearner.observe, PixelLearner.learn

    def observe(self, rows):
        self.stored = getattr(self, "stored", 0) + rows.batch_size[0]
        return real_observe(self, rows)

    def learn(self):
        metrics = real_learn(self)
        seen.append((self._env_step, getattr(self, "stored", 0), int(self.state["agent_step"])))
        return metrics

    monkeypatch.setattr(PixelLearner, "observe", observe)
    monkeypatch.setattr(PixelLearner, "learn", learn)
    raw = {
        **CONFIG,
        "train": {**CONFIG["train"], "total_steps": 40, "learning_starts": 30, "eval_every": 40, "eval_episodes": 1,
                  "checkpoint_every": 40, "log_every": 20},
        "agent": {**CONFIG["agent"], "batch_size": 8, "hidden_dim": 16, "update_every": 2},
    }
    res = rlfunc.train(raw, run_dir=tmp_path / "run")
    assert res.env_steps == 40
    assert seen == [(t, t, t) for t in range(30, 40, 2)]
