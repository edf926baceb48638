"""Second review of populations and their checkpoints (rlfunc.runtime.population): each test is a defect
the review reproduced, now fixed.

* a population checkpoint whose meta.json was edited and re-signed (wrong number of members' counters,
  negative or huge steps, a non-number wall time) is one CheckpointError sentence, not an IndexError in
  the middle of training or a crash at the next save;
* a population run whose member directories are gone still resumes as a population;
* grid values that differ as written but resolve to one member on the env (REDQ's target_entropy
  ``auto`` and ``-1`` for one action) are refused, as equal numbers are;
* grid values a float32 setting cannot hold (``1e39``, ``1e-60``) are refused before anything is built;
* ``vectorize: loop`` with members that differ in a learning rate is each member's single run bit for
  bit (its update ran with the rate as a float32 tensor in ``hparams``, ~1e-7 off);
* an evaluation that a Ctrl-C interrupted is run when the population resumes, as a single run's is;
* a kill after the population's checkpoint but before the members' policies is repaired at resume
  (``member-<k>/checkpoints`` held the previous policy, and after a finished run's last save nothing
  wrote it again).
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
import torch

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime.checkpoint import CheckpointError, load_checkpoint, meta_checksum
from rlfunc.runtime.config import ConfigError, build_config

torch.set_num_threads(1)

TRAIN = {"eval_episodes": 1, "log_every": 50, "progress": False, "tensorboard": False, "compile": False, "threads": 1}
REDQ = {
    "algo": "redq",
    "env": {"id": "Pendulum-v1"},
    "train": {**TRAIN, "total_steps": 120, "learning_starts": 100, "replay_size": 1000, "eval_every": 120,
              "checkpoint_every": 120},
    "agent": {"hidden_sizes": [16, 16], "num_critics": 3, "updates_per_step": 2, "batch_size": 8},
}


def _config(**train):
    config = copy.deepcopy(REDQ)
    config["train"].update(train)
    return config


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A finished 2-member population (120 env steps, one checkpoint)."""
    run = tmp_path_factory.mktemp("pop") / "run"
    pr.train(REDQ, run_dir=run, seeds=[0, 1])
    return run


def _copy(trained: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(trained, run)
    return run


def _resign(run: Path, edit) -> None:
    """Edit the population checkpoint's meta.json and make its checksum again (what a crafted file does)."""
    (meta_path,) = (run / "checkpoints").glob("step_*/meta.json")
    meta = json.loads(meta_path.read_text())
    edit(meta)
    meta["checksum"] = meta_checksum(meta)
    meta_path.write_text(json.dumps(meta))


@pytest.mark.parametrize(
    "edit, words",
    [
        (lambda m: m.__setitem__("env_steps", [120]), "invalid env_steps"),
        (lambda m: m.__setitem__("env_steps", [120, 120, 120]), "invalid env_steps"),
        (lambda m: m.__setitem__("env_steps", [-5, 120]), "invalid env_steps"),
        (lambda m: m.__setitem__("env_steps", [10**30, 120]), "invalid env_steps"),
        (lambda m: m.__setitem__("env_steps", [100, 110]), "not its members' largest"),
        (lambda m: m.__setitem__("updates", [1]), "invalid updates"),
        (lambda m: m.__setitem__("episodes", [0, True]), "invalid episodes"),
        (lambda m: m.__setitem__("best", [None]), "invalid best"),
        (lambda m: m.__setitem__("best", ["nan", None]), "invalid best"),
        (lambda m: m.__setitem__("wall_s", "x"), "invalid wall_s"),
    ],
)
def test_a_resigned_population_checkpoint_with_bad_counters_is_one_sentence(trained, tmp_path, edit, words):
    run = _copy(trained, tmp_path)
    _resign(run, edit)
    with pytest.raises(CheckpointError, match=words) as info:
        rlfunc.resume(run, total_steps=140)
    assert "\n" not in str(info.value) and str(info.value).endswith("use an earlier checkpoint.")


def test_a_population_without_its_member_directories_resumes_as_a_population(trained, tmp_path):
    run = _copy(trained, tmp_path)
    for k in range(2):
        shutil.rmtree(run / f"member-{k}")
    assert pr.is_population_run(run)
    res = rlfunc.resume(run, total_steps=130)
    assert [m.env_steps for m in res.members] == [130, 130]
    assert rlfunc.load(run / "member-1") is not None
    assert not pr.is_population_run(tmp_path / "nothing-here")


@pytest.mark.parametrize("values", [["auto", -1], ["mbpo", "auto"]])
def test_grid_values_that_resolve_to_one_member_are_refused(tmp_path, values):
    """Pendulum has one action: ``auto`` is -1, and ``mbpo`` is ``auto`` off the MBPO table."""
    with pytest.raises(ConfigError, match="gives one member twice") as info:
        pr.train(REDQ, run_dir=tmp_path / "pop", seeds=[0, 1], grid={"agent.target_entropy": values})
    assert "list each value once" in str(info.value)
    assert not (tmp_path / "pop").exists()
    config = build_config({**REDQ, "train": {**REDQ["train"], "population": {
        "seeds": [0], "grid": {"agent.target_entropy": ["auto", -2]}}}})
    assert len(pr.PopulationTrainer(config, tmp_path / "ok").members) == 2  # different on this env: trained


@pytest.mark.parametrize("grid", [{"agent.init_alpha": [1e39, 1.0]}, {"agent.critic_lr": [1e-60, 1e-3]},
                                  {"agent.target_entropy": [-1e39, -1.0]}])
def test_grid_values_float32_cannot_hold_are_refused_before_anything_is_built(tmp_path, monkeypatch, grid):
    def built(*args, **kwargs):
        raise AssertionError("the population was built")

    monkeypatch.setattr(pr.PopulationTrainer, "__init__", built)
    with pytest.raises(ConfigError, match="outside what a float32 setting holds"):
        pr.train(REDQ, run_dir=tmp_path / "pop", seeds=[0], grid=grid)


def test_looped_members_that_differ_in_a_learning_rate_are_their_single_runs_bit_for_bit(tmp_path):
    config = _config(total_steps=150, eval_every=150, checkpoint_every=150)
    pop = {**config, "train": {**config["train"], "population": {"vectorize": "loop"}}}
    res = pr.train(pop, run_dir=tmp_path / "pop", seeds=[0], grid={"agent.critic_lr": [3e-4, 1e-3]})
    state = load_checkpoint(tmp_path / "pop")[0]["state"]
    assert state["hparams", "critic_lr"].tolist() == pytest.approx([3e-4, 1e-3])  # still data in the population
    for k, lr in enumerate((3e-4, 1e-3)):
        single = rlfunc.train(config, overrides={"agent.critic_lr": lr}, run_dir=tmp_path / f"single-{k}")
        assert res.members[k].evals == single.evals
        mine = load_checkpoint(res.members[k].run_dir)[0]["state", "params"]
        theirs = load_checkpoint(single.run_dir)[0]["state", "params"]
        assert all(torch.equal(mine[key], v) for key, v in theirs.items(True, True))


def test_an_evaluation_interrupted_by_ctrl_c_is_run_when_the_population_resumes(tmp_path, monkeypatch):
    from rlfunc.runtime.trainer import RunInterrupted

    config = _config(total_steps=160, learning_starts=60, eval_every=80, checkpoint_every=1000)
    evaluate = pr.PopulationTrainer.evaluate_members

    def interrupted(self, ks):
        if self.env_step == 80:
            raise KeyboardInterrupt
        return evaluate(self, ks)

    monkeypatch.setattr(pr.PopulationTrainer, "evaluate_members", interrupted)
    with pytest.raises(RunInterrupted, match="saved at step 80"):
        pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    monkeypatch.setattr(pr.PopulationTrainer, "evaluate_members", evaluate)
    res = rlfunc.resume(tmp_path / "pop")
    assert [[s for s, _ in m.evals] for m in res.members] == [[80, 160], [80, 160]]
    for k in range(2):
        rows = (tmp_path / "pop" / f"member-{k}" / "eval.csv").read_text().splitlines()[1:]
        assert [int(r.split(",")[0]) for r in rows] == [80, 160]


class _Killed(BaseException):
    """Stands in for a kill -9: not an Exception, so the save on the way out does not catch it."""


def test_a_kill_before_the_members_policies_are_written_is_repaired_at_resume(tmp_path, monkeypatch):
    config = _config(total_steps=150, eval_every=75, checkpoint_every=75)
    save_policies = pr.PopulationTrainer._save_policies

    def killed(self, ks):
        if max(self.env_steps) == 150:
            raise _Killed
        return save_policies(self, ks)

    monkeypatch.setattr(pr.PopulationTrainer, "_save_policies", killed)
    with pytest.raises(_Killed):
        pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    monkeypatch.setattr(pr.PopulationTrainer, "_save_policies", save_policies)
    assert sorted(p.name for p in (tmp_path / "pop" / "checkpoints").glob("step_*"))[-1] == "step_000000150"
    assert [p.name for p in (tmp_path / "pop" / "member-1" / "checkpoints").glob("step_*")] == ["step_000000075"]
    rlfunc.resume(tmp_path / "pop")  # finished: nothing to train, but the members' policies are brought up to date
    state = load_checkpoint(tmp_path / "pop")[0]["state", "params"]
    for k in range(2):
        tensors, meta = load_checkpoint(tmp_path / "pop" / f"member-{k}")
        assert meta["env_step"] == 150
        assert all(torch.equal(state[key][k], v) for key, v in tensors["state", "params"].items(True, True))


@pytest.mark.parametrize("text", ["- 1\n", "train: 5\n", "algo: redq\nenv: 3\n", "\xff\xfe: [\n"])
def test_plot_of_a_run_whose_config_yaml_is_damaged_is_one_sentence(tmp_path, capsys, text):
    """`rlfunc plot` read a member's config.yaml as it came: a list or a section that is not a mapping was a
    TypeError traceback labelled a bug in rlfunc; now one sentence naming the file."""
    from rlfunc.runtime.cli import main

    run = tmp_path / "member-0"
    run.mkdir()
    (run / "eval.csv").write_text("step,mean_return\n100,-1.0\n")
    (run / "config.yaml").write_text(text, encoding="utf-8", errors="surrogateescape")
    rc = main(["plot", str(run), "--out", str(tmp_path / "curves.png")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "config.yaml' is not a run config rlfunc wrote; restore it or leave that run out." in err[0]
