"""A user whose environment lacks an optional (or a broken core) package: every command that needs it
says so in one sentence naming the install command, exit code 2, before anything is trained or
written; commands that do not need it still work. The package is hidden in this process
(``sys.modules[name] = None``: ``import name`` raises ImportError, ``find_spec`` returns None)."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import pytest

from rlfunc.runtime.checkpoint import meta_checksum
from rlfunc.runtime.cli import main

TINY = [
    "--set", "agent.hidden_sizes=[16,16]", "--set", "agent.num_critics=2", "--set", "agent.updates_per_step=1",
    "--set", "agent.batch_size=16", "--set", "train.total_steps=64", "--set", "train.learning_starts=48",
    "--set", "train.eval_every=64", "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=64",
    "--set", "train.threads=1",
]


def _hide(monkeypatch, *names: str) -> None:
    for name in names:
        monkeypatch.setitem(sys.modules, name, None)


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# -- TensorBoard and tqdm: core dependencies, on by default (train.tensorboard, train.progress) ------------


@pytest.mark.parametrize("key, hidden, other", [
    ("tensorboard", ("tensorboard", "torch.utils.tensorboard"), "progress"),
    ("progress", ("tqdm",), "tensorboard"),
])
def test_training_without_a_logger_package_is_one_sentence_before_the_run_dir(tmp_path, monkeypatch, capsys, key,
                                                                               hidden, other):
    # was: a ModuleNotFoundError traceback from the logger once training started, exit 1 ("a bug in rlfunc")
    _hide(monkeypatch, *hidden)
    rc = main(["train", "--run-dir", str(tmp_path / "r"), *TINY, "--set", f"train.{other}=false"])
    err = _one_line(capsys)
    assert rc == 2, err
    assert f"train.{key}" in err and "pip install -e ." in err and f"train.{key}=false" in err
    assert not (tmp_path / "r").exists()


def test_without_tensorboard_and_tqdm_training_with_them_off_still_works(tmp_path, monkeypatch, capsys):
    _hide(monkeypatch, "tensorboard", "torch.utils.tensorboard", "tqdm")
    run = tmp_path / "r"
    rc = main(["train", "--run-dir", str(run), *TINY, "--set", "train.tensorboard=false", "--set", "train.progress=false"])
    assert rc == 0, capsys.readouterr().err
    assert (run / "eval.csv").is_file() and not list(run.glob("events.out.tfevents.*"))


# -- W&B: a stored config naming train.wandb -------------------------------------------------------------


@pytest.fixture(scope="module")
def wandb_run(tmp_path_factory):
    """A tiny run whose checkpoint's config names train.wandb (as a run trained with W&B has), made
    without W&B: the stored config edited and re-signed."""
    run = tmp_path_factory.mktemp("wb") / "run"
    assert main(["train", "--run-dir", str(run), *TINY, "--set", "train.tensorboard=false",
                 "--set", "train.progress=false"]) == 0
    meta_path = next((run / "checkpoints").glob("step_*")) / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["config"]["train"]["wandb"] = {"mode": "offline", "project": "x"}
    meta["checksum"] = meta_checksum({k: v for k, v in meta.items() if k != "checksum"})
    meta_path.write_text(json.dumps(meta))
    return run


def test_eval_export_and_load_of_a_wandb_run_need_no_wandb(wandb_run, tmp_path, monkeypatch, capsys):
    # was: "Checkpoint ... holds a config this rlfunc rejects: train.wandb is set but wandb is not installed", exit 2
    import rlfunc

    _hide(monkeypatch, "wandb")
    assert main(["eval", str(wandb_run), "--episodes", "1"]) == 0, capsys.readouterr().err
    assert main(["export", str(wandb_run), "--out", str(tmp_path / "x")]) == 0, capsys.readouterr().err
    assert main(["dataset", "collect", "--checkpoint", str(wandb_run), "--steps", "20",
                 "--out", str(tmp_path / "d.npz")]) == 0, capsys.readouterr().err
    policy = rlfunc.load(wandb_run)
    assert policy.run_config.train.wandb == {"mode": "offline", "project": "x"}


def test_resume_of_a_wandb_run_without_wandb_is_one_sentence(wandb_run, monkeypatch, capsys):
    _hide(monkeypatch, "wandb")
    before = sorted(p.name for p in wandb_run.iterdir())
    assert main(["resume", str(wandb_run), "--total-steps", "80"]) == 2
    err = _one_line(capsys)
    assert 'pip install -e ".[wandb]" to resume this run.' in err
    assert sorted(p.name for p in wandb_run.iterdir()) == before


def test_resume_without_tensorboard_is_one_sentence(wandb_run, monkeypatch, capsys, tmp_path):
    """A run trained with TensorBoard (the default) resumed where it is missing."""
    run = tmp_path / "tb"
    assert main(["train", "--run-dir", str(run), *TINY, "--set", "train.progress=false"]) == 0
    _hide(monkeypatch, "tensorboard", "torch.utils.tensorboard")
    capsys.readouterr()
    assert main(["resume", str(run), "--total-steps", "80"]) == 2
    assert "pip install tensorboard) to resume this run." in _one_line(capsys)


# -- plot without matplotlib --------------------------------------------------------------------------------


def test_plot_without_matplotlib_is_one_sentence_naming_the_extra(tmp_path, monkeypatch, capsys):
    # was: RuntimeError "Plotting needs matplotlib" as a traceback, exit 1 ("a bug in rlfunc")
    _hide(monkeypatch, "matplotlib", "matplotlib.pyplot")
    out = tmp_path / "p.png"
    assert main(["plot", str(tmp_path), "--out", str(out)]) == 2
    assert _one_line(capsys) == ('rlfunc: error: rlfunc plot needs matplotlib, which is not installed; '
                                 'install it with pip install -e ".[plots]".')
    assert not out.exists()


# -- env packages of the packaged configs: DMC, Atari ------------------------------------------------------


def test_dmc_without_dm_control_is_one_sentence_naming_the_extra(tmp_path, monkeypatch, capsys):
    # was: RuntimeError traceback from rlfunc.envs.dmc.load_suite, exit 1 ("a bug in rlfunc")
    monkeypatch.setenv("MUJOCO_GL", "egl")
    _hide(monkeypatch, "dm_control")
    rc = main(["train", "drqv2/walker_walk", "--run-dir", str(tmp_path / "r"), "--set", "train.total_steps=300",
               "--set", "train.learning_starts=10", "--set", "train.progress=false"])
    err = _one_line(capsys)
    assert rc == 2, err
    assert 'pip install -e ".[dmc]"' in err and "dmc/walker_walk-v0" in err
    assert not (tmp_path / "r").exists()


def test_dmc_without_a_headless_gl_library_is_one_sentence(monkeypatch):
    import ctypes.util

    from rlfunc.envs.factory import make_env

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(ValueError, match=r"^Environment 'dmc/cartpole_balance-v0' needs .*apt-get install"):
        make_env("dmc/cartpole_balance-v0")


def test_atari_without_ale_py_names_the_atari_extra(tmp_path, monkeypatch, capsys):
    # was: "... names module 'ale_py', which is not installed; pip install the package that provides it, ..."
    _hide(monkeypatch, "ale_py")
    rc = main(["train", "r2d2/atari_pong", "--run-dir", str(tmp_path / "r"), "--set", "train.total_steps=300",
               "--set", "train.learning_starts=10"])
    err = _one_line(capsys)
    assert rc == 2 and err.endswith('install it with pip install -e ".[atari]".'), err


def test_atari_preprocessing_without_opencv_names_the_atari_extra(monkeypatch):
    # was: "... refused the env or its arguments (opencv-python package not installed ...); fix the arguments or
    # remove the wrapper."
    from rlfunc.envs.factory import build_wrappers, make_env

    class NeedsOpenCV(gym.Wrapper):
        def __init__(self, env):
            raise gym.error.DependencyNotInstalled(
                'opencv-python package not installed, run `pip install "gymnasium[other]"` to get dependencies for atari'
            )

    monkeypatch.setattr(gym.wrappers, "AtariPreprocessing", NeedsOpenCV)
    wrappers = build_wrappers(["gymnasium.wrappers.AtariPreprocessing"])
    with pytest.raises(ValueError, match=r'needs a package that is not installed .*; install it with pip install -e "\.\[atari\]"\.$'):
        make_env("CartPole-v1", wrappers=wrappers)
