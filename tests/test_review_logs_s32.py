"""Review of what a run's logs say (session 32): ``metrics.csv``'s ``steps_per_s`` is the env-step rate
of the row's window without the evaluations in it (they are not env stepping), for a single run and for
each population member. The evaluation's time used to be left out of the row it was due at only to be
charged to the next row's window, so every row after an evaluation showed a rate several times lower."""

from __future__ import annotations

from pathlib import Path

import torch
from helpers_logs import fake_clock, rows

import rlfunc
from rlfunc.runtime import population as pr

torch.set_num_threads(1)

SLOW_EVAL_S = 1000.0  # each evaluation takes this long on the fake clock: far longer than 50 env steps


def _assert_rates_leave_the_evaluations_out(run_dir: Path) -> None:
    logged = [r for r in rows(run_dir / "metrics.csv") if r["learner_calls"] != "0"]
    evals = [int(r["step"]) for r in rows(run_dir / "eval.csv")]
    assert len(logged) >= 4 and len(evals) >= 3
    # 50 env steps took far less than one evaluation: a window that held one had a rate below 50 / 1000
    slow = [(r["step"], r["steps_per_s"]) for r in logged if float(r["steps_per_s"]) < 50 / SLOW_EVAL_S * 10]
    assert not slow, f"rows whose steps_per_s counts an evaluation's time: {slow}"


def test_steps_per_s_of_a_single_run_leaves_the_evaluations_out(tmp_path, monkeypatch):
    from rlfunc.runtime import trainer as tr

    offset = fake_clock(monkeypatch, tr)

    def slow_episodes(policy, env, episodes, seed=None, **kwargs):
        offset[0] += SLOW_EVAL_S
        return [-1.0] * episodes

    monkeypatch.setattr(tr, "run_episodes", slow_episodes)
    overrides = {
        "agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 16,
        "train.total_steps": 300, "train.learning_starts": 100, "train.eval_every": 100, "train.eval_episodes": 1,
        "train.checkpoint_every": 1000, "train.log_every": 50, "train.progress": False, "train.threads": 1,
        "train.tensorboard": False,
    }
    rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "r")
    _assert_rates_leave_the_evaluations_out(tmp_path / "r")
    # time_s still counts the evaluations (training wall time): it grew by each one
    times = [float(r["time_s"]) for r in rows(tmp_path / "r" / "metrics.csv")]
    assert times[-1] >= 2 * SLOW_EVAL_S


def test_steps_per_s_of_population_members_leaves_the_evaluations_out(tmp_path, monkeypatch):
    from rlfunc.runtime import evaluate as ev

    offset = fake_clock(monkeypatch, pr)

    def slow_together(act_all, envs, episodes, seeds, **kwargs):
        offset[0] += SLOW_EVAL_S
        return [[-1.0] * episodes for _ in envs]

    monkeypatch.setattr(ev, "run_episodes_together", slow_together)
    config = {
        "algo": "redq",
        "env": {"id": "Pendulum-v1"},
        "train": {"total_steps": 300, "learning_starts": 100, "replay_size": 1000, "eval_every": 100,
                  "eval_episodes": 1, "checkpoint_every": 1000, "log_every": 50, "progress": False,
                  "tensorboard": False, "compile": False, "threads": 1},
        "agent": {"hidden_sizes": [16, 16], "num_critics": 2, "updates_per_step": 1, "batch_size": 8},
    }
    pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    for k in (0, 1):
        _assert_rates_leave_the_evaluations_out(tmp_path / "pop" / f"member-{k}")
