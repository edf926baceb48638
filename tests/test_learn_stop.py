"""Stopping ``benchmarks/run.py learn`` while its runs train as Ray tasks (``--jobs 2``, the sweep
machinery of :mod:`rlfunc.scale.sweep` on an embedded loopback Ray): killing the command ends every
worker process and leaves each run resumable from its checkpoint (``rlfunc sweep --resume``), and a
run whose worker dies is retried by Ray from its checkpoint while the command goes on. (Before the
sweep, ``learn`` had its own process pool; its workers outliving the command was a bug this file
first tested.) Skipped when Ray is not installed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from rlfunc.runtime.checkpoint import load_checkpoint  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# A tiny REDQ run; the test stops it (or kills one worker) once it has learned and saved.
SETTINGS = {
    "agent.hidden_sizes": "[16,16]", "agent.num_critics": "2", "agent.updates_per_step": "1",
    "agent.batch_size": "32", "train.learning_starts": "200", "train.eval_every": "100000",
    "train.checkpoint_every": "200", "train.log_every": "100", "train.eval_episodes": "1",
    "train.tensorboard": "false",
}


def _start_learn(tmp_path: Path, steps: int) -> tuple[subprocess.Popen, Path]:
    runs = tmp_path / "runs"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn", "--config", "configs/redq/pendulum.yaml",
           "--seeds", "2", "--jobs", "2", "--no-population", "--threads", "1", "--steps", str(steps),
           "--runs-dir", str(runs), "--out", str(tmp_path / "learn.json")]
    for key, value in SETTINGS.items():
        cmd += ["--set", f"{key}={value}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), runs


def _attempts(runs: Path) -> list[dict]:
    return [json.loads(line) for p in runs.glob("*/attempts.jsonl") for line in p.read_text().splitlines()]


def _wait_until_both_runs_saved(proc: subprocess.Popen, runs: Path, timeout: float = 240) -> list[Path]:
    """Both runs past their random steps with a checkpoint; returns their run directories."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(runs.rglob("metrics.csv"))
        if len(logs) == 2 and all(len(p.read_text().splitlines()) >= 4 and (p.parent / "checkpoints" / "latest").is_file()
                                  for p in logs):
            return sorted(p.parent for p in logs)
        time.sleep(0.5)
    proc.kill()
    raise AssertionError(f"the two runs did not start learning: {proc.communicate()}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by its parent) has ended too
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:  # reaped since the kill(0) above
        return False


def _wait_gone(pids: list[int], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.5)
    for p in pids:
        if _alive(p):
            os.kill(p, signal.SIGKILL)
            raise AssertionError(f"worker {p} was still running {timeout:.0f} s after the stop")


def test_killing_the_learn_command_ends_its_workers_and_leaves_resumable_runs(tmp_path):
    proc, runs = _start_learn(tmp_path, steps=1_000_000)
    try:
        run_dirs = _wait_until_both_runs_saved(proc, runs)
        workers = [a["pid"] for a in _attempts(runs)]
        assert len(workers) == 2, workers
        proc.send_signal(signal.SIGTERM)  # the command alone, not its process group
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err
        assert "rlfunc sweep --resume" in err and str(runs) in err
        _wait_gone(workers)
    finally:
        proc.kill()
    for run_dir in run_dirs:
        _, meta = load_checkpoint(run_dir)
        assert meta["env_step"] >= 200, run_dir  # past the random steps: resume continues from here


def test_a_run_whose_worker_dies_is_retried_from_its_checkpoint_and_learn_finishes(tmp_path):
    proc, runs = _start_learn(tmp_path, steps=1000)
    try:
        run_dirs = _wait_until_both_runs_saved(proc, runs)
        victim = next(a for a in _attempts(runs) if a["run"] == run_dirs[0].name)
        os.kill(victim["pid"], signal.SIGKILL)  # the worker process dies mid-run
        out, err = proc.communicate(timeout=240)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    tries = [a for a in _attempts(runs) if a["run"] == run_dirs[0].name]
    assert [t["start"] for t in tries] == ["fresh", "resume"] and tries[1]["from_step"] >= 200, tries
    result = json.loads((tmp_path / "learn.json").read_text())
    assert [(r["seed"], r["env_steps"], r["complete"]) for r in result["runs"]] == [(0, 1000, True), (1, 1000, True)]
    assert result["settings"]["population"]["redq"] == {"members": None, "separate_runs_because": "--no-population"}
    assert "Ray tasks" in result["machine"]["executor"]
