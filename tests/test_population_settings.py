"""Populations' settings as data and their spec (rlfunc.runtime.population, rlfunc.runtime.specs): each
member computes what its single run computes, and what would not is refused before training.

* DRQN/R2D2/DQN's old ``lr_decay_updates``/``lr_end`` decay has an absolute end rate: a member whose
  ``lr`` is data decays from its rate to ``lr_end``, as its single run (it used to end at
  ``lr_end * member_lr / lr``, the population config's decay rescaled);
* RLPD takes REDQ's settings as data (its update is REDQ's): a grid over ``agent.critic_lr`` trains
  the two single runs; an algorithm that took none would say so, never list nothing;
* grid values equal once read (``1e-3`` and ``0.001`` from a config file, ``1`` and ``1.0``) are
  refused in one sentence; config files' values are read as ``--grid`` reads them;
* ``--seeds`` counts its seeds with a set, and refuses more than ``MAX_SEEDS`` before building a list;
* ``rlfunc plot`` of a population's run directory plots its members.
"""

from __future__ import annotations

import csv
import math
import shutil
import tracemalloc
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml
from helpers_batches import r2d2_batch, sequence_batch

import rlfunc
from rlfunc.algos import drqn, r2d2, redq, rlpd
from rlfunc.core import population
from rlfunc.runtime import population as pr
from rlfunc.runtime import population_members as members_of
from rlfunc.runtime.cli import main
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import ConfigError, build_config
from rlfunc.runtime.specs import MAX_SEEDS, parse_grid, parse_seeds

torch.set_num_threads(1)

DATA = Path(__file__).parent / "data" / "pendulum_expert_2k.npz"
RTOL = 1e-6  # as tests/test_population_runtime.py: the vmapped update is not bit-exact
PARAM_RTOL = 1e-5

VEC4, DISCRETE2 = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)


def _close(a, b) -> None:
    assert [s for s, _ in a] == [s for s, _ in b], (a, b)
    for (_, x), (_, y) in zip(a, b):
        assert math.isclose(x, y, rel_tol=RTOL), (a, b)


def _params_close(a_dir, b_dir) -> None:
    a, b = load_checkpoint(a_dir)[0]["state", "params"], load_checkpoint(b_dir)[0]["state", "params"]
    worst = 0.0
    for key, y in b.items(True, True):
        worst = max(worst, float((a[key] - y).abs().max()) / max(float(y.abs().max()), 1e-3))
    assert worst < PARAM_RTOL, worst


# --------------------------------------------------------------------------- 1. lr_decay_updates / lr_end
OLD_DECAY = dict(lr=1e-3, lr_decay_updates=10, lr_end=4e-4)
DECAY_PROBLEMS = {
    "drqn": (drqn, drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=4, batch_size=4, target_period=7,
                               **OLD_DECAY), lambda c, g: sequence_batch(c.sequence_length, c.batch_size, g)),
    "dqn": (drqn, drqn.Config(encoder_sizes=(8,), lstm_size=8, sequence_length=1, batch_size=4, target_period=7,
                              core="mlp", **OLD_DECAY), lambda c, g: sequence_batch(c.sequence_length, c.batch_size, g)),
    "r2d2": (r2d2, r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=2, sequence_length=4,
                               sequence_period=2, batch_size=4, target_period=7, **OLD_DECAY), r2d2_batch),
}


@pytest.mark.parametrize("algo", sorted(DECAY_PROBLEMS))
def test_a_member_with_the_old_lr_decay_decays_to_lr_end_as_its_single_run(algo):
    """Two members with lr 1e-3 and 2e-3 and the old spelling (decay to lr_end = 4e-4 over 10 updates):
    over 20 updates each member's rate and parameters are its single run's, which ends at lr_end."""
    import dataclasses

    module, config, batch_fn = DECAY_PROBLEMS[algo]
    configs = [config, dataclasses.replace(config, lr=2e-3)]
    singles = [module.init(c, VEC4, DISCRETE2, seed=s) for c, s in zip(configs, (0, 1))]
    pop = population.stack([s.clone() for s in singles])
    assert pop["hparams", "lr"].tolist() == pytest.approx([1e-3, 2e-3])
    step = population.vmap_update(module.update)
    gens = [torch.Generator().manual_seed(10 + k) for k in range(2)]
    for i in range(20):
        batches = [batch_fn(configs[k], gens[k]) for k in range(2)]
        pop, pop_metrics = step(pop, torch.stack(batches))
        for k in range(2):
            singles[k], metrics = module.update(singles[k], batches[k])
            torch.testing.assert_close(pop_metrics["lr"][k], metrics["lr"], rtol=1e-6, atol=0,
                                       msg=lambda m: f"member {k} update {i}: {m}")
    assert [float(pop_metrics["lr"][k]) for k in range(2)] == pytest.approx([4e-4, 4e-4], rel=1e-6)
    for k in range(2):
        member = population.member(pop, k)
        for key, value in singles[k]["params"].items(True, True):
            torch.testing.assert_close(member["params"][key], value, rtol=1e-5,
                                       atol=1e-5 * float(value.abs().max()) + 1e-12)


def test_the_old_lr_decay_alone_still_evaluates_its_expression_bit_for_bit():
    from rlfunc.algos._qstate import q_lr
    from rlfunc.core.optim import Schedule

    config = drqn.Config(lr=1e-3, lr_decay_updates=10, lr_end=4e-4)
    steps = torch.arange(15, dtype=torch.float32)
    assert torch.equal(q_lr(config)(steps), Schedule("linear", 1e-3, 4e-4, 10)(steps))
    # restarted from another rate, it ends at lr_end (the relative schedules rescale instead)
    torch.testing.assert_close(q_lr(config).scaled(steps, torch.tensor(2e-3))[-1], torch.tensor(4e-4))


DQN = {
    "algo": "dqn",
    "env": {"id": "CartPole-v1"},
    "train": {"total_steps": 240, "learning_starts": 50, "replay_size": 200, "eval_every": 120, "checkpoint_every": 120,
              "eval_episodes": 1, "log_every": 50, "progress": False, "tensorboard": False, "threads": 1},
    "agent": {"lstm_size": 8, "encoder_sizes": [8], "batch_size": 4, "sequence_length": 1, "sequence_period": 1,
              "train_every": 2, "eps_decay_steps": 200, "target_period": 20, "lr": 1e-3, "lr_schedule": None,
              "lr_decay_updates": 40, "lr_end": 5e-4},
}


def test_a_dqn_grid_over_lr_with_the_old_lr_decay_equals_its_single_runs(tmp_path):
    """The reviewer's case end to end (a grid over agent.lr, lr_decay_updates/lr_end): member 1 (lr 2e-3)
    ends at lr_end as its single run, not at 1e-3; every evaluation and the final weights agree."""
    res = pr.train(DQN, run_dir=tmp_path / "pop", seeds=[0], grid={"agent.lr": [1e-3, 2e-3]})
    for k, lr in enumerate((1e-3, 2e-3)):
        single = rlfunc.train(DQN, overrides={"train.seed": 0, "agent.lr": lr}, run_dir=tmp_path / f"single-{k}")
        _close(res.members[k].evals, single.evals)
        _params_close(res.members[k].run_dir, single.run_dir)
        with open(res.members[k].run_dir / "metrics.csv") as f:
            last = list(csv.DictReader(f))[-1]
        assert float(last["lr"]) == pytest.approx(5e-4, rel=1e-6)  # 95 updates: past the 40-update decay


# --------------------------------------------------------------------------- 2. RLPD's settings as data
def test_rlpd_takes_redqs_settings_as_data():
    assert rlpd.HPARAMS == redq.HPARAMS and rlpd.INIT_SETTINGS == redq.INIT_SETTINGS
    assert population.hparam_names(rlpd.Config()) == redq.HPARAMS
    assert population.hparam_names(rlpd.Config().redq_config()) == redq.HPARAMS  # what its states hold


RLPD = {
    "algo": "rlpd",
    "env": {"id": "Pendulum-v1"},
    "data": {"path": str(DATA)},
    "train": {"total_steps": 200, "learning_starts": 100, "replay_size": 1000, "eval_every": 100, "eval_episodes": 1,
              "checkpoint_every": 200, "log_every": 50, "progress": False, "tensorboard": False},
    "agent": {"hidden_sizes": [16, 16], "num_critics": 3, "updates_per_step": 2, "batch_size": 8},
}


@pytest.mark.parametrize("vectorize", ["vmap", "loop"])  # loop: what auto gives RLPD on a CPU
def test_an_rlpd_grid_over_critic_lr_equals_the_two_single_runs(tmp_path, vectorize, capsys):
    config = {**RLPD, "train": {**RLPD["train"], "population": {"vectorize": vectorize}}}
    res = pr.train(config, run_dir=tmp_path / "pop", seeds=[0], grid={"agent.critic_lr": [3e-4, 1e-3]})
    assert res.vectorize == vectorize
    for k, lr in enumerate((3e-4, 1e-3)):
        single = rlfunc.train(RLPD, overrides={"train.seed": 0, "agent.critic_lr": lr}, run_dir=tmp_path / f"single-{k}")
        _close(res.members[k].evals, single.evals)
        _params_close(res.members[k].run_dir, single.run_dir)
        assert yaml.safe_load((res.members[k].run_dir / "config.yaml").read_text())["agent"]["critic_lr"] == lr
    with pytest.raises(AssertionError):  # the two rates trained different weights
        _params_close(res.members[0].run_dir, res.members[1].run_dir)
    # 6. `rlfunc plot` of the population's directory plots its members (one curve per grid value)
    capsys.readouterr()
    assert main(["plot", str(tmp_path / "pop"), "--out", str(tmp_path / "pop.png")]) == 0
    assert (tmp_path / "pop.png").stat().st_size > 0


def test_a_grid_key_that_is_not_data_names_the_settings_or_says_there_are_none(monkeypatch):
    raw = {**RLPD, "train": {**RLPD["train"], "population": {"grid": {"agent.hidden_sizes": [[8], [16]]}}}}
    with pytest.raises(ConfigError, match=r"not a setting rlpd takes as data \(those are: agent.actor_lr, agent.critic_lr"):
        members_of.member_specs(build_config(raw))
    monkeypatch.setattr(population, "hparam_names", lambda config: ())
    monkeypatch.setattr(population, "_init_settings", lambda config: ())
    raw = {**RLPD, "train": {**RLPD["train"], "population": {"grid": {"agent.critic_lr": [3e-4, 1e-3]}}}}
    with pytest.raises(ConfigError) as err:
        members_of.member_specs(build_config(raw))
    text = str(err.value)
    assert "(rlpd takes none)" in text and "()" not in text and "are: )" not in text, text


# --------------------------------------------------------------------------- 3. equal grid values
SAC = {"algo": "sac", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 50, "learning_starts": 20}}


@pytest.mark.parametrize(
    "values",
    [["1e-3", 0.001], [1, 1.0], [0.001, 0.001]],
    ids=["yaml-string-and-float", "int-and-float", "same"],
)
def test_grid_values_equal_once_read_are_refused_in_one_sentence(tmp_path, values):
    raw = {**SAC, "train": {**SAC["train"], "population": {"seeds": [0], "grid": {"agent.critic_lr": values}}}}
    with pytest.raises(ConfigError, match=r"grid.agent.critic_lr gives one value twice .*; list each value once\.$"):
        build_config(raw)


def test_a_config_files_grid_is_read_as_the_cli_reads_it(tmp_path, capsys):
    """PyYAML reads ``1e-3`` (no dot) as a string; as a grid value it is the number, as --grid's."""
    text = ("algo: sac\nenv: {id: Pendulum-v1}\ntrain:\n  total_steps: 50\n  learning_starts: 20\n  population:\n"
            "    grid: {agent.critic_lr: [1e-3, 2e-3]}\n")
    path = tmp_path / "c.yaml"
    path.write_text(text)
    members = members_of.member_specs(build_config(yaml.safe_load(text)))
    assert [m.settings for m in members] == [{"agent.critic_lr": 0.001}, {"agent.critic_lr": 0.002}]
    assert [m.config.agent.critic_lr for m in members] == [0.001, 0.002]
    path.write_text(text.replace("2e-3", "0.001"))
    assert main(["train", str(path), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("rlfunc: error: train.population.grid.agent.critic_lr gives one value twice ('1e-3' and 0.001 are "
                   "equal); list each value once.")
    assert not (tmp_path / "run").exists()


def test_cli_grid_values_equal_once_read_are_refused(tmp_path, capsys):
    assert parse_grid(["agent.critic_lr=1e-3,3e-4"]) == {"agent.critic_lr": [1e-3, 3e-4]}
    for dup in ("1,1.0", "1e-3,0.001", "0.5,5e-1"):
        with pytest.raises(ConfigError, match=r"gives one value twice .*; list each value once\.$"):
            parse_grid([f"agent.critic_lr={dup}"])
    assert parse_grid(["agent.auto_alpha=true,1"])["agent.auto_alpha"] == [True, 1]  # a bool is not a number
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(SAC))
    assert main(["train", str(path), "--seeds", "0", "--grid", "agent.critic_lr=1,1.0", "--run-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert "gives one value twice (1 and 1.0)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


# --------------------------------------------------------------------------- 4. --seeds
def test_seeds_are_parsed_and_refused_past_the_bound_before_any_list_is_built():
    """(Parsing was quadratic: 0-16000 took 6 s; a speed goal is a benchmark's, not a timed assertion's.)"""
    tracemalloc.start()
    try:
        assert parse_seeds(f"0-{MAX_SEEDS - 1}") == list(range(MAX_SEEDS))
        built = tracemalloc.get_traced_memory()[1]  # the list and the set of MAX_SEEDS seeds (~280 kB)
        for text in ("0-4294967295", f"0-{MAX_SEEDS}", f"0-{MAX_SEEDS - 1},{MAX_SEEDS}"):
            tracemalloc.reset_peak()
            with pytest.raises(ConfigError, match=rf"names more than {MAX_SEEDS} seeds.*; name fewer seeds"):
                parse_seeds(text)
            peak = tracemalloc.get_traced_memory()[1]
            assert peak < built // 4, (text, peak, built)  # refused before any list is built (measured ~2 kB)
    finally:
        tracemalloc.stop()
    assert parse_seeds("0-2,9,5") == [0, 1, 2, 9, 5]
    with pytest.raises(ConfigError, match="names seed 2 twice"):
        parse_seeds("0-3,2")
    with pytest.raises(ConfigError, match="names seed 7 twice"):
        parse_seeds("5-9,7-8")


def test_a_population_larger_than_the_bound_is_refused_before_anything_is_built():
    grid = {"agent.critic_lr": [1e-4 * (i + 1) for i in range(MAX_SEEDS // 2 + 1)]}
    raw = {**SAC, "train": {**SAC["train"], "population": {"seeds": [0, 1], "grid": grid}}}
    with pytest.raises(ConfigError, match=rf"has {2 * len(grid['agent.critic_lr'])} members .* more than the {MAX_SEEDS}"):
        build_config(raw)


# --------------------------------------------------------------------------- 6. plot
def test_plot_of_a_population_directory_plots_its_members(tmp_path):
    from rlfunc.runtime.plot import expand_runs, plot_runs

    pop = tmp_path / "pop"
    for k, (seed, lr) in enumerate([(0, 3e-4), (1, 3e-4), (0, 1e-3), (1, 1e-3)]):
        d = pop / f"member-{k}"
        d.mkdir(parents=True)
        (d / "config.yaml").write_text(yaml.safe_dump(
            {"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": {"seed": seed}, "agent": {"critic_lr": lr}}))
        (d / "eval.csv").write_text("step,mean_return\n100,-1000\n200,-900\n")
    (pop / "member-10").mkdir()  # sorted by number, not text (a 3-member run would otherwise list 10 before 2)
    (pop / "member-10" / "config.yaml").write_text((pop / "member-3" / "config.yaml").read_text())
    (pop / "member-10" / "eval.csv").write_text((pop / "member-3" / "eval.csv").read_text())
    dirs, labels = expand_runs([pop], ["x"])
    assert [Path(d).name for d in dirs] == ["member-0", "member-1", "member-2", "member-3", "member-10"]
    assert labels == ["x"] * 5
    assert plot_runs([pop], tmp_path / "p.png").exists()
    shutil.rmtree(pop / "member-10")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="has no eval.csv; pass run directories"):
        plot_runs([empty], tmp_path / "q.png")
