"""Input checks of ``rlfunc sweep --sweep-dir`` and ``rlfunc train --grid`` found in review, each one sentence
(exit 2) before anything is trained or written, and for the sweep before Ray starts (``connect`` is replaced by
a function that fails the test if reached, so no Ray is started here):

* ``--sweep-dir`` naming a training run's directory (or a directory inside one) started Ray, wrote the sweep's
  files into the user's run and failed every run ("... is inside the run directory ..."); the suggested
  ``rlfunc sweep --resume`` could never succeed. It is refused, nothing written;
* ``--sweep-dir`` naming a directory that holds a sweep was refused only after Ray had started;
* ``--sweep-dir`` naming a file was refused as an ``--out`` the user never passed; so was a sweep directory's
  own ``results.json`` that is not a results JSON (as ``--out 'None'``);
* ``rlfunc train --grid KEY=... --set KEY=...`` dropped the ``--set`` value silently (each member takes its grid
  value), as did ``--set KEY`` beside the config file's ``train.population.grid``; both are refused as
  ``rlfunc sweep`` refuses ``--set`` and ``--grid`` of one key;
* ``--grid`` replaced the config file's whole ``train.population.grid``: a key of the config's grid that
  ``--grid`` does not give was dropped silently (fewer members); refused, naming the ``--grid`` that keeps it.
"""

import importlib
import os

import pytest
import yaml
from test_sweep_checks_runs_here import no_ray  # noqa: F401  (a fixture: Ray starting fails the test)

from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError

sweep_mod = importlib.import_module("rlfunc.scale.sweep")  # the package exports the function as `sweep`

TINY = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {"total_steps": 200, "learning_starts": 100, "eval_every": 100, "eval_episodes": 1,
              "checkpoint_every": 100, "log_every": 100, "threads": 1, "tensorboard": False, "progress": False},
    "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
}


@pytest.fixture
def tiny(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A finished single training run (checkpoints/, config.yaml, metrics.csv, eval.csv, its lock file)."""
    from rlfunc.runtime.population import train

    run_dir = tmp_path_factory.mktemp("trained") / "base"
    train(dict(TINY), run_dir=run_dir)
    assert (run_dir / "config.yaml").is_file() and (run_dir / "checkpoints").is_dir()
    return run_dir


def snapshot(root):
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    return lines[0]


# ----------------------------------------------------------------------------- rlfunc sweep --sweep-dir


def test_a_sweep_dir_that_holds_a_training_run_is_refused_before_ray_and_nothing_is_written(
        tiny, trained_run, no_ray, capsys):
    before = snapshot(trained_run)
    assert main(["sweep", str(tiny), "--sweep-dir", str(trained_run)]) == 2
    assert one_line(capsys) == (
        f"rlfunc: error: --sweep-dir {str(trained_run)!r} holds a training run (config.yaml, metrics.csv, eval.csv, "
        "checkpoints), which the sweep's runs and files would mix with; pick another --sweep-dir."
    )
    assert snapshot(trained_run) == before


@pytest.mark.parametrize("inside", ["checkpoints", "new/sub"])
def test_a_sweep_dir_inside_a_training_run_is_refused_before_ray(tiny, trained_run, no_ray, capsys, inside):
    before = snapshot(trained_run)
    sweep_dir = trained_run / inside
    assert main(["sweep", str(tiny), "--sweep-dir", str(sweep_dir)]) == 2
    assert one_line(capsys) == (
        f"rlfunc: error: --sweep-dir {str(sweep_dir)!r} is inside the run directory {str(trained_run)!r}, whose own "
        "files and commands (resume, eval, checkpoint clean-up) the sweep's runs would mix with; pick a --sweep-dir "
        "outside it."
    )
    assert snapshot(trained_run) == before


def test_a_sweep_dir_that_holds_a_sweep_is_refused_before_ray(tiny, tmp_path, no_ray, capsys):
    sweep_dir = tmp_path / "sw"
    plan = sweep_mod.plan_sweep(str(tiny), "0", sweep_dir=sweep_dir)
    sweep_mod.write_plan(plan)
    before = snapshot(sweep_dir)
    assert main(["sweep", str(tiny), "--sweep-dir", str(sweep_dir)]) == 2
    assert one_line(capsys) == (
        f"rlfunc: error: {str(sweep_dir)!r} already holds a sweep; continue it with "
        f"`rlfunc sweep --resume {sweep_dir}` or pick another --sweep-dir."
    )
    assert snapshot(sweep_dir) == before


def test_a_sweep_dir_that_is_a_file_says_so_not_out(tiny, tmp_path, no_ray, capsys):
    text = tiny.read_text()
    assert main(["sweep", str(tiny), "--sweep-dir", str(tiny)]) == 2
    assert one_line(capsys) == f"rlfunc: error: --sweep-dir {str(tiny)!r} is a file; pass a directory."
    under = tiny / "sw"
    assert main(["sweep", str(tiny), "--sweep-dir", str(under)]) == 2
    assert one_line(capsys) == (
        f"rlfunc: error: --sweep-dir {str(under)!r} is under {str(tiny)!r}, which is a file; pass a directory."
    )
    assert tiny.read_text() == text and sorted(os.listdir(tmp_path)) == ["s.yaml"]


def test_a_sweep_dirs_own_results_json_that_is_not_one_names_the_sweep_dir_not_out(tiny, tmp_path, no_ray, capsys):
    sweep_dir = tmp_path / "sw"
    sweep_dir.mkdir()
    (sweep_dir / "results.json").write_text("mine")
    assert main(["sweep", str(tiny), "--sweep-dir", str(sweep_dir)]) == 2
    assert one_line(capsys) == (
        f"rlfunc: error: --sweep-dir {str(sweep_dir)!r} holds a results.json that is not the results JSON of an "
        "earlier `rlfunc sweep`; pick another --sweep-dir, or pass --out."
    )
    assert os.listdir(sweep_dir) == ["results.json"] and (sweep_dir / "results.json").read_text() == "mine"


# ----------------------------------------------------------------------------- rlfunc train --grid


def test_train_refuses_a_key_in_both_set_and_grid(tiny, tmp_path, capsys):
    run_dir = tmp_path / "pop"
    code = main(["train", str(tiny), "--grid", "agent.tau=0.005,0.01", "--set", "agent.tau=0.5",
                 "--run-dir", str(run_dir)])
    assert code == 2
    assert one_line(capsys) == "rlfunc: error: agent.tau is in both --set and --grid; give it in one of them."
    assert not run_dir.exists()
    from rlfunc.runtime.population import train

    with pytest.raises(ConfigError, match=r"^agent\.tau is in both --set and --grid; give it in one of them\.$"):
        train(dict(TINY), overrides={"agent.tau": 0.5}, grid={"agent.tau": [0.005, 0.01]}, run_dir=run_dir)
    assert not run_dir.exists()


def test_train_refuses_set_of_a_key_the_config_files_population_grid_gives(tmp_path, capsys):
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({**TINY, "train": {**TINY["train"], "population": {
        "seeds": [0], "grid": {"agent.tau": [0.005, 0.01]}}}}))
    run_dir = tmp_path / "pop"
    assert main(["train", str(config), "--set", "agent.tau=0.5", "--run-dir", str(run_dir)]) == 2
    assert one_line(capsys) == (
        "rlfunc: error: agent.tau is in both --set and train.population.grid; give it in one of them."
    )
    assert not run_dir.exists()


def test_grid_that_would_drop_a_key_of_the_config_files_population_grid_is_refused(tmp_path, capsys):
    from rlfunc.runtime import population_members as members_of
    from rlfunc.runtime.config import apply_overrides, build_config

    raw = {**TINY, "train": {**TINY["train"], "population": {"seeds": [0], "grid": {"agent.tau": [0.005, 0.01]}}}}
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "pop"
    assert main(["train", str(config), "--grid", "agent.critic_lr=1e-3,3e-4", "--run-dir", str(run_dir)]) == 2
    assert one_line(capsys) == (
        "rlfunc: error: --grid replaces the config's train.population.grid, so its agent.tau would be dropped; "
        "give it with --grid too (--grid agent.tau=0.005,0.01), or remove it from the config file."
    )
    assert not run_dir.exists()
    # a key both give takes --grid's values (as --set wins over the file); the suggested --grid keeps both
    pop = {"seeds": [0], "grid": {"agent.tau": [0.02, 0.03], "agent.critic_lr": [1e-3, 3e-4]}}
    members = members_of.member_specs(build_config(apply_overrides(raw, {"train.population": pop})))
    assert sorted((m.settings["agent.tau"], m.settings["agent.critic_lr"]) for m in members) == [
        (0.02, 3e-4), (0.02, 1e-3), (0.03, 3e-4), (0.03, 1e-3)]
