"""Smoke tests of the R2D2 benchmark entries of ``benchmarks/run.py``: update, replay, stored-state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
torch.set_num_threads(1)


def _run(args, timeout=300):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_update_r2d2_quick(tmp_path):
    out = tmp_path / "update_r2d2.json"
    _run(["update", "--algo", "r2d2", "--r2d2-scale", "tiny", "--quick", "--no-compile", "--threads", "1", "--out", str(out)])
    data = json.loads(out.read_text())
    assert {"cpu", "cores", "torch", "python", "date"} <= set(data["machine"])
    rows = [r for r in data["variants"] if "unavailable" not in r]  # CPU: the CUDA-graph row is unavailable
    assert {r["variant"] for r in data["variants"]} - {r["variant"] for r in rows} == {"functional-eager+cudagraph"}
    assert {r["variant"] for r in rows} == {"imperative", "functional-eager"}
    for r in rows:
        for key in ("updates_per_s", "ratio_vs_imperative", "flop_efficiency", "threads", "device", "torch", "ms_per_env_step"):
            assert key in r, key
        assert r["updates_per_s"] > 0 and 0 < r["flop_efficiency"] < 1.5
    assert data["flops"]["per_update"] > 0 and data["problem"]["scale"] == "tiny"


def test_replay_subcommand(tmp_path):
    out = tmp_path / "replay.json"
    _run(["replay", "--sizes", "1000", "5000", "--reps", "5", "--rounds", "2", "--out", str(out)])
    data = json.loads(out.read_text())
    assert [r["stored"] for r in data["rows"]] == [1000, 5000]
    for r in data["rows"]:
        assert r["batch"] == 64 and r["sample_us"] > 0 and r["update_us"] > 0
    assert "cpu" in data["machine"]


def test_stored_state_subcommand(tmp_path):
    import rlfunc

    res = rlfunc.train(
        "configs/r2d2/cartpole_novel.yaml",
        overrides={
            "agent.lstm_size": 16, "agent.encoder_sizes": [16], "agent.head_sizes": [16], "agent.burn_in": 3,
            "agent.sequence_length": 4, "agent.sequence_period": 3, "agent.batch_size": 8, "train.learning_starts": 10,
            "env.num_envs": 2, "train.total_steps": 200, "train.eval_every": 200, "train.checkpoint_every": 100,
            "train.eval_episodes": 1, "train.compile": False, "train.progress": False,
        },
        run_dir=tmp_path / "run",
    )
    out = tmp_path / "ss.json"
    _run(["stored-state", str(res.run_dir), "--earlier", str(res.run_dir / "checkpoints" / "step_000000100"),
          "--episodes", "3", "--actors", "2", "--out", str(out)])
    data = json.loads(out.read_text())
    d = data["discrepancy"]
    assert data["actor_env_step"] == 100 and data["learner_env_step"] == 200
    assert d["windows"] > 0
    for k in ("stored+burn_in", "zero+burn_in", "stored", "zero"):
        assert d[k]["all_steps_mean"] >= 0
