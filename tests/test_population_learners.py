"""Populations of every learner (rlfunc.runtime.population, issue #24): vector envs, DRQN/DQN/R2D2, DrQ-v2.

Each test trains a 2-member population on CPU and the single runs with the members'
seeds (and settings), and compares every evaluation return and the final weights
(PARAM_RTOL of each tensor's scale). Tolerance: RTOL relative, as
tests/test_population_runtime.py, for the continuous-action learners (REDQ, DrQ-v2):
the vmapped update is not bit-exact (batched matrix products sum in another order,
settings held as tensors round differently; rlfunc.core.population "Numerics") and
the returns of a continuous policy move with its weights. The discrete learners (DRQN, DQN, R2D2)
act by argmax, so differences in the last bits of a Q-value leave the actions, the
data and the returns unchanged unless two Q-values tie to within them: measured, their
returns are equal, and the tests assert the same RTOL.
"""

from __future__ import annotations

import math

import pytest
import torch

import rlfunc
from rlfunc.runtime import population as pr
from rlfunc.runtime.checkpoint import load_checkpoint

RTOL = 1e-6
PARAM_RTOL = 1e-5  # final weights of a member vs its single run, relative to each tensor's scale (measured <= 1e-6)

TRAIN = {"eval_episodes": 1, "log_every": 50, "progress": False, "tensorboard": False, "compile": False, "threads": 1}

DRQN = {
    "algo": "drqn",
    "env": {"id": "CartPole-v1", "num_envs": 2},
    "train": {**TRAIN, "total_steps": 240, "learning_starts": 50, "replay_size": 200, "eval_every": 120, "checkpoint_every": 120},
    "agent": {"lstm_size": 8, "encoder_sizes": [8], "batch_size": 4, "sequence_length": 4, "sequence_period": 4,
              "train_every": 2, "eps_decay_steps": 200, "target_period": 20},
}

R2D2_SMALL = {
    "algo": "r2d2",
    "env": {"id": "CartPole-v1", "num_envs": 2},
    "train": {**TRAIN, "total_steps": 120, "learning_starts": 10, "replay_size": 200, "eval_every": 60, "checkpoint_every": 120},
    "agent": {"lstm_size": 8, "encoder_sizes": [8], "head_sizes": [8], "burn_in": 2, "sequence_length": 4,
              "sequence_period": 3, "batch_size": 4, "samples_per_insert": 8, "target_period": 20},
}


def _close(a, b) -> None:
    assert [s for s, _ in a] == [s for s, _ in b], (a, b)
    for (_, x), (_, y) in zip(a, b):
        assert math.isclose(x, y, rel_tol=RTOL), (a, b)


def _params(run_dir):
    tensors, _ = load_checkpoint(run_dir)
    return tensors["state", "params"]


def _params_close(a, b) -> float:
    """Largest difference of two parameter sets relative to each tensor's scale; asserted below PARAM_RTOL."""
    worst = 0.0
    for key, x in a.items(True, True):
        y = b[key]
        worst = max(worst, float((x - y).abs().max()) / max(float(y.abs().max()), 1e-3))
    assert worst < PARAM_RTOL, worst
    return worst


def _members_equal_single_runs(tmp_path, config, seeds, grid=None, vectorize=None):
    """Train the population (``train.population.vectorize``, default auto) and each member's single run; their
    evaluations agree (``vectorize="loop"``: bit for bit, each member runs its single run's calls). Returns the
    population's result."""
    pop_config = config if vectorize is None else {**config, "train": {**config["train"], "population": {"vectorize": vectorize}}}
    res = pr.train(pop_config, run_dir=tmp_path / "pop", seeds=seeds, grid=grid)
    assert vectorize is None or res.vectorize == vectorize
    values = list(grid.items())[0] if grid else None
    settings = [{}] if not grid else [{values[0]: v} for v in values[1]]
    k = 0
    for setting in settings:
        for seed in seeds:
            single = rlfunc.train(config, overrides={"train.seed": seed, **setting}, run_dir=tmp_path / f"single-{k}")
            if vectorize == "loop":
                assert res.members[k].evals == single.evals
                a, b = _params(res.members[k].run_dir), _params(single.run_dir)
                assert all(torch.equal(a[key], v) for key, v in b.items(True, True))
            else:
                _close(res.members[k].evals, single.evals)
                _params_close(_params(res.members[k].run_dir), _params(single.run_dir))
            k += 1
    assert len(res.members) == k
    return res


def test_redq_members_on_vector_envs_equal_single_runs(tmp_path):
    """env.num_envs=2: each member steps its own vector env, seeded as its single run's; a learn per stored row."""
    config = {
        "algo": "redq",
        "env": {"id": "Pendulum-v1", "num_envs": 2},
        "train": {**TRAIN, "total_steps": 240, "learning_starts": 100, "replay_size": 1000, "eval_every": 120, "checkpoint_every": 120},
        "agent": {"hidden_sizes": [16, 16], "num_critics": 3, "updates_per_step": 2, "batch_size": 8},
    }
    res = _members_equal_single_runs(tmp_path, config, [0, 1])
    assert res.members[0].evals != res.members[1].evals


@pytest.mark.parametrize("vectorize", ["vmap", "loop"])  # loop: what auto gives DrQ-v2 on a CPU
def test_drqv2_members_equal_single_runs(tmp_path, vectorize):
    """DrQ-v2 from Pendulum's pixels: frame-stack replay, action repeat, an update every 2 agent
    steps between acting and stepping the env, sigma's schedule at each member's agent step."""
    config = {
        "algo": "drqv2",
        "env": {"id": "Pendulum-v1", "kwargs": {"render_mode": "rgb_array"},
                "wrappers": [{"pixels": {"size": 32, "frame_stack": 3, "action_repeat": 2}}]},
        "train": {**TRAIN, "total_steps": 120, "learning_starts": 40, "replay_size": 1000, "eval_every": 60,
                  "checkpoint_every": 60, "log_every": 20},
        "agent": {"batch_size": 8, "hidden_dim": 16, "feature_dim": 8, "encoder_channels": [4, 4, 4, 4],
                  "stddev_duration": 100},
    }
    res = _members_equal_single_runs(tmp_path, config, [0, 1], vectorize=vectorize)
    assert res.members[0].evals != res.members[1].evals
    with open(tmp_path / "pop" / "member-0" / "eval.csv") as f:
        assert f.readline().split(",")[:2] == ["step", "frames"]  # agent steps and env frames, as a single run's
    out = rlfunc.evaluate(rlfunc.load(tmp_path / "pop" / "member-1"), episodes=1, seed=1 + 10_000)
    assert math.isclose(out["mean"], res.members[1].evals[-1][1], rel_tol=RTOL)
    more = pr.resume(tmp_path / "pop", total_steps=140)
    assert [m.evals[-1][0] for m in more.members] == [140, 140]
def test_drqn_members_equal_single_runs_load_and_resume(tmp_path):
    """DRQN on two CartPole envs per member: episodes end at different steps in each member, so
    a member's autoreset steps store fewer rows and its learner is ready at other env steps than
    the other's; the members that are not ready keep their state (masked update)."""
    res = _members_equal_single_runs(tmp_path, DRQN, [0, 1])
    assert res.members[0].evals != res.members[1].evals
    out = rlfunc.evaluate(rlfunc.load(tmp_path / "pop" / "member-1"), episodes=1, seed=1 + 10_000)
    assert out["mean"] == res.members[1].evals[-1][1]
    more = pr.resume(tmp_path / "pop", total_steps=300)
    assert [m.evals[-1][0] for m in more.members] == [300, 300]


def test_vmapped_members_shifted_by_autoreset_share_their_updates_and_train_the_same(tmp_path, monkeypatch):
    """DRQN learns every train_every env steps; autoreset steps shift the members' counts, so their
    boundaries fall at different rows of a round. Vmapped, a round's due updates are counted and
    run together (PopulationTrainer._learn_due): fewer population updates than rows at which some
    member was ready, and the same trained weights and returns as updating at each row."""
    config = {**DRQN, "train": {**DRQN["train"], "population": {"vectorize": "vmap"}}}
    calls = {}
    learn = pr.PopulationTrainer.learn

    def counting(label):
        def wrapped(self, ready=None):
            calls[label] = calls.get(label, 0) + 1
            return learn(self, ready)
        return wrapped

    monkeypatch.setattr(pr.PopulationTrainer, "learn", counting("grouped"))
    grouped = pr.train(config, run_dir=tmp_path / "grouped", seeds=[0, 1])
    from rlfunc.runtime.learners.sequence import SequenceLearner

    monkeypatch.setattr(SequenceLearner, "ready_reads_updates", True)  # no grouping: an update at each row
    monkeypatch.setattr(pr.PopulationTrainer, "learn", counting("per_row"))
    per_row = pr.train(config, run_dir=tmp_path / "per_row", seeds=[0, 1])
    assert calls["grouped"] < 0.75 * calls["per_row"], calls
    for a, b in zip(grouped.members, per_row.members):
        assert a.evals == b.evals and a.gradient_steps == b.gradient_steps
        _params_close(_params(a.run_dir), _params(b.run_dir))


def test_dqn_two_learning_rates_equal_single_runs(tmp_path):
    """The DQN control (one-step windows, the sequence learner) with agent.lr as data."""
    config = {**DRQN, "algo": "dqn", "env": {"id": "CartPole-v1", "num_envs": 1},
              "agent": {**DRQN["agent"], "sequence_length": 1, "sequence_period": 1}}
    res = _members_equal_single_runs(tmp_path, config, [0], grid={"agent.lr": [1e-3, 1e-2]})
    with pytest.raises(AssertionError):  # the two rates trained different weights
        _params_close(_params(res.members[0].run_dir), _params(res.members[1].run_dir))


@pytest.mark.parametrize("vectorize", ["vmap", "loop"])
def test_r2d2_members_equal_single_runs(tmp_path, vectorize):
    """R2D2: prioritized windows, priorities written back per member, the samples-per-insert
    limiter per member (members become ready at different steps), one epsilon per actor; vmapped
    (a member not ready keeps its state: masked update) and looped (only the ready members' own
    updates run: bit for bit its single run, through checkpoints and resume)."""
    # PyTorch's init: the two seeds' episodes, windows and limiters differ here; with R2D2's default (haiku's,
    # zero biases) both members made 109 updates (greedy returns 9.0 each), so the masked update never ran
    agent = {**R2D2_SMALL["agent"], "init": "torch_default", "lstm_init": "torch_default", "forget_bias": 0.0}
    config = {**R2D2_SMALL, "agent": agent, "train": {**R2D2_SMALL["train"], "total_steps": 240, "eval_every": 120}}
    res = _members_equal_single_runs(tmp_path, config, [0, 1], vectorize=vectorize)
    # the members' limiters let them learn at different env steps (the masked update ran)
    assert res.members[0].gradient_steps != res.members[1].gradient_steps
    out = rlfunc.evaluate(rlfunc.load(tmp_path / "pop" / "member-0"), episodes=1, seed=10_000)
    assert out["mean"] == res.members[0].evals[-1][1]
    more = pr.resume(tmp_path / "pop", total_steps=270)  # each member's priorities and limiter count restored
    assert [m.evals[-1][0] for m in more.members] == [270, 270]
    assert all(m.gradient_steps > r.gradient_steps for m, r in zip(more.members, res.members))


def test_replays_that_fit_once_but_not_p_times_are_refused_before_training(tmp_path, monkeypatch):
    """The first member's learner sizes its replay; P of them must fit (one sentence naming both fixes)."""
    from rlfunc.runtime import memory
    from rlfunc.runtime.config import ConfigError, build_config

    config = build_config({**DRQN, "train": {**DRQN["train"], "population": {"seeds": [0, 1, 2]}}})
    probe = pr.PopulationTrainer(build_config({**DRQN, "train": {**DRQN["train"], "population": {"seeds": [0]}}}), tmp_path / "a")
    one = probe.learners[0]._replay_need().nbytes
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * one)  # room for two replays, not three
    with pytest.raises(ConfigError, match=r"for each of 3 members needs .* lower train.replay_size or give fewer members \(train\.population\.seeds"):
        pr.PopulationTrainer(config, tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_members_share_one_batched_replay(tmp_path, monkeypatch):
    """DRQN/DQN (and DrQ-v2, REDQ/SAC/RLPD) members' replays are rows of one batched replay (member k's
    learner holds its row), sampled with one call when every member learns; R2D2 keeps separate replays."""
    from rlfunc.replay.population import PopulationReplay
    from rlfunc.replay.population_sequence import PopulationSequenceReplay
    from rlfunc.runtime.config import build_config

    calls = {"n": 0}
    real = PopulationSequenceReplay.sample

    def counted(self, *args, **kwargs):
        calls["n"] += 1
        return real(self, *args, **kwargs)

    monkeypatch.setattr(PopulationSequenceReplay, "sample", counted)
    config = {**DRQN, "env": {"id": "CartPole-v1", "num_envs": 1}, "train": {**DRQN["train"], "total_steps": 100}}
    res = pr.train(config, run_dir=tmp_path / "pop", seeds=[0, 1])
    assert calls["n"] == res.members[0].gradient_steps > 0  # one batched draw per update of both members
    pt = pr.PopulationTrainer(build_config({**config, "train": {**config["train"], "population": {"seeds": [0, 1]}}}), tmp_path / "x")
    assert isinstance(pt.replay, PopulationSequenceReplay) and pt.learners[1].replay is pt.replay.member(1)
    r2d2 = {**config, "algo": "r2d2", "agent": {"lstm_size": 8, "encoder_sizes": [8], "head_sizes": [8], "burn_in": 2,
                                               "sequence_length": 4, "sequence_period": 3, "batch_size": 4}}
    pt = pr.PopulationTrainer(build_config({**r2d2, "train": {**r2d2["train"], "learning_starts": 10, "population": {"seeds": [0, 1]}}}), tmp_path / "y")
    assert pt.replay is None
    redq = {"algo": "sac", "env": {"id": "Pendulum-v1"},
            "train": {**TRAIN, "total_steps": 100, "learning_starts": 10, "replay_size": 100, "population": {"seeds": [0, 1]}}}
    pt = pr.PopulationTrainer(build_config(redq), tmp_path / "z")
    assert isinstance(pt.replay, PopulationReplay) and len(pt.learners[0].replay) == 0


@pytest.mark.parametrize("name", ["drqn", "r2d2"])
def test_a_population_of_one_is_its_single_run_bit_for_bit(tmp_path, name):
    """One member of the sequence learners (per-member replays, R2D2's priorities and limiter): the
    runtime runs the single run's act and update on the unstacked member (no torch.vmap), so the
    evaluation returns are the single run's exactly."""
    config = DRQN if name == "drqn" else R2D2_SMALL
    res = pr.train(config, run_dir=tmp_path / "pop", seeds=[1])
    single = rlfunc.train(config, overrides={"train.seed": 1}, run_dir=tmp_path / "single")
    assert res.members[0].evals == single.evals and res.members[0].gradient_steps == single.gradient_steps


# ----------------------------------------------------------------------------- train.cuda_graph


def _fixed_state_population(tmp_path, config, seeds):
    """A population trained plainly and one whose update is behind FixedStateUpdate (as train.cuda_graph puts
    it, eager on CPU: the fixed buffers without the capture); returns both results and the partial calls."""
    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.graphs import FixedStateUpdate

    built = build_config({**config, "train": {**config["train"], "population": {"seeds": seeds, "vectorize": "vmap"}}})
    plain = pr.PopulationTrainer(built, tmp_path / "plain").run()
    pt = pr.PopulationTrainer(built, tmp_path / "fixed")
    if len(seeds) == 1:
        pt._update_one = FixedStateUpdate(pt._update_one, pt.member_state(0))
    else:
        pt._update = FixedStateUpdate(pt._update, pt.state)
    partial, learn = [], pt.learn

    def spy(ready=None):
        partial.append(ready is not None and len(ready) < len(seeds))
        return learn(ready)

    pt.learn = spy
    return plain, pt.run(), sum(partial)


@pytest.mark.parametrize("seeds", [[0, 1], [0]])
def test_a_population_on_fixed_state_buffers_trains_what_the_plain_one_trains(tmp_path, seeds):
    """``train.cuda_graph`` puts the population's update behind ``FixedStateUpdate``: the state at fixed
    addresses, the new state copied into them in place (what a CUDA graph replays). On CPU the wrapper runs
    eagerly on those buffers, so a population using it trains exactly what the plain one trains -- also
    when R2D2's samples-per-insert limiter leaves a member not ready, whose old state the in-place write
    would otherwise lose -- and a population of one keeps its single-run path."""
    plain, fixed, partial = _fixed_state_population(tmp_path, R2D2_SMALL, seeds)
    if len(seeds) > 1:
        assert partial > 0  # the test covers calls where one member is not ready
    assert [m.evals for m in fixed.members] == [m.evals for m in plain.members]
    for k in range(len(seeds)):
        a, b = _params(tmp_path / "fixed" / f"member-{k}"), _params(tmp_path / "plain" / f"member-{k}")
        assert all(torch.equal(a[key], v) for key, v in b.items(True, True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (the CUDA-graph capture of a population's update)")
def test_a_population_with_train_cuda_graph_replays_its_update_as_one_graph_on_cuda(tmp_path):
    """On CUDA, ``train.cuda_graph`` records the vmapped update once and replays it; the members' evaluations
    equal the eager CUDA population's (the same kernels, replayed)."""
    config = {**R2D2_SMALL, "train": {**R2D2_SMALL["train"], "device": "cuda", "population": {"seeds": [0, 1]}}}
    eager = pr.train(config, run_dir=tmp_path / "eager")
    from rlfunc.runtime.config import build_config

    pt = pr.PopulationTrainer(build_config({**config, "train": {**config["train"], "cuda_graph": True}}), tmp_path / "graph")
    graphed = pt.run()
    assert pt._update.mode == "cuda_graph" and len(pt._update._graphs) >= 1, pt._update.fallback_reason
    for a, b in zip(graphed.members, eager.members):
        _close(a.evals, b.evals)
