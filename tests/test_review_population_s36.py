"""Session-36 review of populations from a researcher's side (rlfunc.runtime.population): each test is a
defect the review reproduced, now fixed.

* a Ctrl-C, SIGTERM or crash that ended a population between a log step's count and a member's metrics row
  (a held interrupt raised in another member's row, or the finite check before it) saved the population at
  that step without the member's row: the resumed run continued after it, so ``member-<k>/metrics.csv``
  never had a row there (a single run writes it on the way out, ``Trainer._write_missed_row``);
* ``seeds`` and ``grid`` given to :func:`rlfunc.runtime.population.train` as numpy or torch values
  (``np.arange(4)``, ``list(np.logspace(-4, -3, 3))``, a tuple, an array) were refused with a sentence
  that called integers not integers, or crashed with a ``yaml.RepresenterError`` traceback after the run
  directory was made (the population's ``config.yaml`` could not store a numpy float);
* a single run's directory holding a ``member-0/`` of its own (``rlfunc export RUN --out RUN/member-0``, a
  population's member copied in to compare) was taken for a population: ``rlfunc resume RUN`` said its
  checkpoint "is not a population's; resume it with `rlfunc resume` of its own run", which is what it was.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch
from test_review_population_2 import TRAIN  # the tiny train section of the population reviews

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime.config import ConfigError, build_config, load_config

torch.set_num_threads(1)

SAC = {
    "algo": "sac",
    "env": {"id": "Pendulum-v1"},
    "train": {**TRAIN, "total_steps": 150, "learning_starts": 40, "replay_size": 500, "eval_every": 150,
              "checkpoint_every": 150},
    "agent": {"hidden_sizes": [8, 8], "batch_size": 8},
}


def _config(**train) -> dict:
    config = copy.deepcopy(SAC)
    config["train"].update(train)
    return config


def _steps(path: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in path.read_text().splitlines()[1:]]


def test_an_interrupt_before_a_members_log_row_writes_it_before_saving(tmp_path, monkeypatch):
    """Member 1's row at env step 50 is cut off by a Ctrl-C raised while member 0's was written (where a
    held interrupt lands): the population saves at step 50 with both rows, and the resumed run's metrics.csv
    of every member has the rows the uninterrupted run has."""
    run = tmp_path / "run"
    log = pr.PopulationTrainer._log
    fired = []

    def interrupted_log(self, k, *args):
        log(self, k, *args)
        if k == 0 and self.env_steps[k] == 50 and not fired:
            fired.append(k)
            raise KeyboardInterrupt

    monkeypatch.setattr(pr.PopulationTrainer, "_log", interrupted_log)
    with pytest.raises(KeyboardInterrupt, match="saved at step 50"):
        pr.train(_config(), run_dir=run, seeds=[0, 1])
    monkeypatch.setattr(pr.PopulationTrainer, "_log", log)
    assert fired
    for k in range(2):
        assert _steps(run / f"member-{k}" / "metrics.csv") == [50], k
    rlfunc.resume(run)
    whole = pr.train(_config(), run_dir=tmp_path / "whole", seeds=[0, 1])
    for k in range(2):
        expected = _steps(whole.members[k].run_dir / "metrics.csv")
        assert expected == [50, 100, 150]
        assert _steps(run / f"member-{k}" / "metrics.csv") == expected, k


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seeds": np.arange(2)},
        {"seeds": torch.arange(2)},
        {"grid": {"agent.critic_lr": list(np.logspace(-4, -3, 2))}},
        {"grid": {"agent.critic_lr": np.array([1e-4, 1e-3])}},
        {"grid": {"agent.critic_lr": (1e-4, 1e-3)}},
    ],
    ids=["np-seeds", "torch-seeds", "np-floats", "np-array", "tuple"],
)
def test_numpy_and_torch_seeds_and_grid_values_train_as_plain_numbers(tmp_path, kwargs):
    run = tmp_path / "run"
    result = pr.train(_config(total_steps=50, learning_starts=40, eval_every=50, checkpoint_every=50),
                      run_dir=run, **kwargs)
    assert len(result.members) == 2
    stored = build_config(load_config(run / "config.yaml")).train.population
    if "seeds" in kwargs:
        assert stored["seeds"] == [0, 1] and all(type(s) is int for s in stored["seeds"])
    else:
        assert [type(v) for v in stored["grid"]["agent.critic_lr"]] == [float, float]
        assert stored["grid"]["agent.critic_lr"] == pytest.approx([1e-4, 1e-3])


def test_a_numpy_grid_value_in_a_built_config_is_one_sentence(tmp_path):
    raw = _config()
    raw["train"]["population"] = {"grid": {"agent.critic_lr": [np.float64(1e-4), np.float64(1e-3)]}}
    with pytest.raises(ConfigError, match=r"config.yaml cannot store; give plain Python numbers"):
        build_config(raw)
    raw["train"]["population"] = {"seeds": [np.int64(0), np.int64(1)]}
    with pytest.raises(ConfigError, match=r"train.population.seeds holds .*int\(v\) or float\(v\)"):
        build_config(raw)
    assert not (tmp_path / "run").exists()


def test_a_single_run_holding_a_member_0_directory_resumes_as_the_single_run(tmp_path):
    run = tmp_path / "run"
    rlfunc.train(_config(total_steps=50, learning_starts=40, eval_every=50, checkpoint_every=50), run_dir=run)
    rlfunc.export(run, run / "member-0")  # odd but legal: the export lands inside the run
    assert not pr.is_population_run(run)
    result = rlfunc.resume(run, total_steps=60)
    assert result.env_steps == 60
    assert rlfunc.load(run / "member-0").params is not None  # the export is still what it was


def test_export_of_a_population_directory_names_export_too(tmp_path, capsys):
    """`rlfunc export POP` was told to "load or evaluate one member's run directory": export takes a member too."""
    from rlfunc.runtime.cli import main

    pop = tmp_path / "pop"
    pr.train(_config(), run_dir=pop, seeds=[0, 1])
    assert main(["export", str(pop), "--out", str(tmp_path / "out")]) != 0
    err = capsys.readouterr().err
    assert "pass one member's run directory instead (load, eval and export take it as an ordinary run)" in err
    assert str(pop / "member-0") in err


def test_a_population_without_run_dir_is_named_pop_and_its_size(tmp_path):
    """The default directory of a population is ``<algo>-<env>-pop<P>-<time>`` under train.run_dir (one helper,
    rlfunc.runtime.run_dir.new_run_dir, names single runs' ``s<seed>`` and populations' ``pop<P>``)."""
    result = pr.train(_config(run_dir=str(tmp_path)), seeds=[0, 1])
    assert result.run_dir.parent == tmp_path and result.run_dir.name.startswith("sac-Pendulum-v1-pop2-")
    single = rlfunc.train(_config(run_dir=str(tmp_path), seed=4))
    assert single.run_dir.name.startswith("sac-Pendulum-v1-s4-")
