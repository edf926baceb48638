"""Regression tests from a review of the single-run training loop, session 29 (each failed before its fix)."""

from __future__ import annotations

import csv
from pathlib import Path

import torch

import rlfunc
from rlfunc.runtime.callbacks import Callback
from rlfunc.runtime.checkpoint import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TINY = {"agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 2, "agent.batch_size": 16,
        "train.total_steps": 400, "train.learning_starts": 100, "train.eval_every": 100, "train.eval_episodes": 1,
        "train.checkpoint_every": 100, "train.log_every": 50, "train.progress": False, "train.threads": 1,
        "train.tensorboard": False}


def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


class RecordEvals(Callback):
    def __init__(self):
        self.steps = []

    def on_eval(self, run, step, returns):
        self.steps.append(step)


def test_evaluation_with_eval_epsilon_is_reproducible_from_the_seed(tmp_path):
    """agent.eval_epsilon > 0 drew its random actions from torch's unseeded global RNG: two runs with the
    same seed trained the same parameters but logged different evaluation returns."""
    def run(name):
        return rlfunc.train(str(ROOT / "configs/drqn/cartpole_novel.yaml"), overrides={
            "agent.lstm_size": 16, "agent.encoder_sizes": [16], "agent.batch_size": 8,
            "train.learning_starts": 50, "train.replay_size": 200, "env.num_envs": 2,
            "train.total_steps": 200, "train.eval_every": 100, "train.checkpoint_every": 200,
            "train.eval_episodes": 5, "train.compile": False, "train.progress": False, "train.tensorboard": False,
            "train.threads": 1, "agent.eval_epsilon": 0.5}, run_dir=tmp_path / name)

    torch.manual_seed(1)
    a = run("a")
    torch.manual_seed(2)  # the global RNG must not matter
    b = run("b")
    assert a.evals == b.evals
    ta, _ = load_checkpoint(tmp_path / "a")
    tb, _ = load_checkpoint(tmp_path / "b")
    assert all(torch.equal(ta["state"][k], tb["state"][k]) for k in ta["state"].keys(True, True))


def test_a_stopped_runs_final_evaluation_reaches_on_eval(tmp_path):
    """A run stopped by a rule (train.max_updates here) evaluated its final state without calling on_eval."""
    rec = RecordEvals()
    res = rlfunc.train(None, overrides={**TINY, "train.max_updates": 21}, run_dir=tmp_path / "run", callbacks=[rec])
    assert res.stop_reason.startswith("max_updates")
    steps = [s for s, _ in res.evals]
    assert steps[-1] == res.env_steps and steps[-1] % 100 != 0  # a final evaluation off the period
    assert rec.steps == steps == [int(r["step"]) for r in _rows(tmp_path / "run" / "eval.csv")]
    assert _rows(tmp_path / "run" / "eval.csv")[-1]["stop_reason"].startswith("max_updates")


def test_a_stop_decided_by_an_evaluation_is_one_metrics_row(tmp_path):
    """stop_at_return stops at an evaluation; the step's metrics row was written before it, then a second
    row at the same step with nan speed and no returns."""
    res = rlfunc.train(None, overrides={**TINY, "train.stop_at_return": -1e9}, run_dir=tmp_path / "run")
    assert res.stop_reason.startswith("stop_at_return") and res.env_steps == 100
    rows = _rows(tmp_path / "run" / "metrics.csv")
    steps = [int(r["step"]) for r in rows]
    assert steps == sorted(set(steps)) == [50, 100]
    assert rows[-1]["stop_reason"].startswith("stop_at_return") and rows[-1]["steps_per_s"] != "nan"
    evals = _rows(tmp_path / "run" / "eval.csv")
    assert [int(r["step"]) for r in evals] == [100] and evals[0]["stop_reason"].startswith("stop_at_return")
