"""Review s37: fidelity audit of the Atari configs (DRQN Flickering Pong, R2D2 Pong/Breakout).

Fixed here: ``configs/drqn/atari_pong_flicker.yaml`` evaluated greedily (``agent.eval_epsilon`` left at
DRQN's default 0), while the recurrent Caffe code the config follows (``dqn_main.cpp``:
``evaluate_with_epsilon .05``) and DQN Nature's evaluation act epsilon-greedily with 0.05, the protocol
behind the paper's Flickering Pong number (12.1 +- 2.2). The evaluation policy the trainer builds must
act with that epsilon.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from rlfunc.algos import drqn
from rlfunc.runtime.config import build_config, load_config

ROOT = Path(__file__).resolve().parents[1]
needs_atari = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None,
                                 reason="needs the atari extra: pip install -e '.[atari]'")


@needs_atari
def test_drqn_flickering_pong_evaluates_with_dqns_epsilon():
    cfg = build_config(load_config(str(ROOT / "configs/drqn/atari_pong_flicker.yaml")))
    assert cfg.agent.eval_epsilon == pytest.approx(0.05)
    # what the trainer's evaluation does with it: drqn.greedy_action acts epsilon-greedily, not greedily
    small = drqn.Config(encoder="nature", encoder_sizes=(), lstm_size=8, eval_epsilon=cfg.agent.eval_epsilon)
    obs_space = gym.spaces.Box(0, 255, (84, 84), np.uint8)
    state = drqn.init(small, obs_space, gym.spaces.Discrete(6), seed=0)
    n = 400
    obs = torch.zeros(n, 84, 84, dtype=torch.uint8)
    carry = drqn.initial_carry(small, n)
    greedy, _ = drqn.greedy_action(state["params"], obs, carry, config=None)
    noise = drqn.draw_act_noise(n, generator=torch.Generator().manual_seed(0))
    acted, _ = drqn.greedy_action(state["params"], obs, carry, config=small, noise=noise)
    off = (acted != greedy).float().mean().item()
    assert 0.0 < off < 0.15  # ~0.05 * 5/6 of the actions differ from the greedy one
