"""Stopping ``benchmarks/run.py learn`` while its runs train in parallel worker processes: every
run saves its state and every process ends, whether the command itself or one run is killed.
(Before this, a worker whose parent was killed trained on and then waited forever for work.)"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from rlfunc.runtime.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]

# A tiny REDQ run that would take far longer than the test: the test stops it once it learns.
SETTINGS = {
    "agent.hidden_sizes": "[16,16]", "agent.num_critics": "2", "agent.updates_per_step": "1",
    "agent.batch_size": "32", "train.learning_starts": "200", "train.eval_every": "100000",
    "train.checkpoint_every": "100000", "train.log_every": "100",
}


def _start_learn(tmp_path: Path) -> tuple[subprocess.Popen, Path]:
    runs = tmp_path / "runs"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn", "--config", "configs/redq/pendulum.yaml",
           "--seeds", "2", "--jobs", "2", "--threads", "1", "--steps", "1000000", "--runs-dir", str(runs),
           "--out", str(tmp_path / "learn.json")]
    for key, value in SETTINGS.items():
        cmd += ["--set", f"{key}={value}"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), runs


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(c) for c in path.read_text().split()] if path.exists() else []


def _wait_until_both_runs_learn(proc: subprocess.Popen, runs: Path, timeout: float = 300) -> list[Path]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        logs = list(runs.rglob("metrics.csv"))
        if len(logs) == 2 and all(len(p.read_text().splitlines()) >= 4 for p in logs):  # past the random steps
            return [p.parent for p in logs]
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


def _assert_saved(run_dirs: list[Path]) -> None:
    for run_dir in run_dirs:
        _, meta = load_checkpoint(run_dir)
        assert meta["env_step"] > 200, run_dir  # saved on the way out, past the random steps


def _workers(proc: subprocess.Popen) -> list[int]:
    workers = [p for p in _children(proc.pid) if Path(f"/proc/{p}/cmdline").read_bytes().count(b"spawn")]
    assert len(workers) == 2, workers
    return workers


def test_killing_the_learn_command_stops_and_saves_its_runs(tmp_path):
    proc, runs = _start_learn(tmp_path)
    try:
        run_dirs = _wait_until_both_runs_learn(proc, runs)
        workers = _workers(proc)
        proc.send_signal(signal.SIGTERM)  # the command alone, not its process group
        proc.wait(timeout=60)
        _wait_gone(workers)
    finally:
        proc.kill()
    _assert_saved(run_dirs)


def test_killing_one_run_stops_the_others_and_the_command_says_where_they_are(tmp_path):
    proc, runs = _start_learn(tmp_path)
    try:
        run_dirs = _wait_until_both_runs_learn(proc, runs)
        workers = _workers(proc)
        os.kill(workers[0], signal.SIGTERM)
        _, err = proc.communicate(timeout=180)
        assert proc.returncode == 1, err
        assert "each saved its state" in err and str(runs) in err
        _wait_gone(workers)
    finally:
        proc.kill()
    _assert_saved(run_dirs)
