"""Review of the run directory on a real file system (full disk, kills at awkward moments, retention).

* A checkpoint pruned by ``train.keep_checkpoints`` (or a worse policy pruned from ``best/``) was deleted
  in place; ``rmtree`` deletes in the file system's order, which on tmpfs lists ``meta.json`` before
  ``tensors/``, so a process killed while deleting it (a large replay takes a while) left a ``step_*``
  directory holding its tensors but no meta.json: no longer a checkpoint, so no later pruning or
  clean-up ever removed it (one full checkpoint leaked per such kill). A checkpoint is now renamed to a
  killed write's leftover name first, which the next start cleans.
* A ``metrics.csv`` / ``eval.csv`` row cut off by a full disk (or a crash before the page cache reached
  the disk) was kept by the resume when its step was not after the checkpoint, and the next row was
  appended onto it: one garbled row (``600,501,50750,651,...``). A last line without its line end is
  now dropped.
* A population ignored ``train.on_checkpoint_error: continue`` (a full disk stopped it anyway), and a
  failed write was tried again on the way out, adding a warning that "no checkpoint was written" even
  when the population's checkpoint had been written and only a member's policy had not.
* A run killed before its first checkpoint sent the user in a circle: ``rlfunc train`` into its
  directory said "continue it with `rlfunc resume`", and ``rlfunc resume`` said "pass the directory
  `rlfunc train` created, once it has saved a checkpoint". The resume now says there is nothing to
  resume and what to do instead (a run still training there is refused as in use first).
"""

from __future__ import annotations

import csv
import errno
import os
import shutil
import subprocess
import sys

import pytest
import torch
from tensordict import TensorDict

import rlfunc
import rlfunc.runtime.checkpoint as ckpt_mod
from rlfunc.runtime.checkpoint import (
    LOCK_FILE,
    CheckpointWriteError,
    clean_leftovers,
    list_checkpoints,
    load_checkpoint,
    prune_checkpoints,
    save_checkpoint,
)
from rlfunc.runtime.cli import main
from rlfunc.runtime.run_log import CsvLog


def _config(total, checkpoint_every=12, eval_every=12, seeds=None, **train):
    config = {
        "algo": "sac",
        "env": {"id": "Pendulum-v1", "wrappers": [{"time_limit": {"max_episode_steps": 6}}]},
        "train": {"total_steps": total, "learning_starts": 8, "replay_size": 200, "eval_every": eval_every,
                  "eval_episodes": 1, "checkpoint_every": checkpoint_every, "log_every": 12, "progress": False,
                  "tensorboard": False, "threads": 1, **train},
        "agent": {"hidden_sizes": [8], "batch_size": 8},
    }
    if seeds is not None:
        config["train"]["population"] = {"seeds": seeds}
    return config


def _err_lines(capsys):
    return [line for line in capsys.readouterr().err.splitlines() if line.strip()]


# ----------------------------------------------------------------------------- pruning killed mid-delete
class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it in the process runs."""


def test_a_prune_killed_while_deleting_leaves_nothing_that_is_never_cleaned(tmp_path, monkeypatch):
    directory = tmp_path / "checkpoints"
    for step in (100, 200, 300):
        save_checkpoint(directory, f"step_{step:09d}", TensorDict({"w": torch.ones(64)}, batch_size=[]), {"env_step": step})
    real_rmtree = shutil.rmtree

    def killed_rmtree(path, ignore_errors=False, onerror=None, **kw):
        meta = os.path.join(path, "meta.json")
        if os.path.isfile(meta):  # tmpfs's order: meta.json first, then the (large) tensors
            os.unlink(meta)
            raise _Killed()
        return real_rmtree(path, ignore_errors=ignore_errors, onerror=onerror, **kw)

    monkeypatch.setattr(ckpt_mod.shutil, "rmtree", killed_rmtree)
    with pytest.raises(_Killed):
        prune_checkpoints(directory, keep=2)
    monkeypatch.setattr(ckpt_mod.shutil, "rmtree", real_rmtree)
    # the next start cleans what the kill left; later saves prune as usual
    clean_leftovers(directory)
    save_checkpoint(directory, "step_000000400", TensorDict({"w": torch.ones(64)}, batch_size=[]), {"env_step": 400})
    prune_checkpoints(directory, keep=2)
    clean_leftovers(directory)
    assert sorted(p.name for p in directory.iterdir()) == ["latest", "step_000000300", "step_000000400"]
    # (was: step_000000100 with tensors/ and no meta.json, there for good)
    assert [p.name for p in list_checkpoints(directory)] == ["step_000000400", "step_000000300"]
    load_checkpoint(directory)


# ----------------------------------------------------------------------------- a log row cut off
def test_a_cut_off_log_row_is_dropped_not_glued_to_the_next(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("step,loss,stop_reason\r\n250,1.5,\r\n500,2.5,\r\n600,3.")  # the disk filled mid-row
    log = CsvLog(path, truncate_after=600)  # the resume's checkpoint is at 600: the cut row is not after it
    log.write({"step": 750, "loss": 4.5, "stop_reason": ""})
    log.close()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["step"], r["loss"]) for r in rows] == [("250", "1.5"), ("500", "2.5"), ("750", "4.5")]
    # (was: ("600", "3.750"), the cut row with the next one appended to it, and no row 750)
    cut_header = tmp_path / "eval.csv"
    cut_header.write_text("step,ret")  # killed while writing the header: nothing to keep
    log = CsvLog(cut_header, truncate_after=0)
    log.write({"step": 12, "mean_return": -3.0})
    log.close()
    with open(cut_header, newline="") as f:
        assert list(csv.DictReader(f)) == [{"step": "12", "mean_return": "-3.0"}]


def test_a_resumed_run_after_a_cut_off_row_logs_clean_rows(tmp_path):
    run_dir = tmp_path / "run"
    rlfunc.train(_config(total=24), run_dir=run_dir)
    metrics = run_dir / "metrics.csv"
    text = metrics.read_text()
    last = text.rstrip("\r\n").rsplit("\n", 1)[1]
    assert last.startswith("24,")
    metrics.write_text(text[: text.index(last)] + last[:8])  # the row at the checkpoint's step, cut off
    rlfunc.resume(run_dir, total_steps=48)
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [12, 36, 48]  # was [12, 24, 48]: the cut row with row 36 glued on
    assert all(None not in r and all(v is not None for v in r.values()) for r in rows), rows


# ----------------------------------------------------------------------------- a population on a full disk
def _fail_writes(monkeypatch, where):
    """save_checkpoint refuses (a full disk) every write into a directory whose path ends with ``where``."""
    real = ckpt_mod.save_checkpoint

    def save(directory, name, tensors, meta):
        if str(directory).endswith(where):
            raise CheckpointWriteError(errno.ENOSPC, f"Could not write checkpoint {name} in {str(directory)!r} (the disk is full).")
        return real(directory, name, tensors, meta)

    monkeypatch.setattr(ckpt_mod, "save_checkpoint", save)


def test_a_population_honours_on_checkpoint_error_continue(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "pop"
    _fail_writes(monkeypatch, os.path.join("pop", "checkpoints"))
    result = rlfunc.train(_config(total=24, seeds=[0, 1], on_checkpoint_error="continue"), run_dir=run_dir)
    assert result.env_steps == 24  # was: CheckpointWriteError at the first checkpoint
    err = capsys.readouterr().err
    assert "Training continues without this checkpoint." in err
    assert not list_checkpoints(run_dir / "checkpoints")


def test_a_failed_population_write_is_one_sentence_and_not_tried_again(tmp_path, monkeypatch, capsys):
    run_dir = tmp_path / "pop"
    _fail_writes(monkeypatch, os.path.join("member-0", "checkpoints"))  # the state is saved, a member's policy is not
    assert main(["train", "--run-dir", str(run_dir), "--set", "algo=sac", "--set", "env.id=Pendulum-v1",
                 *[a for k, v in {"train.total_steps": 24, "train.learning_starts": 8, "train.replay_size": 200,
                                  "train.eval_every": 12, "train.eval_episodes": 1, "train.checkpoint_every": 12,
                                  "train.progress": "false", "train.tensorboard": "false", "train.threads": 1,
                                  "agent.hidden_sizes": "[8]", "agent.batch_size": 8}.items()
                   for a in ("--set", f"{k}={v}")],
                 "--seeds", "0,1"]) == 2
    lines = _err_lines(capsys)
    assert lines[-1].startswith("rlfunc: error: Could not write checkpoint step_000000012"), lines
    assert not any("could not be saved on the way out" in line for line in lines), lines  # was: "no checkpoint was written"
    assert [p.name for p in list_checkpoints(run_dir / "checkpoints")] == ["step_000000012"]
    monkeypatch.undo()
    result = rlfunc.resume(run_dir)  # the member's policy is written by the resume
    assert result.env_steps == 24
    assert load_checkpoint(run_dir / "member-0")[1]["env_step"] == 24


# ----------------------------------------------------------------------------- killed before the first checkpoint
def _killed_before_first_checkpoint(run_dir, population=False):
    """What `rlfunc train` leaves when SIGKILLed before its first checkpoint."""
    run_dir.mkdir()
    (run_dir / LOCK_FILE).write_text("12345\n")
    (run_dir / "config.yaml").write_text("algo: sac\n")
    (run_dir / "best").mkdir()
    if population:
        (run_dir / "checkpoints").mkdir()
        (run_dir / "checkpoints" / ".step_000000012.tmp-12345").mkdir()  # its first write, cut off
        (run_dir / "member-0").mkdir()
        (run_dir / "member-0" / "metrics.csv").write_text("step\r\n6\r\n")
    else:
        (run_dir / "metrics.csv").write_text("step\r\n6\r\n")


@pytest.mark.parametrize("population", [False, True])
def test_a_run_killed_before_its_first_checkpoint_is_not_sent_in_a_circle(tmp_path, capsys, population):
    run_dir = tmp_path / "run"
    _killed_before_first_checkpoint(run_dir, population)
    assert main(["resume", str(run_dir)]) == 2
    resume_says = _err_lines(capsys)[-1]
    assert "stopped before its first checkpoint" in resume_says and "another --run-dir" in resume_says, resume_says
    # (was: "pass the directory `rlfunc train` created, once it has saved a checkpoint", while `rlfunc train`
    # there says "continue it with `rlfunc resume ...`")
    assert main(["train", "--run-dir", str(run_dir)]) == 2
    assert "rlfunc resume" in _err_lines(capsys)[-1]
    assert (run_dir / "config.yaml").is_file()  # nothing deleted


def test_a_run_still_training_before_its_first_checkpoint_is_in_use_not_nothing_saved(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _killed_before_first_checkpoint(run_dir)
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys, time\n"
         f"fd = os.open({str(run_dir / LOCK_FILE)!r}, os.O_RDWR)\n"
         "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert main(["resume", str(run_dir)]) == 2
        says = _err_lines(capsys)[-1]
        assert "in use by another rlfunc process" in says and "delete" not in says, says
    finally:
        holder.kill()
        holder.wait()


def test_a_folder_that_merely_holds_a_config_yaml_is_not_called_a_run(tmp_path, capsys):
    folder = tmp_path / "my-configs"
    folder.mkdir()
    (folder / "config.yaml").write_text("algo: sac\n")  # the user's own file, no run was started here
    assert main(["resume", str(folder)]) == 2
    says = _err_lines(capsys)[-1]
    assert "no checkpoints/ to resume from" in says and "delete" not in says, says
    assert sorted(p.name for p in folder.iterdir()) == ["config.yaml"]  # no lock file left in it
