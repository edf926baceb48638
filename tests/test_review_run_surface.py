"""Review of the run surface: interrupts while a stopped run finishes, resuming stopped runs,
logs of runs resumed in their warm-up, callbacks given wrongly or failing, and ``rlfunc plot``'s
output path and input errors."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

import rlfunc
from rlfunc.runtime.callbacks import Callback, check
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.cli import main
from rlfunc.runtime.run_log import CsvLog
from rlfunc.runtime.trainer import RunInterrupted
from test_run_surface import TINY as RUN_SURFACE_TINY
from test_run_surface import rows

# test_run_surface's tiny REDQ run, shorter: these tests stop and resume it
TINY = {**RUN_SURFACE_TINY, "train.total_steps": 250}


def checkpoints(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoints").glob("step_*"))


class InterruptAt(Callback):
    """Ctrl-C at a chosen env step."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step(self, run):
        if run.env_step == self.step:
            raise KeyboardInterrupt


def test_ctrl_c_while_a_stopped_run_finishes_still_saves(tmp_path):
    """A Ctrl-C during a stopping rule's final logging/evaluation used to escape unsaved (a bare
    KeyboardInterrupt, no checkpoint, the SIGTERM handler left installed)."""

    class InterruptTheStopRow(Callback):
        def on_log(self, run, row):
            if row["stop_reason"]:
                raise KeyboardInterrupt

    before = signal.getsignal(signal.SIGTERM)
    over = {**TINY, "train.checkpoint_every": 1000, "train.eval_every": 200, "train.stop_at_return": -1e9}
    with pytest.raises(RunInterrupted, match="saved at step 200"):
        rlfunc.train(None, overrides=over, run_dir=tmp_path / "r", callbacks=[InterruptTheStopRow()])
    assert checkpoints(tmp_path / "r") == ["step_000000200"]
    assert signal.getsignal(signal.SIGTERM) == before


def test_metrics_of_a_run_resumed_in_its_warm_up_get_the_loss_columns(tmp_path, capsys):
    """Interrupted before learning, the file held warm-up rows only; the resumed run's losses were
    then never logged ("metrics.csv has no column for critic_loss ...")."""
    with pytest.raises(RunInterrupted):
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r", callbacks=[InterruptAt(60)])
    rlfunc.resume(tmp_path / "r")
    assert "has no column" not in capsys.readouterr().err
    metrics = rows(tmp_path / "r" / "metrics.csv")
    assert [r["step"] for r in metrics] == ["50", "100", "150", "200", "250"]
    assert metrics[0]["critic_loss"] == "" and all(float(r["critic_loss"]) > 0 for r in metrics[1:])


def test_csv_log_widens_a_warm_up_only_file_once(tmp_path):
    path = tmp_path / "m.csv"
    log = CsvLog(path)
    log.write({"step": 1, "a": 1}, complete=False)
    log.close()
    log = CsvLog(path, truncate_after=1)
    log.write({"step": 2, "a": 2, "loss": 0.5})
    log.write({"step": 3, "a": 3, "loss": 0.25, "late": 1})  # a column after the first complete row: not logged
    assert rows(path) == [
        {"step": "1", "a": "1", "loss": ""},
        {"step": "2", "a": "2", "loss": "0.5"},
        {"step": "3", "a": "3", "loss": "0.25"},
    ]


def test_resuming_a_run_a_rule_stopped_stops_at_once(tmp_path, capsys):
    """It used to train one more step (max_updates, max_wall_s) or one more evaluation interval
    (stop_at_return, patience_evals) at every resume, appending a new evaluation each time."""
    over = {**TINY, "train.max_updates": 101}
    straight = rlfunc.train(None, overrides=over, run_dir=tmp_path / "a")
    with pytest.raises(RunInterrupted):
        rlfunc.train(None, overrides=over, run_dir=tmp_path / "b", callbacks=[InterruptAt(120)])
    resumed = rlfunc.resume(tmp_path / "b")
    assert (resumed.env_steps, resumed.gradient_steps) == (straight.env_steps, straight.gradient_steps) == (150, 102)
    assert resumed.stop_reason == straight.stop_reason
    evals, metrics = rows(tmp_path / "b" / "eval.csv"), rows(tmp_path / "b" / "metrics.csv")
    saved = checkpoints(tmp_path / "b")
    capsys.readouterr()
    again = rlfunc.resume(tmp_path / "b", total_steps=400)
    assert (again.env_steps, again.gradient_steps, again.stop_reason) == (150, 102, straight.stop_reason)
    assert again.final_return == resumed.final_return
    assert "already stopped at env step 150" in capsys.readouterr().err
    assert rows(tmp_path / "b" / "eval.csv") == evals and rows(tmp_path / "b" / "metrics.csv") == metrics
    assert checkpoints(tmp_path / "b") == saved


def test_every_config_rule_says_when_it_already_stopped_a_run():
    from types import SimpleNamespace

    from rlfunc.runtime.callbacks import MaxUpdates, MaxWallTime, Patience, StopAtReturn

    run = SimpleNamespace(gradient_steps=10, wall_s=5.0, evals=[(100, -3.0), (200, -5.0)])
    assert MaxUpdates(10).reached(run) and not MaxUpdates(11).reached(run)
    assert MaxWallTime(5.0).reached(run) and not MaxWallTime(6.0).reached(run)
    assert StopAtReturn(-5.0).reached(run) and not StopAtReturn(-4.0).reached(run)
    patience = Patience(1)
    patience.on_start(run)
    assert patience.reached(run)
    patience = Patience(2)
    patience.on_start(run)
    assert not patience.reached(run)
    assert Callback().reached(run) is None


def test_a_failing_on_checkpoint_does_not_claim_the_state_was_not_saved(tmp_path, capsys):
    class Broken(Callback):
        def on_checkpoint(self, run, path):
            raise RuntimeError("my callback broke")

    with pytest.raises(RuntimeError, match="my callback broke"):
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r", callbacks=[Broken()])
    assert "could not be saved" not in capsys.readouterr().err
    assert checkpoints(tmp_path / "r") == ["step_000000100"]
    assert load_checkpoint(tmp_path / "r")[1]["env_step"] == 100


def test_callbacks_given_as_a_class_or_alone(tmp_path):
    class Mine(Callback):
        pass

    with pytest.raises(TypeError, match=r"callback Mine is a class.*callbacks=\[Mine\(\)\]"):
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r", callbacks=[Mine])
    assert not (tmp_path / "r").exists()  # refused before the run directory was kept
    one = Mine()
    assert check(one) == [one] and check(None) == []
    with pytest.raises(TypeError, match="callbacks must be a list"):
        check(3)


def test_plot_output_path_and_input_errors_are_one_sentence(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("algo: redq\nenv: {id: Pendulum-v1}\n")
    (run / "eval.csv").write_text("step,time_s,mean_return\n100,1.0,-5.0\n200,2.0,-3.0\n")
    assert main(["plot", str(run), "--out", str(tmp_path / "curves")]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {tmp_path / 'curves.png'}"  # the file written
    assert (tmp_path / "curves.png").is_file()

    def one_line(argv, *needles):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith("rlfunc: error: "), err
        for needle in needles:
            assert needle in err, err

    one_line(["plot", str(run), "--out", str(tmp_path)], "is a directory")
    assert not tmp_path.with_name(tmp_path.name + ".png").exists()
    one_line(["plot", str(run), "--out", str(tmp_path / "c.txt")], "'.txt'", ".png")
    one_line(["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "c.png")], "does not exist")
    (tmp_path / "nothing").mkdir()
    one_line(["plot", str(tmp_path / "nothing"), "--out", str(tmp_path / "c.png")], "has no eval.csv")
    err_free = tmp_path / "empty"
    err_free.mkdir()
    (err_free / "config.yaml").write_text((run / "config.yaml").read_text())
    (err_free / "eval.csv").write_text("step,time_s,mean_return\n")
    one_line(["plot", str(err_free), "--out", str(tmp_path / "c.png")], "has no evaluations yet")
    (err_free / "eval.csv").write_text("step,time_s\n100,1.0\n")
    one_line(["plot", str(err_free), "--out", str(tmp_path / "c.png")], "not an eval.csv rlfunc wrote")


def test_an_evaluation_cut_off_by_ctrl_c_is_run_when_the_run_resumes(tmp_path, monkeypatch):
    """Ctrl-C (or SIGTERM) during a periodic evaluation saved the step, but the resumed run went
    on to the next step: that evaluation was missing from eval.csv and the run's evals for good."""
    import rlfunc.runtime.trainer as trainer

    over = {**TINY, "train.total_steps": 300}
    straight = rlfunc.train(None, overrides=over, run_dir=tmp_path / "straight")
    real, calls = trainer.run_episodes, []

    def cut_off_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the evaluation at step 200
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(trainer, "run_episodes", cut_off_second)
    with pytest.raises(RunInterrupted, match="saved at step 200"):
        rlfunc.train(None, overrides=over, run_dir=tmp_path / "r")
    monkeypatch.setattr(trainer, "run_episodes", real)
    resumed = rlfunc.resume(tmp_path / "r")
    assert resumed.evals == straight.evals  # Pendulum's episodes end at 200: the resume is exact
    assert [r["step"] for r in rows(tmp_path / "r" / "eval.csv")] == ["100", "200", "300"]


def test_an_evaluation_whose_callback_breaks_off_keeps_its_row(tmp_path):
    """The evaluation was in the run's evals (and the checkpoint) but its eval.csv row was lost."""

    class InterruptTheEval(Callback):
        def on_eval(self, run, step, returns):
            if step == 200:
                raise KeyboardInterrupt

    with pytest.raises(RunInterrupted, match="saved at step 200"):
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r", callbacks=[InterruptTheEval()])
    assert [r["step"] for r in rows(tmp_path / "r" / "eval.csv")] == ["100", "200"]
    assert [s for s, _ in load_checkpoint(tmp_path / "r")[1]["evals"]] == [100, 200]
    resumed = rlfunc.resume(tmp_path / "r")
    assert [s for s, _ in resumed.evals] == [100, 200, 250]  # not evaluated twice at 200
    assert [r["step"] for r in rows(tmp_path / "r" / "eval.csv")] == ["100", "200", "250"]


def test_predict_takes_tensors_and_refuses_non_numbers_in_one_sentence():
    import gymnasium as gym
    import numpy as np
    import torch

    from rlfunc.algos import redq
    from rlfunc.runtime.policy import Policy

    box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    config = redq.Config(hidden_sizes=(8, 8), num_critics=2)
    state = redq.init(config, gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), box, seed=0)
    policy = Policy("redq", state["params"], config, box.low, box.high, (4,))
    obs = np.ones((3, 4), np.float32)
    want, _ = policy.predict(obs)
    got, _ = policy.predict(torch.ones(3, 4, requires_grad=True))
    assert np.array_equal(got, want)
    with pytest.raises(ValueError, match=r"dtype <U1 .*pass numbers"):
        policy.predict(np.array(["a"] * 4))
    with pytest.raises(ValueError, match=r"dtype object .*pass numbers"):
        policy.predict(np.array([None] * 4, dtype=object))


@pytest.mark.parametrize("step,evals,missed", [
    (102, [], True),  # 3 envs: the step crossed 100 without landing on it, and no evaluation is recorded
    (102, [(102, 0.0)], False),
    (150, [(102, 0.0)], False),
    (204, [(102, 0.0)], True),  # interrupted during the evaluation due at the crossing of 200
    (100, [(100, 0.0)], False),
    (60, [], False),
])
def test_a_missed_evaluation_is_one_whose_multiple_the_step_crossed(step, evals, missed):
    """With several envs (or a distributed run's chunks) the loop evaluates when a step crosses a multiple of
    eval_every, so a resume looks for a crossed multiple, not for a step that is one."""
    from types import SimpleNamespace

    from rlfunc.runtime.trainer import Trainer

    run = SimpleNamespace(env_step=step, evals=evals,
                          config=SimpleNamespace(train=SimpleNamespace(eval_every=100, total_steps=1000)))
    assert Trainer._missed_evaluation(run) is missed
