"""Faults of a sweep's task and its CLI found in review, each run here in-process without Ray (the task body
:func:`rlfunc.scale.sweep.train_or_continue` runs as a Ray worker or a `rlfunc sweep --resume` runs it):

* a second attempt at a run that has no checkpoint yet (a second ``rlfunc sweep --resume`` while the first
  still trains, a Ray retry whose old process lives) deleted the live run's directory, lock file included,
  and trained beside it; it is now refused under the run directory's lock, with nothing deleted;
* a run whose only checkpoint was renamed into place by a write killed before ``latest`` was written (as a
  run's first checkpoint always is) was wiped and retrained from step 0; it now resumes, as ``rlfunc resume``;
* a run whose config names modules (a ``module:Env-v0`` env id, a ``module:ClassName`` wrapper) could never
  be continued in a fresh worker (``rlfunc.resume`` without ``allow_import``, which ``rlfunc sweep`` cannot
  pass); the modules the plan's own config names are now allowed;
* the PNG merged grid points that differ only in keys plot does not count as settings (train.max_updates),
  which the JSON keeps apart; it now draws one curve per JSON label;
* ``--gpus`` was silently ignored with ``--resume``; it is refused in one sentence, as CONFIG and --seeds are.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rlfunc.runtime.checkpoint import LOCK_FILE
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, to_dict
from rlfunc.scale.sweep import ATTEMPTS_FILE, PLAN_FILE, plan_sweep, train_or_continue, write_plan

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 300,
        "learning_starts": 100,
        "eval_every": 150,
        "eval_episodes": 1,
        "checkpoint_every": 150,
        "keep_checkpoints": 5,
        "log_every": 100,
        "threads": 1,
        "tensorboard": False,
    },
    "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
}


def attempts(sweep_dir: Path) -> list[dict]:
    path = sweep_dir / ATTEMPTS_FILE
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def eval_steps(run_dir: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in (run_dir / "eval.csv").read_text().splitlines()[1:]]


def snapshot(run_dir: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(run_dir)): (p.read_bytes() if p.is_file() else None) for p in sorted(run_dir.rglob("*"))}


def planned(tmp_path: Path, config: dict, seeds: str = "0", grid=None) -> tuple[dict, Path]:
    plan = plan_sweep(config, seeds, grid, None, tmp_path / "sw")
    write_plan(plan)
    return plan, Path(plan["sweep_dir"])


def cut_back_to_first_checkpoint(run_dir: Path, latest: bool) -> None:
    """The state a worker killed after its first checkpoint (step 150) leaves: no newer checkpoint, eval.csv
    up to step 150, and ``latest`` naming it, or (``latest=False``) not yet written: the kill came between
    renaming the checkpoint into place and writing ``latest``."""
    import shutil

    checkpoints = run_dir / "checkpoints"
    shutil.rmtree(checkpoints / "step_000000300")
    if latest:
        (checkpoints / "latest").write_text("step_000000150\n")
    else:
        (checkpoints / "latest").unlink()
    lines = (run_dir / "eval.csv").read_text().splitlines()
    (run_dir / "eval.csv").write_text("\n".join(lines[:2]) + "\n")
    assert eval_steps(run_dir) == [150]


# ----------------------------------------------------------------------------- 1. the run directory's lock


HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # what rlfunc's lock_run_dir takes in a process training there
os.ftruncate(fd, 0); os.pwrite(fd, f"{os.getpid()}\\n".encode(), 0)
print("locked", flush=True)
sys.stdin.read()
"""


def test_a_second_attempt_at_a_run_another_process_trains_is_refused_and_deletes_nothing(tmp_path):
    """The first attempt is training (its lock held by another live process) and has no checkpoint yet: the
    second attempt used to delete the whole run directory (the lock file too) and train beside it."""
    plan, sweep_dir = planned(tmp_path, TINY)
    entry = plan["runs"][0]
    run_dir = sweep_dir / entry["name"]
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(build_config(apply_overrides(TINY, entry["overrides"])))))
    (run_dir / "metrics.csv").write_text("step,loss\n100,1.0\n")
    (run_dir / "eval.csv").write_text("step,mean_return,time_s\n150,-1000.0,1.0\n")
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir / LOCK_FILE)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        before = snapshot(run_dir)
        with pytest.raises(ConfigError) as refused:
            train_or_continue(plan, entry)
        sentence = str(refused.value)
        assert sentence == (
            f"Run directory {str(run_dir)!r} is in use by another rlfunc process (pid {holder.pid}) that is training "
            "there; wait for it to end (or stop it) before training or resuming in this directory."
        )
        assert snapshot(run_dir) == before, "nothing of the live run is deleted or written"
        assert attempts(sweep_dir) == [], "no attempt started"
    finally:
        holder.stdin.close()
        holder.wait(timeout=30)
    # the first attempt died before its first checkpoint: the next attempt clears its files and trains afresh
    records = train_or_continue(plan, entry)
    assert [a["start"] for a in attempts(sweep_dir)] == ["fresh"]
    assert eval_steps(run_dir) == [150, 300] and records[0]["complete"]
    assert "step,loss" not in (run_dir / "metrics.csv").read_text(), "the dead attempt's rows are gone"
    assert (run_dir / LOCK_FILE).is_file()


# ----------------------------------------------------------------------------- 2. resume-or-fresh


def test_a_first_checkpoint_not_yet_named_by_latest_is_resumed_not_wiped(tmp_path):
    import rlfunc

    plan, sweep_dir = planned(tmp_path, TINY)
    entry = plan["runs"][0]
    run_dir = sweep_dir / entry["name"]
    rlfunc.train(TINY, overrides=dict(entry["overrides"]), run_dir=run_dir)
    cut_back_to_first_checkpoint(run_dir, latest=False)
    records = train_or_continue(plan, entry)
    assert [(a["start"], a.get("from_step")) for a in attempts(sweep_dir)] == [("resume", 150)]
    assert eval_steps(run_dir) == [150, 300], "continued from step 150, not retrained from step 0"
    assert records[0]["complete"] and records[0]["env_steps"] == 300


# ----------------------------------------------------------------------------- 3. modules the plan names


WRAPPER_MODULE = '''
import gymnasium as gym


class Same(gym.Wrapper):
    """A user's own wrapper, named in the sweep's config as sweep_faults_wrappers:Same."""
'''


def test_a_run_whose_config_names_modules_is_continued_in_a_fresh_worker(tmp_path, monkeypatch):
    """env.id ``pkg_envs_example:PkgReachBox-v0`` (tests/pkg_envs_example.py) and the wrapper
    ``sweep_faults_wrappers:Same``: the retry's ``rlfunc.resume`` refused both modules (the checkpoint's
    config is a loaded file), with a --allow-import that `rlfunc sweep` does not have."""
    import rlfunc

    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "sweep_faults_wrappers.py").write_text(WRAPPER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    config = {**TINY, "env": {"id": "pkg_envs_example:PkgReachBox-v0",
                              "wrappers": ["sweep_faults_wrappers:Same", {"time_limit": {"max_episode_steps": 40}}]}}
    plan, sweep_dir = planned(tmp_path, config)
    entry = plan["runs"][0]
    run_dir = sweep_dir / entry["name"]
    rlfunc.train(config, overrides=dict(entry["overrides"]), run_dir=run_dir)  # the first attempt
    cut_back_to_first_checkpoint(run_dir, latest=True)
    for module in ("pkg_envs_example", "sweep_faults_wrappers"):  # a fresh worker has imported neither
        monkeypatch.delitem(sys.modules, module)
    records = train_or_continue(plan, entry)
    assert [(a["start"], a.get("from_step")) for a in attempts(sweep_dir)] == [("resume", 150)]
    assert eval_steps(run_dir) == [150, 300] and records[0]["complete"]
    assert {"pkg_envs_example", "sweep_faults_wrappers"} <= set(sys.modules)


def test_resume_is_allowed_only_the_modules_the_plans_own_config_names(tmp_path, monkeypatch):
    """``allow_import`` is built from the entry's config (the plan's), never from the checkpoint's: a plan
    of a plain env allows nothing (a checkpoint naming a module is then refused as ``rlfunc resume`` refuses it)."""
    import rlfunc

    config = {**TINY, "env": {"id": "pkg_envs_example:PkgReachBox-v0",
                              "wrappers": ["gymnasium.wrappers.RecordEpisodeStatistics",
                                           {"time_limit": {"max_episode_steps": 40}}]}}
    plan, sweep_dir = planned(tmp_path, config)
    entry = plan["runs"][0]
    checkpoint = sweep_dir / entry["name"] / "checkpoints" / "step_000000150"
    checkpoint.mkdir(parents=True)
    (checkpoint / "meta.json").write_text("{}")  # found as a checkpoint; what resume reads is not reached
    seen = []

    def resume(path, **kwargs):
        seen.append(kwargs.get("allow_import"))
        raise ConfigError("stopped before training")

    monkeypatch.setattr(rlfunc, "resume", resume)
    for which in (plan, {**plan, "raw_config": TINY}):
        with pytest.raises(ConfigError, match="stopped before training"):
            train_or_continue(which, entry)
    assert [list(a) for a in seen] == [["pkg_envs_example", "gymnasium.wrappers.RecordEpisodeStatistics"], []]


# ----------------------------------------------------------------------------- 4 and 5: a finished sweep


@pytest.fixture
def finished_sweep(tmp_path):
    """A sweep over train.max_updates (a key plot does not count as a setting) whose runs are faked as
    finished, so that `sweep --resume` starts no Ray; the two grid points have different curves."""
    pytest.importorskip("ray")  # sweep() refuses to run without it
    plan, sweep_dir = planned(tmp_path, TINY, seeds="0-1", grid=["train.max_updates=50,100000"])
    for e in plan["runs"]:
        d = sweep_dir / e["name"]
        d.mkdir()
        (d / "config.yaml").write_text(yaml.safe_dump(to_dict(build_config(apply_overrides(TINY, e["overrides"])))))
        low = e["grid"]["train.max_updates"] < 1000
        (d / "eval.csv").write_text("step,mean_return,time_s\n150,%f,1\n300,%f,2\n" % ((-1000, -900) if low else (-100, -50)))
    return sweep_dir


def test_the_png_draws_one_curve_per_grid_point_as_the_json_does(finished_sweep, monkeypatch):
    from rlfunc.runtime import plot
    from rlfunc.scale.sweep import sweep

    drawn = {}
    original = plot.plot_curves

    def plot_curves(groups, out, **kwargs):
        drawn.update(groups)
        return original(groups, out, **kwargs)

    monkeypatch.setattr(plot, "plot_curves", plot_curves)
    result = sweep(resume=finished_sweep, echo=lambda line: None)
    assert len(result["summary"]) == 2, "the JSON keeps the two grid points apart"
    assert sorted(drawn) == sorted(result["summary"]), "one curve per JSON label"
    for label, curves in drawn.items():
        finals = sorted(float(returns[-1]) for _, returns in curves)
        assert finals == sorted(result["summary"][label]["final_returns"]), f"{label}: its own two seeds"
    assert Path(result["png"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_gpus_with_resume_is_refused_in_one_sentence(finished_sweep, tmp_path, capsys):
    from rlfunc.runtime.cli import main
    from rlfunc.scale.sweep import sweep

    plan_before = (finished_sweep / PLAN_FILE).read_bytes()
    out = tmp_path / "gpus.json"
    sentence = "--resume continues the stored plan, whose runs each ask for 0 GPUs; drop --gpus (a new amount needs a new sweep)."
    for gpus in ("0.5", "0"):
        assert main(["sweep", "--resume", str(finished_sweep), "--gpus", gpus, "--out", str(out)]) == 2
        err = capsys.readouterr().err.strip()
        assert err == f"rlfunc: error: {sentence}"
    with pytest.raises(ConfigError) as refused:
        sweep(resume=finished_sweep, gpus=0.5, out=out, echo=lambda line: None)
    assert str(refused.value) == sentence
    assert not out.exists() and (finished_sweep / PLAN_FILE).read_bytes() == plan_before
    # without --gpus the stored plan continues (every run finished: read back, no Ray)
    assert main(["sweep", "--resume", str(finished_sweep), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["failed"] == {}
