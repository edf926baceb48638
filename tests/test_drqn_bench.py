"""Smoke test of ``benchmarks/run.py drqn-episodes`` (DRQN's acting-view diagnostic). 1 torch thread."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch.set_num_threads(1)


def _tiny_drqn_run(tmp_path, extra=None):
    import rlfunc

    return rlfunc.train(
        "configs/drqn/cartpole_novel.yaml",
        overrides={
            "agent.lstm_size": 16, "agent.encoder_sizes": [16], "agent.batch_size": 8,
            "train.learning_starts": 50, "train.replay_size": 200, "env.num_envs": 2,
            "train.total_steps": 200, "train.eval_every": 200, "train.checkpoint_every": 200,
            "train.eval_episodes": 1, "train.compile": False, "train.progress": False,
            **(extra or {}),
        },
        run_dir=tmp_path / "run",
    )


def test_drqn_episodes_subcommand(tmp_path):
    res = _tiny_drqn_run(tmp_path, {"agent.eval_epsilon": 0.5})  # the diagnostic plays both modes greedily
    out = tmp_path / "ends.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "drqn-episodes", str(res.run_dir),
         "--episodes", "3", "--out", str(out), "--note", "tiny run"],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(out.read_text())
    assert data["benchmark"] == "drqn_episode_ends" and data["note"] == "tiny run"
    (row,) = data["rows"]
    whole = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "drqn-episodes", str(res.run_dir),
         "--episodes", "3", "--window", "1000", "--out", str(tmp_path / "whole.json")],
        cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300,
    )
    assert whole.returncode == 0, whole.stdout + whole.stderr
    (w,) = json.loads((tmp_path / "whole.json").read_text())["rows"]
    assert w["windowed"]["returns"] == w["carried"]["returns"] == row["carried"]["returns"]
    assert row["env_step"] == 200 and row["window"] == 20  # the config's sequence_length
    for mode in ("carried", "windowed"):
        r = row[mode]
        assert sum(r["ends"].values()) == 3 and set(r["ends"]) <= {"pole", "cart", "truncated"}
        assert r["mean_length"] == r["mean_return"]  # CartPole: reward 1 per step


def test_window_longer_than_episode_acts_as_carried_state(tmp_path):
    """Unrolling the whole history from zeros is the carried state: both modes play the same episodes."""
    import rlfunc
    from benchmarks.drqn_bench import play
    from rlfunc.envs import build_wrappers, make_env

    res = _tiny_drqn_run(tmp_path)
    policy = rlfunc.load(res.run_dir)
    env = make_env("CartPole-v1", wrappers=build_wrappers(["mask_velocity"]))
    carried = play(policy, env, episodes=3, seed=7, window=None)
    whole = play(policy, env, episodes=3, seed=7, window=1000)
    short = play(policy, env, episodes=3, seed=7, window=1)
    assert carried["returns"] == whole["returns"]
    assert carried["ends"] == whole["ends"]
    assert sum(short["ends"].values()) == 3
