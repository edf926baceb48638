"""Review (session 37) of the loaded-file guard across threads, processes and Ray actors.

:func:`rlfunc.envs.factory.from_loaded_file` keeps its allow list in a ``ContextVar``, which a new thread,
a subprocess or a Ray actor does not see. Every place where rlfunc makes an env (or imports a module) from
a config read from a file was checked for being reached outside the thread that entered the guard:

1. threads and subprocesses: rlfunc starts none that make envs. ``make_vector_env`` is a ``SyncVectorEnv``
   (its constructors run in the caller's thread), so is a population's :class:`PopulationCollector`; no
   ``AsyncVectorEnv``, ``Thread`` or process pool exists in rlfunc. The first test records, for each env
   made and each module a config names, the thread it is made in and the guard's state there.
2. Ray actors of a resumed distributed R2D2 run (``rlfunc resume --address``): each actor makes its envs
   from the loaded config with no guard of its own, but the driver makes the same envs first, under the
   guard (``Trainer._make_envs`` in the learner's constructor), and is refused before any actor is asked
   for: the second and third tests, with a stand-in Ray that records each actor asked for, and on a real
   loopback Ray with the module on the workers' path (where an actor, were it started, could import it).
3. Ray tasks of a resumed sweep (``rlfunc sweep --resume``): each task re-enters the guard with the
   user's ``--allow-import`` (``train_or_continue``), for a fresh attempt (tests/test_review_security_sweep_s33.py)
   and, tested here, for a run it resumes from a checkpoint.

No path needed a change: these tests pass on the code as it was and record why it is safe. Each of the first
two fails if the trainer's envs are made in a worker thread instead (checked by hand in session 37).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
from pathlib import Path

import pytest
from helpers_ray import InstantRay
from test_review_security_resume_s33 import DIST as S33_DIST

import rlfunc
from rlfunc.envs import factory
from rlfunc.runtime.checkpoint import meta_checksum
from rlfunc.runtime.cli import main

SINGLE = {
    "agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 1, "agent.batch_size": 16,
    "train.total_steps": 64, "train.learning_starts": 48, "train.eval_every": 64, "train.eval_episodes": 1,
    "train.checkpoint_every": 64, "train.log_every": 64, "train.progress": False, "train.threads": 1,
    "train.tensorboard": False,
}
# test_review_security_resume_s33's distributed run with one actor and half its steps
DIST = {**S33_DIST, "distributed": {**S33_DIST["distributed"], "actors": 1},
        "train": {**S33_DIST["train"], "total_steps": 200}}
MODULE = "s37_guard_mod"
SOURCE = """
import os
from pathlib import Path
Path({markers!r}, str(os.getpid())).write_text("imported")
import gymnasium as gym


class Same(gym.Wrapper):
    pass
"""


# ----------------------------------------------------------------------------- helpers


@pytest.fixture
def hostile(tmp_path, monkeypatch):
    """A module on the path (and on ``PYTHONPATH``, for Ray workers) that leaves a file named by the
    importing process's pid in the returned directory when imported."""
    mods, markers = tmp_path / "mods", tmp_path / "markers"
    mods.mkdir()
    markers.mkdir()
    (mods / f"{MODULE}.py").write_text(SOURCE.format(markers=str(markers)))
    monkeypatch.syspath_prepend(str(mods))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(mods), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    return markers


def forge(src: Path, dst: Path, edit) -> Path:
    """A copy of the run ``src`` whose checkpoints' stored config ``edit`` changed, re-signed (as a hostile
    run directory can be: the checksum guards against damage, not against its author). Its config.yaml, a
    copy for people that a resume refuses to write over once edited, is left out."""
    shutil.copytree(src, dst)
    (dst / "config.yaml").unlink()
    for ckpt in sorted((dst / "checkpoints").glob("step_*")):
        meta = json.loads((ckpt / "meta.json").read_text())
        edit(meta["config"])
        meta["checksum"] = meta_checksum({k: v for k, v in meta.items() if k != "checksum"})
        (ckpt / "meta.json").write_text(json.dumps(meta))
    return dst


def naming(env: dict):
    """An edit of a stored config that sets its env section's keys ``env``."""
    return lambda config: config["env"].update(env)


def one_error_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if line.startswith("rlfunc: error:")]
    assert len(err) == 1, err
    return err[0]


ENVS = [
    pytest.param({"id": f"{MODULE}:CartPole-v1"}, id="env.id"),
    pytest.param({"wrappers": ["mask_velocity", f"{MODULE}:Same"]}, id="wrapper"),
]


# ----------------------------------------------------------------------------- 1. threads


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("s37") / "single"
    rlfunc.train(None, overrides=SINGLE, run_dir=run)
    return run


@pytest.fixture(scope="module")
def population(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("s37") / "population"
    rlfunc.train(None, overrides={**SINGLE, "train.population": {"seeds": [0, 1]}}, run_dir=run)
    return run


@pytest.fixture
def made(monkeypatch):
    """``(what, thread, guard)`` of each env made and each module a config names, as it happens; an
    ``AsyncVectorEnv`` (worker processes) fails the test."""
    import gymnasium as gym

    seen = []
    make_one, import_named = factory._make_one, factory._import_named

    def recording(what, fn):
        def call(*args, **kwargs):
            seen.append((what, threading.get_ident(), factory._LOADED.get()))
            return fn(*args, **kwargs)
        return call

    def no_async(*args, **kwargs):
        raise AssertionError("an AsyncVectorEnv was made")

    monkeypatch.setattr(factory, "_make_one", recording("env", make_one))
    monkeypatch.setattr(factory, "_import_named", recording("import", import_named))
    monkeypatch.setattr(gym.vector.AsyncVectorEnv, "__init__", no_async)
    return seen


def test_every_env_of_a_loaded_run_is_made_in_the_calling_thread_under_the_guard(
        single, population, tmp_path, monkeypatch, made, capsys):
    """eval, resume (a single run and a population), dataset collect and rlfunc.evaluate make each env,
    and import each module the stored config names, in the thread that entered the guard, with the
    user's allow list in force there (the guard does not reach other threads or processes)."""
    (tmp_path / "s37_allowed_mod.py").write_text("IMPORTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "s37_allowed_mod", raising=False)
    run = forge(single, tmp_path / "run", naming({"id": "s37_allowed_mod:Pendulum-v1"}))
    pop = Path(shutil.copytree(population, tmp_path / "pop"))
    allow = ["--allow-import", "s37_allowed_mod"]
    commands = [
        ["eval", str(run), "--episodes", "1", *allow],
        ["dataset", "collect", "--checkpoint", str(run), "--steps", "5", "--out", str(tmp_path / "d.npz"), *allow],
        ["resume", str(run), "--total-steps", "80", *allow],
        ["resume", str(pop), "--total-steps", "80"],
    ]
    main_thread = threading.get_ident()
    for argv in commands:
        made.clear()
        assert main(argv) == 0, (argv, capsys.readouterr().err)
        assert any(what == "env" for what, _, _ in made), argv
        assert all(thread == main_thread and guard is not None for _, thread, guard in made), (argv, made)
        if "s37_allowed_mod" in argv:
            assert ("import", main_thread, ("s37_allowed_mod",)) in made, (argv, made)
    made.clear()
    assert len(rlfunc.evaluate(run, episodes=1, allow_import=["s37_allowed_mod"])["returns"]) == 1
    assert made and all(thread == main_thread and guard == ("s37_allowed_mod",) for _, thread, guard in made), made


# ----------------------------------------------------------------------------- 2. Ray actors of a distributed run


@pytest.fixture(scope="module")
def distributed_run(tmp_path_factory) -> Path:
    """A tiny distributed R2D2 run, trained with its actors in this process (:class:`InstantRay`)."""
    pytest.importorskip("ray")
    from rlfunc.runtime.config import build_config
    from rlfunc.scale import distributed

    run = tmp_path_factory.mktemp("s37d") / "run"
    distributed.DistributedTrainer(build_config(DIST), run, None, InstantRay()).run()
    return run


class RecordingRay(InstantRay):
    """:class:`InstantRay` that records each actor asked for (its config's env section) before making it."""

    def __init__(self) -> None:
        self.actors: list[dict] = []

    def remote(self, cls):
        factory_ = super().remote(cls)
        asked = self.actors

        class Recorded:
            def options(self, **_):
                return self

            def remote(self, raw, *args):
                asked.append(raw["env"])
                return factory_.remote(raw, *args)

        return Recorded()


@pytest.fixture
def recording_ray(monkeypatch):
    """``rlfunc resume --address local`` gets a :class:`RecordingRay` where it would start Ray."""
    import importlib

    ray = RecordingRay()
    monkeypatch.setattr(importlib.import_module("rlfunc.scale.sweep"), "connect", lambda *a, **k: (ray, False))
    return ray


@pytest.mark.parametrize("env", ENVS)
def test_a_resumed_distributed_run_is_refused_by_the_driver_before_any_actor(
        distributed_run, tmp_path, hostile, recording_ray, capsys, env):
    """The actors make envs from the loaded config without a guard of their own; the driver makes the same
    envs first, under the guard, so a module the config names is refused before any actor is asked for.
    Allowed, the driver imports it and the actors are started with that config."""
    run = forge(distributed_run, tmp_path / "run", naming(env))
    assert main(["resume", str(run), "--address", "local", "--total-steps", "300"]) == 2
    line = one_error_line(capsys)
    assert f"--allow-import {MODULE}" in line, line
    assert recording_ray.actors == [] and list(hostile.iterdir()) == []
    assert main(["resume", str(run), "--address", "local", "--total-steps", "300", "--allow-import", MODULE]) == 0
    assert recording_ray.actors and all(MODULE in json.dumps(a) for a in recording_ray.actors)
    assert [p.name for p in hostile.iterdir()] == [str(os.getpid())]


@pytest.mark.xdist_group("ray")
def test_on_a_real_ray_no_process_imports_a_module_the_resumed_run_names(distributed_run, tmp_path, hostile):
    """End to end on a loopback Ray whose workers have the module on their ``PYTHONPATH``: refused, no process
    imports it (the driver refuses before any actor exists); allowed, the actor's process imports it too (it
    makes the envs the loaded config names), which is what the driver's refusal keeps from happening."""
    pytest.importorskip("ray")
    from rlfunc.scale.sweep import connect

    run = forge(distributed_run, tmp_path / "run", naming({"id": f"{MODULE}:CartPole-v1"}))
    ray, started = connect(None, num_cpus=2)  # loopback, no dashboard; started once for both resumes
    try:
        with pytest.raises(ValueError, match=f"--allow-import {MODULE} "):
            rlfunc.resume(run, address="local", total_steps=300)
        assert list(hostile.iterdir()) == []
        rlfunc.resume(run, address="local", total_steps=300, allow_import=[MODULE])
    finally:
        if started:
            ray.shutdown()
    pids = {p.name for p in hostile.iterdir()}
    assert str(os.getpid()) in pids and len(pids) >= 2, pids  # the driver, and the actor's process


# ----------------------------------------------------------------------------- 3. Ray tasks of a resumed sweep


@pytest.mark.parametrize("env", [
    pytest.param({"id": f"{MODULE}:Pendulum-v1"}, id="env.id"),
    pytest.param({"wrappers": [f"{MODULE}:Same"]}, id="wrapper"),
])
def test_a_resumed_sweeps_task_resuming_a_checkpoint_refuses_what_it_names(single, tmp_path, hostile, env):
    """A task of ``rlfunc sweep --resume`` runs in a Ray worker, where the driver's guard is not in force:
    ``train_or_continue`` (called here with no guard entered, as in a worker) resumes a run whose checkpoint
    names a module under the user's ``--allow-import`` only (here none), and refuses it."""
    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import ATTEMPTS_FILE, train_or_continue
    from test_review_sweep_faults import TINY, planned

    plan, sweep_dir = planned(tmp_path, TINY)
    entry = plan["runs"][0]
    forge(single, sweep_dir / entry["name"], naming(env))  # a run the sweep's earlier attempt checkpointed
    assert factory._LOADED.get() is None
    with pytest.raises((ValueError, ConfigError), match=f"--allow-import {MODULE} "):
        train_or_continue(plan, entry, [])
    assert list(hostile.iterdir()) == []
    attempts = (sweep_dir / ATTEMPTS_FILE).read_text().splitlines()
    assert [json.loads(line)["start"] for line in attempts] == ["resume"]  # the branch that resumes a checkpoint
