"""A full disk while a run appends to its logs: Python raises at ``write``/``close`` with no file
name, so the user's sentence said only "cannot write a file: the disk is full; free space and run
again", and "run again" led to ``rlfunc train``, which refuses a directory holding a run. The log's
write error now names the file, and the sentence says to continue with ``rlfunc resume RUN`` when
that run has a checkpoint (the state was saved before the disk filled)."""

from __future__ import annotations

import errno

import yaml

import rlfunc.runtime.run_log as run_log
from rlfunc.runtime.cli import main, user_error_message

CONFIG = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1", "wrappers": [{"time_limit": {"max_episode_steps": 6}}]},
    "train": {"total_steps": 48, "learning_starts": 8, "replay_size": 200, "eval_every": 12, "eval_episodes": 1,
              "checkpoint_every": 12, "log_every": 12, "progress": False, "tensorboard": False, "threads": 1},
    "agent": {"hidden_sizes": [8], "batch_size": 8},
}


class _FullDisk:
    """A text file whose writes fail as a full disk's do: ``OSError(ENOSPC)`` without a file name."""

    def __init__(self, f):
        self._f = f

    def write(self, text):
        raise OSError(errno.ENOSPC, "No space left on device")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._f.close()
        return False


def test_a_full_disk_during_a_log_append_names_the_file_and_the_resume(tmp_path, capsys, monkeypatch):
    cfg, run = tmp_path / "c.yaml", tmp_path / "run"
    cfg.write_text(yaml.safe_dump(CONFIG))
    real_open = run_log._open

    def filling(path, mode):
        f = real_open(path, mode)
        saved = (run / "checkpoints").is_dir() and any((run / "checkpoints").glob("step_*/meta.json"))
        return _FullDisk(f) if mode == "a" and path.name == "metrics.csv" and saved else f

    monkeypatch.setattr(run_log, "_open", filling)
    assert main(["train", str(cfg), "--run-dir", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"rlfunc: error: cannot write {str(run / 'metrics.csv')!r}: the disk is full; "
                       f"free space, then continue with `rlfunc resume {run}`."), err

    monkeypatch.setattr(run_log, "_open", real_open)
    assert main(["resume", str(run)]) == 0  # what the sentence said works
    steps = [int(line.split(",")[0]) for line in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == sorted(set(steps)) and steps[-1] == 48, steps  # no row lost or doubled across the stop


def test_without_a_checkpoint_to_resume_the_sentence_says_run_again(tmp_path):
    (tmp_path / "config.yaml").write_text("algo: sac\n")
    (tmp_path / "checkpoints").mkdir()
    exc = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "metrics.csv"))
    assert user_error_message(exc) == (f"cannot write {str(tmp_path / 'metrics.csv')!r}: the disk is full; "
                                       "free space and run again.")
    assert user_error_message(OSError(errno.ENOSPC, "No space left on device")) == (
        "cannot write a file: the disk is full; free space and run again.")


def _trainers(tmp_path):
    """A single run's Trainer and a 2-member population's, both with ``keep_best`` (nothing trained)."""
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.population import PopulationTrainer
    from rlfunc.runtime.trainer import Trainer

    single = Trainer(build_config({**CONFIG, "train": {**CONFIG["train"], "keep_best": True}}), tmp_path / "single")
    raw = {**CONFIG, "train": {**CONFIG["train"], "keep_best": True, "population": {"seeds": [0, 1]}}}
    return single, PopulationTrainer(build_config(raw), tmp_path / "pop")


def test_a_failed_best_write_does_not_block_a_later_better_than_saved_policy(tmp_path, monkeypatch, capsys):
    """The best return was recorded before the best policy was written: when that write failed (a full
    disk), every later evaluation better than the saved policy but not than the unsaved one was dropped."""
    import rlfunc.runtime.checkpoint as ckpt
    import rlfunc.runtime.trainer as trainer_mod
    from rlfunc.runtime.checkpoint import CheckpointWriteError, list_checkpoints

    single, pop = _trainers(tmp_path)
    real, fail = ckpt.save_checkpoint, [True]

    def full_once(directory, *args, **kwargs):
        if fail[0]:
            fail[0] = False
            raise CheckpointWriteError(errno.ENOSPC, "Could not write the best policy (the disk is full).")
        return real(directory, *args, **kwargs)

    monkeypatch.setattr(trainer_mod, "save_checkpoint", full_once)
    single._save_best(-100.0)  # its write fails
    single._save_best(-200.0)  # worse than the unsaved one, better than nothing saved: kept now
    assert [p.name for p in list_checkpoints(single.best_dir)] == ["step_000000000"]

    monkeypatch.setattr(ckpt, "save_checkpoint", full_once)
    fail[0] = True
    pop._save_best(1, -100.0)
    pop._save_best(1, -200.0)
    assert len(list_checkpoints(pop.member_dir(1) / "best")) == 1
    assert "not saved" in capsys.readouterr().err
    single.close_envs()
    pop.close_envs()
