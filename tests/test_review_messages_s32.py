"""Review of bad inputs (session 32), each a Python error or a misleading sentence before: ``resume`` of a
run's ``checkpoints/`` (or of one checkpoint in it), described as having "no checkpoints/ to resume
from"; ``eval``/``export``/``dataset collect``/``plot`` of a sweep's directory, described as holding no
checkpoint or no eval.csv; ``rlfunc.train(3)`` (or ``""``, ``b"path"``) raising pathlib's TypeError (or
reading ``""`` as the current directory); the population API's ``seeds=3``/``grid="k=v1,v2"`` raising
"'int' object is not iterable"; ``allow_import=3`` to resume/dataset collect raising the same; and
``rlfunc.evaluate(policy, env_id=<another env>)`` failing at the first step with a sentence asking for
"observations of the env it was trained on" the caller never passed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import rlfunc
from rlfunc.runtime import population
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError

SETS = {"algo": "sac", "agent.hidden_sizes": [8], "agent.batch_size": 4, "train.total_steps": 20,
        "train.learning_starts": 10, "train.eval_every": 20, "train.eval_episodes": 1,
        "train.checkpoint_every": 20, "train.progress": False, "train.threads": 1,
        "train.tensorboard": False, "env.kwargs.max_episode_steps": 10}


def refusal(capsys) -> str:
    """stderr's one line (``rlfunc: error: ...``), no traceback."""
    err = capsys.readouterr().err.strip().splitlines()
    assert err and "Traceback" not in "\n".join(err)
    assert len(err) == 1, err
    return err[0]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("s32") / "run"
    rlfunc.train(None, overrides=SETS, run_dir=run_dir)
    return run_dir


def test_resume_of_a_runs_checkpoints_names_the_run_to_resume(run, capsys):
    step = sorted((run / "checkpoints").glob("step_*"))[-1]
    for path, what in ((run / "checkpoints", "holds the checkpoints"), (step, "is a checkpoint")):
        assert main(["resume", str(path)]) == 2
        line = refusal(capsys)
        assert f"{what} of the run in {str(run.resolve())!r}" in line, line
        assert line.endswith(f"run `rlfunc resume {run.resolve()}`."), line
        assert "no checkpoints/" not in line


def test_a_sweep_directory_is_named_as_one_to_eval_export_collect_and_plot(run, tmp_path, capsys):
    sweep = tmp_path / "sweep"
    (sweep / "g0-s0").mkdir(parents=True)
    (sweep / "sweep.json").write_text(json.dumps({"version": 1}))
    (sweep / "g0-s0" / "config.yaml").write_text("algo: sac\n")
    for argv in (["eval", str(sweep)], ["export", str(sweep), "--out", str(tmp_path / "x")],
                 ["dataset", "collect", "--checkpoint", str(sweep), "--steps", "5", "--out", str(tmp_path / "d.npz")]):
        assert main(argv) == 2
        line = refusal(capsys)
        assert "is a sweep's directory" in line and repr(str(sweep / "g0-s0")) in line, line
    assert not (tmp_path / "x").exists() and not (tmp_path / "d.npz").exists()
    assert main(["plot", str(sweep), "--out", str(tmp_path / "c.png")]) == 2
    line = refusal(capsys)
    assert "is a sweep's directory" in line and "pass its runs' directories" in line, line


@pytest.mark.parametrize("config", [3, [1], ""])
def test_train_with_a_config_that_is_no_path_is_one_sentence(config, tmp_path):
    with pytest.raises(TypeError, match=r"^config must be a YAML file's path .*, got .*\.$"):
        rlfunc.train(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_train_with_a_bytes_config_path_reads_it(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("algo: sac\nenv: {id: Pendulum-v1}\ntrain: {total_steps: 10, learning_starts: 20}\n")
    with pytest.raises(ConfigError, match="learning_starts=20 is more than train.total_steps=10"):
        rlfunc.train(str(path).encode(), run_dir=tmp_path / "run")


def test_population_seeds_and_grid_of_the_wrong_type_are_one_sentence(tmp_path):
    with pytest.raises(ConfigError, match=r"train\.population\.seeds must be a non-empty list .*, got 3\.$"):
        population.train(None, overrides=SETS, run_dir=tmp_path / "a", seeds=3)
    with pytest.raises(ConfigError, match=r"train\.population\.grid must map agent\.NAME to a list of values"):
        population.train(None, overrides=SETS, run_dir=tmp_path / "b", grid="agent.critic_lr=1e-3,3e-4")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_allow_import_of_the_wrong_type_is_one_sentence(run, tmp_path):
    with pytest.raises(ValueError, match=r"^allow_import must be a module name or a list of them, got 3\.$"):
        rlfunc.resume(run, allow_import=3)
    from rlfunc.runtime.dataset import collect

    with pytest.raises(ValueError, match=r"^allow_import must be a module name or a list of them, got \[1\]\.$"):
        collect(tmp_path / "d.npz", checkpoint=run, steps=5, allow_import=[1])
    assert not (tmp_path / "d.npz").exists()


def test_evaluate_on_another_env_names_the_env_the_policy_was_trained_on(run):
    policy = rlfunc.load(run)
    with pytest.raises(ValueError, match=(
        r"^Environment 'CartPole-v1' has observations of shape \(4,\), but this sac policy takes \(3,\); "
        r"evaluate it on the env it was trained on \('Pendulum-v1', with its wrappers\)\.$"
    )):
        rlfunc.evaluate(policy, episodes=1, env_id="CartPole-v1")
    assert rlfunc.evaluate(policy, episodes=1, env_id="Pendulum-v1")["returns"]


def test_the_config_listing_says_which_configs_need_prior_data(capsys):
    """`rlfunc configs` ended with "run one with `rlfunc train NAME`", but the RLPD configs ship without their
    prior data and `rlfunc train rlpd/pendulum` alone is refused: the listing says so beside them."""
    from rlfunc.runtime.cli import main as cli_main

    assert cli_main(["configs"]) == 0
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines() if line and not line.startswith("(")}
    assert lines["rlpd/pendulum"].endswith("(needs --set data.path=FILE.npz)")
    assert lines["rlpd/hopper"].endswith("(needs --set data.path=FILE.npz)")
    assert not [name for name, line in lines.items() if "needs --set data.path" in line and not name.startswith("rlpd/")]
