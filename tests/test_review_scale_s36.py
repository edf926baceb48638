"""Session-36 review of the scale-out side (rlfunc.scale: distributed R2D2, rlfunc sweep).

Each test fails on the code before its fix; the module docstrings of rlfunc/scale say what is kept.
"""

from __future__ import annotations

import csv
import os
import signal

import pytest
from helpers_ray import InstantRay
from test_distributed_r2d2 import _tiny, bounded  # noqa: F401 -- a fixture: each Ray test within 120 s
from test_sweep_checks_runs_here import no_ray  # noqa: F401 -- a fixture: Ray starting fails the test

from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import build_config
from rlfunc.runtime.learners.sequence import R2D2Learner
from rlfunc.scale import distributed


def _rows(run_dir, name="metrics.csv"):
    with open(run_dir / name, newline="") as f:
        return list(csv.DictReader(f))


# ----------------------------------------------------------------------------- distributed R2D2, without Ray


class RaiseAtStep:
    """on_step raises (a callback's bug) at the first chunk at or past ``step``."""

    def __init__(self, step):
        self.step = step

    def on_step(self, run):
        if run.env_step >= self.step:
            raise RuntimeError("callback bug")


def test_a_callback_error_at_a_log_crossing_chunk_still_writes_its_row(tmp_path):
    """A chunk's env_step is rarely a multiple of train.log_every: a callback's error (or SIGTERM) between
    the chunk that crossed one and its row left no row there, and the run was saved at that step, so the
    resumed run (which continues after it) never had one. The single run's _write_missed_row looked only
    for multiples of log_every."""
    raw = _tiny(**{"train.total_steps": 600, "train.log_every": 100, "distributed.param_sync_steps": 64})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", [RaiseAtStep(300)], InstantRay())
    with pytest.raises(RuntimeError, match="callback bug"):
        trainer.run()
    step = trainer.env_step
    assert step >= 300 and step % 100 != 0  # the crossing chunk's step is no multiple of log_every
    rows = [int(r["step"]) for r in _rows(tmp_path / "run")]
    assert rows[-1] == step, rows
    assert len(rows) == len(set(rows))
    _, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == step  # saved at that step: a resume continues after the row


def test_sigterm_inside_a_distributed_update_waits_for_its_count(tmp_path, monkeypatch):
    """SIGTERM that lands in an update after its new state was assigned (here: in after_update) raised at
    once in the distributed loop, before learner_calls counted the update: the state saved on the way out
    had taken one more step than its meta's updates (the single run defers it: tests/test_interrupt_during_update.py)."""
    original = R2D2Learner.after_update
    sent = []

    def after_update(self, metrics, context):
        if int(self.state["step"]) >= 5 and not sent:
            sent.append(int(self.state["step"]))
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, after the state was assigned
        return original(self, metrics, context)

    monkeypatch.setattr(R2D2Learner, "after_update", after_update)
    raw = _tiny(**{"train.total_steps": 1200, "train.log_every": 100, "distributed.param_sync_steps": 32})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay())
    with pytest.raises(SystemExit) as stopped:
        trainer.run()
    assert sent and stopped.value.code == 143
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert meta["updates"] == int(tensors["state", "step"]) == trainer.learner_calls > 0
    assert meta["env_step"] == trainer.env_step == sum(c[2] for c in trainer.chunks)


def test_max_updates_stops_the_distributed_learner_at_the_limit(tmp_path):
    """train.max_updates is a rule asked at each chunk (on_step), and the learner may update many times between
    two chunks (here min_replay_ratio holds the actors while it catches up): a limit of 7 stopped the run after
    301 gradient steps. The learner now stops updating at the limit and the next chunk stops the run."""
    raw = _tiny(**{"train.total_steps": 3000, "train.max_updates": 7, "train.learning_starts": 8,
                   "distributed.param_sync_steps": 200, "distributed.max_replay_ratio": 0.5,
                   "distributed.min_replay_ratio": 0.5})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay())
    result = trainer.run()
    assert result.gradient_steps == trainer.learner_calls == 7
    assert result.stop_reason == "max_updates: 7 gradient steps >= 7"
    assert result.env_steps < 3000
    last = _rows(tmp_path / "run")[-1]
    assert int(last["step"]) == result.env_steps and last["stop_reason"] == result.stop_reason
    assert int(last["gradient_steps"]) == 7


# ----------------------------------------------------------------------------- rlfunc sweep, on a local Ray


def test_a_stopped_sweep_saves_its_running_run_at_the_step_it_reached(bounded, tmp_path):
    """SIGTERM (or Ctrl-C) of a sweep shut Ray down under its running tasks: each run lost everything since
    its last periodic checkpoint (here: all of it, checkpoint_every is past the run's end). The sweep now
    cancels them as Ctrl-C stops `rlfunc train`: the run saves where it is, and --resume continues from there."""
    pytest.importorskip("ray")
    import threading
    import time

    import yaml
    from test_sweep import TINY

    from rlfunc.scale.sweep import SweepStopped, sweep

    sw = tmp_path / "sw"
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump({**TINY, "train": {**TINY["train"], "total_steps": 200_000,
                                                         "checkpoint_every": 1_000_000, "eval_every": 1_000_000}}))
    seen = {}

    def stop_when_training():
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            metrics = sw / "g0-s0" / "metrics.csv"
            if metrics.is_file() and len(metrics.read_text().splitlines()) >= 4:  # the header and 3 rows
                seen["step"] = int(metrics.read_text().splitlines()[-1].split(",")[0])
                os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_when_training, daemon=True)
    watcher.start()
    with pytest.raises(SweepStopped, match="rlfunc sweep --resume"):
        sweep(config, "0", sweep_dir=sw, echo=lambda line: None)
    watcher.join(timeout=5)
    assert seen["step"] >= 300
    _, meta = load_checkpoint(sw / "g0-s0")  # none before: the run was never saved
    assert meta["env_step"] >= seen["step"]
    import ray

    assert not ray.is_initialized()


def test_a_sweep_dir_holding_runs_named_as_the_new_sweeps_is_refused(tmp_path, capsys, no_ray):
    """The runs of an earlier sweep whose sweep.json was removed: a new sweep of other settings into that
    directory said "2 finished already, 0 to train" and reported the old runs (another batch size, another
    total_steps) as its own. Refused in one sentence before Ray starts, nothing written."""
    import yaml
    from test_sweep_checks_runs_here import TINY

    from rlfunc.runtime.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    sw = tmp_path / "sw"
    old = sw / "g0-s1"
    old.mkdir(parents=True)
    (old / "config.yaml").write_text(yaml.safe_dump(TINY))
    (old / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes,stop_reason\n400,1.0,-900.0,0.0,1,\n")
    code = main(["sweep", str(config), "--seeds", "0-1", "--sweep-dir", str(sw), "--set", "agent.batch_size=64"])
    err = capsys.readouterr().err
    assert code != 0
    assert f"--sweep-dir {str(sw)!r} already holds g0-s1, a directory named as a run of this sweep" in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert sorted(p.name for p in sw.iterdir()) == ["g0-s1"]


@pytest.mark.parametrize("seeds, sentence", [
    ([0, 0], "--seeds '0,0' names seed 0 twice; list each seed once."),
    ([True], "--seeds 'True' is not a seed list"),
])
def test_a_seed_list_from_python_is_checked_as_the_seeds_text(tmp_path, seeds, sentence):
    """sweep(config, [0, 0]) planned two runs named g0-s0 that trained one directory (the second refused by
    its lock after Ray had started, or reading the first's run back); [True] trained seed 1."""
    from test_sweep_checks_runs_here import TINY

    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import plan_sweep

    with pytest.raises(ConfigError) as refused:
        plan_sweep(TINY, seeds, None, None, tmp_path / "sw")
    assert sentence in str(refused.value)
    assert plan_sweep(TINY, [2, 0], None, None, tmp_path / "sw")["seeds"] == [2, 0]


def test_numpy_and_torch_integer_seeds_plan_as_their_numbers(tmp_path):
    """A population's seeds take np.arange(2) and torch.arange(2) (tests/test_review_population_s36.py); the
    sweep's seed list read as --seeds text refused them as "np.int64(0)" is not a seed list."""
    import numpy as np
    import torch
    from test_sweep_checks_runs_here import TINY

    from rlfunc.scale.sweep import plan_sweep

    for seeds in (np.arange(2), torch.arange(2), [np.int32(0), 1]):
        assert plan_sweep(TINY, seeds, None, None, tmp_path / "sw")["seeds"] == [0, 1]


def test_actors_created_before_one_that_fails_to_be_created_are_killed(tmp_path):
    """Creating the second actor fails (a Ray error, a Ctrl-C or a sweep's cancel at that moment): the first
    was created before the loop's try, so its finally did not kill it and it outlived the run."""

    class SecondFails(InstantRay):
        def __init__(self):
            self.created, self.killed = [], []

        def remote(self, cls):
            factory, ray = super().remote(cls), self

            class Counting:
                def options(self, **_):
                    return self

                def remote(self, *args):
                    if len(ray.created) == 1:
                        raise KeyboardInterrupt
                    ray.created.append(factory.remote(*args))
                    return ray.created[-1]

            return Counting()

        def kill(self, actor, no_restart=True):
            self.killed.append(actor)

    ray = SecondFails()
    raw = _tiny(**{"distributed.actors": 2})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, ray)
    with pytest.raises(KeyboardInterrupt):
        trainer.run()
    assert len(ray.created) == 1 and ray.killed == ray.created
