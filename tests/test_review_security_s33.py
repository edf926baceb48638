"""Session 33 security review, the loaders' part (the sweep's and resume's parts have their own files):
a run's config.yaml of nested YAML aliases is refused by ``plot`` at once (it flattened and dumped every
expanded value, for minutes), infinite action bounds in a checkpoint's meta.json are refused (the loaded
policy answered NaN actions), and the pure ``init`` of the continuous-action algorithms refuses infinite
action bounds as the runtime does (the squashed actions would be rescaled to inf/NaN)."""

from __future__ import annotations

import math
import shutil
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from test_checkpoint_robustness import _resign

import rlfunc
from rlfunc.runtime.cli import main

torch.set_num_threads(1)

TINY = {
    "agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 16,
    "train.total_steps": 64, "train.learning_starts": 48, "train.eval_every": 64, "train.eval_episodes": 1,
    "train.checkpoint_every": 64, "train.threads": 1, "train.progress": False, "train.tensorboard": False,
}

BOMB = "\n".join(
    ["algo: sac", "env: {id: Pendulum-v1}", "zz:", "  l0: &l0 {a: 1, b: 1, c: 1, d: 1, e: 1, f: 1, g: 1, h: 1, i: 1, j: 1}"]
    + [f"  l{i}: &l{i} {{" + ", ".join(f"{k}: *l{i - 1}" for k in "abcdefghij") + "}" for i in range(1, 9)]
) + "\n"


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("sec") / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    return run


def test_plot_refuses_a_config_of_nested_aliases_at_once(trained, tmp_path, capsys):
    bomb = tmp_path / "bomb"
    shutil.copytree(trained, bomb)
    (bomb / "config.yaml").write_text(BOMB)
    assert len(BOMB) < 1000
    started = time.monotonic()
    assert main(["plot", str(trained), str(bomb), "--out", str(tmp_path / "p.png")]) == 2
    assert time.monotonic() - started < 20  # it ran for minutes
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "holds more than 10,000 values once its YAML aliases are expanded" in err and "leave that run out" in err, err


@pytest.mark.parametrize("low, high", [(-math.inf, math.inf), (-2.0, 1e39)])  # 1e39 is inf in float32
def test_infinite_action_bounds_in_meta_json_are_refused(trained, tmp_path, low, high):
    run = tmp_path / "run"
    shutil.copytree(trained, run)

    def edit(meta):
        meta["action_low"], meta["action_high"] = [low], [high]

    metas = list(run.rglob("meta.json"))
    assert metas
    for meta in metas:
        _resign(meta.parent, edit)
    with pytest.raises(Exception, match="action bounds") as info:
        rlfunc.load(run).predict(np.zeros(3, np.float32))
    assert "\n" not in str(info.value)


class _UnboundedActions(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, False, False, {}


def test_infinite_action_bounds_are_one_sentence_from_the_runtime_and_from_the_pure_init(tmp_path):
    """The runtime said so already; the pure ``init`` of REDQ/SAC/RLPD and DrQ-v2 (a user's own script) now too."""
    from rlfunc.algos import drqv2, redq

    gym.register("RlfuncUnboundedActions-v0", entry_point=_UnboundedActions, max_episode_steps=20)
    try:
        with pytest.raises(Exception, match="has unbounded actions; rlfunc's policies need a bounded Box"):
            rlfunc.train(None, overrides={**TINY, "env.id": "RlfuncUnboundedActions-v0"}, run_dir=tmp_path / "r")
    finally:
        gym.registry.pop("RlfuncUnboundedActions-v0", None)
    with pytest.raises(ValueError, match=r"must be finite, got low \[-inf\] and high \[inf\]; give the env.s action space finite bounds"):
        redq.init(redq.Config(), _UnboundedActions.observation_space, _UnboundedActions.action_space)
    pixels = gym.spaces.Box(0, 255, (3, 84, 84), np.uint8)
    with pytest.raises(ValueError, match=r"DrQ-v2 squashes actions .* must be finite"):
        drqv2.init(drqv2.Config(frame_stack=1), pixels, gym.spaces.Box(-1.0, np.inf, (1,), np.float32))


def test_a_sweeps_results_read_a_runs_config_yaml_bounded(trained, tmp_path):
    """``collected_run`` (the sweep's results, ``benchmarks/learn_bench.py collect``) reads a run's config.yaml as
    ``plot`` does: nested aliases are one sentence, not an expansion dumped into the results JSON."""
    from rlfunc.scale.results import collected_run

    assert collected_run(trained)["env"] == "Pendulum-v1"
    bomb = tmp_path / "bomb"
    shutil.copytree(trained, bomb)
    (bomb / "config.yaml").write_text(BOMB)
    with pytest.raises(ValueError, match="holds more than 10,000 values once its YAML aliases are expanded"):
        collected_run(bomb)
