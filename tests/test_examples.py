"""Smoke tests of the single-file examples (rlfunc/examples/): each runs as
``python -m rlfunc.examples.<name> [--flags]`` for a few hundred steps at tiny sizes.

They run in this process through :func:`runpy.run_module` with ``__name__ ==
"__main__"`` (exactly what ``python -m`` executes, without a new interpreter
per script). DrQ-v2 on DeepMind Control skips without dm-control.
"""

from __future__ import annotations

import dataclasses
import importlib
import re
import runpy
import sys
import warnings
from pathlib import Path

import pytest
import torch

torch.set_num_threads(1)

EXAMPLES = ["redq_pendulum", "redq_population", "rlpd_pendulum", "drqn_cartpole", "r2d2_cartpole", "drqv2_dmc"]
EXAMPLES_DIR = Path(__file__).resolve().parents[1] / "rlfunc" / "examples"


def run_example(name: str, argv: list[str], monkeypatch, capsys) -> list[tuple[int, float]]:
    """Run ``python -m rlfunc.examples.<name> *argv`` in-process; returns the printed (step, eval) pairs."""
    monkeypatch.setattr(sys, "argv", [f"rlfunc.examples.{name}", *argv])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "found in sys.modules" when another test imported it
        runpy.run_module(f"rlfunc.examples.{name}", run_name="__main__")
    out = capsys.readouterr().out
    return [(int(s), float(r)) for s, r in re.findall(r"^step (\d+).*?eval (\S+)", out, flags=re.M)]


def test_redq_example_runs(monkeypatch, capsys):
    argv = ["--total-steps", "200", "--learning-starts", "100", "--num-critics", "3", "--updates-per-step", "2",
            "--batch-size", "16", "--hidden", "16", "--eval-every", "100", "--eval-episodes", "1"]
    evals = run_example("redq_pendulum", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [100, 200] and all(-2000 < r <= 0 for _, r in evals)


@pytest.mark.compile
def test_redq_population_example_runs_compiled(monkeypatch, capsys):
    """Four members (two seeds x two critic rates) in one process, the vmapped steps compiled."""
    argv = ["--seeds", "0", "1", "--critic-lrs", "3e-4", "1e-3", "--total-steps", "200", "--learning-starts", "100",
            "--num-critics", "3", "--updates-per-step", "2", "--batch-size", "16", "--hidden", "16",
            "--eval-every", "100", "--eval-episodes", "1", "--compile"]
    monkeypatch.setattr(sys, "argv", ["rlfunc.examples.redq_population", *argv])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        runpy.run_module("rlfunc.examples.redq_population", run_name="__main__")
    out = capsys.readouterr().out
    assert "4 members (seed, critic_lr): (0, 0.0003), (0, 0.001), (1, 0.0003), (1, 0.001)" in out
    rows = re.findall(r"^step (\d+)  eval (\S+) (\S+) (\S+) (\S+) ", out, flags=re.M)
    assert [int(r[0]) for r in rows] == [100, 200]
    assert all(-2000 < float(x) <= 0 for r in rows for x in r[1:])


def test_rlpd_example_runs(tmp_path, monkeypatch, capsys):
    from rlfunc.runtime.dataset import collect

    data = collect(tmp_path / "prior.npz", env_id="Pendulum-v1", steps=300, policy="random", seed=1)["path"]
    argv = ["--data-path", data, "--total-steps", "200", "--learning-starts", "100", "--num-critics", "3",
            "--updates-per-step", "2", "--batch-size", "16", "--hidden", "16", "--eval-every", "100",
            "--eval-episodes", "1"]
    evals = run_example("rlpd_pendulum", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [100, 200]


def test_rlpd_example_without_data_is_a_clear_error(monkeypatch, capsys):
    with pytest.raises(SystemExit, match="needs prior data"):
        run_example("rlpd_pendulum", ["--total-steps", "10"], monkeypatch, capsys)


def test_drqn_example_runs(monkeypatch, capsys):
    argv = ["--num-envs", "2", "--total-steps", "300", "--learning-starts", "100", "--batch-size", "4",
            "--lstm-size", "8", "--replay-size", "200", "--eval-every", "150", "--eval-episodes", "1"]
    evals = run_example("drqn_cartpole", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [150, 300] and all(r >= 1 for _, r in evals)


def test_r2d2_example_runs(monkeypatch, capsys):
    argv = ["--num-envs", "2", "--total-steps", "300", "--width", "8", "--burn-in", "2", "--sequence-length", "4",
            "--sequence-period", "2", "--batch-size", "4", "--replay-size", "200", "--learning-starts", "10",
            "--eval-every", "150", "--eval-episodes", "1"]
    evals = run_example("r2d2_cartpole", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [150, 300]


TINY_DRQV2 = ["--size", "16", "--frame-stack", "2", "--batch-size", "8", "--channels", "4", "--convs", "2",
              "--feature-dim", "8", "--hidden-dim", "16", "--replay-size", "2000", "--eval-episodes", "1"]


def test_drqv2_example_runs_on_a_gymnasium_pixel_env(monkeypatch, capsys):
    argv = ["--env-id", "Pendulum-v1", *TINY_DRQV2, "--total-steps", "200", "--learning-starts", "100",
            "--eval-every", "100"]
    evals = run_example("drqv2_dmc", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [100, 200]


def test_drqv2_example_runs_on_dmc(monkeypatch, capsys):
    pytest.importorskip("dm_control", reason="dm-control not installed: pip install -e '.[dmc]'")
    argv = [*TINY_DRQV2, "--action-repeat", "8", "--fast-render", "--total-steps", "40", "--learning-starts", "20",
            "--eval-every", "40"]
    evals = run_example("drqv2_dmc", argv, monkeypatch, capsys)
    assert [s for s, _ in evals] == [40] and evals[0][1] >= 0.0  # DMC rewards are in [0, 1] per frame


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_are_short_typed_and_documented(name, capsys):
    """Each script stays short, documents every flag, has --compile, and uses no private rlfunc names."""
    path = EXAMPLES_DIR / f"{name}.py"
    source = path.read_text()
    assert len(source.splitlines()) < 150, f"{path.name} grew to {len(source.splitlines())} lines"
    assert not re.search(r"rlfunc\.\S*\._|from rlfunc\S* import _", source), "examples use only public names"
    module = importlib.import_module(f"rlfunc.examples.{name}")
    fields = dataclasses.fields(module.Args)
    assert all(f.metadata.get("help") for f in fields)
    assert all(f.type in (int, float, str, bool, list[int], list[float]) for f in fields)  # lists: nargs="+"
    assert module.parse_args(["--compile"]).compile is True and module.parse_args([]).compile is False
    with pytest.raises(SystemExit):
        module.parse_args(["--help"])
    assert "--total-steps" in capsys.readouterr().out
