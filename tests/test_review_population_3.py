"""Third review of populations, after replays' ``state_dict`` became views of the live storage, a
population's resume dropped the loaded checkpoint, ``rlfunc sweep --population`` planned one population
per grid point and ``rlfunc.train`` handed its run-dir lock over to the run. The review found no defect
in these; the tests below guard what it checked:

* a 2-member population stopped at ``train.total_steps`` (an episode boundary of every member) and
  resumed to a later total ends with every member's parameters, optimizer moments and evaluations
  equal to the uninterrupted population's, bit for bit on CPU (REDQ on Pendulum; DQN and DRQN on the
  vector-observation cue task, whose episodes all last ``delay + 1`` steps);
* after that resume, ``member-<k>/`` is an ordinary run holding member ``k``'s newest policy:
  ``rlfunc.load``, ``rlfunc.export`` and ``rlfunc.evaluate`` (what ``rlfunc eval`` runs, with the member's
  evaluation seed) read it, and the run-dir lock is released after the run and after the resume;
* ``rlfunc sweep --population`` plans one population per grid point whose members' ``config.yaml``
  are what ``rlfunc train CONFIG --seeds ...`` writes for the same seeds and setting.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import yaml

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime import population_members as members_of
from rlfunc.runtime.checkpoint import load_checkpoint

torch.set_num_threads(1)

TRAIN = {"eval_episodes": 1, "log_every": 60, "progress": False, "tensorboard": False, "compile": False, "threads": 1}
REDQ = {
    "algo": "redq",
    "env": {"id": "Pendulum-v1"},
    "train": {**TRAIN, "total_steps": 200, "learning_starts": 150, "replay_size": 1000, "eval_every": 100,
              "checkpoint_every": 100},
    "agent": {"hidden_sizes": [16, 16], "num_critics": 2, "updates_per_step": 2, "batch_size": 8},
}
CUE = {"id": "rlfunc/CueMemory-v0", "num_envs": 1, "kwargs": {"delay": 5}}  # every episode: 6 steps
DQN = {
    "algo": "dqn",
    "env": CUE,
    "train": {**TRAIN, "total_steps": 120, "learning_starts": 36, "replay_size": 500, "eval_every": 60,
              "checkpoint_every": 60},
    "agent": {"encoder_sizes": [16], "batch_size": 8, "target_period": 10, "eps_decay_steps": 200, "train_every": 2},
}
DRQN = copy.deepcopy({**DQN, "algo": "drqn"})
DRQN["agent"] = {**DQN["agent"], "lstm_size": 8, "sequence_length": 6}


def _with(config: dict, **train) -> dict:
    config = copy.deepcopy(config)
    config["train"].update(train)
    return config


def _held(run: Path) -> bool:
    import os

    from rlfunc.runtime import checkpoint

    key = os.path.realpath(run)
    return key in checkpoint._LOCKS or key in checkpoint._HANDED_OVER


def _equal_state(a, b) -> None:
    keys = set(a.keys(True, True))
    assert keys == set(b.keys(True, True))
    for key in keys:
        assert torch.equal(a[key], b[key]), key


@pytest.mark.parametrize(
    "config, grid",
    [(REDQ, None), (DQN, {"agent.lr": [1e-3, 3e-3]}), (DRQN, None)],
    ids=["redq", "dqn-grid", "drqn"],
)
def test_a_resumed_population_ends_where_the_uninterrupted_one_does(tmp_path, config, grid):
    total = config["train"]["total_steps"]
    seeds = [0] if grid else [0, 1]
    whole = pr.train(_with(config, total_steps=2 * total), run_dir=tmp_path / "whole", seeds=seeds, grid=grid)
    pr.train(config, run_dir=tmp_path / "cut", seeds=seeds, grid=grid)
    assert not _held(tmp_path / "cut")  # the run released the lock rlfunc.train took for it
    resumed = rlfunc.resume(tmp_path / "cut", total_steps=2 * total)
    assert not _held(tmp_path / "cut")
    assert [m.evals for m in resumed.members] == [m.evals for m in whole.members]
    mine, theirs = load_checkpoint(tmp_path / "cut")[0], load_checkpoint(tmp_path / "whole")[0]
    _equal_state(mine["state"], theirs["state"])
    _equal_state(mine["replay"], theirs["replay"])
    for k in range(2):  # member-<k>/ is an ordinary run holding member k's newest policy
        member = tmp_path / "cut" / f"member-{k}"
        tensors, meta = load_checkpoint(member)
        assert meta["env_step"] == 2 * total
        assert yaml.safe_load((member / "config.yaml").read_text())["train"]["total_steps"] == 2 * total
        for key, v in tensors["state", "params"].items(True, True):
            assert torch.equal(v, mine["state", "params"][key][k]), key
        exported = rlfunc.export(member, tmp_path / f"export-{k}")
        for path in (member, exported):
            params = rlfunc.load(path).params
            for key, v in params.items(True, True):
                assert torch.equal(v, mine["state", "params"][key][k]), (path, key)
        seed = 10_000 + yaml.safe_load((member / "config.yaml").read_text())["train"]["seed"]
        episodes = config["train"]["eval_episodes"]
        assert rlfunc.evaluate(member, episodes=episodes, seed=seed)["mean"] == resumed.members[k].evals[-1][1]


def test_a_population_sweep_plans_what_rlfunc_train_seeds_makes_for_each_grid_point(tmp_path):
    """``rlfunc sweep --population``: one population per grid point (a setting held as data, and a shape,
    which a population's own grid refuses), labelled by the point; its members' configs are those of
    ``rlfunc train CONFIG --seeds 0,1 --set KEY=VALUE`` (the sweep's runs only turn the progress bar off)."""
    import importlib

    from rlfunc.runtime.config import apply_overrides, build_config, to_dict

    sweep = importlib.import_module("rlfunc.scale.sweep")
    for key, values in (("agent.actor_lr", [3e-4, 1e-3]), ("agent.hidden_sizes", [[8], [4, 4]])):
        plan = sweep.plan_sweep(REDQ, "0,1", {key: values}, None, tmp_path / key, population=True)
        assert [e["grid"] for e in plan["runs"]] == [{key: v} for v in values]
        assert [e["members"] for e in plan["runs"]] == [2, 2]
        labels = {"agent.actor_lr": ["redq agent.actor_lr=0.0003", "redq agent.actor_lr=0.001"],
                  "agent.hidden_sizes": ["redq agent.hidden_sizes=[8]", "redq agent.hidden_sizes=[4, 4]"]}[key]
        assert [e["label"] for e in plan["runs"]] == labels
        for entry, value in zip(plan["runs"], values):
            planned = members_of.member_specs(build_config(apply_overrides(REDQ, entry["overrides"])))
            cli = members_of.member_specs(build_config(apply_overrides(REDQ, {key: value, "train.population": {"seeds": [0, 1]}})))
            assert [m.seed for m in planned] == [0, 1]
            for a, b in zip(planned, cli):
                a, b = to_dict(a.config), to_dict(b.config)
                assert a["train"].pop("progress") is False
                b["train"].pop("progress")
                assert a == b
                assert a["agent"][key.split(".")[1]] == value
