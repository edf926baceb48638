"""Session-35 review of the training loop's ends (rlfunc.runtime.trainer, callbacks, distributed R2D2).

1. A stop at the final evaluation of a run whose ``train.total_steps`` (or a resume's ``total_steps``) is no
   multiple of ``train.eval_every`` wrote the last step's metrics row twice (metrics.csv and TensorBoard), the
   second with ``episode_return`` nan, and called ``on_log`` twice for it: the final evaluation ran after the
   step's row. Distributed R2D2 evaluated after a chunk's row at every evaluation, so a stop there did too.
2. ``on_end(run, reason)`` was not called when a run ended with an exception (a callback's or any other),
   Ctrl-C or a non-finite loss; a crash saved the state at its step without a word.
3. ``max_wall_s``'s reason rounded the time to whole seconds ("2 s of training >= 1.5" at 1.502 s).
"""

from __future__ import annotations

import collections
import math
import os
import signal
import sys

import pytest
from helpers_envs import register
from helpers_logs import rows

import rlfunc
from rlfunc.runtime.callbacks import MaxWallTime
from rlfunc.runtime.checkpoint import list_checkpoints
from rlfunc.runtime.trainer import NonFiniteLossError, RunInterrupted


def _config(total=70, eval_every=30, **train):
    return {
        "algo": "sac",
        "env": {"id": "Pendulum-v1", "wrappers": [{"time_limit": {"max_episode_steps": 10}}]},
        "train": {"total_steps": total, "learning_starts": 8, "replay_size": 500, "eval_every": eval_every,
                  "eval_episodes": 1, "checkpoint_every": 1000, "log_every": 10, "progress": False,
                  "tensorboard": False, "threads": 1, **train},
        "agent": {"hidden_sizes": [8], "batch_size": 8},
    }


class StopAt(rlfunc.Callback):
    """Stops the run at the evaluation of ``step``; records on_log's rows and on_end's reasons."""

    def __init__(self, step):
        self.step, self.logged, self.ended = step, [], []

    def on_eval(self, run, step, returns):
        return "stop at the final evaluation" if step == self.step else None

    def on_log(self, run, row):
        self.logged.append((row["step"], row["stop_reason"]))

    def on_end(self, run, reason):
        self.ended.append(reason)


def _one_row_per_step(run_dir, last_step, reason):
    metrics = rows(run_dir / "metrics.csv")
    steps = [int(r["step"]) for r in metrics]
    assert [s for s, n in collections.Counter(steps).items() if n > 1] == []
    assert steps[-1] == last_step and metrics[-1]["stop_reason"].startswith(reason)
    assert not math.isnan(float(metrics[-1]["episode_return"]))  # the step's real one, not a second row's nan
    assert [r["stop_reason"] for r in metrics[:-1]] == [""] * (len(metrics) - 1)
    evals = rows(run_dir / "eval.csv")
    assert int(evals[-1]["step"]) == last_step and evals[-1]["stop_reason"].startswith(reason)


def test_a_callbacks_stop_at_the_final_evaluation_writes_the_steps_row_once(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cb = StopAt(70)
    res = rlfunc.train(_config(tensorboard=True), run_dir=tmp_path / "r", callbacks=[cb])
    assert res.env_steps == 70 and res.stop_reason == "stop at the final evaluation"
    _one_row_per_step(tmp_path / "r", 70, "stop at the final evaluation")
    assert [s for s, _ in cb.logged].count(70) == 1 and cb.logged[-1] == (70, "stop at the final evaluation")
    assert cb.ended == ["stop at the final evaluation"]
    events = EventAccumulator(str(tmp_path / "r"), size_guidance={"scalars": 0})
    events.Reload()
    for tag in ("train/episode_return", "train/steps_per_s"):
        steps = [e.step for e in events.Scalars(tag)]
        assert steps.count(70) == 1, tag


def test_a_config_rule_at_the_final_evaluation_writes_the_steps_row_once(tmp_path):
    """The run's only evaluation is its final one (eval_every past total_steps): stop_at_return fires there."""
    res = rlfunc.train(_config(eval_every=100, stop_at_return=-1e9), run_dir=tmp_path / "r")
    assert res.env_steps == 70 and res.stop_reason.startswith("stop_at_return")
    _one_row_per_step(tmp_path / "r", 70, "stop_at_return")


def test_a_stop_at_the_final_evaluation_of_a_resume_to_new_total_steps_writes_one_row(tmp_path):
    rlfunc.train(_config(total=60), run_dir=tmp_path / "r")
    cb = StopAt(75)
    res = rlfunc.resume(tmp_path / "r", total_steps=75, callbacks=[cb])
    assert res.env_steps == 75 and res.stop_reason == "stop at the final evaluation"
    _one_row_per_step(tmp_path / "r", 75, "stop at the final evaluation")
    assert cb.logged == [(70, ""), (75, "stop at the final evaluation")]


@pytest.mark.parametrize("final", [False, True], ids=["periodic-evaluation", "final-evaluation"])
def test_distributed_r2d2_records_an_on_eval_stop_in_the_chunks_one_row(tmp_path, final):
    """It logged the chunk's row before evaluating, so a stop at any evaluation wrote that row again."""
    from helpers_ray import InstantRay
    from test_distributed_r2d2 import _tiny

    from rlfunc.runtime.config import build_config
    from rlfunc.scale import distributed

    total = 1100 if final else 2400

    class StopAtEval(StopAt):
        def on_eval(self, run, step, returns):
            return "stop here" if step >= total or not final else None

    raw = _tiny(**{"train.total_steps": total, "train.eval_every": 400, "train.log_every": 200})
    cb = StopAtEval(None)
    res = distributed.DistributedTrainer(build_config(raw), tmp_path / "r", [cb], InstantRay()).run()
    assert res.stop_reason == "stop here" and cb.ended == ["stop here"]
    _one_row_per_step(tmp_path / "r", res.env_steps, "stop here")
    assert [s for s, _ in cb.logged].count(res.env_steps) == 1
    assert res.env_steps >= total if final else 400 <= res.env_steps < 800


# -- on_end on every way out -----------------------------------------------------------------------------


CRASH_STEP = {"on_step": 25, "on_log": 20, "on_eval": 30, "on_checkpoint": 25}


class Boom(rlfunc.Callback):
    """Raises ValueError in ``hook`` at its :data:`CRASH_STEP`; records on_end's reasons and whether the
    crash step's state was saved by then."""

    def __init__(self, hook, end_raises=False):
        self.hook, self.end_raises, self.ended = hook, end_raises, []

    def _boom(self, hook, step):
        if hook == self.hook and step == CRASH_STEP[hook]:
            raise ValueError(f"boom in {hook}")

    def on_step(self, run):
        self._boom("on_step", run.env_step)

    def on_log(self, run, row):
        self._boom("on_log", row["step"])

    def on_eval(self, run, step, returns):
        self._boom("on_eval", step)

    def on_checkpoint(self, run, path):
        self._boom("on_checkpoint", run.env_step)

    def on_end(self, run, reason):
        saved = [int(p.name.split("_")[1]) for p in list_checkpoints(run.run_dir / "checkpoints")]
        self.ended.append((reason, run.env_step, saved))
        if self.end_raises:
            raise RuntimeError("on_end failed too")


@pytest.mark.parametrize("hook", ["on_step", "on_log", "on_eval", "on_checkpoint"])
def test_a_callbacks_exception_calls_on_end_after_the_save_and_says_where_it_saved(tmp_path, hook, capsys):
    cb = Boom(hook)
    extra = {"checkpoint_every": 25} if hook == "on_checkpoint" else {}
    with pytest.raises(ValueError, match=f"boom in {hook}"):
        rlfunc.train(_config(**extra), run_dir=tmp_path / "r", callbacks=[cb])
    step = CRASH_STEP[hook]
    assert cb.ended == [(f"error: ValueError: boom in {hook}", step, [step])]
    err = capsys.readouterr().err
    assert f"saved at step {step}; continue with `rlfunc resume {tmp_path / 'r'}`" in err


def test_an_exception_of_on_end_does_not_hide_the_runs_own_error(tmp_path, capsys):
    cb = Boom("on_step", end_raises=True)
    with pytest.raises(ValueError, match="boom in on_step") as raised:
        rlfunc.train(_config(), run_dir=tmp_path / "r", callbacks=[cb])
    assert cb.ended == [("error: ValueError: boom in on_step", 25, [25])]
    assert any("on_end raised RuntimeError: on_end failed too" in note for note in raised.value.__notes__)
    assert "Boom.on_end raised RuntimeError: on_end failed too" in capsys.readouterr().err


def test_any_other_exception_calls_on_end_too(tmp_path, monkeypatch):
    from rlfunc.runtime import trainer as trainer_module

    original = trainer_module.Trainer._learn

    def failing(self):
        if self.env_step == 25:
            raise OSError("device lost")
        return original(self)

    monkeypatch.setattr(trainer_module.Trainer, "_learn", failing)
    cb = Boom(None)
    with pytest.raises(OSError, match="device lost"):
        rlfunc.train(_config(), run_dir=tmp_path / "r", callbacks=[cb])
    assert cb.ended == [("error: OSError: device lost", 25, [25])]


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not Python's default handler in this process (the guard leaves it alone)")
def test_ctrl_c_calls_on_end_with_interrupted_after_the_save(tmp_path):
    class CtrlC(Boom):
        def on_step(self, run):
            if run.env_step == 25:
                os.kill(os.getpid(), signal.SIGINT)

    cb = CtrlC(None)
    with pytest.raises(RunInterrupted, match="saved at step 25"):
        rlfunc.train(_config(), run_dir=tmp_path / "r", callbacks=[cb])
    assert cb.ended == [("interrupted", 25, [25])]


def test_a_non_finite_loss_calls_on_end_and_keeps_the_last_good_checkpoint(tmp_path):
    register()
    config = _config(total=200, checkpoint_every=20)
    config["env"] = {"id": "rlfunc_test/Counting-v0", "kwargs": {"term_at": 10, "nan_reward_after": 50}}
    cb = Boom(None)
    with pytest.raises(NonFiniteLossError):
        rlfunc.train(config, run_dir=tmp_path / "r", callbacks=[cb])
    [(reason, step, saved)] = cb.ended
    assert reason.startswith("non-finite loss: ") and "non-finite" in reason[len("non-finite loss: "):]
    assert saved and max(saved) <= step and all(s <= 60 for s in saved)


def test_a_populations_crash_says_where_it_saved_as_a_single_runs(tmp_path, monkeypatch, capsys):
    from rlfunc.runtime.population import PopulationTrainer

    def failing(self, ks):
        raise OSError("device lost")

    monkeypatch.setattr(PopulationTrainer, "evaluate_members", failing)
    with pytest.raises(OSError, match="device lost"):
        rlfunc.train(_config(population={"seeds": [0, 1]}), run_dir=tmp_path / "pop")
    err = capsys.readouterr().err
    assert f"(OSError: device lost); saved at step 30; continue with `rlfunc resume {tmp_path / 'pop'}`" in err


# -- max_wall_s's reason -----------------------------------------------------------------------------


class _Run:
    def __init__(self, wall_s):
        self.wall_s = wall_s


@pytest.mark.parametrize("wall, limit, shown", [(1.502, 1.5, "1.50 s"), (0.4013, 0.4, "0.401 s"),
                                                (1.50042, 1.5004, "1.5004")])
def test_max_wall_s_reason_is_true_as_printed(wall, limit, shown):
    reason = MaxWallTime(limit).reached(_Run(wall))
    assert reason.startswith(f"max_wall_s: {shown}")
    printed, bound = reason.split(": ", 1)[1].split(" s of training >= ")
    assert float(printed) >= float(bound) == limit
    assert MaxWallTime(limit).reached(_Run(limit * 0.999)) is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-n", "0", "-p", "no:cacheprovider"]))


@pytest.mark.skipif(signal.getsignal(signal.SIGINT) is not signal.default_int_handler,
                    reason="SIGINT is not Python's default handler in this process (the guard leaves it alone)")
@pytest.mark.parametrize("how", ["ctrl-c", "callback error"])
def test_a_run_ended_between_a_log_steps_updates_and_its_row_still_has_the_row(tmp_path, how):
    """A Ctrl-C (or a callback's exception) in ``on_step`` at log step 30: the state was saved at 30 but its
    metrics row was never written, and the resumed run continued at 31 (metrics.csv had 10, 20, 40, ...)."""

    class EndAt30(rlfunc.Callback):
        def on_step(self, run):
            if run.env_step == 30:
                if how == "ctrl-c":
                    os.kill(os.getpid(), signal.SIGINT)
                raise ValueError("a bug in my callback")

    with pytest.raises((RunInterrupted, ValueError)):
        rlfunc.train(_config(), run_dir=tmp_path / "r", callbacks=[EndAt30()])
    assert [int(r["step"]) for r in rows(tmp_path / "r" / "metrics.csv")] == [10, 20, 30]
    rlfunc.resume(tmp_path / "r")
    steps = [int(r["step"]) for r in rows(tmp_path / "r" / "metrics.csv")]
    assert steps == [10, 20, 30, 40, 50, 60, 70]
