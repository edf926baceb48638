"""Training a population in one process (rlfunc.runtime.population, issue #24).

A 2-member REDQ population on CPU gives each member the evaluation returns of the
single run with its seed (and its learning rate), to float tolerance: not bit for
bit, because the vmapped update's batched matrix products sum in another order
(rlfunc.core.population, "Numerics"); measured, the returns agree to ~1e-8
relative. Member directories are ordinary runs for rlfunc.load / eval / plot; resume
continues every member; what is not batched yet is refused in one sentence.
"""

from __future__ import annotations

import csv
import importlib.util
import math
from pathlib import Path

import pytest
import torch
import yaml

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime import population_members as members_of
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, build_config

BASE = {
    "algo": "redq",
    "env": {"id": "Pendulum-v1"},
    "train": {
        "total_steps": 300,
        "learning_starts": 100,
        "replay_size": 1000,
        "eval_every": 150,
        "eval_episodes": 1,
        "checkpoint_every": 150,
        "log_every": 50,
        "progress": False,
        "tensorboard": False,
    },
    "agent": {"hidden_sizes": [16, 16], "num_critics": 3, "updates_per_step": 2, "batch_size": 8},
}

DATA = Path(__file__).parent / "data" / "pendulum_expert_2k.npz"
RTOL = 1e-6  # measured ~1e-8; the vmapped update is not bit-exact (module doc)


def _close(a: list[tuple[int, float]], b: list[tuple[int, float]]) -> None:
    assert [s for s, _ in a] == [s for s, _ in b]
    for (_, x), (_, y) in zip(a, b):
        assert math.isclose(x, y, rel_tol=RTOL), (a, b)


def test_seeds_equal_single_runs(tmp_path):
    res = pr.train(BASE, run_dir=tmp_path / "pop", seeds=[0, 1])
    assert [m.run_dir.name for m in res.members] == ["member-0", "member-1"]
    for k, seed in enumerate((0, 1)):
        single = rlfunc.train(BASE, overrides={"train.seed": seed}, run_dir=tmp_path / f"single-{seed}")
        _close(res.members[k].evals, single.evals)
        assert len(res.members[k].evals) == 2
        member = tmp_path / "pop" / f"member-{k}"
        config = yaml.safe_load((member / "config.yaml").read_text())
        assert config["train"]["seed"] == seed and "population" not in config["train"]
        with open(member / "eval.csv") as f:
            rows = list(csv.DictReader(f))
        assert [float(r["mean_return"]) for r in rows] == [r for _, r in res.members[k].evals]
        with open(member / "metrics.csv") as f:
            assert [int(r["step"]) for r in csv.DictReader(f)] == list(range(50, 301, 50))
        # one member's policy, as an ordinary run's: rlfunc.load / rlfunc.evaluate, same return as its last eval
        out = rlfunc.evaluate(rlfunc.load(member), episodes=1, seed=seed + 10_000)
        assert out["mean"] == res.members[k].evals[-1][1]
    assert yaml.safe_load((tmp_path / "pop" / "config.yaml").read_text())["train"]["population"] == {"seeds": [0, 1]}
    with pytest.raises(ValueError, match="population's checkpoint, which holds every member; pass one member's run directory instead"):
        rlfunc.load(tmp_path / "pop")


def test_two_learning_rates_equal_single_runs(tmp_path):
    res = pr.train(BASE, run_dir=tmp_path / "pop", seeds=[3], grid={"agent.critic_lr": [3e-4, 1e-3]})
    for k, lr in enumerate((3e-4, 1e-3)):
        single = rlfunc.train(BASE, overrides={"train.seed": 3, "agent.critic_lr": lr}, run_dir=tmp_path / f"lr-{k}")
        _close(res.members[k].evals, single.evals)
        config = yaml.safe_load((tmp_path / "pop" / f"member-{k}" / "config.yaml").read_text())
        assert config["agent"]["critic_lr"] == lr and config["train"]["seed"] == 3
    assert res.members[0].evals != res.members[1].evals


def test_cli_seeds_grid_and_resume(tmp_path, capsys):
    cfg = tmp_path / "c.yaml"
    train = {**BASE["train"], "total_steps": 200, "checkpoint_every": 200, "tensorboard": True}
    cfg.write_text(yaml.safe_dump({**BASE, "train": train}))
    run = tmp_path / "run"
    argv = ["train", str(cfg), "--seeds", "0-1", "--grid", "agent.actor_lr=3e-4,1e-3", "--run-dir", str(run)]
    assert main(argv) == 0
    members = sorted(p.name for p in run.iterdir() if p.name.startswith("member-"))
    assert members == [f"member-{k}" for k in range(4)]
    seen = [yaml.safe_load((run / m / "config.yaml").read_text()) for m in members]
    assert [(c["train"]["seed"], c["agent"]["actor_lr"]) for c in seen] == [(0, 3e-4), (1, 3e-4), (0, 1e-3), (1, 1e-3)]
    assert all(list((run / m).glob("events.out.tfevents.*")) for m in members)  # TensorBoard, per member
    # resume from the checkpoint at step 200 (an episode boundary of Pendulum) continues exactly as one
    # uninterrupted population run does
    assert main(["resume", str(run), "--total-steps", "300"]) == 0
    whole = pr.train(
        {**BASE, "train": {**BASE["train"], "checkpoint_every": 200}}, run_dir=tmp_path / "whole",
        seeds=[0, 1], grid={"agent.actor_lr": [3e-4, 1e-3]},
    )
    for k in range(4):
        with open(run / f"member-{k}" / "eval.csv") as f:
            resumed = [(int(r["step"]), float(r["mean_return"])) for r in csv.DictReader(f)]
        assert resumed[0][0] == 150 and resumed[-1][0] == 300
        assert resumed[-1] == whole.members[k].evals[-1]
    capsys.readouterr()
    # one member is an ordinary run for eval and plot; resuming a member is refused (weights only)
    assert main(["eval", str(run / "member-2"), "--episodes", "1"]) == 0
    assert main(["plot", str(run / "member-0"), str(run / "member-1"), "--out", str(tmp_path / "c.png")]) == 0
    assert main(["resume", str(run / "member-0")]) == 2
    assert "weights only" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, text",
    [
        (["--seeds", "0-1", "--set", "data.pretrain_steps=2"], "does not support data.pretrain_steps"),
        (["--seeds", "0-1", "--grid", "agent.hidden_sizes=[8],[16]"], "agent.hidden_sizes is not a setting redq takes as data"),
        (["--seeds", "3-1"], "--seeds '3-1': the range '3-1' runs backwards"),
        (["--seeds", "0,0"], "names seed 0 twice"),
        (["--seeds", "0-1", "--set", "train.stop_at_return=0"], "does not support stopping rules"),
        pytest.param(
            ["--seeds", "0-1", "--set", "train.wandb={mode: offline}"], "does not support train.wandb",
            marks=pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="train.wandb needs wandb installed"),
        ),
        (["--grid", "agent.critic_lr"], "must look like section.key=value1,value2"),
        (["--vectorize", "loop"], "give --seeds or --grid too"),
    ],
)
def test_refusals_are_one_sentence(tmp_path, capsys, argv, text):
    config = BASE
    if "pretrain" in text:
        config = {"algo": "rlpd", "env": {"id": "Pendulum-v1"}, "data": {"path": str(DATA)}, "train": {"total_steps": 10000}}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config))
    run = tmp_path / "run"
    assert main(["train", str(cfg), "--run-dir", str(run), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert text in err and len(err.splitlines()) == 1 and err.startswith("rlfunc: error: ")
    assert not run.exists()


def test_vectorize_auto_vmaps_on_a_gpu_and_where_batching_pays_on_a_cpu_and_bad_values_are_one_sentence():
    """train.population.vectorize: auto vmaps on CUDA, and on a CPU the algorithms measured at least as fast
    batched (population_members.CPU_VMAP); the others loop over members. A bad value, and loop with train.cuda_graph (which
    captures the vmapped update), are one sentence before training."""
    assert members_of.resolve_vectorize("auto", "redq", "cpu") == "vmap" and members_of.resolve_vectorize("auto", "drqn", "cpu") == "vmap"
    assert members_of.resolve_vectorize("auto", "r2d2", "cpu") == "loop" and members_of.resolve_vectorize("auto", "drqv2", "cpu") == "loop"
    assert members_of.resolve_vectorize("auto", "r2d2", "cuda:0") == "vmap" and members_of.resolve_vectorize("loop", "redq", "cuda") == "loop"
    # DRQN with a conv torso vmaps eager but loops compiled on a CPU (population_drqn_minatar_update_only.json)
    assert members_of.resolve_vectorize("auto", "drqn", "cpu", "minatar") == "vmap"
    assert members_of.resolve_vectorize("auto", "drqn", "cpu", "minatar", compiled=True) == "loop"
    assert members_of.resolve_vectorize("auto", "drqn", "cpu", "mlp", compiled=True) == "vmap"
    assert members_of.resolve_vectorize("auto", "dqn", "cpu", "minatar", compiled=True) == "vmap"
    # ... and both loop on frames below 4 members (population_dqn_minatar_breakout_flicker_runs_vmap.json)
    assert members_of.resolve_vectorize("auto", "dqn", "cpu", "minatar", members=2) == "loop"
    assert members_of.resolve_vectorize("auto", "dqn", "cpu", "minatar", members=4) == "vmap"
    assert members_of.resolve_vectorize("auto", "dqn", "cpu", "mlp", members=2) == "vmap"
    assert members_of.resolve_vectorize("auto", "drqn", "cuda", "minatar", compiled=True) == "vmap"
    with pytest.raises(ConfigError, match=r"^train\.population\.vectorize must be one of auto, vmap, loop, got 'batched'\.$"):
        build_config({**BASE, "train": {**BASE["train"], "population": {"seeds": [0, 1], "vectorize": "batched"}}})
    graphed = build_config({**BASE, "train": {**BASE["train"], "device": "cuda", "cuda_graph": True,
                                              "population": {"seeds": [0, 1], "vectorize": "loop"}}})
    with pytest.raises(ConfigError, match=r"^train\.cuda_graph captures the vmapped population update; set "):
        members_of.member_specs(graphed)


def test_cli_vectorize_loop_trains_each_member_bit_for_bit_as_its_single_run(tmp_path, capsys):
    """``rlfunc train --seeds 0-1 --vectorize loop``: each member's own update and act in turn, so a
    member's evaluations are its single run's exactly (not only to float rounding, as vmapped)."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(BASE))
    assert main(["train", str(cfg), "--seeds", "0-1", "--vectorize", "loop", "--run-dir", str(tmp_path / "pop")]) == 0
    assert "vectorize=loop" in capsys.readouterr().err
    single = rlfunc.train(BASE, overrides={"train.seed": 1}, run_dir=tmp_path / "single")
    with open(tmp_path / "pop" / "member-1" / "eval.csv") as f:
        rows = [(int(r["step"]), float(r["mean_return"])) for r in csv.DictReader(f)]
    assert rows == [(int(s), r) for s, r in single.evals] and len(rows) >= 2


def test_rlfunc_train_and_resume_take_a_population_config(tmp_path):
    """rlfunc.train / rlfunc.resume from Python hand a population config to the population trainer."""
    cfg = {**BASE, "train": {**BASE["train"], "total_steps": 150, "population": {"seeds": [0, 1]}}}
    res = rlfunc.train(cfg, run_dir=tmp_path / "r")
    assert len(res.members) == 2 and (tmp_path / "r" / "member-1" / "eval.csv").exists()
    res = rlfunc.resume(tmp_path / "r", total_steps=300)
    assert res.env_steps == 300
    with pytest.raises(ConfigError, match="callbacks are not available for populations"):
        rlfunc.train(cfg, run_dir=tmp_path / "s", callbacks=[rlfunc.Callback()])


def test_population_benchmark_smoke(tmp_path):
    """``benchmarks/run.py population --quick`` times both variants and writes its JSON."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = tmp_path / "population.json"
    cmd = [sys.executable, str(root / "benchmarks" / "run.py"), "population", "--quick", "--members", "2",
           "--repeats", "1", "--steps", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=root)
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    (row,) = d["rows"]
    assert row["members"] == 2 and row["total_throughput_ratio"] > 0 and "cpu" in d["machine"]


def test_sac_member_equals_its_single_run(tmp_path):
    sac = {**BASE, "algo": "sac", "agent": {"hidden_sizes": [16, 16], "batch_size": 8},
           "train": {**BASE["train"], "total_steps": 200, "eval_every": 200, "checkpoint_every": 200}}
    res = pr.train(sac, run_dir=tmp_path / "pop", seeds=[0, 1])
    single = rlfunc.train(sac, overrides={"train.seed": 1}, run_dir=tmp_path / "single")
    _close(res.members[1].evals, single.evals)


@pytest.mark.parametrize("vectorize", ["vmap", "loop"])  # loop: what auto gives RLPD on a CPU (bit for bit)
def test_rlpd_members_equal_single_runs_and_share_the_dataset(tmp_path, vectorize):
    import shutil

    import numpy as np

    from rlfunc.replay.offline import DatasetError

    data = tmp_path / "prior.npz"
    shutil.copy(DATA, data)
    rlpd = {**BASE, "algo": "rlpd", "data": {"path": str(data)},
            "train": {**BASE["train"], "total_steps": 200, "eval_every": 200, "checkpoint_every": 200}}
    chosen = {**rlpd, "train": {**rlpd["train"], "population": {"vectorize": vectorize}}}
    res = pr.train(chosen, run_dir=tmp_path / "pop", seeds=[0, 1])
    assert res.vectorize == vectorize
    for seed in (0, 1):
        single = rlfunc.train(rlpd, overrides={"train.seed": seed}, run_dir=tmp_path / f"single-{seed}")
        if vectorize == "loop":
            assert res.members[seed].evals == single.evals
        else:
            _close(res.members[seed].evals, single.evals)
    pt = pr.PopulationTrainer(build_config({**rlpd, "train": {**rlpd["train"], "population": {"seeds": [0, 1]}}}), tmp_path / "x")
    assert pt.learners[1].dataset is pt.dataset is pt.learners[0].sampler.dataset
    assert rlfunc.load(tmp_path / "pop" / "member-1") is not None
    assert pr.resume(tmp_path / "pop", total_steps=220).env_steps == 220  # continues from the shared dataset
    with np.load(data) as arrays:
        changed = {name: arrays[name] for name in arrays.files}
    changed["rewards"] = changed["rewards"] + 1.0  # the file changed since
    np.savez(data, **changed)
    with pytest.raises(DatasetError, match="is not the one this population was trained with"):
        pr.resume(tmp_path / "pop", total_steps=240)


def test_ctrl_c_saves_every_member_and_resume_continues(tmp_path, monkeypatch):
    from rlfunc.runtime.trainer import RunInterrupted

    learn = pr.PopulationTrainer.learn

    def interrupted(self, ready=None):
        if self.env_step == 180:
            raise KeyboardInterrupt
        return learn(self, ready)

    monkeypatch.setattr(pr.PopulationTrainer, "learn", interrupted)
    config = {**BASE, "train": {**BASE["train"], "total_steps": 250, "checkpoint_every": 1000}}
    with pytest.raises(RunInterrupted, match="saved at step 180"):
        pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    monkeypatch.setattr(pr.PopulationTrainer, "learn", learn)
    assert sorted(p.name for p in (tmp_path / "pop" / "checkpoints").glob("step_*")) == ["step_000000180"]
    for k in range(2):  # each member's policy as of the interruption
        assert rlfunc.load(tmp_path / "pop" / f"member-{k}") is not None
    res = pr.resume(tmp_path / "pop")
    assert res.env_steps == 250 and all(m.evals[-1][0] == 250 for m in res.members)


def test_a_non_finite_member_stops_the_population_and_names_it(tmp_path):
    from helpers_envs import register

    from rlfunc.runtime.trainer import NonFiniteLossError

    register()
    cfg = {
        **BASE,
        "env": {"id": "rlfunc_test/Counting-v0", "kwargs": {"term_at": 50, "nan_reward_after": 200}},
        "train": {**BASE["train"], "population": {"seeds": [0, 1]}},
    }
    with pytest.raises(NonFiniteLossError, match=r"member \d \(seed \d\) has a non-finite"):
        rlfunc.train(cfg, run_dir=tmp_path / "r")


@pytest.mark.parametrize("algo", ["redq", "rlpd"])
def test_a_population_of_one_trains_its_single_run_bit_for_bit(tmp_path, algo):
    """One member: the runtime acts and updates on the unstacked member with the single run's own
    calls (no torch.vmap, rlfunc.core.population "One member"), so every evaluation return and the
    final weights are the single run's exactly, not to a tolerance; resume continues it."""
    config = {**BASE, "algo": algo, **({"data": {"path": str(DATA)}} if algo == "rlpd" else {})}
    res = pr.train(config, run_dir=tmp_path / "pop", seeds=[3])
    single = rlfunc.train(config, overrides={"train.seed": 3}, run_dir=tmp_path / "single")
    assert res.members[0].evals == single.evals and len(single.evals) == 2
    a, b = rlfunc.load(tmp_path / "pop" / "member-0"), rlfunc.load(single.run_dir)
    for key, value in b.params.items(True, True):
        assert torch.equal(a.params[key], value), key
    more = pr.resume(tmp_path / "pop", total_steps=350)
    assert more.members[0].evals[:2] == single.evals and more.members[0].env_steps == 350


def test_a_compiled_population_compiles_each_vmapped_step_where_the_algorithm_can():
    """``train.compile`` (``compile_mode: step``): REDQ, SAC and RLPD's population update is their
    members' step loop (``make_population_update``: two small compiles); ``full`` and the other
    algorithms compile the vmapped update whole. Nothing is compiled until the first call."""
    import functools
    import types

    from rlfunc.algos import drqn, redq, rlpd

    for module in (redq, rlpd):
        update = pr.population_update(module, types.SimpleNamespace(compile=True, compile_mode="step"))
        assert isinstance(update, functools.partial) and update.keywords["members"] is True
        assert all(hasattr(step, "_torchdynamo_orig_callable") for step in update.keywords["steps"])
    whole = pr.population_update(redq, types.SimpleNamespace(compile=True, compile_mode="full"))
    assert hasattr(whole, "_torchdynamo_orig_callable")
    assert hasattr(pr.population_update(drqn, types.SimpleNamespace(compile=True, compile_mode="step")),
                   "_torchdynamo_orig_callable")
    eager = pr.population_update(redq, types.SimpleNamespace(compile=False, compile_mode="step"))
    assert eager.__name__ == "population_update" and not hasattr(eager, "_torchdynamo_orig_callable")


@pytest.mark.compile
def test_a_compiled_population_trains_what_the_eager_one_trains(tmp_path):
    """Two REDQ members with ``train.compile=true`` (each vmapped step compiled) against the eager
    population: the same evaluations up to the compiled arithmetic's rounding (Adam's float32 bias
    corrections; measured ~1e-6 relative over these 200 updates of G=2)."""
    eager = pr.train(BASE, run_dir=tmp_path / "eager", seeds=[0, 1])
    compiled = pr.train(BASE, overrides={"train.compile": True}, run_dir=tmp_path / "compiled", seeds=[0, 1])
    for a, b in zip(eager.members, compiled.members):
        assert [s for s, _ in a.evals] == [s for s, _ in b.evals]
        for (_, x), (_, y) in zip(a.evals, b.evals):
            assert math.isclose(x, y, rel_tol=1e-3), (a.evals, b.evals)
