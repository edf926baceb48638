"""metrics.csv has a row at a run's last step also when ``train.total_steps`` is not a multiple of
``train.log_every`` (a run of 60 steps logging every 25 wrote rows at 25 and 50 only, so the last losses,
rate and ``episode_return`` were in no log): single runs, each member of a population, distributed R2D2."""

from __future__ import annotations

import csv

from helpers_ray import InstantRay
from test_distributed_r2d2 import _tiny

import rlfunc
from rlfunc.runtime.config import build_config
from rlfunc.scale import distributed


def _steps(run_dir) -> list[int]:
    with open(run_dir / "metrics.csv") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def _config(total, log_every, **train):
    return {
        "algo": "sac",
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "train": {"total_steps": total, "learning_starts": 8, "replay_size": 500, "eval_every": 1000,
                  "eval_episodes": 1, "log_every": log_every, "progress": False, "tensorboard": False, "threads": 1,
                  **train},
        "agent": {"hidden_sizes": [8], "batch_size": 8},
    }


def test_a_single_run_logs_its_last_step(tmp_path):
    rlfunc.train(_config(61, 25), run_dir=tmp_path / "run")
    assert _steps(tmp_path / "run") == [25, 50, 61]
    rlfunc.train(_config(50, 25), run_dir=tmp_path / "even")  # a multiple: one row at the end, as before
    assert _steps(tmp_path / "even") == [25, 50]


def test_every_member_of_a_population_logs_its_last_step(tmp_path):
    rlfunc.train(_config(61, 25, population={"seeds": [0, 1]}), run_dir=tmp_path / "pop")
    for k in (0, 1):
        assert _steps(tmp_path / "pop" / f"member-{k}") == [25, 50, 61]


def test_distributed_r2d2_logs_the_chunk_that_ends_the_run(tmp_path):
    raw = _tiny(**{"train.total_steps": 600, "train.checkpoint_every": 600, "train.log_every": 100000})
    distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay()).run()
    steps = _steps(tmp_path / "run")
    assert len(steps) == 1 and steps[0] >= 600  # the arriving chunk may carry the count past total_steps
