"""Reading a checkpoint never runs code, and a damaged one is refused with one sentence.

Each fault class of the reliability issue (#22) is made here on a real run's
checkpoint and read back through the command line (``rlfunc eval``,
``rlfunc resume``, ``rlfunc dataset collect``) and ``rlfunc.load``: a crafted
pickle payload, a stored config naming a module to import or a wrapper that
writes files, a huge stored ``obs_shape``, truncated / empty / byte-flipped /
deleted / extra files, a manifest claiming another dtype or shape, another
algorithm's tensors, non-finite weights, an edited meta.json, a ``latest``
pointing outside, a full disk while writing, leftovers of killed writes.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import rlfunc
from rlfunc.runtime import checkpoint as ckpt_mod
from rlfunc.runtime.checkpoint import CheckpointError, load_checkpoint, meta_checksum
from rlfunc.runtime.cli import main

TINY = {
    "agent.hidden_sizes": [16, 16],
    "agent.num_critics": 2,
    "agent.updates_per_step": 1,
    "agent.batch_size": 16,
    "train.total_steps": 300,
    "train.learning_starts": 100,
    "train.eval_every": 300,
    "train.eval_episodes": 1,
    "train.checkpoint_every": 150,
    "train.log_every": 150,
    "train.progress": False,
    "train.threads": 1,
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A finished REDQ run with checkpoints at 150 and 300 steps."""
    run = tmp_path_factory.mktemp("trained") / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run)
    return run


@pytest.fixture
def run(trained, tmp_path) -> Path:
    """A private copy of the trained run, free to damage."""
    return Path(shutil.copytree(trained, tmp_path / "run"))


def newest(run: Path) -> Path:
    return run / "checkpoints" / "step_000000300"


def tree_digest(path: Path) -> dict[str, str]:
    return {
        str(p.relative_to(path)): hashlib.blake2b(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("rlfunc: error:")]
    assert len(errors) == 1, err
    assert "Traceback" not in "\n".join(err)
    return errors[0]


def rewrite_meta(ckpt: Path, edit) -> None:
    """Edit meta.json and re-sign it, as someone who knows the format would."""
    meta = json.loads((ckpt / "meta.json").read_text())
    edit(meta)
    meta["checksum"] = meta_checksum(meta)
    (ckpt / "meta.json").write_text(json.dumps(meta))


def file_of(ckpt: Path, key: tuple[str, ...]) -> Path:
    meta = json.loads((ckpt / "meta.json").read_text())
    index = [tuple(e["key"]) for e in meta["manifest"]].index(key)
    return ckpt / "tensors" / f"{index:05d}.bin"


WEIGHT = ("state", "params", "actor", "mean", "weight")


# -- code execution ------------------------------------------------------------------------


class _Payload:
    """Unpickling this writes the marker file: proof that a loader ran code."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (Path(self.marker), "pwned"))


def craft_pickle_checkpoint(run: Path, marker: Path, version: int) -> Path:
    """Replace the newest checkpoint's tensors with tensordict's memmap of a NonTensorData whose
    pickle writes ``marker`` when loaded, and point meta.json's format at ``version``."""
    from tensordict import NonTensorData, TensorDict

    ckpt = newest(run)
    good, meta = load_checkpoint(ckpt)
    evil = good.clone()
    evil["payload"] = NonTensorData(_Payload(str(marker)))
    shutil.rmtree(ckpt / "tensors")
    evil.memmap(ckpt / "tensors", num_threads=0)
    assert list((ckpt / "tensors").rglob("*.pickle")) or list((ckpt / "tensors").rglob("*.pkl")) or any(
        "pickle" in p.read_text(errors="ignore") or p.suffix not in (".json", ".memmap")
        for p in (ckpt / "tensors").rglob("*")
        if p.is_file()
    ), "the crafted entry must be stored as a pickle"
    meta["format_version"] = version
    if version == 2:
        meta["manifest"], meta["batch_sizes"] = [], []
        meta["checksum"] = meta_checksum(meta)
    (ckpt / "meta.json").write_text(json.dumps(meta))
    return ckpt


@pytest.mark.parametrize("version", [1, 2])
def test_crafted_pickle_never_runs(run, tmp_path, capsys, version):
    marker = tmp_path / "marker"
    ckpt = craft_pickle_checkpoint(run, marker, version)
    commands = [
        ["eval", str(run), "--episodes", "1"],
        ["eval", str(ckpt), "--episodes", "1"],
        ["dataset", "collect", "--checkpoint", str(ckpt), "--steps", "5", "--out", str(tmp_path / "d.npz")],
        ["export", str(ckpt), "--out", str(tmp_path / "exported")],
    ]
    for argv in commands:
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert "step_000000300" in line and "rlfunc did not write" in line, line
        assert not marker.exists(), f"{argv} ran the payload"
    with pytest.raises(CheckpointError):
        rlfunc.load(ckpt)
    assert not marker.exists()
    # resume skips the crafted checkpoint with a line and continues from the good one before it
    assert main(["resume", str(run), "--total-steps", "350"]) == 0
    err = capsys.readouterr().err
    assert "skipping step_000000300" in err and not marker.exists()
    assert load_checkpoint(run)[1]["env_step"] == 350


def test_the_crafted_payload_is_live(run, tmp_path):
    """The crafted checkpoint really runs code under tensordict's own loader (so the test above
    would catch a loader that unpickles)."""
    from tensordict import TensorDict

    marker = tmp_path / "marker"
    ckpt = craft_pickle_checkpoint(run, marker, 1)
    TensorDict.load_memmap(ckpt / "tensors", allow_pickle=True)
    assert marker.read_text() == "pwned"


# -- damaged files -------------------------------------------------------------------------


def _truncate(ckpt):
    f = file_of(ckpt, WEIGHT)
    f.write_bytes(f.read_bytes()[:-5])


def _empty(ckpt):
    file_of(ckpt, WEIGHT).write_bytes(b"")


def _flip(ckpt):
    f = file_of(ckpt, WEIGHT)
    data = bytearray(f.read_bytes())
    data[3] ^= 0x40
    f.write_bytes(bytes(data))


def _delete(ckpt):
    file_of(ckpt, WEIGHT).unlink()


def _extra(ckpt):
    (ckpt / "tensors" / "99999.bin").write_bytes(b"\0" * 8)


def _extra_top(ckpt):
    (ckpt / "notes.pkl").write_bytes(b"\x80\x04.")


def _dtype(ckpt):
    def edit(meta):
        for e in meta["manifest"]:
            if tuple(e["key"]) == WEIGHT:
                e["dtype"] = "int32"  # same bytes, another meaning

    rewrite_meta(ckpt, edit)


def _bad_dtype_name(ckpt):
    def edit(meta):
        meta["manifest"][0]["dtype"] = "object"

    rewrite_meta(ckpt, edit)


def _shape(ckpt):
    def edit(meta):
        for e in meta["manifest"]:
            if tuple(e["key"]) == WEIGHT:
                e["shape"] = list(reversed(e["shape"]))  # same byte count, another layout

    rewrite_meta(ckpt, edit)


def _meta_edit_unsigned(ckpt):
    meta = json.loads((ckpt / "meta.json").read_text())
    meta["env_step"] = 10**9
    (ckpt / "meta.json").write_text(json.dumps(meta))


def _meta_garbage(ckpt):
    (ckpt / "meta.json").write_bytes(b"\x00\xff{garbage")


def _nan_weights(ckpt):
    f = file_of(ckpt, WEIGHT)
    t = torch.frombuffer(bytearray(f.read_bytes()), dtype=torch.float32).clone()
    t[0] = float("nan")
    f.write_bytes(t.numpy().tobytes())

    def edit(meta):  # re-sign, as a run that diverged would have written it
        for e in meta["manifest"]:
            if tuple(e["key"]) == WEIGHT:
                e["blake2b"] = hashlib.blake2b(f.read_bytes(), digest_size=32).hexdigest()

    rewrite_meta(ckpt, edit)


def _foreign_algo(ckpt):
    def edit(meta):
        meta["algo"] = "drqn"
        meta["config"]["algo"] = "drqn"
        meta["config"]["agent"] = {}  # a config that builds: the state is what is foreign
        meta["config"]["env"]["id"] = "CartPole-v1"
        meta["config"]["train"].pop("compile_mode", None)  # not a drqn key (it compiles whole updates)
        meta["config"]["train"].pop("replay_size", None)  # drqn's default, in windows
        meta["config"]["train"]["learning_starts"] = 0
        meta["num_actions"] = 2
        meta.pop("action_low"), meta.pop("action_high")
        meta["obs_shape"] = [4]

    rewrite_meta(ckpt, edit)


def _symlink(ckpt):
    f = file_of(ckpt, WEIGHT)
    size = f.stat().st_size
    f.unlink()
    target = ckpt.parent.parent / "outside.bin"
    target.write_bytes(b"\0" * size)
    f.symlink_to(target)


FAULTS = {
    "truncated": (_truncate, "bytes"),
    "zero-length": (_empty, "bytes"),
    "byte-flipped": (_flip, "checksum"),
    "deleted": (_delete, "missing"),
    "extra tensor file": (_extra, "did not write"),
    "extra top-level file": (_extra_top, "did not write"),
    "wrong dtype": (_dtype, "builds"),
    "unknown dtype": (_bad_dtype_name, "dtype"),
    "wrong shape": (_shape, "expects|builds"),
    "meta edited": (_meta_edit_unsigned, "checksum"),
    "meta garbage": (_meta_garbage, "JSON"),
    "non-finite weights": (_nan_weights, "non-finite"),
    "foreign algorithm": (_foreign_algo, "another|rejects"),
    "symlinked file": (_symlink, "opened|regular"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_damaged_checkpoint_is_one_sentence_and_untouched(run, capsys, fault):
    damage, expected = FAULTS[fault]
    ckpt = newest(run)
    damage(ckpt)
    before = tree_digest(ckpt)
    assert main(["eval", str(ckpt), "--episodes", "1"]) == 2
    line = one_error_line(capsys)
    assert "step_000000300" in line, line
    import re

    assert re.search(expected, line), line
    with pytest.raises(CheckpointError):
        rlfunc.load(ckpt)
    assert tree_digest(ckpt) == before, "reading must never write into the checkpoint"


@pytest.mark.parametrize("fault", ["truncated", "byte-flipped", "non-finite weights", "meta garbage", "deleted"])
def test_resume_falls_back_to_the_newest_good_checkpoint(run, capsys, fault):
    FAULTS[fault][0](newest(run))
    assert main(["resume", str(run), "--total-steps", "400"]) == 0
    err = capsys.readouterr().err
    assert "rlfunc: skipping step_000000300" in err, err
    tensors, meta = load_checkpoint(run)
    assert meta["env_step"] == 400 and meta["evals"][0][0] == 300  # re-evaluated at 300 from step 150
    eval_steps = [line.split(",")[0] for line in (run / "eval.csv").read_text().splitlines()[1:]]
    assert eval_steps == ["300", "400"]  # the log was cut back to step 150 and continued once


def test_resume_refuses_a_checkpoint_of_another_algorithm(run, capsys):
    """A checkpoint that verifies but holds another algorithm's state is refused, not skipped:
    its config says it belongs to another run."""
    _foreign_algo(newest(run))
    assert main(["resume", str(run)]) == 2
    assert "another algorithm" in one_error_line(capsys)


def test_resume_with_no_good_checkpoint_is_one_sentence(run, capsys):
    for step in ("000000150", "000000300"):
        _flip(run / "checkpoints" / f"step_{step}")
    assert main(["resume", str(run)]) == 2
    line = one_error_line(capsys)
    assert "No checkpoint" in line and "verifies" in line


def test_latest_pointing_outside_is_ignored(run, tmp_path, capsys):
    (run / "checkpoints" / "latest").write_text("../../../etc\n")
    _, meta = load_checkpoint(run)
    assert meta["env_step"] == 300


def test_resume_takes_the_config_from_the_checkpoint(run, capsys):
    (run / "config.yaml").write_text("algo: [not, a, config\n")  # the run's copy for people, damaged
    assert main(["resume", str(run), "--total-steps", "350"]) == 0
    assert load_checkpoint(run)[1]["env_step"] == 350
    assert "algo: redq" in (run / "config.yaml").read_text()  # rewritten from the checkpoint


def test_leftovers_of_killed_writes_are_cleaned(run, capsys):
    ckpts = run / "checkpoints"
    (ckpts / ".step_000000450.tmp-4242" / "tensors").mkdir(parents=True)
    (ckpts / ".latest.tmp-4242").write_text("step_000000450\n")
    # a replacement of step 300 killed between its two renames: the old copy is all there is
    os.replace(ckpts / "step_000000300", ckpts / ".step_000000300.old-4242")
    assert main(["resume", str(run), "--total-steps", "350"]) == 0
    err = capsys.readouterr().err
    assert "restored step_000000300" in err and "removed .step_000000450.tmp-4242" in err
    # train.keep_checkpoints (2) then pruned step 150
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step_000000300", "step_000000350"]
    assert load_checkpoint(ckpts / "step_000000300")[1]["env_step"] == 300


# -- writing -------------------------------------------------------------------------------


def _fail_after(monkeypatch, good_writes: int) -> None:
    """The disk fills up after ``good_writes`` checkpoint files."""
    real = ckpt_mod._write_bytes
    count = {"n": 0}

    def write(path, data):
        count["n"] += 1
        if count["n"] > good_writes:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        return real(path, data)

    monkeypatch.setattr(ckpt_mod, "_write_bytes", write)


def test_full_disk_stops_cleanly_and_keeps_the_previous_checkpoint(trained, tmp_path, capsys, monkeypatch):
    first = json.loads((newest(trained) / "meta.json").read_text())
    _fail_after(monkeypatch, len(first["manifest"]) + 1)  # the first checkpoint's tensors and meta.json fit
    out = tmp_path / "full"
    assert main(["train", "--run-dir", str(out), *[f"--set={k}={json.dumps(v)}" for k, v in TINY.items()]]) == 2
    line = one_error_line(capsys)
    assert "disk is full" in line and "step_000000150 is intact" in line, line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest", "step_000000150"]
    assert load_checkpoint(out)[1]["env_step"] == 150
    monkeypatch.undo()
    assert main(["resume", str(out)]) == 0
    assert load_checkpoint(out)[1]["env_step"] == 300


def test_full_disk_can_continue_without_checkpoints(tmp_path, capsys, monkeypatch):
    _fail_after(monkeypatch, 0)
    res = rlfunc.train(None, overrides={**TINY, "train.on_checkpoint_error": "continue"}, run_dir=tmp_path / "c")
    assert res.env_steps == 300
    # at 150 and 300, and once more at the end (the state at 300 is still not saved)
    assert capsys.readouterr().err.count("Training continues without this checkpoint") == 3
    assert not [p for p in (tmp_path / "c" / "checkpoints").iterdir() if p.name != "latest"]


# -- the command line's boundary -----------------------------------------------------------


def test_run_dir_holding_a_run_is_refused(run, capsys):
    for name in ("checkpoints", "metrics.csv", "eval.csv", "config.yaml"):
        other = run.parent / f"holds-{name}"
        other.mkdir()
        (other / name).mkdir() if name == "checkpoints" else (other / name).write_text("x")
        assert main(["train", "--run-dir", str(other)]) == 2
        line = one_error_line(capsys)
        assert "already holds a run" in line and "rlfunc resume" in line
        assert sorted(p.name for p in other.iterdir()) == [name]


def test_unwritable_run_dir_is_refused_before_envs(tmp_path, capsys, monkeypatch):
    from rlfunc.runtime import trainer

    def no_envs(*a, **k):
        raise AssertionError("envs were built")

    monkeypatch.setattr(trainer, "_make_envs", no_envs)
    (tmp_path / "a-file").write_text("")
    assert main(["train", "--run-dir", str(tmp_path / "a-file" / "run")]) == 2
    assert "Cannot write to run directory" in one_error_line(capsys)
    assert main(["train", "--run-dir", str(tmp_path / "a-file")]) == 2
    assert "is a file" in one_error_line(capsys)


def test_env_failure_leaves_no_empty_run_dir(tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["train", "--run-dir", str(out), "--set", "env.kwargs={no_such_kwarg: 1}"]) == 2
    one_error_line(capsys)
    assert not out.exists()


def test_user_path_errors_are_one_sentence(tmp_path, capsys):
    cases = [
        ["eval", str(tmp_path / "nowhere")],
        ["eval", str(tmp_path / "f.txt")],
        ["resume", str(tmp_path / "nowhere")],
        ["resume", str(tmp_path)],
        ["train", str(tmp_path)],  # a directory as the config
        ["train", str(tmp_path / "missing.yaml")],
    ]
    (tmp_path / "f.txt").write_text("x")
    for argv in cases:
        assert main(argv) == 2, argv
        one_error_line(capsys)


def test_a_bug_shows_its_traceback_and_says_so(capsys, monkeypatch):
    from rlfunc.runtime import trainer

    def broken(*a, **k):
        raise KeyError("internal")

    monkeypatch.setattr(trainer, "train", broken)
    assert main(["train"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError" in err and "this is a bug in rlfunc" in err


def test_ctrl_c_is_one_line_with_how_to_continue(tmp_path, capsys, monkeypatch):
    from rlfunc.runtime import learners

    calls = {"n": 0}
    real = learners.TransitionLearner.learn

    def interrupted(self):
        calls["n"] += 1
        if calls["n"] == 20:
            raise KeyboardInterrupt
        return real(self)

    monkeypatch.setattr(learners.TransitionLearner, "learn", interrupted)
    out = tmp_path / "ctrl-c"
    assert main(["train", "--run-dir", str(out), *[f"--set={k}={json.dumps(v)}" for k, v in TINY.items()]]) == 130
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"rlfunc: interrupted; saved at step 119; continue with `rlfunc resume {out}`", err
    assert "Traceback" not in "\n".join(err)
    assert load_checkpoint(out)[1]["env_step"] == 119


def test_an_impossible_allocation_is_one_sentence(tmp_path, capsys, monkeypatch):
    """torch's CPU allocator raises a RuntimeError, not a MemoryError; the CLI names it as memory."""
    from rlfunc.runtime import trainer

    def huge(*a, **k):
        torch.empty(10**15, dtype=torch.uint8)

    monkeypatch.setattr(trainer, "_make_envs", huge)
    assert main(["train", "--run-dir", str(tmp_path / "r")]) == 2
    assert "out of memory" in one_error_line(capsys)
    assert not (tmp_path / "r").exists()


def forget_module(monkeypatch, name: str) -> None:
    """``name`` is not imported now, and is forgotten again after the test."""
    import sys

    monkeypatch.setitem(sys.modules, name, None)
    del sys.modules[name]


def test_loading_never_imports_a_module_the_stored_config_names(run, tmp_path, monkeypatch, capsys):
    """A stored config may name a user's module (env.id module:Env-v0, a module:Class wrapper):
    rlfunc.load and rlfunc export never import it, and making its env (eval, resume, dataset collect,
    rlfunc.evaluate) imports it only with --allow-import MODULE (allow_import= in Python), refusing
    in one sentence before the env is made otherwise."""
    (tmp_path / "side_effect_mod.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('imported').write_text('yes')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    forget_module(monkeypatch, "side_effect_mod")

    def edit(meta):
        meta["config"]["env"]["id"] = "side_effect_mod:Pendulum-v1"
        meta["config"]["env"]["wrappers"] = [{"side_effect_mod:Nothing": {}}]

    ckpt = newest(run)
    for c in (ckpt, run / "checkpoints" / "step_000000150"):
        rewrite_meta(c, edit)
    before = tree_digest(run / "checkpoints")
    policy = rlfunc.load(ckpt)
    assert policy.run_config.env.id == "side_effect_mod:Pendulum-v1"
    assert main(["export", str(ckpt), "--out", str(tmp_path / "exported")]) == 0
    refused = [
        ["eval", str(ckpt), "--episodes", "1"],
        ["eval", str(tmp_path / "exported"), "--episodes", "1"],
        ["resume", str(run), "--total-steps", "350"],
        ["dataset", "collect", "--checkpoint", str(ckpt), "--steps", "5", "--out", str(tmp_path / "d.npz")],
        ["eval", str(ckpt), "--episodes", "1", "--allow-import", "side_effect"],  # a prefix is not its package
    ]
    for argv in refused:
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert "'side_effect_mod'" in line and "--allow-import side_effect_mod" in line, line
    with pytest.raises(ValueError, match="allow_import=\\['side_effect_mod'\\]"):
        rlfunc.evaluate(policy, episodes=1)
    assert not (tmp_path / "imported").exists()
    assert not (tmp_path / "d.npz").exists()
    assert tree_digest(run / "checkpoints") == before, "a refused resume must not touch the run"
    # allowed: the module is imported (and here has no such wrapper: one sentence)
    assert main(["eval", str(ckpt), "--episodes", "1", "--allow-import", "side_effect_mod"]) == 2
    assert "has no 'Nothing'" in one_error_line(capsys)
    assert (tmp_path / "imported").exists()


def test_allowed_module_makes_the_env(run, tmp_path, monkeypatch, capsys):
    """With --allow-import, eval and rlfunc.evaluate make the stored env:Env-v0 as gym.make would; a
    module already imported in the process (here by the first call) needs no flag."""
    import sys

    (tmp_path / "registers_nothing.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    forget_module(monkeypatch, "registers_nothing")
    rewrite_meta(newest(run), lambda meta: meta["config"]["env"].update(id="registers_nothing:Pendulum-v1"))
    with pytest.raises(ValueError, match="--allow-import registers_nothing"):
        rlfunc.evaluate(newest(run), episodes=1)
    assert "registers_nothing" not in sys.modules
    assert main(["eval", str(newest(run)), "--episodes", "1", "--allow-import", "registers_nothing"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert sys.modules["registers_nothing"].IMPORTED
    assert len(rlfunc.evaluate(newest(run), episodes=1)["returns"]) == 1


def _record_video_run(run: Path, folder: Path, name: str) -> None:
    def edit(meta):
        meta["config"]["env"]["kwargs"] = {"render_mode": "rgb_array"}
        meta["config"]["env"]["wrappers"] = [{name: {"video_folder": str(folder), "name_prefix": "planted"}}]

    for c in sorted((run / "checkpoints").glob("step_*")):
        rewrite_meta(c, edit)


@pytest.mark.parametrize(
    "name, allow",
    [
        ("gymnasium.wrappers.RecordVideo", "gymnasium.wrappers.RecordVideo"),
        ("gymnasium.wrappers:RecordVideo", "gymnasium.wrappers"),  # an imported module names no I/O wrapper either
    ],
)
def test_a_stored_wrapper_cannot_write_files(run, tmp_path, capsys, name, allow):
    """A checkpoint's env.wrappers may hold only wrappers that do no I/O: gymnasium's RecordVideo with
    a video_folder of the file's choosing is refused by eval, resume and dataset collect unless allowed."""
    planted = tmp_path / "planted"
    _record_video_run(run, planted, name)
    for argv in (
        ["eval", str(run), "--episodes", "1"],
        ["resume", str(run), "--total-steps", "350"],
        ["dataset", "collect", "--checkpoint", str(run), "--steps", "5", "--out", str(tmp_path / "d.npz")],
    ):
        assert main(argv) == 2, argv
        line = one_error_line(capsys)
        assert repr(name) in line and f"--allow-import {allow}" in line, line
    with pytest.raises(ValueError, match="env.wrappers entry"):
        rlfunc.evaluate(run, episodes=1)
    assert not planted.exists()


def test_loaded_wrapper_allowlist():
    """What the packaged configs use (and gymnasium's other I/O-free transforms) is applied from a
    loaded file; a rendering or writing wrapper only when allowed; the user's own config is unaffected."""
    from rlfunc.envs import build_wrappers
    from rlfunc.envs.factory import from_loaded_file

    packaged = [
        {"gymnasium.wrappers.AtariPreprocessing": {"noop_max": 30, "frame_skip": 4, "screen_size": 84,
                                                   "terminal_on_life_loss": False, "grayscale_obs": True,
                                                   "scale_obs": False}},
        {"flicker": {"p": 0.5}}, {"time_limit": {"max_episode_steps": 5000}}, "mask_velocity",
        {"pixels": {"size": 84, "frame_stack": 3, "action_repeat": 2}},
        {"gymnasium.wrappers.FrameStackObservation": {"stack_size": 4}},
        "rlfunc.envs.wrappers:ScaleObservation",
    ]
    video = [{"gymnasium.wrappers.RecordVideo": {"video_folder": "/tmp/x"}}]
    with from_loaded_file():
        assert len(build_wrappers(packaged)) == len(packaged)
        for bad in (video, ["gymnasium.wrappers.HumanRendering"], ["gymnasium.wrappers.JaxToNumpy"]):
            with pytest.raises(ValueError, match="--allow-import gymnasium.wrappers"):
                build_wrappers(bad)
    with from_loaded_file(["gymnasium.wrappers.RecordVideo"]):
        assert len(build_wrappers(video)) == 1
    assert len(build_wrappers(video)) == 1  # a config the user wrote


@pytest.mark.parametrize("shape", [[200000, 100000], [10**13]])
def test_a_huge_stored_obs_shape_is_refused_before_building(run, monkeypatch, capsys, shape):
    """meta.json's obs_shape is checked against the stored parameters before any space or network is
    built from it (a crafted [200000, 100000] would allocate tens of GiB)."""
    from rlfunc.runtime import api

    def no_build(*a, **k):
        raise AssertionError("spaces were built from the crafted obs_shape")

    rewrite_meta(newest(run), lambda meta: meta.update(obs_shape=shape))
    monkeypatch.setattr(api, "_expected_params", no_build)
    with pytest.raises(CheckpointError, match="obs_shape"):
        rlfunc.load(newest(run))
    assert main(["eval", str(newest(run)), "--episodes", "1"]) == 2
    assert "obs_shape" in one_error_line(capsys)


def test_huge_stored_hidden_sizes_allocate_nothing(run):
    """The parameter structure a stored config builds is computed on the meta device: a crafted
    agent.hidden_sizes of 10^5 x 10^5 (40 GB of float32) is refused at once as another configuration's."""
    rewrite_meta(newest(run), lambda meta: meta["config"]["agent"].update(hidden_sizes=[100000, 100000]))
    with pytest.raises(CheckpointError, match="another configuration"):
        rlfunc.load(newest(run))


def test_a_dataset_with_non_numeric_action_bounds_is_one_sentence(tmp_path):
    import gymnasium as gym
    import numpy as np

    from rlfunc.replay.offline import DatasetError, load_dataset

    n = 10
    good = dict(observations=np.zeros((n, 3), np.float32), actions=np.zeros((n, 1), np.float32),
                rewards=np.zeros(n, np.float32), next_observations=np.zeros((n, 3), np.float32),
                terminals=np.zeros(n, bool))
    env = gym.make("Pendulum-v1")
    for key, value in (("action_low", np.array(["x"])), ("action_high", np.array([1 + 2j]))):
        path = tmp_path / f"{key}.npz"
        np.savez(path, **good, **{key: value})
        with pytest.raises(DatasetError, match=f"'{key}' has dtype .*real numbers"):
            load_dataset(path, env.observation_space, env.action_space)
    np.savez(tmp_path / "ok.npz", **good, action_low=np.array([-2.0]), action_high=np.array([2]))
    assert len(load_dataset(tmp_path / "ok.npz", env.observation_space, env.action_space)) == n
