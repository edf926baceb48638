"""The run surface: stopping rules and callbacks, gradient-step counters, append-only CSV logs,
TensorBoard (and W&B offline) logs, the progress line, bounded and best checkpoints."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

import rlfunc
from rlfunc.runtime.callbacks import Callback, Patience
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.cli import main
from rlfunc.runtime.run_log import CsvLog, Progress

TINY = {
    "agent.hidden_sizes": [16, 16],
    "agent.num_critics": 2,
    "agent.updates_per_step": 2,
    "agent.batch_size": 16,
    "train.total_steps": 400,
    "train.learning_starts": 100,
    "train.eval_every": 100,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 100,
    "train.log_every": 50,
    "train.progress": False,
    "train.threads": 1,
}


def rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_stop_at_return_saves_and_records_why(tmp_path):
    res = rlfunc.train(None, overrides={**TINY, "train.stop_at_return": -1e9}, run_dir=tmp_path / "r")
    assert res.env_steps == 100 and res.stop_reason.startswith("stop_at_return")
    evals = rows(tmp_path / "r" / "eval.csv")
    assert [e["step"] for e in evals] == ["100"] and evals[-1]["stop_reason"].startswith("stop_at_return")
    assert rows(tmp_path / "r" / "metrics.csv")[-1]["stop_reason"].startswith("stop_at_return")
    assert load_checkpoint(tmp_path / "r")[1]["env_step"] == 100


def test_max_updates_counts_gradient_steps(tmp_path):
    # updates_per_step 2: every learner call is two critic gradient steps
    res = rlfunc.train(None, overrides={**TINY, "train.max_updates": 21}, run_dir=tmp_path / "r")
    assert res.gradient_steps == 22 and res.stop_reason.startswith("max_updates")
    assert res.env_steps == 100 + 10  # learning from step 100, one call per env step
    metrics = rows(tmp_path / "r" / "metrics.csv")
    last = metrics[-1]
    assert int(last["gradient_steps"]) == 2 * int(last["learner_calls"]) == 22
    assert last["stop_reason"].startswith("max_updates")
    _, meta = load_checkpoint(tmp_path / "r")
    assert meta["gradient_steps"] == 22 and meta["env_step"] == 110
    # the run also got a final evaluation at the step it stopped
    assert rows(tmp_path / "r" / "eval.csv")[-1]["step"] == "110"


def test_max_wall_s_stops(tmp_path):
    res = rlfunc.train(None, overrides={**TINY, "train.max_wall_s": 1e-6}, run_dir=tmp_path / "r")
    assert res.env_steps == 1 and res.stop_reason.startswith("max_wall_s")


def test_callbacks_see_every_hook_and_can_stop(tmp_path):
    class Recorder(Callback):
        def __init__(self):
            self.calls = []

        def on_start(self, run):
            self.calls.append(("start", run.env_step))

        def on_log(self, run, row):
            self.calls.append(("log", row["step"]))

        def on_eval(self, run, step, returns):
            self.calls.append(("eval", step, len(returns)))
            return step >= 200  # True: stop, reason is the class name

        def on_checkpoint(self, run, path):
            self.calls.append(("checkpoint", Path(path).name))

        def on_end(self, run, reason):
            self.calls.append(("end", reason))

    rec = Recorder()
    res = rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r", callbacks=[rec])
    assert res.stop_reason == "Recorder.on_eval" and res.env_steps == 200
    kinds = [c[0] for c in rec.calls]
    assert kinds[0] == "start" and kinds[-1] == "end" and rec.calls[-1] == ("end", "Recorder.on_eval")
    assert ("eval", 100, 1) in rec.calls and ("eval", 200, 1) in rec.calls
    assert ("checkpoint", "step_000000100") in rec.calls and ("checkpoint", "step_000000200") in rec.calls
    assert ("log", 50) in rec.calls
    with pytest.raises(TypeError, match="none of the hooks"):
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "bad", callbacks=[object()])


def test_patience_counts_evaluations_without_a_new_best():
    class Run:
        evals = [(1, 5.0), (2, 4.0)]  # restored: one evaluation since the best

    p = Patience(3)
    p.on_start(Run())
    assert p.on_eval(Run(), 3, [4.5]) is None  # 2 since the best
    assert p.on_eval(Run(), 4, [5.0]).startswith("patience_evals")  # equal is not better: 3
    p2 = Patience(2)
    p2.on_start(Run())
    assert p2.on_eval(Run(), 3, [6.0]) is None and p2.best == 6.0


def test_patience_from_the_config(tmp_path):
    res = rlfunc.train(None, overrides={**TINY, "train.patience_evals": 1, "train.total_steps": 2000}, run_dir=tmp_path / "r")
    evals = [r for _, r in res.evals]
    assert res.stop_reason.startswith("patience_evals")
    assert evals[-1] <= max(evals[:-1])  # stopped at the first evaluation that was not a new best


def test_metrics_csv_is_appended_with_its_columns_fixed_once(tmp_path, monkeypatch):
    opened = []
    real_open = open

    def spy(path, mode="r", *a, **k):
        if str(path).endswith("metrics.csv"):
            opened.append(mode)
        return real_open(path, mode, *a, **k)

    import builtins

    monkeypatch.setattr(builtins, "open", spy)
    rlfunc.train(None, overrides={**TINY, "train.total_steps": 300}, run_dir=tmp_path / "r")
    monkeypatch.undo()
    assert opened.count("w") == 1, opened  # the header once, every row appended
    metrics = rows(tmp_path / "r" / "metrics.csv")
    assert [m["step"] for m in metrics] == ["50", "100", "150", "200", "250", "300"]
    assert metrics[0]["critic_loss"] == "" and metrics[0]["gradient_steps"] == "0"  # warm-up rows kept
    assert float(metrics[-1]["critic_loss"]) >= 0


def test_csv_log_flushes_rows_of_a_run_that_never_learned(tmp_path):
    log = CsvLog(tmp_path / "m.csv")
    log.write({"step": 1, "a": 1.0}, complete=False)
    log.write({"step": 2, "a": 2.0}, complete=False)
    assert not (tmp_path / "m.csv").exists()
    log.close()
    assert [r["step"] for r in rows(tmp_path / "m.csv")] == ["1", "2"]


def test_tensorboard_events_are_written_and_readable(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rlfunc.train(None, overrides={**TINY, "train.total_steps": 200}, run_dir=tmp_path / "r")
    acc = EventAccumulator(str(tmp_path / "r"))
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert "eval/mean_return" in tags and "train/critic_loss" in tags and "train/gradient_steps" in tags
    assert [e.step for e in acc.Scalars("eval/mean_return")] == [100, 200]
    evals = rows(tmp_path / "r" / "eval.csv")
    assert [e.value for e in acc.Scalars("eval/mean_return")] == pytest.approx([float(e["mean_return"]) for e in evals])


def test_wandb_offline_needs_no_network(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_SILENT", "true")
    run = tmp_path / "r"
    rlfunc.train(
        None,
        overrides={**TINY, "train.total_steps": 200, "train.wandb": {"project": "rlfunc-test", "mode": "offline"}},
        run_dir=run,
    )
    offline = list((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("*.wandb"))


def test_wandb_without_the_package_is_one_sentence(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    assert main(["train", "--run-dir", str(tmp_path / "r"), "--set", "train.wandb={project: x}"]) == 2
    assert "pip install" in capsys.readouterr().err and not (tmp_path / "r").exists()


def test_progress_rate_and_eta_belong_to_the_current_phase(monkeypatch):
    now = {"t": 0.0}
    monkeypatch.setattr("rlfunc.runtime.run_log.time.monotonic", lambda: now["t"])
    p = Progress(False, total=10_000, initial=0, label="x")
    now["t"] = 1.0
    assert p.status(1000, None) == "warm-up 1000.0 steps/s | ETA after warm-up | eval n/a"
    p.learning_started(1000)
    now["t"] = 11.0  # 20 learning steps in 10 s: 2 steps/s, 8980 steps left
    assert p.status(1020, -5.0) == "learning 2.0 steps/s | ETA 1h14m | eval -5.0"
    assert p.status(10_000, 1.0).endswith("done | eval 1.0")


def test_checkpoints_are_bounded_and_the_best_is_kept(tmp_path):
    res = rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r")
    assert sorted(p.name for p in (tmp_path / "r" / "checkpoints").iterdir()) == ["latest", "step_000000300", "step_000000400"]
    best = [p for p in (tmp_path / "r" / "best").iterdir() if p.name.startswith("step_")]
    assert len(best) == 1
    best_step, best_return = max(res.evals, key=lambda e: e[1])
    assert best[0].name == f"step_{best_step:09d}"
    tensors, meta = load_checkpoint(best[0])
    assert meta["weights_only"] and meta["eval_return"] == best_return
    assert set(tensors.keys()) == {"state"} and set(tensors["state"].keys()) == {"params"}
    policy = rlfunc.load(tmp_path / "r" / "best")
    assert policy.act([0.0, 1.0, 0.0]).shape == (1,)


def test_a_weights_only_checkpoint_cannot_be_resumed(tmp_path, capsys):
    rlfunc.train(None, overrides={**TINY, "train.total_steps": 100}, run_dir=tmp_path / "r")
    best = tmp_path / "r" / "best"
    from rlfunc.runtime.config import ConfigError

    with pytest.raises(ConfigError, match="weights only"):  # from Python too, not only the CLI
        rlfunc.resume(best)
    (best / "checkpoints").mkdir()
    for p in list(best.iterdir()):
        if p.name != "checkpoints":
            p.rename(best / "checkpoints" / p.name)
    assert main(["resume", str(best)]) == 2
    assert "weights only" in capsys.readouterr().err


def test_checkpoint_without_replay_resumes_with_an_empty_one(tmp_path, capsys):
    over = {**TINY, "train.checkpoint_replay": False, "train.total_steps": 200}
    rlfunc.train(None, overrides=over, run_dir=tmp_path / "r")
    tensors, meta = load_checkpoint(tmp_path / "r")
    assert "replay" not in tensors.keys() and meta["replay_saved"] is False
    calls_before = int(rows(tmp_path / "r" / "metrics.csv")[-1]["learner_calls"])
    res = rlfunc.resume(tmp_path / "r", total_steps=400)
    assert "resuming with an empty replay" in capsys.readouterr().err
    metrics = {int(m["step"]): m for m in rows(tmp_path / "r" / "metrics.csv")}
    # the replay is refilled with train.learning_starts (100) transitions before learning continues,
    # as at the start of a run: the first call is at step 300
    assert int(metrics[250]["learner_calls"]) == calls_before
    assert int(metrics[300]["learner_calls"]) == calls_before + 1
    assert int(metrics[400]["learner_calls"]) == calls_before + 101
    assert res.env_steps == 400


def test_stopping_rule_values_are_checked(tmp_path, capsys):
    for bad in ("train.patience_evals=-1", "train.max_wall_s=-5", "train.stop_at_return=.nan", "train.keep_checkpoints=0"):
        assert main(["train", "--run-dir", str(tmp_path / "r"), "--set", bad]) == 2, bad
        err = capsys.readouterr().err
        assert bad.split("=")[0] in err, err


def test_r2d2_refuses_checkpoints_without_replay(tmp_path, capsys):
    """R2D2's samples-per-insert bound counts the windows taken in: an empty replay would stall it."""
    assert main(["train", "configs/r2d2/cartpole.yaml", "--run-dir", str(tmp_path / "r"), "--set", "train.checkpoint_replay=false"]) == 2
    assert "not available for r2d2" in capsys.readouterr().err


def test_a_resumed_run_continues_its_wandb_run(tmp_path, monkeypatch):
    """Each resume started a new W&B run (wandb.init without an id), so one training run's curves were split
    over several W&B runs; and W&B's own step must only grow, so re-logged steps after the checkpoint were
    dropped. The run directory keeps the W&B run id, a resume continues that run, and rows are plotted
    against env_step."""
    pytest.importorskip("wandb")
    for name, value in (("WANDB_SILENT", "true"), ("WANDB_CONFIG_DIR", str(tmp_path / "cfg")),
                        ("WANDB_CACHE_DIR", str(tmp_path / "cache"))):
        monkeypatch.setenv(name, value)
    run = tmp_path / "r"
    settings = {"train.wandb": {"project": "rlfunc-test", "mode": "offline"}}
    rlfunc.train(None, overrides={**TINY, "train.total_steps": 200, **settings}, run_dir=run)
    run_id = (run / "wandb_run_id").read_text().strip()
    assert run_id
    rlfunc.resume(run, total_steps=300)
    assert (run / "wandb_run_id").read_text().strip() == run_id
    offline = sorted((run / "wandb").glob("offline-run-*"))
    assert len(offline) == 2 and all(run_id in d.name for d in offline)


def test_max_wall_s_crossed_during_an_evaluation_stops_at_that_step(tmp_path, monkeypatch):
    """The limit passed while evaluating at step 100: the run stops there, that evaluation its last, instead
    of training step 101 and evaluating again (session 30). The evaluation takes 1000 s on a fake clock,
    so the case does not depend on this machine's speed (the 100 steps before it take well under 500 s)."""
    from helpers_logs import fake_clock

    import rlfunc.runtime.trainer as trainer

    original = trainer.run_episodes
    offset = fake_clock(monkeypatch, trainer)

    def slow(*args, **kwargs):
        offset[0] += 1000.0
        return original(*args, **kwargs)

    monkeypatch.setattr(trainer, "run_episodes", slow)
    res = rlfunc.train(None, overrides={**TINY, "train.max_wall_s": 500.0}, run_dir=tmp_path / "r")
    assert res.env_steps == 100 and res.stop_reason.startswith("max_wall_s")
    evals = rows(tmp_path / "r" / "eval.csv")
    assert [r["step"] for r in evals] == ["100"] and evals[0]["stop_reason"].startswith("max_wall_s")
    assert load_checkpoint(tmp_path / "r")[1]["env_step"] == 100


def test_max_wall_s_does_not_rename_a_complete_run(tmp_path, monkeypatch):
    """A run that reaches total_steps ends with reason total_steps even if the limit passes during its
    final evaluation (its wall time made to jump there, so the case does not depend on this machine's speed)."""
    import rlfunc.runtime.trainer as trainer

    original = trainer.run_episodes
    jumped = []

    def jump_at_the_end(policy, env, episodes, *args, **kwargs):
        returns = original(policy, env, episodes, *args, **kwargs)
        if watched and watched[-1].env_step >= 400:
            watched[-1]._prior_wall += 1000.0  # the final evaluation "took" 1000 s
            jumped.append(True)
        return returns

    watched = []

    class Watch(Callback):
        def on_start(self, run):
            watched.append(run)

    monkeypatch.setattr(trainer, "run_episodes", jump_at_the_end)
    res = rlfunc.train(None, overrides={**TINY, "train.eval_every": 1000, "train.max_wall_s": 500.0}, callbacks=[Watch()],
                       run_dir=tmp_path / "r")
    assert jumped and res.env_steps == 400 and res.stop_reason == "total_steps"
