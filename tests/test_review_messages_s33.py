"""Session 33 review of error messages: each bad input is one sentence saying what to change, said
before anything is trained or read (an empty train.device, an unknown algorithm, a sweep directory
that does not exist, install hints quoted one way, a missing logger package on resume)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, build_config

ROOT = Path(__file__).resolve().parents[1]
ENV = {"id": "Pendulum-v1"}

TINY = [
    "--set", "agent.hidden_sizes=[16,16]", "--set", "agent.num_critics=2", "--set", "agent.updates_per_step=1",
    "--set", "agent.batch_size=16", "--set", "train.total_steps=64", "--set", "train.learning_starts=48",
    "--set", "train.eval_every=64", "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=64",
    "--set", "train.threads=1",
]


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# -- 1. an empty train.device ------------------------------------------------------------------------


def test_empty_device_names_the_key_and_its_valid_values(tmp_path, capsys):
    # was: "train.device must not be empty (null)." (nothing about what to set)
    rc = main(["train", "--run-dir", str(tmp_path / "r"), *TINY, "--set", "train.device="])
    err = _one_line(capsys)
    assert rc == 2, err
    assert err == ("rlfunc: error: train.device must not be empty; set it to cpu, cuda, cuda:N (N a GPU index) "
                   "or mps, e.g. --set train.device=cpu."), err
    assert not (tmp_path / "r").exists()


def test_every_device_the_message_names_is_accepted():
    from rlfunc.runtime.config import TrainSection

    for device in ("cpu", "cuda", "cuda:0", "mps"):  # the config takes them; the trainer checks this machine has one
        assert TrainSection(device=device).device == device


def test_other_empty_keys_name_their_type_and_how_to_set_them():
    with pytest.raises(ConfigError, match=r"^train\.total_steps must not be empty; set it to a value of type int, "
                                          r"e\.g\. --set train\.total_steps=VALUE\.$"):
        build_config({"algo": "redq", "env": ENV, "train": {"total_steps": None}})


# -- 2. an unknown algorithm ------------------------------------------------------------------------


def test_unknown_algo_lists_the_names_as_words(capsys):
    # was: "Unknown algo 'foo'; choose one of ['dqn', 'drqn', ...]." (a Python list)
    assert main(["algos", "foo"]) == 2
    err = _one_line(capsys)
    assert err == "rlfunc: error: Unknown algo 'foo'; choose one of dqn, drqn, drqv2, r2d2, redq, rlpd, sac.", err


# -- 3. sweep --resume of something that is not a sweep ---------------------------------------------------


@pytest.fixture
def no_ray(monkeypatch):
    """These refusals come before Ray is imported: they read the same with Ray missing."""
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError


def test_sweep_resume_of_a_missing_directory_says_it_does_not_exist(tmp_path, capsys, no_ray):
    # was: "'.../nope' holds no sweep.json; ..." for a path that is not there at all
    missing = tmp_path / "nope"
    assert main(["sweep", "--resume", str(missing)]) == 2
    err = _one_line(capsys)
    assert f"--resume {str(missing)!r} does not exist; pass the directory an earlier `rlfunc sweep` wrote" in err, err
    assert "sweep.json" not in err and not missing.exists()


def test_sweep_resume_of_a_directory_without_a_plan_is_not_a_sweep_directory(tmp_path, capsys, no_ray):
    assert main(["sweep", "--resume", str(tmp_path)]) == 2
    err = _one_line(capsys)
    assert f"--resume {str(tmp_path)!r} is not a sweep directory (it holds no sweep.json); pass the directory" in err
    (tmp_path / "f").write_text("x")
    assert main(["sweep", "--resume", str(tmp_path / "f")]) == 2
    assert "is a file, not a sweep directory" in _one_line(capsys)


def test_sweep_resume_of_a_run_inside_a_sweep_names_the_sweep(tmp_path, capsys, no_ray):
    (tmp_path / "sweep.json").write_text("{}")
    (tmp_path / "run-s0").mkdir()
    assert main(["sweep", "--resume", str(tmp_path / "run-s0")]) == 2
    err = _one_line(capsys)
    assert err.endswith(f"pass its parent, `rlfunc sweep --resume {tmp_path}`."), err


# -- 4. install hints: one quoting, the README's ------------------------------------------------------------


def test_install_hints_are_quoted_as_the_readme_quotes_them():
    assert 'pip install torch==2.13.0 -e ".[test,plots]"' in (ROOT / "README.md").read_text()
    single = re.compile(r"""pip install (-e )?'[^']*\[""")
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "rlfunc").rglob("*.py")]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text().splitlines(), 1) if single.search(line)]
    assert not found, found


def test_the_hint_constants_use_double_quotes():
    from rlfunc.envs.dmc import DMC_INSTALL_HINT
    from rlfunc.envs.minatar import MINATAR_INSTALL_HINT
    from rlfunc.replay.offline import _MINARI_EXTRA

    assert DMC_INSTALL_HINT.startswith('pip install -e ".[dmc]"')
    assert MINATAR_INSTALL_HINT.startswith('pip install -e ".[minatar]"')
    assert _MINARI_EXTRA.startswith('pip install -e ".[minari]"')


# -- 5. resume: a missing logger package before the checkpoint is read ------------------------------------------


def test_resume_without_tensorboard_refuses_before_reading_a_checkpoint(tmp_path, monkeypatch, capsys):
    from rlfunc.runtime import checkpoint, population, trainer

    run = tmp_path / "tb"
    assert main(["train", "--run-dir", str(run), *TINY, "--set", "train.progress=false"]) == 0
    capsys.readouterr()
    loaded = []

    def spy(*args, **kwargs):
        loaded.append(args)
        raise AssertionError("a checkpoint was read before the package check")

    for module in (checkpoint, trainer, population):
        for name in ("load_checkpoint", "load_newest_good"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, spy)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    before = sorted(p.name for p in run.iterdir())
    assert main(["resume", str(run), "--total-steps", "80"]) == 2
    err = _one_line(capsys)
    assert "train.tensorboard is on" in err and "pip install tensorboard) to resume this run." in err, err
    assert loaded == []
    assert sorted(p.name for p in run.iterdir()) == before


@pytest.mark.parametrize("kind", ["python_api", "population"])
def test_resume_refuses_a_missing_logger_package_before_reading_a_checkpoint_from_python_and_for_populations(
        tmp_path, monkeypatch, capsys, kind):
    """The check sits in the resume itself (``rlfunc.resume`` and a population's resume), not only in the CLI."""
    import rlfunc
    from rlfunc.runtime import checkpoint, population, trainer

    run = tmp_path / kind
    seeds = ["--seeds", "0-1"] if kind == "population" else []
    assert main(["train", "--run-dir", str(run), *TINY, *seeds, "--set", "train.progress=false"]) == 0
    capsys.readouterr()

    def spy(*args, **kwargs):
        raise AssertionError("a checkpoint was read before the package check")

    for module in (checkpoint, trainer, population):
        if hasattr(module, "load_newest_good"):
            monkeypatch.setattr(module, "load_newest_good", spy)
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ConfigError, match=r"train\.tensorboard is on.*pip install tensorboard\) to resume this run\."):
        rlfunc.resume(run, total_steps=80)
