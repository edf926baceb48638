"""Four small input defects: each bad input is one sentence saying what to change, raised before work
starts, and nothing a user made is lost or silently overwritten.

* ``rlfunc eval --video DIR`` replaced the videos an earlier evaluation wrote to DIR;
* ``rlfunc export --out FILE`` said an empty *file* "already exists and is not empty";
* ``write_npz`` failing midway (a full disk) named its temporary file and left it behind;
* ``train.wandb`` settings ``wandb.init`` refuses reached the user as a pydantic traceback.

Runs are tiny (the embedded REDQ/Pendulum with 8-unit critics, batch 8, a few dozen steps).
"""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import numpy as np
import pytest

import rlfunc
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError
from test_review_resources import TINY as RESOURCES_TINY  # noqa: E402 -- the tiny REDQ run these tests share

TINY = {**RESOURCES_TINY, "train.total_steps": 40}

VIDEO = "redq-Pendulum-v1-episode-{}.mp4"  # <algo>-<env>-episode-<i>.mp4, as evaluate names them


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("small") / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run_dir)
    return run_dir


# -- 1. eval --video DIR must not replace an earlier evaluation's videos ----------------------------


@pytest.fixture
def no_episodes(monkeypatch):
    """Record episode runs instead of running them (no step, so RecordVideo writes nothing): a refusal
    must come before the first episode, so `no_episodes` stays empty."""
    pytest.importorskip("moviepy")  # --video needs it (checked before the directory otherwise)
    from rlfunc.runtime import evaluate as evaluate_mod

    ran = []

    def record(policy, env, episodes, *args, **kwargs):
        ran.append(episodes)
        return [0.0] * episodes  # no step taken, so RecordVideo writes nothing

    monkeypatch.setattr(evaluate_mod, "run_episodes", record)
    return ran


def test_eval_video_refuses_a_directory_holding_videos_it_would_overwrite(run, tmp_path, capsys, no_episodes):
    videos = tmp_path / "videos"
    videos.mkdir()
    old = videos / VIDEO.format(1)
    old.write_bytes(b"an earlier evaluation's video")
    with pytest.raises(ValueError) as info:
        rlfunc.evaluate(run, episodes=3, video_dir=videos)
    message = str(info.value)
    assert VIDEO.format(1) in message and "new directory" in message and "remove" in message, message
    assert message.count(". ") == 0 and message.endswith("."), message  # one sentence
    assert no_episodes == [] and old.read_bytes() == b"an earlier evaluation's video"

    # the CLI: exit 2, the sentence, the video kept
    assert main(["eval", str(run), "--episodes", "2", "--video", str(videos)]) == 2
    err = capsys.readouterr().err
    assert VIDEO.format(1) in err and "Traceback" not in err and "Overwriting" not in err, err
    assert no_episodes == [] and old.read_bytes() == b"an earlier evaluation's video"


def test_eval_video_refuses_the_videos_a_real_evaluation_wrote(run, tmp_path):
    """The names checked are the names RecordVideo writes: record one episode, then ask again."""
    pytest.importorskip("moviepy")
    videos = tmp_path / "videos"
    first = rlfunc.evaluate(run, episodes=1, video_dir=videos)
    assert first["videos"] == [str(videos / VIDEO.format(0))]
    written = (videos / VIDEO.format(0)).read_bytes()
    with pytest.raises(ValueError, match=f"{VIDEO.format(0)}.*pass a new directory or remove them"):
        rlfunc.evaluate(run, episodes=1, video_dir=videos)
    assert (videos / VIDEO.format(0)).read_bytes() == written and len(list(videos.iterdir())) == 1


def test_eval_video_accepts_a_directory_with_other_files_only(run, tmp_path, no_episodes):
    videos = tmp_path / "videos"
    videos.mkdir()
    others = [
        "notes.txt",
        "sac-Pendulum-v1-episode-0.mp4",  # another algorithm's
        VIDEO.format(2),  # an episode this evaluation (of two) does not record
        VIDEO.format("01"),  # not a name RecordVideo writes
        VIDEO.format(0) + ".bak",
    ]
    for name in others:
        (videos / name).write_text(name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = rlfunc.evaluate(run, episodes=2, video_dir=videos)
    assert no_episodes == [2] and out["returns"] == [0.0, 0.0]
    assert not [w for w in caught if "Overwriting" in str(w.message)]  # gymnasium's, untrue now
    assert sorted(p.name for p in videos.iterdir()) == sorted(others)
    assert all((videos / name).read_text() == name for name in others)

    empty = tmp_path / "empty"
    empty.mkdir()
    rlfunc.evaluate(run, episodes=1, video_dir=empty)
    assert no_episodes == [2, 1]


# -- 2. export --out FILE: the sentence says it is a file ---------------------------------------------


def test_export_to_an_empty_file_says_it_is_a_file(run, tmp_path, capsys):
    out = tmp_path / "policy"
    out.write_bytes(b"")
    with pytest.raises(ValueError) as info:
        rlfunc.export(run, out)
    message = str(info.value)
    assert "is a file" in message and "new directory" in message and "not empty" not in message, message
    assert main(["export", str(run), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "is a file" in err and "not empty" not in err, err
    assert out.is_file() and out.read_bytes() == b""

    full = tmp_path / "full"  # a non-empty directory still says so
    full.mkdir()
    (full / "x").write_text("x")
    with pytest.raises(ValueError, match="already exists and is not empty"):
        rlfunc.export(run, full)


# -- 3. write_npz failing midway ------------------------------------------------------------------------


def _disk_full(file, *args, **kwargs):
    """np.savez that writes part of the file, then finds the disk full."""
    with open(file, "wb") as f:
        f.write(b"PK\x03\x04 half a zip")
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(file))


def test_write_npz_that_fails_midway_removes_its_temp_file_and_names_the_output(tmp_path, monkeypatch):
    from rlfunc.replay import offline

    monkeypatch.setattr(offline.np, "savez", _disk_full)
    out = tmp_path / "data" / "d.npz"
    with pytest.raises(Exception) as info:
        offline.write_npz(out, {"x": np.zeros(3)})
    message = str(info.value)
    assert isinstance(info.value, offline.DatasetError), repr(info.value)
    assert str(out) in message and "disk is full" in message and ".tmp-" not in message, message
    assert list(out.parent.iterdir()) == []  # no temporary file, no output


def test_dataset_collect_on_a_full_disk_is_one_sentence_naming_out(tmp_path, monkeypatch, capsys):
    from rlfunc.replay import offline

    monkeypatch.setattr(offline.np, "savez", _disk_full)
    out = tmp_path / "d.npz"
    argv = ["dataset", "collect", "--env", "Pendulum-v1", "--policy", "random", "--steps", "5", "--out", str(out)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert str(out) in err and ".tmp-" not in err and "Traceback" not in err, err
    assert list(tmp_path.iterdir()) == []


# -- 4. train.wandb settings wandb.init refuses ---------------------------------------------------------


@pytest.fixture
def offline_wandb(monkeypatch, tmp_path):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")  # never the network
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))


@pytest.mark.parametrize(
    ("settings", "named"),
    [
        ({"mode": "bogus"}, "train.wandb.mode='bogus'"),
        ({"resume": "sometimes"}, "train.wandb.resume='sometimes'"),
        ({"job_type": 3}, "train.wandb.job_type=3"),  # wandb reports it as its setting run_job_type
        ({"settings": {"no_such_setting": 1}}, "train.wandb.settings.no_such_setting=1"),
    ],
)
def test_wandb_log_refusing_its_settings_is_one_config_sentence(settings, named, tmp_path, offline_wandb):
    from rlfunc.runtime.run_log import WandbLog

    with pytest.raises(ConfigError) as info:
        WandbLog(settings, tmp_path / "run", {"algo": "redq"})
    message = str(info.value)
    assert named in message and "wandb.init" in message, message
    assert "\n" not in message and "pydantic" not in message and "errors.pydantic.dev" not in message, message


def test_train_wandb_mode_bogus_is_one_sentence_with_wandbs_reason(tmp_path, capsys, offline_wandb):
    with pytest.raises(ConfigError) as info:
        rlfunc.train(None, overrides={**TINY, "train.wandb": {"mode": "bogus"}}, run_dir=tmp_path / "r1")
    message = str(info.value)
    assert "train.wandb.mode='bogus'" in message and "'offline'" in message, message  # wandb's own reason
    assert main(["train", "--run-dir", str(tmp_path / "r2"), "--set", "train.wandb={mode: bogus}"]) == 2
    err = capsys.readouterr().err
    assert "train.wandb.mode='bogus'" in err and "Traceback" not in err and "ValidationError" not in err, err
    assert not list((tmp_path / "r2").rglob("step_*"))  # refused before any training
    # the refused run left no run files: the same command with the setting fixed trains (it was refused
    # as "already holds a run (config.yaml)")
    rlfunc.train(None, overrides=TINY, run_dir=tmp_path / "r1")
    assert (tmp_path / "r1" / "checkpoints").is_dir()
