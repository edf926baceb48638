"""An embedded ``rlfunc sweep`` checks each distinct run's env, spaces and device on this machine
before Ray starts (``rlfunc.scale.sweep.check_runs_here``): a run that could never start is one
sentence and no sweep directory, not a failed task after the sweep began. With ``--address`` the
check is the workers' (they may have envs or devices this machine lacks). No Ray is started here:
``connect`` is replaced by a function that fails the test if reached."""

import importlib

import pytest
import yaml

from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError
sweep_mod = importlib.import_module("rlfunc.scale.sweep")  # the package exports the function as `sweep`

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {"total_steps": 400, "learning_starts": 100, "threads": 1, "tensorboard": False},
    "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture
def no_ray(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("Ray was started although a run could not start")

    monkeypatch.setattr(sweep_mod, "connect", refuse)
    monkeypatch.setattr(sweep_mod, "_import_ray", lambda: None)


@pytest.mark.parametrize("override, sentence", [
    ("env.id=CartPole-v1", "run g0-s0: REDQ, SAC and RLPD need a continuous"),
    ("env.kwargs.foo=1", "run g0-s0: Bad env.kwargs for 'Pendulum-v1'"),
    ("env.kwargs.g=abc", "failed at its first step"),
])
def test_a_run_that_cannot_start_here_is_one_sentence_before_ray(tiny, tmp_path, capsys, no_ray, override, sentence):
    sweep_dir = tmp_path / "sw"
    code = main(["sweep", str(tiny), "--seeds", "0-1", "--sweep-dir", str(sweep_dir), "--set", override])
    err = capsys.readouterr().err
    assert code != 0
    assert sentence in err, err
    assert len([line for line in err.splitlines() if line.strip()]) == 1, err
    assert not sweep_dir.exists()


def test_a_device_this_machine_lacks_is_refused_for_an_embedded_sweep(tiny, tmp_path, capsys, no_ray):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    code = main(["sweep", str(tiny), "--seeds", "0", "--sweep-dir", str(tmp_path / "sw"), "--set", "train.device=cuda"])
    err = capsys.readouterr().err
    assert code != 0 and "train.device=cuda" in err and "use 'cpu'" in err, err


def test_each_distinct_run_is_checked_once_and_the_bad_grid_point_is_named(tiny, monkeypatch):
    from rlfunc.runtime import trainer

    checked = []
    real = trainer.check_env_and_agent

    def counting(config, *args):
        checked.append((config.train.seed, tuple(config.agent.hidden_sizes)))
        real(config, *args)

    monkeypatch.setattr(trainer, "check_env_and_agent", counting)
    plan = sweep_mod.plan_sweep(str(tiny), "0-2", ["agent.hidden_sizes=[8,8],[16,16]"])
    sweep_mod.check_runs_here(plan)
    assert [h for _, h in checked] == [(8, 8), (16, 16)]  # seeds aside, one check per grid point

    bad = sweep_mod.plan_sweep(str(tiny), "0-1", ["env.id=Pendulum-v1,CartPole-v1"])
    with pytest.raises(ConfigError, match=r"^run g1-id=CartPole-v1-s0: REDQ, SAC and RLPD need a continuous"):
        sweep_mod.check_runs_here(bad)


def test_a_cluster_sweep_leaves_the_check_to_its_workers(tiny, tmp_path, monkeypatch):
    def must_not_check(plan):
        raise AssertionError("checked on the head of a cluster sweep")

    class Joined(Exception):
        pass

    def joined(*args, **kwargs):
        raise Joined()

    monkeypatch.setattr(sweep_mod, "check_runs_here", must_not_check)
    monkeypatch.setattr(sweep_mod, "_import_ray", lambda: None)
    monkeypatch.setattr(sweep_mod, "_prepare_join", lambda address: None)
    monkeypatch.setattr(sweep_mod, "connect", joined)
    with pytest.raises(Joined):
        sweep_mod.sweep(str(tiny), "0", overrides=["env.id=CartPole-v1"], sweep_dir=tmp_path / "sw",
                        address="ray://127.0.0.1:1")
