"""Populations (rlfunc.core.population; issue #24, the pure part): member k of a vmapped
population update computes what a single update of member k computes.

* every algorithm in scope (REDQ, SAC, RLPD, DrQ-v2, DRQN, DQN, R2D2; tiny sizes): a 3-member
  population of different seeds, updated 50 times by ``torch.vmap(update,
  randomness="error")`` on per-member batches and per-member noise, equals 3 single-member
  runs: parameters, target networks, optimizer moments and step counts, and every metric
  (losses, R2D2's priorities) at every update, to 1e-5 relative (elementwise ``rtol=1e-5``
  with an absolute floor of 1e-5 times the leaf's largest magnitude, for entries near 0);
* settings as data: 2 members whose configs differ in learning rates (and ``gamma``,
  ``tau``, target entropy, fixed temperature where the algorithm takes them as data) equal
  two single runs of those configs, which run the float path (no ``hparams``), with and
  without a learning-rate schedule;
* the float path is unchanged: a state without ``hparams`` never gains one;
* ``stack`` refuses members that differ in a static setting, ``with_hparams`` refuses a
  name the algorithm does not read; each in one sentence naming the field;
* randomness is explicit: a vmapped update that would draw (no noise given) is refused;
  ``draw_per_member`` gives each member what its own generator gives, whatever ``P``;
* no host syncs in a vmapped update with settings as data (every algorithm, learning-rate
  schedule on);
* ``torch.compile(fullgraph=True)`` of the vmapped REDQ update matches eager (``compile``;
  the other algorithms' in tests/test_population_compile.py).
"""

from __future__ import annotations

import dataclasses
import math

import gymnasium as gym
from helpers_batches import r2d2_batch, sequence_batch
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode

from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd
from rlfunc.core import population
from rlfunc.core.optim import Adam, LRSchedule

torch.set_num_threads(1)

UPDATES = 50

# --------------------------------------------------------------------------- problems
# Each problem: (module, configs per member, init(config, seed), batch(generator),
# noise(config, generator) or None, prepare(state, i) before update i).

BOX3, BOX2 = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
PIXELS = gym.spaces.Box(0, 255, (6, 12, 12), np.uint8)
VEC4, DISCRETE2 = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)

REDQ_SMALL = dict(hidden_sizes=(16, 16), num_critics=3, updates_per_step=2, batch_size=8)
DRQV2_SMALL = dict(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1, frame_stack=2, batch_size=4)
DRQN_SMALL = dict(encoder_sizes=(8,), lstm_size=8, sequence_length=4, batch_size=4, target_period=7)
R2D2_SMALL = dict(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=2, sequence_length=4, sequence_period=2,
                  batch_size=4, target_period=7)


def _transition_batch(config, g):
    G, B = config.updates_per_step, config.batch_size
    return TensorDict(
        {
            "obs": torch.randn(G, B, 3, generator=g),
            "action": torch.rand(G, B, 2, generator=g) * 2 - 1,
            "reward": torch.randn(G, B, generator=g),
            "next_obs": torch.randn(G, B, 3, generator=g),
            "terminated": (torch.rand(G, B, generator=g) < 0.1).float(),
        },
        batch_size=[G, B],
    )


def _pixel_batch(config, g):
    B = config.batch_size
    return TensorDict(
        {
            "obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8, generator=g),
            "action": torch.rand(B, 2, generator=g) * 2 - 1,
            "reward": torch.randn(B, generator=g),
            "discount": torch.where(torch.rand(B, generator=g) < 0.1, 0.0, 0.99**3),
            "next_obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8, generator=g),
        },
        batch_size=[B],
    )


def _agent_step(state, i):
    state["agent_step"] = torch.full(state.batch_size, 2 * i, dtype=torch.int64)
    return state


@dataclasses.dataclass
class Problem:
    module: object
    config: object
    init: object
    batch: object
    noise: object = None
    prepare: object = None


def _redq_problem(module, config):
    return Problem(
        module,
        config,
        lambda c, seed: module.init(c, BOX3, BOX2, seed=seed),
        lambda c, g: _transition_batch(c, g),
        lambda c, g: module.draw_noise(c, c.updates_per_step, c.batch_size, 2, generator=g),
    )


PROBLEMS = {
    "redq": lambda **kw: _redq_problem(redq, redq.Config(**{**REDQ_SMALL, **kw})),
    "sac": lambda **kw: _redq_problem(redq, redq.sac_config(**{"hidden_sizes": (16, 16), "batch_size": 8, **kw})),
    "rlpd": lambda **kw: _redq_problem(rlpd, rlpd.Config(**{**REDQ_SMALL, **kw})),
    "drqv2": lambda **kw: Problem(
        drqv2,
        drqv2.Config(**{**DRQV2_SMALL, **kw}),
        lambda c, seed: drqv2.init(c, PIXELS, BOX2, seed=seed),
        _pixel_batch,
        lambda c, g: drqv2.draw_noise(c, c.batch_size, 2, generator=g),
        _agent_step,
    ),
    "drqn": lambda **kw: Problem(
        drqn,
        drqn.Config(**{**DRQN_SMALL, **kw}),
        lambda c, seed: drqn.init(c, VEC4, DISCRETE2, seed=seed),
        lambda c, g: sequence_batch(c.sequence_length, c.batch_size, g),
    ),
    "r2d2": lambda **kw: Problem(
        r2d2,
        r2d2.Config(**{**R2D2_SMALL, **kw}),
        lambda c, seed: r2d2.init(c, VEC4, DISCRETE2, seed=seed),
        r2d2_batch,
    ),
    # DQN (registry "dqn"): DRQN's module with core="mlp" and one-step windows
    "dqn": lambda **kw: PROBLEMS["drqn"](**{"core": "mlp", "sequence_length": 1, **kw}),
}
ALGOS = sorted(PROBLEMS)


# --------------------------------------------------------------------------- comparison
LR_METRICS = {"lr", "actor_lr", "critic_lr", "alpha_lr"}


def _assert_rel_close(actual: torch.Tensor, expected: torch.Tensor, what: str, rtol: float = 1e-5) -> None:
    if not expected.is_floating_point():
        assert torch.equal(actual, expected), what
        return
    scale = float(expected.abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * scale + 1e-12, msg=lambda m: f"{what}: {m}")


def _assert_state_close(actual: TensorDict, expected: TensorDict, what: str, rtol: float = 1e-5) -> None:
    a, e = actual.exclude("config", "hparams"), expected.exclude("config", "hparams")
    assert set(a.keys(True, True)) == set(e.keys(True, True)), what
    for key, value in e.items(True, True):
        _assert_rel_close(a[key], value, f"{what} {key}", rtol=rtol)


def _run_population_and_singles(problem: Problem, pop_states, single_states, configs, updates=UPDATES, seed=0):
    """``updates`` vmapped updates of ``stack(pop_states)`` and as many single updates of each
    ``single_states[k]``, member k on the same batches and noise; every metric compared at every
    update, the states at the end. Returns the final population state."""
    P = len(single_states)
    pop = population.stack(pop_states)
    step = population.vmap_update(problem.module.update)
    data_gens = [torch.Generator().manual_seed(1000 * seed + 10 + k) for k in range(P)]
    noise_gens = [torch.Generator().manual_seed(1000 * seed + 50 + k) for k in range(P)]
    singles = list(single_states)
    pop_history, single_history = [], [[] for _ in range(P)]
    for i in range(updates):
        batches = [problem.batch(configs[k], data_gens[k]) for k in range(P)]
        noises = (
            population.draw_per_member(lambda g: problem.noise(problem.config, g), noise_gens)
            if problem.noise
            else None
        )
        if problem.prepare:
            pop = problem.prepare(pop, i)
        args = (torch.stack(batches),) + ((noises,) if noises is not None else ())
        pop, pop_metrics = step(pop, *args)
        pop_history.append(pop_metrics)
        for k in range(P):
            state = problem.prepare(singles[k], i) if problem.prepare else singles[k]
            single_args = (batches[k],) + ((noises[k],) if noises is not None else ())
            singles[k], metrics = problem.module.update(state, *single_args)
            single_history[k].append(metrics)
    # Each metric's whole trajectory [updates, ...] at once: relative to the largest magnitude the
    # metric takes in the run (a loss that crosses 0 is compared at its own scale, not at 0's).
    pop_history = torch.stack(pop_history)  # [updates, P]
    for k in range(P):
        history = torch.stack(single_history[k])
        extra = set(pop_history.keys(True, True)) - set(history.keys(True, True))
        assert extra <= LR_METRICS, extra  # with rates as data the rates are logged, scheduled or not
        for name, value in history.items(True, True):
            _assert_rel_close(pop_history[name][:, k], value, f"member {k} metric {name} over {updates} updates")
    for k in range(P):
        _assert_state_close(population.member(pop, k), singles[k], f"member {k} after {updates} updates:")
    return pop, singles


# --------------------------------------------------------------------------- vmap == singles
@pytest.mark.parametrize("algo", ALGOS)
def test_member_k_of_a_vmapped_update_equals_its_single_member_update(algo):
    """3 seeds, 50 updates: params, targets, Adam moments and steps, losses (and R2D2's
    priorities, DrQ-v2's sigma) of member k equal a single run of member k's state."""
    problem = PROBLEMS[algo]()
    states = [problem.init(problem.config, seed) for seed in (0, 1, 2)]
    configs = [problem.config] * 3
    pop, _ = _run_population_and_singles(problem, [s.clone() for s in states], states, configs)
    assert population.size(pop) == 3
    assert "hparams" not in pop.keys()  # same configs: nothing became data


# --------------------------------------------------------------------------- settings as data
SETTINGS = {
    # algo: (shared config overrides, member 0's settings, member 1's settings)
    "redq": ({}, {"critic_lr": 3e-4, "actor_lr": 3e-4, "gamma": 0.99, "tau": 0.005, "target_entropy": -2.0},
             {"critic_lr": 1e-3, "actor_lr": 1e-4, "gamma": 0.9, "tau": 0.02, "target_entropy": -1.0}),
    "sac": ({"auto_alpha": False}, {"critic_lr": 3e-4, "alpha_lr": 3e-4, "init_alpha": 0.2},
            {"critic_lr": 2e-3, "alpha_lr": 1e-3, "init_alpha": 0.05}),
    "rlpd": ({}, {"critic_lr": 3e-4, "alpha_lr": 3e-4, "tau": 0.005}, {"critic_lr": 1e-3, "alpha_lr": 1e-4, "tau": 0.01}),
    "drqv2": ({}, {"lr": 1e-4, "tau": 0.01}, {"lr": 1e-3, "tau": 0.05}),
    "drqn": ({}, {"lr": 1e-3, "gamma": 0.99}, {"lr": 3e-3, "gamma": 0.9}),
    "r2d2": ({}, {"lr": 1e-4, "gamma": 0.997}, {"lr": 1e-3, "gamma": 0.95}),
    "dqn": ({}, {"lr": 1e-3, "gamma": 0.99}, {"lr": 3e-3, "gamma": 0.9}),
}
SCHEDULE = LRSchedule(kind="cosine", warmup_updates=5, decay_updates=30, end_factor=0.1, warmup_start_factor=0.1)


@pytest.mark.parametrize("scheduled", [False, True], ids=["constant", "cosine"])
@pytest.mark.parametrize("algo", ALGOS)
def test_members_with_different_settings_equal_single_runs_with_those_settings(algo, scheduled):
    """Two members made from two configs (two learning rates, and gamma/tau/target entropy/
    fixed temperature where the algorithm takes them as data) equal two single runs of those
    configs, which take the float path; with a cosine schedule with warm-up too (the member's
    rate in the state rescales the population config's schedule)."""
    shared, s0, s1 = SETTINGS[algo]
    shared = dict(shared, lr_schedule=SCHEDULE) if scheduled else shared
    problem = PROBLEMS[algo](**shared)
    configs = [dataclasses.replace(problem.config, **s) for s in (s0, s1)]
    states = [problem.init(c, seed) for c, seed in zip(configs, (3, 4))]
    assert all("hparams" not in s.keys() for s in states)
    pop, singles = _run_population_and_singles(problem, states, [s.clone() for s in states], configs, seed=1)
    data = population.hparam_names(problem.config) if algo != "rlpd" else redq.HPARAMS
    differing = sorted(k for k in s0 if s0[k] != s1[k] and k in data)
    assert sorted(pop["hparams"].keys()) == differing
    for name in differing:
        assert pop["hparams", name].tolist() == pytest.approx([s0[name], s1[name]], rel=1e-6)
    assert all("hparams" not in s.keys() for s in singles)  # the float path never gains settings


def test_two_learning_rates_are_two_runs_not_one():
    """The members really learn at their own rates: their critic parameters move apart by
    the ratio of the rates after one update from the same state (Adam's first step is lr * sign)."""
    problem = PROBLEMS["redq"]()
    state = problem.init(problem.config, 0)
    pop = population.stack([population.with_hparams(state, critic_lr=lr) for lr in (1e-4, 1e-3)])
    g = [torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)]
    batch = torch.stack([problem.batch(problem.config, gk) for gk in g])
    same = [torch.Generator().manual_seed(8), torch.Generator().manual_seed(8)]  # identical noise: only lr differs
    noise = population.draw_per_member(lambda gk: problem.noise(problem.config, gk), same)
    new, metrics = population.vmap_update(redq.update)(pop, batch, noise)
    before = state["params", "critic", "2", "bias"]
    moved = (new["params", "critic", "2", "bias"] - before).abs().amax(dim=-1)
    assert moved[0].max() > 0
    # G = 2 Adam steps of at most lr each (beta1 bias correction makes the first exactly lr)
    assert float(moved[1].max()) == pytest.approx(10 * float(moved[0].max()), rel=0.2)
    assert metrics["critic_lr"].tolist() == pytest.approx([1e-4, 1e-3])


def test_hparams_equal_to_the_config_change_nothing_but_rounding():
    """A single state holding its own config's values as data runs the tensor path and agrees
    with the float path to rounding; it carries its settings through every update."""
    problem = PROBLEMS["redq"](lr_schedule=SCHEDULE)
    config = problem.config
    state = problem.init(config, 0)
    held = population.with_hparams(state, **{n: getattr(config, n) for n in redq.HPARAMS})
    g1, g2 = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    for i in range(10):
        b1, b2 = problem.batch(config, g1), problem.batch(config, g2)
        n1, n2 = problem.noise(config, g1), problem.noise(config, g2)
        state, m1 = redq.update(state, b1, n1)
        held, m2 = redq.update(held, b2, n2)
        for name, value in m1.items():
            _assert_rel_close(m2[name], value, f"update {i} {name}")
    _assert_state_close(held, state, "held vs float")
    assert "hparams" not in state.keys()
    assert sorted(held["hparams"].keys()) == sorted(redq.HPARAMS)


# --------------------------------------------------------------------------- the core pieces under vmap
def test_adam_under_vmap_matches_the_fused_kernel():
    """30 steps of 3 members with gradients from 1e-8 to 10: the vmapped (out-of-place, float64
    bias corrections) Adam equals the eager fused kernel per member to float rounding."""
    gen = torch.Generator().manual_seed(0)
    P = 3
    params = TensorDict({"w": torch.randn(P, 37, 19, generator=gen), "b": torch.randn(P, 5, generator=gen)}, [P])
    opt = Adam(lr=1e-3)
    states = torch.stack([opt.init(params[k]) for k in range(P)])
    step = torch.vmap(opt.step)
    singles = [(params[k].clone(), states[k].clone()) for k in range(P)]
    for _ in range(30):
        scale = 10.0 ** torch.randint(-8, 2, (P, 37, 19), generator=gen).float()
        grads = TensorDict({"w": torch.randn(P, 37, 19, generator=gen) * scale, "b": torch.randn(P, 5, generator=gen)}, [P])
        params, states = step(grads, states, params)
        singles = [opt.step(grads[k], s, p) for k, (p, s) in enumerate(singles)]
    for k, (p, s) in enumerate(singles):
        for key in ("w", "b"):
            torch.testing.assert_close(params[k][key], p[key], rtol=1e-6, atol=1e-7)
            torch.testing.assert_close(states[k]["exp_avg_sq"][key], s["exp_avg_sq"][key], rtol=1e-6, atol=0.0)
        assert float(states[k]["step"]) == float(s["step"]) == 30.0


def test_polyak_under_vmap_with_per_member_tau_is_the_foreach_arithmetic():
    from rlfunc.core.targets import polyak

    gen = torch.Generator().manual_seed(1)
    target = TensorDict({"a": torch.randn(2, 50, generator=gen), "n": {"b": torch.randn(2, 3, 4, generator=gen)}}, [2])
    online = target.apply(lambda t: t + torch.randn(t.shape, generator=gen))
    taus = (0.005, 0.3)
    batched = torch.vmap(polyak)(target, online, torch.tensor(taus))
    for k, tau in enumerate(taus):
        single = polyak(target[k], online[k], tau)
        for key, value in single.items(True, True):
            assert torch.equal(batched[k][key], value), key


@pytest.mark.parametrize(
    "spec",
    [
        LRSchedule(kind="constant", warmup_updates=4, warmup_start_factor=0.2),
        LRSchedule(kind="linear", decay_updates=10, end_factor=0.1),
        SCHEDULE,
    ],
    ids=["constant-warmup", "linear", "cosine-warmup"],
)
def test_a_schedule_rescaled_to_a_rate_in_the_state_is_the_schedule_at_that_rate(spec):
    steps = torch.arange(0, 45, dtype=torch.float32)
    rescaled = spec.at(3e-4).scaled(steps, torch.tensor(2e-3))
    torch.testing.assert_close(rescaled, spec.at(2e-3)(steps), rtol=1e-6, atol=0.0)
    opt = Adam(lr=spec.at(3e-4))
    rate = opt.learning_rate(TensorDict({"step": torch.tensor(7.0)}, []), torch.tensor(2e-3))
    torch.testing.assert_close(rate, spec.at(2e-3)(torch.tensor(7.0)), rtol=1e-6, atol=0.0)


def test_a_rate_in_the_state_needs_a_float_or_a_schedule():
    state = TensorDict({"step": torch.tensor(3.0)}, [])
    assert Adam(lr=1e-3).learning_rate(state, torch.tensor(5e-4)) == torch.tensor(5e-4)
    assert Adam(lr=1e-3).learning_rate(state) == 1e-3  # absent: the float, as before
    with pytest.raises(ValueError, match="float or a Schedule"):
        Adam(lr=lambda step: 1e-3 * 0.5**step).learning_rate(state, torch.tensor(5e-4))


# --------------------------------------------------------------------------- stack / member / refusals
def test_stack_member_unstack_round_trip():
    problem = PROBLEMS["drqn"]()
    states = [problem.init(problem.config, s) for s in range(4)]
    pop = population.stack(states)
    assert pop.batch_size == torch.Size([4]) and population.size(pop) == 4
    assert pop.get_non_tensor("config") == problem.config
    assert pop["params", "lstm", "weight_ih"].shape[0] == 4
    for k, m in enumerate(population.unstack(pop)):
        assert m.batch_size == torch.Size([])
        assert m.get_non_tensor("config") == problem.config
        for key, value in states[k].exclude("config").items(True, True):
            assert torch.equal(m[key], value), key
    assert torch.equal(population.member(pop, -1)["params", "head", "weight"], states[3]["params", "head", "weight"])
    with pytest.raises(IndexError, match="k must be in"):
        population.member(pop, 4)


def test_stack_refuses_members_that_differ_in_a_static_setting():
    problem = PROBLEMS["redq"]()
    a = problem.init(problem.config, 0)
    b = problem.init(dataclasses.replace(problem.config, backup_entropy=False), 1)
    with pytest.raises(ValueError, match=r"member 1's config differs from member 0's in backup_entropy.*separate populations"):
        population.stack([a, b])
    c = redq.init(dataclasses.replace(problem.config, hidden_sizes=(8, 8)), BOX3, BOX2, seed=0)
    with pytest.raises(ValueError, match="hidden_sizes"):
        population.stack([a, c])
    d = drqn.init(drqn.Config(**DRQN_SMALL), VEC4, DISCRETE2, seed=0)
    with pytest.raises(ValueError, match="one algorithm"):
        population.stack([a, d])
    with pytest.raises(ValueError, match="at least one"):
        population.stack([])
    e = problem.init(problem.config, 1)
    e["params", "log_alpha"] = torch.zeros(2)
    with pytest.raises(ValueError, match=r"member 1's state does not match.*log_alpha"):
        population.stack([a, e])


def test_with_hparams_refuses_a_setting_the_algorithm_does_not_read():
    state = drqv2.init(drqv2.Config(**DRQV2_SMALL), PIXELS, BOX2, seed=0)
    with pytest.raises(ValueError, match=r"'gamma' is not a setting .*drqv2.Config reads from the state; the ones it does: lr, tau"):
        population.with_hparams(state, gamma=0.9)
    with pytest.raises(ValueError, match="finite"):
        population.with_hparams(state, lr=float("nan"))
    pop = population.stack([state, state.clone()])
    pop = population.with_hparams(pop, lr=[1e-4, 2e-4], tau=0.02)
    assert pop["hparams", "lr"].tolist() == pytest.approx([1e-4, 2e-4])
    assert pop["hparams", "tau"].tolist() == pytest.approx([0.02, 0.02])
    with pytest.raises(ValueError, match=r"one number or one per member \(\[2\]\)"):
        population.with_hparams(pop, lr=[1e-4, 2e-4, 3e-4])
    assert "hparams" not in state.keys()  # not modified in place


def test_every_algorithm_names_its_settings_as_data():
    assert redq.HPARAMS == ("actor_lr", "critic_lr", "alpha_lr", "gamma", "tau", "init_alpha")
    assert population.hparam_names(rlpd.init(rlpd.Config(**REDQ_SMALL), BOX3, BOX2).get_non_tensor("config")) == redq.HPARAMS
    assert drqv2.HPARAMS == ("lr", "tau")
    assert drqn.HPARAMS == ("lr", "gamma")
    assert r2d2.HPARAMS == ("lr", "gamma")
    for module in (redq, drqv2, drqn, r2d2):
        fields = {f.name for f in dataclasses.fields(module.Config)}
        assert set(module.HPARAMS) <= fields


# --------------------------------------------------------------------------- a population of one
@pytest.mark.parametrize("algo", ALGOS)
def test_a_population_of_one_runs_the_single_update_directly_and_equals_it_exactly(algo, monkeypatch):
    """P=1: ``vmap_update`` calls the single update on the unstacked member (no ``torch.vmap``:
    patched to fail here) and the result is the single update's, bit for bit, over 5 updates;
    ``population.vmap`` (the runtime's act) likewise."""
    problem = PROBLEMS[algo]()
    single = problem.init(problem.config, 3)
    pop = population.stack([single])
    step = population.vmap_update(problem.module.update)

    def no_vmap(*args, **kwargs):
        raise AssertionError("a population of one must not go through torch.vmap")

    monkeypatch.setattr(torch, "vmap", no_vmap)
    data, noise_gen = torch.Generator().manual_seed(7), torch.Generator().manual_seed(8)
    for i in range(5):
        batch = problem.batch(problem.config, data)
        noise = problem.noise(problem.config, noise_gen) if problem.noise else None
        if problem.prepare:
            single, pop = problem.prepare(single, i), problem.prepare(pop, i)
        single, metrics = problem.module.update(single, batch, *((noise,) if noise is not None else ()))
        pop, pop_metrics = step(pop, batch.unsqueeze(0), *((noise.unsqueeze(0),) if noise is not None else ()))
        assert pop.batch_size == torch.Size([1]) and pop.get_non_tensor("config") == single.get_non_tensor("config")
        for key, value in metrics.items(True, True):
            assert pop_metrics[key].shape == (1, *value.shape) and torch.equal(pop_metrics[key][0], value), (i, key)
    member = population.member(pop, 0).exclude("config")
    assert set(member.keys(True, True)) == set(single.exclude("config").keys(True, True))
    for key, value in single.exclude("config").items(True, True):
        assert torch.equal(member[key], value), key
    # the acting call: population.vmap runs the function itself for one member
    act = population.vmap(lambda params, x: (params, x * 2))
    params, doubled = act(pop["params"], torch.ones(1, 3))
    assert torch.equal(doubled, torch.full((1, 3), 2.0)) and params.batch_size == torch.Size([1])
    assert (params == pop["params"]).all()


def test_population_vmap_batches_more_than_one_member():
    params = TensorDict({"w": torch.arange(6.0).reshape(2, 3)}, batch_size=[2])
    out = population.vmap(lambda p, x: p["w"] * x)(params, torch.tensor([[1.0], [2.0]]))
    assert torch.equal(out, torch.tensor([[0.0, 1.0, 2.0], [6.0, 8.0, 10.0]]))


# --------------------------------------------------------------------------- randomness
def test_a_vmapped_update_that_would_draw_is_refused():
    """Without noise REDQ draws from the global generator; under randomness='error' that fails
    instead of sharing one stream across members."""
    problem = PROBLEMS["redq"]()
    pop = population.stack([problem.init(problem.config, s) for s in (0, 1)])
    batch = torch.stack([problem.batch(problem.config, torch.Generator().manual_seed(k)) for k in (0, 1)])
    with pytest.raises(RuntimeError, match="randomness"):
        population.vmap_update(redq.update)(pop, batch)
    with pytest.raises(ValueError, match="leading member dimension of 2"):
        population.vmap_update(redq.update)(pop, batch[:1], None)


def test_a_members_noise_does_not_depend_on_the_population_size():
    config = redq.Config(**REDQ_SMALL)

    def draw(g):
        return redq.draw_noise(config, 2, 8, 2, generator=g)

    small = population.draw_per_member(draw, [torch.Generator().manual_seed(s) for s in (5, 6)])
    large = population.draw_per_member(draw, [torch.Generator().manual_seed(s) for s in (5, 6, 7, 8)])
    alone = draw(torch.Generator().manual_seed(6))
    for key in alone.keys():
        assert torch.equal(small[key][1], alone[key]) and torch.equal(large[key][1], alone[key])
    assert small.batch_size == torch.Size([2])


# --------------------------------------------------------------------------- no host sync
SYNC_OPS = {"_local_scalar_dense", "nonzero", "is_nonzero", "masked_select", "item", "equal"}


class _Syncs(TorchDispatchMode):
    """Records host-sync ops (as tests/test_gpu_path.py's audit)."""

    def __init__(self) -> None:
        super().__init__()
        self.found = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket.__name__ in SYNC_OPS:
            self.found.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("algo", ALGOS)
def test_a_vmapped_update_with_settings_as_data_makes_no_host_sync(algo):
    shared, s0, s1 = SETTINGS[algo]
    problem = PROBLEMS[algo](**shared, lr_schedule=SCHEDULE)
    states = [problem.init(dataclasses.replace(problem.config, **s), k) for k, s in enumerate((s0, s1))]
    pop = population.stack(states)
    assert "hparams" in pop.keys() and population.size(pop) == 2  # the vmapped path with settings as data
    g = [torch.Generator().manual_seed(k) for k in (0, 1)]
    batch = torch.stack([problem.batch(problem.config, gk) for gk in g])
    args = (batch,) + ((population.draw_per_member(lambda gk: problem.noise(problem.config, gk), g),) if problem.noise else ())
    if problem.prepare:
        pop = problem.prepare(pop, 3)
    step = population.vmap_update(problem.module.update)
    with _Syncs() as mode:
        pop, _ = step(pop, *args)
    assert mode.found == [], mode.found[:5]


# --------------------------------------------------------------------------- the loop over members' steps
def _population_update_runs(problem, pop, updates, *fns):
    """``updates`` calls of each of ``fns`` from the same population state, on the same batches and
    noise; returns each one's final state and metric history ``[updates, P]``."""
    P = population.size(pop)
    gens = [torch.Generator().manual_seed(70 + k) for k in range(P)]
    states, histories = [pop.clone() for _ in fns], [[] for _ in fns]
    for _ in range(updates):
        batch = torch.stack([problem.batch(problem.config, g) for g in gens])
        noise = population.draw_per_member(lambda g: problem.noise(problem.config, g), gens)
        for j, fn in enumerate(fns):
            states[j], metrics = fn(states[j], batch, noise)
            histories[j].append(metrics)
    return states, [torch.stack(h) for h in histories]


@pytest.mark.parametrize("scheduled", [False, True], ids=["constant", "cosine"])
@pytest.mark.parametrize("algo", ["redq", "sac", "rlpd"])
def test_the_members_step_loop_equals_the_vmapped_update(algo, scheduled):
    """``make_population_update("none")`` (the ``G``-step loop run once, each step vmapped over
    members: what ``train.compile_mode=step`` compiles) equals ``vmap_update(update)`` over 20
    updates of 2 members with different settings as data, with and without a schedule: every
    metric ``[P]`` at every update and the final state (the same kernels on the same numbers)."""
    shared, s0, s1 = SETTINGS[algo]
    problem = PROBLEMS[algo](**(dict(shared, lr_schedule=SCHEDULE) if scheduled else shared))
    configs = [dataclasses.replace(problem.config, **s) for s in (s0, s1)]
    pop = population.stack([problem.init(c, seed) for c, seed in zip(configs, (5, 6))])
    (vmapped, looped), (h_vmapped, h_looped) = _population_update_runs(
        problem, pop, 20, population.vmap_update(problem.module.update), problem.module.make_population_update("none")
    )
    assert looped.batch_size == pop.batch_size and looped.get_non_tensor("config") == vmapped.get_non_tensor("config")
    assert set(h_looped.keys(True, True)) == set(h_vmapped.keys(True, True))
    for name, value in h_vmapped.items(True, True):
        assert h_looped[name].shape == value.shape == (20, 2), name
        _assert_rel_close(h_looped[name], value, f"metric {name}", rtol=1e-6)
    _assert_state_close(looped, vmapped, "members' step loop vs vmap", rtol=1e-6)
    assert torch.equal(looped["hparams", "critic_lr"], vmapped["hparams", "critic_lr"])


def test_the_members_step_loop_needs_its_noise_and_a_member_dimension():
    problem = PROBLEMS["redq"]()
    pop = population.stack([problem.init(problem.config, k) for k in (0, 1)])
    g = torch.Generator().manual_seed(0)
    batch = torch.stack([problem.batch(problem.config, g)] * 2)
    update = redq.make_population_update("none")
    with pytest.raises(ValueError, match=r"members=True needs the vmapped steps and the members' noise"):
        update(pop, batch)
    with pytest.raises(ValueError, match=r"batch must have batch_size \[P, G, B\]"):
        update(pop, batch[0], population.draw_per_member(lambda gk: problem.noise(problem.config, gk), [g, g]))
    with pytest.raises(ValueError, match="compile must be 'none' or 'step'"):
        redq.make_population_update("full")


# --------------------------------------------------------------------------- compiled
@pytest.mark.compile
def test_the_members_step_loop_compiles_per_step_and_matches_eager():
    """``make_population_update("step")``: the two vmapped steps compiled once each (``fullgraph``),
    not recompiled as the steps advance, equal to the eager vmapped update over 3 updates to 1e-4
    (the compiled Adam's float32 bias corrections, as in the test below)."""
    problem = PROBLEMS["redq"]()
    configs = [dataclasses.replace(problem.config, critic_lr=lr, gamma=gm) for lr, gm in ((3e-4, 0.99), (1e-3, 0.9))]
    pop = population.stack([problem.init(c, k) for k, c in enumerate(configs)])
    torch._dynamo.reset()
    compiled = redq.make_population_update("step")
    _population_update_runs(problem, pop, 1, compiled)  # compiles both steps
    with torch._dynamo.config.patch(error_on_recompile=True):
        (a, b), (ha, hb) = _population_update_runs(problem, pop, 3, population.vmap_update(redq.update), compiled)
    for name, value in ha.items(True, True):
        _assert_rel_close(hb[name], value, f"compiled {name}", rtol=1e-4)
    _assert_state_close(b, a, "compiled vs eager")


@pytest.mark.compile
def test_vmapped_redq_update_compiles_fullgraph_and_matches_eager():
    """``torch.compile(vmap_update(redq.update), fullgraph=True)`` on CPU: one graph for a
    2-member population with two critic rates and gammas (no recompilation as the steps
    advance), equal to the eager vmapped update over 3 updates to 1e-4: the compiled Adam
    computes its bias corrections in float32, as the compiled single-member update always
    has (``1 - 0.999^t`` loses ~1e-5 of its value to cancellation at small ``t``), the eager
    vmapped one in float64 as the fused kernel does."""
    problem = PROBLEMS["redq"]()
    configs = [dataclasses.replace(problem.config, critic_lr=lr, gamma=gm) for lr, gm in ((3e-4, 0.99), (1e-3, 0.9))]
    pop = population.stack([problem.init(c, k) for k, c in enumerate(configs)])
    eager = population.vmap_update(redq.update)
    torch._dynamo.reset()
    compiled = torch.compile(population.vmap_update(redq.update), fullgraph=True)
    a, b = pop, pop.clone()
    gens = [torch.Generator().manual_seed(k) for k in (0, 1)]
    for i in range(3):
        batch = torch.stack([problem.batch(problem.config, g) for g in gens])
        noise = population.draw_per_member(lambda g: problem.noise(problem.config, g), gens)
        a, ma = eager(a, batch, noise)
        with torch._dynamo.config.patch(error_on_recompile=i > 0):
            b, mb = compiled(b, batch, noise)
        for name, value in ma.items():
            _assert_rel_close(mb[name], value, f"update {i} {name}", rtol=1e-4)
    _assert_state_close(b, a, "compiled vs eager")
    assert b.get_non_tensor("config") == configs[0]
