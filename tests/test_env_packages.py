"""Envs from other packages: gymnasium's ``module:env-id`` form in train, eval, resume and dataset
collection, one-sentence import errors, and "did you mean" suggestions that stay on the same task."""

from __future__ import annotations

import dataclasses
import sys

import gymnasium as gym
import numpy as np
import pytest
import yaml

from rlfunc.envs import check_env_id, make_env, split_env_id, suggest_env_ids
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, TrainSection, build_config

MODULE = "pkg_envs_example"  # tests/pkg_envs_example.py: registers PkgReach-v0 and PkgReachBox-v0 on import
IDS = ("PkgReach-v0", "PkgReachBox-v0")


def _forget_module() -> None:
    """As if the package had never been imported in this process: its ids are unknown again."""
    sys.modules.pop(MODULE, None)
    for env_id in IDS:
        gym.registry.pop(env_id, None)


@pytest.fixture(autouse=True)
def fresh_registry():
    _forget_module()
    yield
    _forget_module()


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlfunc: error: "), err
    return err[0]


# -- module:env-id ---------------------------------------------------------------------------


def test_module_form_imports_the_module_then_finds_the_id():
    with pytest.raises(ValueError, match="Unknown environment id 'PkgReach-v0'; if a package registers it, write 'package:PkgReach-v0'"):
        check_env_id("PkgReach-v0")
    assert MODULE not in sys.modules
    check_env_id(f"{MODULE}:PkgReach-v0")
    assert MODULE in sys.modules and "PkgReach-v0" in gym.registry
    env = make_env(f"{MODULE}:PkgReachBox-v0", seed=0)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and env.action_space.high.tolist() == [1.0]  # rescaled from [-2, 2]
    assert split_env_id(f"{MODULE}:PkgReach-v0") == (MODULE, "PkgReach-v0")
    assert split_env_id("dmc/cartpole_balance-v0") == (None, "dmc/cartpole_balance-v0")


def test_gymnasium_itself_accepts_what_rlfunc_accepts():
    """The form is gymnasium's own: gym.make imports the module as rlfunc's check does."""
    env = gym.make(f"{MODULE}:PkgReachBox-v0")
    assert env.spec.id == "PkgReachBox-v0"
    check_env_id("gymnasium:Pendulum-v1")


def test_import_failures_are_one_sentence_naming_the_module(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "needs_missing_dep.py").write_text("import surely_not_installed_pkg_xyz\n")
    (tmp_path / "raises_on_import.py").write_text("raise RuntimeError('no licence\\nfound')\n")
    (tmp_path / "registers_nothing.py").write_text("X = 1\n")
    cases = {
        "surely_absent_mod:Foo-v0": "Environment id 'surely_absent_mod:Foo-v0' names module 'surely_absent_mod', which is not installed; pip install the package that provides it, or fix the module name.",
        "surely_absent_mod.sub:Foo-v0": "names module 'surely_absent_mod.sub', which is not installed",
        "needs_missing_dep:Foo-v0": "names module 'needs_missing_dep', whose import needs 'surely_not_installed_pkg_xyz', which is not installed",
        "raises_on_import:Foo-v0": "names module 'raises_on_import', and importing it failed with RuntimeError: no licence found.",
        "registers_nothing:Foo-v0": "importing 'registers_nothing' registered no such id (it must call gymnasium.register('Foo-v0', ...))",
        "a:b:Foo-v0": "has 2 ':'; write it as module:Env-v0",
        ":Foo-v0": "names module '', which is not a Python module name",
        "9lives:Foo-v0": "names module '9lives', which is not a Python module name",
        "registers_nothing:": "names no environment after ':'",
    }
    for env_id, message in cases.items():
        with pytest.raises(ValueError) as info:
            check_env_id(env_id)
        text = str(info.value)
        assert message in text, (env_id, text)
        assert "\n" not in text and text.endswith((".", ")")), text


def test_an_env_whose_dependency_is_missing_is_one_sentence(tmp_path, monkeypatch, capsys):
    """A registered env that cannot be made (its entry point's module or a package it needs is absent)
    is the user's to fix: one line, exit 2, not a traceback."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pkg_needs_dep.py").write_text(
        "import gymnasium as gym\n"
        "class NeedsDep(gym.Env):\n"
        "    def __init__(self):\n"
        "        raise gym.error.DependencyNotInstalled('fancy_sim is not installed, run `pip install fancy_sim`')\n"
        "if 'NeedsDep-v0' not in gym.registry:\n"
        "    gym.register('NeedsDep-v0', entry_point=NeedsDep)\n"
        "    gym.register('LazyDep-v0', entry_point='surely_absent_sim_pkg.envs:Sim')\n"
    )
    with pytest.raises(ValueError, match=r"Environment 'pkg_needs_dep:NeedsDep-v0' needs a package that is not installed \(fancy_sim is not installed, run `pip install fancy_sim`\); install what it names\."):
        make_env("pkg_needs_dep:NeedsDep-v0")
    with pytest.raises(ValueError, match="could not be made: it needs 'surely_absent_sim_pkg', which is not installed"):
        make_env("pkg_needs_dep:LazyDep-v0")
    out = tmp_path / "d.npz"
    assert main(["dataset", "collect", "--env", "pkg_needs_dep:NeedsDep-v0", "--policy", "random", "--steps", "5", "--out", str(out)]) == 2
    assert "needs a package that is not installed" in _one_line_error(capsys)
    for env_id in ("NeedsDep-v0", "LazyDep-v0"):
        gym.registry.pop(env_id, None)
    sys.modules.pop("pkg_needs_dep", None)


def test_a_module_in_the_current_directory_but_off_the_path_is_explained(tmp_path, monkeypatch):
    """`rlfunc` (the console script) does not put the current directory on sys.path; say so."""
    (tmp_path / "my_local_envs.py").write_text("")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    with pytest.raises(ValueError, match=r"not on the Python path, though \./my_local_envs\.py is in the current directory; run with PYTHONPATH=\."):
        check_env_id("my_local_envs:Foo-v0")


def test_config_refuses_a_bad_module_before_training(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", "--set", "algo=sac", "--set", "env.id=surely_absent_mod:Foo-v0", "--run-dir", str(run)]) == 2
    line = _one_line_error(capsys)
    assert "env.id: Environment id 'surely_absent_mod:Foo-v0' names module 'surely_absent_mod', which is not installed" in line
    assert not run.exists()
    with pytest.raises(ConfigError, match="did you mean 'pkg_envs_example:PkgReach-v0'"):
        build_config({"algo": "sac", "env": {"id": f"{MODULE}:PkgRech-v0"}})


# -- suggestions -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed, suggested",
    [
        ("HalfCheetah-v9", ["HalfCheetah-v5"]),  # same env, another version
        ("Pendulum-v0", ["Pendulum-v1"]),
        ("Pendulum", ["Pendulum-v1"]),  # no version: the highest
        ("Hoper-v5", ["Hopper-v5"]),  # a misspelling, same version
        ("Hoper-v9", ["Hopper-v5"]),  # a misspelling at a version it lacks: its highest
        ("walker2D-v5", ["Walker2d-v5"]),  # case
        ("CartPoel-v1", ["CartPole-v1"]),  # two letters swapped
        ("dmc/reacher_esy-v0", ["dmc/reacher_easy-v0"]),
        ("Walker-v5", []),  # Walker2d is another task
        ("Walker3d-v5", []),  # a digit names another task
        ("GymV22Environment-v0", []),
        ("dmc/reacher_medium-v0", []),  # neither reacher_easy nor reacher_hard
        ("Humanoid-v5x", []),
        ("Cheetah-v5", []),  # not HalfCheetah
        ("Fooo-v0", []),
    ],
)
def test_suggestions_stay_on_the_same_task(typed, suggested):
    assert suggest_env_ids(typed) == suggested
    with pytest.raises(ValueError) as info:
        check_env_id(typed)
    if suggested:
        assert str(info.value).endswith(f"did you mean {suggested[0]!r}?")
    else:
        assert "did you mean" not in str(info.value)


# -- end to end through the CLI --------------------------------------------------------------


def _warmup_key() -> str:
    names = {f.name for f in dataclasses.fields(TrainSection)}
    return "learning_starts" if "learning_starts" in names else "random_steps"


def _config(tmp_path) -> str:
    raw = {
        "algo": "sac",
        "env": {
            "id": f"{MODULE}:PkgReach-v0",
            "wrappers": [
                "flatten",  # Dict(position Box(1), target Discrete(3)) -> Box(4): one-hot target
                {"clip_reward": {"min_reward": -1, "max_reward": 1}},
                {"time_limit": {"max_episode_steps": 40}},
            ],
        },
        "train": {
            "total_steps": 300,
            _warmup_key(): 100,
            "eval_every": 150,
            "eval_episodes": 2,
            "checkpoint_every": 150,
            "progress": False,
            "threads": 1,
        },
        "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
    }
    path = tmp_path / "pkg.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def test_train_eval_resume_and_collect_a_package_env(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["train", _config(tmp_path), "--run-dir", str(run)]) == 0
    assert "env steps: 300" in capsys.readouterr().out
    stored = yaml.safe_load((run / "config.yaml").read_text())
    assert stored["env"]["id"] == f"{MODULE}:PkgReach-v0"
    evals = (run / "eval.csv").read_text().splitlines()
    col = evals[0].split(",").index("mean_return")
    assert len(evals) == 3  # steps 150 and 300
    # every eval return is a sum of rewards clipped to [-1, 0] over at most 40 steps (the wrappers ran)
    assert all(-40.0 <= float(row.split(",")[col]) <= 0.0 for row in evals[1:])

    _forget_module()  # a new process: only the stored config can bring the env back
    assert main(["eval", str(run), "--episodes", "2"]) == 2  # a module a loaded file names is not imported unasked
    assert f"--allow-import {MODULE}" in _one_line_error(capsys)
    assert MODULE not in sys.modules
    assert main(["eval", str(run), "--episodes", "2", "--allow-import", MODULE]) == 0
    assert "mean return" in capsys.readouterr().out
    assert MODULE in sys.modules

    _forget_module()
    assert main(["resume", str(run), "--total-steps", "450", "--allow-import", MODULE]) == 0
    assert "env steps: 450" in capsys.readouterr().out

    _forget_module()
    out = tmp_path / "box.npz"
    assert main(["dataset", "collect", "--env", f"{MODULE}:PkgReachBox-v0", "--policy", "random", "--steps", "120",
                 "--out", str(out)]) == 0
    capsys.readouterr()
    with np.load(out) as data:
        assert str(data["env_id"]) == f"{MODULE}:PkgReachBox-v0"
        assert data["observations"].shape == (120, 2) and data["timeouts"].any()  # its registered 50-step limit

    _forget_module()
    wrapped = tmp_path / "wrapped.npz"
    assert main(["dataset", "collect", "--checkpoint", str(run), "--policy", "random", "--steps", "60",
                 "--allow-import", MODULE, "--out", str(wrapped)]) == 0
    capsys.readouterr()
    with np.load(wrapped) as data:
        assert data["observations"].shape == (60, 4)  # the run's flatten wrapper
        assert np.abs(data["rewards"]).max() <= 1.0  # and its clip_reward
        target = data["observations"][:, 1:]
        assert set(target.sum(axis=1).tolist()) == {1.0}  # one-hot

    # an env rlfunc cannot store without the run's wrappers: one sentence naming the way
    assert main(["dataset", "collect", "--env", f"{MODULE}:PkgReach-v0", "--policy", "random", "--steps", "10",
                 "--out", str(tmp_path / "no.npz")]) == 2
    assert "has Dict observations and Box actions" in _one_line_error(capsys)
    assert not (tmp_path / "no.npz").exists()


def test_resume_of_a_run_whose_module_is_gone_is_one_line(tmp_path, capsys, monkeypatch):
    run = tmp_path / "run"
    cfg = yaml.safe_load(open(_config(tmp_path)))
    cfg["train"]["total_steps"] = 150
    cfg["train"]["checkpoint_every"] = 150
    path = tmp_path / "short.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(path), "--run-dir", str(run)]) == 0
    capsys.readouterr()
    _forget_module()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not p.rstrip("/").endswith("tests")])
    assert main(["resume", str(run), "--total-steps", "300", "--allow-import", MODULE]) == 2
    assert "names module 'pkg_envs_example', which is not installed" in _one_line_error(capsys)
