"""Checkpoint robustness: each defect of the checkpoint review, reproduced and fixed.

1. best/ is never replaced by a worse policy after a resume (single run and population);
2. checkpoints past 10**9 env steps, and a failed save on the way out of a crash is reported;
3. a run directory another live process trains in is refused (an advisory lock), and a
   population's resume cleans leftovers of killed writes as a single run's does;
4. a crafted meta.json of any shape is a CheckpointError (so resume falls back past it);
5. a FIFO in place of a tensor file or meta.json is refused at once, never read from;
6. a symlinked meta.json or step_* directory is refused with one sentence;
7. a log file of the run directory that is a symlink is refused, never written through;
8. a write killed between renaming its checkpoint into place and updating ``latest`` does
   not hide that checkpoint, while a leftover of a line a resume abandoned stays behind.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tensordict import TensorDict

import rlfunc
from rlfunc.runtime.checkpoint import (
    LOCK_FILE,
    CheckpointError,
    CheckpointWriteError,
    checkpoint_candidates,
    checkpoint_name,
    clean_leftovers,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    load_newest_good,
    lock_run_dir,
    meta_checksum,
    prune_best,
    prune_checkpoints,
    recorded_best_return,
    save_checkpoint,
    unlock_run_dir,
)
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, build_config

TINY = {
    "agent.hidden_sizes": [16, 16],
    "agent.num_critics": 2,
    "agent.updates_per_step": 1,
    "agent.batch_size": 16,
    "train.total_steps": 300,
    "train.learning_starts": 100,
    "train.replay_size": 1000,
    "train.eval_every": 300,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 150,
    "train.log_every": 150,
    "train.progress": False,
    "train.tensorboard": False,
    "train.threads": 1,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished REDQ run with checkpoints at 150 and 300 steps and a best/ policy."""
    run = tmp_path_factory.mktemp("trained") / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def _tiny_ckpts(directory: Path, steps=(100, 200)) -> list[Path]:
    """Small checkpoints (one tensor of the step's value) at ``steps``, written in that order."""
    return [
        save_checkpoint(directory, checkpoint_name(s), TensorDict({"x": torch.full((3,), float(s))}, []), {"env_step": s})
        for s in steps
    ]


def _resign(ckpt: Path, edit) -> None:
    meta = json.loads((ckpt / "meta.json").read_text())
    edit(meta)
    meta["checksum"] = meta_checksum(meta)
    (ckpt / "meta.json").write_text(json.dumps(meta))


@contextlib.contextmanager
def _deadline(seconds: int):
    """Fail instead of hanging (a FIFO opened without O_NONBLOCK blocks forever)."""

    def hang(*_):
        raise AssertionError(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- 1. best/ after a resume ------------------------------------------------------------------


def _plant_best(run: Path, step: int, eval_return: float) -> Path:
    """A best/ policy saved after the run's last checkpoint (the run was then killed)."""
    tensors, meta = load_checkpoint(run / "checkpoints" / "step_000000150")
    keep = {k: meta[k] for k in ("algo", "config", "obs_shape", "action_low", "action_high")}
    params = TensorDict({"state": {"params": tensors["state", "params"]}}, [])
    return save_checkpoint(run / "best", checkpoint_name(step), params,
                           {**keep, "env_step": step, "eval_return": eval_return, "weights_only": True})


def test_resume_never_replaces_a_better_best_policy(run):
    shutil.rmtree(run / "checkpoints" / "step_000000300")  # killed before its checkpoint at 300
    shutil.rmtree(run / "best")
    planted = _plant_best(run, 200, -1.0)  # Pendulum's returns are below -1: better than any eval
    res = rlfunc.resume(run)
    assert res.env_steps == 300 and res.evals[-1][1] < -1.0
    assert [p.name for p in list_checkpoints(run / "best")] == [planted.name]
    assert load_checkpoint(run / "best")[1]["eval_return"] == -1.0


def test_a_new_best_replaces_worse_ones_but_never_a_better_one(tmp_path):
    best = tmp_path / "best"
    for step, ret in ((100, -50.0), (200, -10.0)):
        save_checkpoint(best, checkpoint_name(step), TensorDict({"x": torch.zeros(1)}, []), {"eval_return": ret})
    assert recorded_best_return(best) == -10.0
    kept = save_checkpoint(best, checkpoint_name(300), TensorDict({"x": torch.zeros(1)}, []), {"eval_return": -20.0})
    assert prune_best(best, kept, -20.0) == ["step_000000100", "step_000000300"]  # the worse new one goes too
    assert [p.name for p in list_checkpoints(best)] == ["step_000000200"] and latest_checkpoint(best).name == "step_000000200"
    kept = save_checkpoint(best, checkpoint_name(400), TensorDict({"x": torch.zeros(1)}, []), {"eval_return": -5.0})
    assert prune_best(best, kept, -5.0) == ["step_000000200"]
    assert [p.name for p in list_checkpoints(best)] == ["step_000000400"]
    assert recorded_best_return(tmp_path / "nowhere") == -math.inf


def test_a_population_member_keeps_its_better_best_policy(tmp_path):
    from rlfunc.runtime import population as pr

    base = {
        "algo": "redq",
        "env": {"id": "Pendulum-v1"},
        "train": {"total_steps": 100, "learning_starts": 50, "replay_size": 500, "eval_every": 100, "eval_episodes": 1,
                  "checkpoint_every": 100, "log_every": 100, "progress": False, "tensorboard": False, "threads": 1},
        "agent": {"hidden_sizes": [16, 16], "num_critics": 2, "updates_per_step": 1, "batch_size": 8},
    }
    run = tmp_path / "pop"
    pr.train(base, run_dir=run, seeds=[0, 1])
    member = run / "member-0"
    tensors, meta = load_checkpoint(member / "best")
    better = save_checkpoint(member / "best", checkpoint_name(150), tensors, {**meta, "env_step": 150, "eval_return": -1.0})
    checkpoint, tensors, meta = load_newest_good(run)
    pop = pr.PopulationTrainer(build_config(meta["config"], resolved=True), run)
    pop.restore(checkpoint, tensors, meta)
    assert pop._best[0] == -1.0 and pop._best[1] < -1.0
    pop._save_best(0, -5.0)  # worse than the policy best/ holds: not saved
    assert [p.name for p in list_checkpoints(member / "best")] == ["step_000000150", "step_000000100"]
    assert latest_checkpoint(member / "best") == better


# -- 2. past 10**9 env steps -----------------------------------------------------------------


def test_checkpoint_names_past_a_billion_steps_sort_by_number(tmp_path):
    assert checkpoint_name(999_999_999) == "step_999999999" and checkpoint_name(10**9) == "step_1000000000"
    old, new = _tiny_ckpts(tmp_path, (999_999_999, 10**9))
    assert list_checkpoints(tmp_path) == [new, old]
    (tmp_path / "latest").unlink()  # by number, not by text, without the pointer too
    assert latest_checkpoint(tmp_path) == new and load_checkpoint(tmp_path)[1]["env_step"] == 10**9
    assert load_checkpoint(old)[1]["env_step"] == 999_999_999  # a 9-digit name stays readable
    (tmp_path / ".step_1000000001.tmp-77").mkdir()
    assert clean_leftovers(tmp_path) == ["removed .step_1000000001.tmp-77, left by an interrupted write"]
    with pytest.raises(ValueError, match="step_000001000"):
        save_checkpoint(tmp_path, "step_0000000001", TensorDict({}, []), {})  # one name per step


def test_trainer_saves_past_a_billion_steps_and_resume_finds_it(tmp_path):
    from rlfunc.runtime.trainer import Trainer

    from rlfunc.runtime.config import apply_overrides, load_config

    config = build_config(apply_overrides(load_config(None), TINY))
    trainer = Trainer(config, tmp_path / "run")
    trainer.env_step = 10**9
    assert trainer.save().name == "step_1000000000"
    checkpoint, _, meta = load_newest_good(tmp_path / "run")
    assert checkpoint.name == "step_1000000000" and meta["env_step"] == 10**9


def test_a_failed_save_on_the_way_out_is_reported(tmp_path, capsys, monkeypatch):
    from rlfunc.runtime import trainer as trainer_mod

    class StopAt:
        def on_step(self, trainer):
            if trainer.env_step == 40:
                raise KeyboardInterrupt

    def full_disk(*a, **k):
        raise CheckpointWriteError(28, "Could not write checkpoint step_000000040 (the disk is full).")

    monkeypatch.setattr(trainer_mod, "save_checkpoint", full_disk)
    with pytest.raises(KeyboardInterrupt) as info:
        rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "run", callbacks=[StopAt()])
    err = capsys.readouterr().err
    assert "rlfunc: warning: the state at env step 40 could not be saved on the way out (Could not write checkpoint" in err
    assert "saved at" not in str(info.value)


# -- 3. one process per run directory --------------------------------------------------------


@contextlib.contextmanager
def _held_by_another_process(run_dir: Path):
    """Another process holding ``run_dir``'s lock as rlfunc takes it (flock on .rlfunc.lock, its pid inside)."""
    code = textwrap.dedent(f"""
        import fcntl, os, sys, time
        fd = os.open({str(run_dir / LOCK_FILE)!r}, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.ftruncate(fd, 0); os.pwrite(fd, f"{{os.getpid()}}\\n".encode(), 0)
        print("locked", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_run_directory_in_use_is_refused(run, capsys):
    leftover = run / "checkpoints" / ".step_000000450.tmp-4242"  # the other process's write in progress
    (leftover / "tensors").mkdir(parents=True)
    before = sorted(p.name for p in run.iterdir())
    with _held_by_another_process(run) as other:
        assert main(["resume", str(run), "--total-steps", "350"]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlfunc:")]
        assert err == [f"rlfunc: error: Run directory {str(run)!r} is in use by another rlfunc process (pid {other.pid}) "
                       "that is training there; wait for it to end (or stop it) before training or resuming in this directory."]
        with pytest.raises(ConfigError, match="in use by another rlfunc process"):
            rlfunc.train(None, overrides=TINY, run_dir=run)
        assert leftover.is_dir(), "a refused process must not clean up the other one's write"
        assert sorted(p.name for p in run.iterdir()) == before
    # the holder was killed: the kernel released its lock
    assert main(["resume", str(run), "--total-steps", "350"]) == 0
    assert not leftover.exists() and load_checkpoint(run)[1]["env_step"] == 350


def test_an_empty_run_directory_in_use_is_refused_to_train(tmp_path):
    target = tmp_path / "fresh"
    target.mkdir()
    with _held_by_another_process(target):
        with pytest.raises(ConfigError, match="in use"):
            rlfunc.train(None, overrides=TINY, run_dir=target)
    assert sorted(p.name for p in target.iterdir()) == [LOCK_FILE]


def test_the_lock_is_taken_once_per_process_and_released(tmp_path):
    lock_run_dir(tmp_path)
    lock_run_dir(tmp_path)  # again in the same process: nothing to wait for
    assert (tmp_path / LOCK_FILE).read_text().strip() == str(os.getpid())
    unlock_run_dir(tmp_path)
    with _held_by_another_process(tmp_path):
        with pytest.raises(ConfigError, match="in use"):
            lock_run_dir(tmp_path)
    lock_run_dir(tmp_path)
    unlock_run_dir(tmp_path)
    (tmp_path / LOCK_FILE).unlink()
    (tmp_path / LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(ConfigError, match="symbolic link"):
        lock_run_dir(tmp_path)
    assert not (tmp_path / "elsewhere").exists()


def test_population_resume_is_locked_and_cleans_leftovers_first(tmp_path, capsys):
    from rlfunc.runtime import population as pr

    run = tmp_path / "pop"
    leftover = run / "checkpoints" / ".step_000000100.tmp-4242"
    leftover.mkdir(parents=True)
    with _held_by_another_process(run):
        with pytest.raises(ConfigError, match="in use"):
            pr.resume(run)
        assert leftover.exists()
    with pytest.raises(CheckpointError, match="no complete checkpoint"):
        pr.resume(run)
    assert not leftover.exists()
    assert "removed .step_000000100.tmp-4242, left by an interrupted write" in capsys.readouterr().err


# -- 4. crafted meta.json --------------------------------------------------------------------


def _dtype_list(meta):
    meta["manifest"][0]["dtype"] = ["float32"]


def _bytes_float(meta):
    meta["manifest"][0]["bytes"] = float(meta["manifest"][0]["bytes"])


def _shape_bool(meta):
    meta["manifest"][0]["shape"] = [True, 1, 1]


def _key_ints(meta):
    meta["manifest"][0]["key"] = [1]


def _format_true(meta):
    meta["format_version"] = True


def _batch_huge(meta):
    meta["batch_sizes"] = [{"key": [], "shape": [2**70]}]


def _batch_key_str(meta):
    meta["batch_sizes"] = [{"key": "x", "shape": [3]}]


def _manifest_dict(meta):
    meta["manifest"] = {"0": meta["manifest"][0]}


CRAFTED = [_dtype_list, _bytes_float, _shape_bool, _key_ints, _format_true, _batch_huge, _batch_key_str, _manifest_dict]


@pytest.mark.parametrize("edit", CRAFTED, ids=[f.__name__ for f in CRAFTED])
def test_a_crafted_manifest_is_a_checkpoint_error_and_resume_falls_back(tmp_path, edit):
    older, newer = _tiny_ckpts(tmp_path)
    _resign(newer, edit)
    with pytest.raises(CheckpointError, match="step_000000200") as info:
        load_checkpoint(newer)
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)
    lines = []
    checkpoint, _, meta = load_newest_good(tmp_path, log=lines.append)
    assert checkpoint == older and meta["env_step"] == 100 and "skipping step_000000200" in lines[0]


def test_an_integer_of_5000_digits_in_meta_json_is_a_checkpoint_error(tmp_path):
    older, newer = _tiny_ckpts(tmp_path)
    text = (newer / "meta.json").read_text().replace('"env_step": 200', '"env_step": ' + "9" * 5000)
    (newer / "meta.json").write_text(text)
    with pytest.raises(CheckpointError, match="meta.json is not valid JSON"):
        load_checkpoint(newer)
    assert load_newest_good(tmp_path, log=lambda line: None)[0] == older


# -- 5. FIFOs ------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["tensors/00000.bin", "meta.json"])
def test_a_fifo_is_refused_without_blocking(tmp_path, which):
    older, newer = _tiny_ckpts(tmp_path)
    (newer / which).unlink()
    os.mkfifo(newer / which)
    with _deadline(30):
        with pytest.raises(CheckpointError, match=r"not a regular file \(a FIFO"):
            load_checkpoint(newer)
        with pytest.raises(CheckpointError, match="not a regular file"):
            rlfunc.load(tmp_path)  # the run's newest: refused too, never opened
        assert load_newest_good(tmp_path, log=lambda line: None)[0] == older


# -- 6. symlinks in a checkpoints directory ----------------------------------------------------


def test_a_symlinked_meta_json_is_refused(tmp_path):
    older, newer = _tiny_ckpts(tmp_path)
    outside = tmp_path / "outside.json"
    shutil.move(newer / "meta.json", outside)
    (newer / "meta.json").symlink_to(outside)
    with pytest.raises(CheckpointError, match="meta.json is a symbolic link, not a regular file rlfunc wrote"):
        load_checkpoint(newer)
    assert load_newest_good(tmp_path, log=lambda line: None)[0] == older


def test_a_symlinked_checkpoint_directory_is_refused(tmp_path):
    (older,) = _tiny_ckpts(tmp_path / "ckpts", (100,))
    (elsewhere,) = _tiny_ckpts(tmp_path / "elsewhere", (200,))
    link = tmp_path / "ckpts" / "step_000000200"
    link.symlink_to(elsewhere, target_is_directory=True)
    (tmp_path / "ckpts" / "latest").write_text("step_000000200\n")
    with pytest.raises(CheckpointError, match=r"step_000000200' is a symbolic link, not a directory rlfunc wrote"):
        load_checkpoint(link)
    with pytest.raises(CheckpointError, match="symbolic link"):
        rlfunc.load(tmp_path / "ckpts")
    lines = []
    assert load_newest_good(tmp_path / "ckpts", log=lines.append)[0] == older
    assert "skipping step_000000200" in lines[0] and "symbolic link" in lines[0]
    _tiny_ckpts(tmp_path / "ckpts", (300,))  # the run goes on from 100
    assert prune_checkpoints(tmp_path / "ckpts", keep=1) == ["step_000000200", "step_000000100"]
    assert not os.path.lexists(link) and (elsewhere / "meta.json").is_file()  # the link went, not its target


# -- 7. symlinked logs --------------------------------------------------------------------------


@pytest.mark.parametrize("log", ["eval.csv", "metrics.csv"])
def test_resume_never_writes_through_a_symlinked_log(run, tmp_path, capsys, log):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run / log).unlink()
    (run / log).symlink_to(victim)
    assert main(["resume", str(run), "--total-steps", "350"]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlfunc: error:")]
    assert len(err) == 1 and f"{log}' is a symbolic link, not a log file rlfunc wrote" in err[0], err
    assert victim.read_text() == "precious\n"


def test_a_log_never_writes_through_a_planted_link(tmp_path):
    from rlfunc.runtime.run_log import CsvLog

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = tmp_path / "eval.csv"
    log = CsvLog(path)
    log.write({"step": 1, "r": 0.5})
    log.write({"step": 2, "r": 0.7})
    (tmp_path / f".eval.csv.tmp-{os.getpid()}").symlink_to(victim)  # at the name of the rewrite's temporary file
    CsvLog(path, truncate_after=1)
    assert path.read_text().splitlines() == ["step,r", "1,0.5"] and victim.read_text() == "precious\n"
    path.unlink()
    path.symlink_to(victim)
    with pytest.raises(ConfigError, match="is a symbolic link"):
        CsvLog(path)
    os.mkfifo(tmp_path / "metrics.csv")
    with _deadline(30), pytest.raises(ConfigError, match="not a regular file"):
        CsvLog(tmp_path / "metrics.csv")


# -- 8. a write killed before `latest` was updated -----------------------------------------------


def test_a_checkpoint_renamed_but_not_yet_named_by_latest_is_resumed_from(tmp_path, monkeypatch):
    _tiny_ckpts(tmp_path, (100, 200))
    real_replace = os.replace

    def killed_at_latest(src, dst, *a, **k):
        if Path(dst).name == "latest":
            raise SystemExit(137)  # the process dies between the two renames
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", killed_at_latest)
    with pytest.raises(SystemExit):
        _tiny_ckpts(tmp_path, (300,))
    monkeypatch.undo()
    assert (tmp_path / "latest").read_text().strip() == "step_000000200"
    clean_leftovers(tmp_path)
    assert latest_checkpoint(tmp_path).name == "step_000000300"
    checkpoint, _, meta = load_newest_good(tmp_path, log=lambda line: None)
    assert checkpoint.name == "step_000000300" and meta["env_step"] == 300
    _tiny_ckpts(tmp_path, (400,))  # the run goes on from 300
    assert prune_checkpoints(tmp_path, keep=2) == ["step_000000200", "step_000000100"]


def test_a_leftover_of_an_abandoned_line_is_not_the_head(tmp_path):
    """What `latest` protects: a resume fell back from a damaged step 300 to 200 and saved 250;
    the higher-numbered 300 (verifying again, say after a read error) is not where the run is."""
    _tiny_ckpts(tmp_path, (100, 200, 300))
    _tiny_ckpts(tmp_path, (250,))  # the resumed run's next checkpoint
    lines = []
    checkpoint, _, meta = load_newest_good(tmp_path, log=lines.append)
    assert checkpoint.name == "step_000000250" and not lines
    assert latest_checkpoint(tmp_path).name == "step_000000250"
    assert checkpoint_candidates(tmp_path)[-1].name == "step_000000300"  # tried last
    assert prune_checkpoints(tmp_path, keep=2) == ["step_000000100", "step_000000300"]
