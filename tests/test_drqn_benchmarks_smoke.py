"""Smoke tests of the DRQN benchmark commands (tiny settings: not measurements)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_update_drqn_quick(tmp_path):
    out = tmp_path / "u.json"
    _run("update", "--algo", "drqn", "--quick", "--no-compile", "--threads", "1", "--windows", "3",
         "--lstm-size", "16", "--out", str(out))
    res = json.loads(out.read_text())
    assert res["algo"] == "drqn" and res["quick"] is True
    graph = [v for v in res["variants"] if "unavailable" in v]  # CPU: the CUDA-graph row says why it is absent
    assert [v["variant"] for v in graph] == ["functional-eager+cudagraph"] and "--device cuda" in graph[0]["unavailable"]
    measured = [v for v in res["variants"] if "unavailable" not in v]
    variants = {v["variant"] for v in measured}
    assert variants == {"imperative", "functional-eager"}
    for v in measured:
        assert v["window"] == 3 and v["updates_per_s"] > 0 and v["flop_efficiency"] > 0
        for key in ("ratio_vs_imperative", "threads", "device", "torch", "ms_per_env_step", "matmul_gflops_ceiling"):
            assert key in v
    assert res["flops"]["3"]["per_update"] > 0 and "machine" in res


def test_learn_generic_tiny(tmp_path):
    out = tmp_path / "learn_drqn.json"
    _run("learn", "--algo", "drqn", "--seeds", "1", "--steps", "120", "--runs-dir", str(tmp_path / "runs"),
         "--out", str(out), "--set", "train.compile=false", "--set", "train.learning_starts=60",
         "--set", "train.eval_every=60", "--set", "train.eval_episodes=1", "--set", "env.num_envs=2")
    res = json.loads(out.read_text())
    assert [r["algo"] for r in res["runs"]] == ["drqn", "dqn"]
    for r in res["runs"]:
        assert r["env"] == "CartPole-v1" and r["seed"] == 0 and r["env_steps"] == 120
        assert [s for s, _ in r["evals"]] == [60, 120] and r["final_return"] == r["evals"][-1][1]
        assert r["wall_s"] > 0
    assert set(res["summary"]) == {"drqn", "dqn"} and "cpu" in res["machine"]
    assert out.with_suffix(".png").stat().st_size > 0
