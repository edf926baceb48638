"""Review of what a run's logs say (session 33), following session 32's ``steps_per_s`` without evaluations.

* A checkpoint write (and a ``best/`` write) is not env stepping either, but its time landed in the next
  ``metrics.csv`` row's window: that row's ``steps_per_s`` was lower. It is left out now, for a single run
  and for each population member.
* A stop row written at a step that is not a log step (an ``on_eval`` stop at the final evaluation) had
  ``steps_per_s`` NaN; it has its partial window's rate now, as every row.
* Distributed R2D2's ``steps_per_s`` still counted the learner's evaluations. Its actors keep collecting
  during them, so only leaving their time out would count steps without their time: the evaluations' (and
  checkpoint writes') time is left out and so are the steps the actors collected meanwhile
  (:class:`rlfunc.scale.distributed.RateWindow`).
* A full disk while writing the ``latest`` pointer, after the checkpoint was renamed into place, reported a
  failed checkpoint write (and stopped the run) although the checkpoint is complete and a resume uses it.
  It is saved now, with one warning that says only ``latest`` was not updated and how the resume finds it.
"""

from __future__ import annotations

import errno
import importlib.util
import math
import time as real_time
from pathlib import Path

import pytest
import torch
from helpers_logs import fake_clock, rows
from tensordict import TensorDict

import rlfunc
import rlfunc.runtime.checkpoint as ck
from rlfunc.runtime import population as pr
from rlfunc.runtime.checkpoint import checkpoint_name, latest_checkpoint, load_newest_good, save_checkpoint
from rlfunc.scale.distributed import RateWindow

torch.set_num_threads(1)

SLOW_S = 1000.0  # each slow evaluation or checkpoint write takes this long on the fake clock

SINGLE = {
    "agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 16,
    "train.total_steps": 300, "train.learning_starts": 100, "train.eval_every": 1000, "train.eval_episodes": 1,
    "train.checkpoint_every": 100, "train.log_every": 50, "train.progress": False, "train.threads": 1,
    "train.tensorboard": False,
}


def _slow(offset: list[float], fn):
    def slow(*args, **kwargs):
        offset[0] += SLOW_S
        return fn(*args, **kwargs)

    return slow


def _assert_no_slow_row(path: Path, least: float = 0.5) -> list[dict[str, str]]:
    """No row's window held a slow write: 50 env steps take far less than ``SLOW_S`` (a window with one
    had a rate below 50 / 1000)."""
    logged = rows(path)
    slow = [(r["step"], r["steps_per_s"]) for r in logged if not float(r["steps_per_s"]) > least]
    assert not slow, f"rows whose steps_per_s is NaN or counts a checkpoint write's or evaluation's time: {slow}"
    return logged


# -- 1. checkpoint writes are off the clock ------------------------------------------------------------


def test_steps_per_s_of_a_single_run_leaves_the_checkpoint_writes_out(tmp_path, monkeypatch):
    from rlfunc.runtime import trainer as tr

    offset = fake_clock(monkeypatch, tr)
    monkeypatch.setattr(tr, "save_checkpoint", _slow(offset, tr.save_checkpoint))
    rlfunc.train(None, overrides=SINGLE, run_dir=tmp_path / "r")
    assert len(list((tmp_path / "r" / "checkpoints").glob("step_*"))) >= 1  # keep_checkpoints prunes the rest
    logged = _assert_no_slow_row(tmp_path / "r" / "metrics.csv")
    assert [int(r["step"]) for r in logged] == [50, 100, 150, 200, 250, 300]
    assert float(logged[-1]["time_s"]) >= 2 * SLOW_S  # time_s (training wall time) still counts them


def test_steps_per_s_of_population_members_leaves_the_checkpoint_writes_out(tmp_path, monkeypatch):
    offset = fake_clock(monkeypatch, pr)
    monkeypatch.setattr(ck, "save_checkpoint", _slow(offset, ck.save_checkpoint))  # imported at each save
    config = {
        "algo": "redq",
        "env": {"id": "Pendulum-v1"},
        "train": {"total_steps": 300, "learning_starts": 100, "replay_size": 1000, "eval_every": 1000,
                  "eval_episodes": 1, "checkpoint_every": 100, "log_every": 50, "progress": False,
                  "tensorboard": False, "compile": False, "threads": 1},
        "agent": {"hidden_sizes": [16, 16], "num_critics": 2, "updates_per_step": 1, "batch_size": 8},
    }
    pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    for k in (0, 1):
        logged = _assert_no_slow_row(tmp_path / "pop" / f"member-{k}" / "metrics.csv")
        assert len(logged) == 6


# -- 2. a stop row at a step that is not a log step ----------------------------------------------------


@pytest.mark.parametrize("total", [130, 150], ids=["not-a-log-step", "a-log-step"])
def test_a_stop_row_has_its_windows_rate_without_the_final_evaluation(tmp_path, monkeypatch, total):
    """``stop_at_return`` reached at the final evaluation: its row (at 130, not a log step; at 150 after the
    row of that step) had ``steps_per_s`` NaN. Now its partial window's rate (at 150: the step's row's), the
    evaluation's time left out as from every window."""
    from rlfunc.runtime import trainer as tr

    offset = fake_clock(monkeypatch, tr)
    monkeypatch.setattr(tr, "run_episodes", _slow(offset, lambda policy, env, episodes, seed=None, **kw: [-1.0] * episodes))
    overrides = {**SINGLE, "train.total_steps": total, "train.checkpoint_every": 1000, "train.stop_at_return": -1e9}
    result = rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "r")
    assert result.stop_reason.startswith("stop_at_return")
    logged = _assert_no_slow_row(tmp_path / "r" / "metrics.csv")
    stop = logged[-1]
    assert int(stop["step"]) == total and stop["stop_reason"].startswith("stop_at_return")
    assert math.isfinite(float(stop["steps_per_s"]))
    if total == 150:  # a log step: its one row holds the stop (session 35: the row was written twice)
        assert logged[-2]["step"] == "100" and [r["step"] for r in logged].count("150") == 1


# -- 3. distributed R2D2: evaluations and the actors' steps during them --------------------------------


def test_a_distributed_rate_window_leaves_out_the_pauses_and_the_steps_collected_in_them():
    now = [0.0]
    window = RateWindow(clock=lambda: now[0])
    window.add(100, began=0.0, ended=1.0)  # 100 steps/s
    now[0] = 1.0
    window.measure()
    assert window.steps_per_s == pytest.approx(100.0)
    with window.off_the_clock():  # a 10 s evaluation; the actors collect 2 s of it, then idle
        now[0] = 11.0
    window.add(300, began=1.0, ended=4.0)  # 200 of its steps during the evaluation, 100 after it
    window.add(100, began=11.0, ended=12.0)
    now[0] = 12.0
    window.measure()
    # the window's 2 s off the evaluation hold 200 steps: 100 steps/s, as before it. Not 600 / 2 (the
    # evaluation's time left out, the steps collected in it counted), nor 600 / 12 (its time kept)
    assert window.steps_per_s == pytest.approx(100.0)
    assert window.rate_so_far() == pytest.approx(100.0)  # nothing counted since: the last row's
    window.add(50)  # a chunk without times counts in full
    now[0] = 13.0
    assert window.rate_so_far() == pytest.approx(50.0)


def test_a_distributed_first_window_starts_when_the_actors_began_collecting():
    """The actors' start-up (5 s here: processes, imports, envs) was in the first row's rate (200 / 7 s)."""
    now = [0.0]
    window = RateWindow(clock=lambda: now[0])
    window.add(100, began=5.5, ended=6.5)  # the first chunk to arrive
    window.add(100, began=5.0, ended=6.0)  # another actor's, begun earlier
    now[0] = 7.0
    window.measure()
    assert window.steps_per_s == pytest.approx(100.0)  # 200 steps from 5.0 to 7.0
    window.add(300, began=6.5, ended=10.0)  # later windows start at the previous row, as before
    now[0] = 10.0
    window.measure()
    assert window.steps_per_s == pytest.approx(100.0)

@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="Ray is not installed (pip install -e '.[ray]')")
def test_distributed_steps_per_s_leaves_the_evaluations_out(tmp_path, monkeypatch):
    """On Ray (loopback): each of the two evaluations before the final one takes 2 s of real time while the
    actors collect; the rows after them had a rate of at most a window's steps (about 200) over 2 s, far
    below what the actors collect (about 1000 steps/s on 2 cores)."""
    import ray

    from rlfunc.runtime import trainer as tr
    from test_distributed_r2d2 import _tiny

    slept = []

    def slow_episodes(policy, env, episodes, seed=None, **kwargs):
        if len(slept) < 2:
            slept.append(2.0)
            real_time.sleep(2.0)
        return [1.0] * episodes

    monkeypatch.setattr(tr, "run_episodes", slow_episodes)
    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False, configure_logging=False)
    try:
        raw = _tiny(**{"train.total_steps": 2400, "train.eval_every": 800, "train.log_every": 200,
                       "train.learning_starts": 2400, "train.replay_size": 2400})  # no updates: the actors' collecting is what is timed
        rlfunc.train(raw, run_dir=tmp_path / "run")
    finally:
        ray.shutdown()
    logged = rows(tmp_path / "run" / "metrics.csv")
    evals = [int(r["step"]) for r in rows(tmp_path / "run" / "eval.csv")]
    assert len(evals) >= 3 and len(logged) >= 8
    after = [r for r in logged if any(e < int(r["step"]) <= e + 400 for e in evals[:-1])]
    assert after
    # In seconds per row, against the run's own other rows, not a fixed rate (on a loaded machine the actors
    # collect far fewer than 250 steps/s, and a window's rate is noisy): a row whose window counted a 2 s
    # evaluation took 2 s more than the rows around it.
    def window_s(i):
        steps = int(logged[i]["step"]) - (int(logged[i - 1]["step"]) if i else 0)
        return steps / float(logged[i]["steps_per_s"])

    others = sorted(window_s(i) for i in range(1, len(logged)) if logged[i] not in after)
    typical = others[len(others) // 2]
    slow = [(r["step"], round(window_s(i), 2)) for i, r in enumerate(logged) if r in after and window_s(i) >= typical + 1.5]
    assert not slow, f"rows after an evaluation whose window counts its 2 s (others' median {typical:.2f} s): {slow}"


# -- 4. a full disk while writing `latest` -------------------------------------------------------------


def _tiny_state(value: float) -> TensorDict:
    return TensorDict({"a": torch.full((4,), value)}, batch_size=[])


def _full_pointer(monkeypatch, after: int = 0) -> None:
    """The ``latest`` pointer's writes fail as a full disk's (ENOSPC) from the ``after+1``-th on."""
    real, calls = ck._write_pointer, [0]

    def full(*args, **kwargs):
        calls[0] += 1
        if calls[0] > after:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(ck, "_write_pointer", full)


def test_a_full_disk_at_the_latest_pointer_keeps_the_complete_checkpoint_as_saved(tmp_path, monkeypatch, capsys):
    save_checkpoint(tmp_path, checkpoint_name(100), _tiny_state(1.0), {"env_step": 100})
    _full_pointer(monkeypatch)
    path = save_checkpoint(tmp_path, checkpoint_name(200), _tiny_state(2.0), {"env_step": 200})  # no error
    err = " ".join(capsys.readouterr().err.split())
    assert path == tmp_path / "step_000000200" and path.is_dir()
    assert "step_000000200 is saved in full" in err and "Could not write" not in err
    assert "`latest` still names step_000000100" in err and "uses step_000000200 anyway" in err
    assert (tmp_path / "latest").read_text().strip() == "step_000000100"
    assert not list(tmp_path.glob(".latest.tmp-*"))
    assert latest_checkpoint(tmp_path) == path
    checkpoint, tensors, meta = load_newest_good(tmp_path, log=lambda line: None)
    assert checkpoint == path and meta["env_step"] == 200 and float(tensors["a"][0]) == 2.0
    # the first checkpoint (no `latest` yet): found by step
    _full_pointer(monkeypatch)
    save_checkpoint(tmp_path / "first", checkpoint_name(5), _tiny_state(5.0), {"env_step": 5})
    err = " ".join(capsys.readouterr().err.split())
    assert "finds step_000000005 anyway, by step among the step_* checkpoints" in err
    assert latest_checkpoint(tmp_path / "first").name == "step_000000005"


def test_a_run_whose_latest_pointer_hits_a_full_disk_goes_on_and_resumes_from_that_checkpoint(tmp_path, monkeypatch, capsys):
    """With ``train.on_checkpoint_error: stop`` (the default) the run stopped with a failed checkpoint write."""
    overrides = {**SINGLE, "train.total_steps": 200, "train.learning_starts": 50}
    _full_pointer(monkeypatch, after=1)  # the checkpoint of step 100 updates `latest`; that of 200 cannot
    result = rlfunc.train(None, overrides=overrides, run_dir=tmp_path / "r")
    assert result.env_steps == 200
    err = " ".join(capsys.readouterr().err.split())
    assert "step_000000200 is saved in full" in err and "Could not write" not in err
    monkeypatch.undo()
    ckpts = tmp_path / "r" / "checkpoints"
    assert (ckpts / "latest").read_text().strip() == "step_000000100"
    assert latest_checkpoint(ckpts).name == "step_000000200"
    resumed = rlfunc.resume(tmp_path / "r", total_steps=250)
    assert resumed.env_steps == 250
    assert [int(r["step"]) for r in rows(tmp_path / "r" / "metrics.csv")] == [50, 100, 150, 200, 250]
