"""Learning-rate schedules (issue 23, section 2): one mechanism in :mod:`rlfunc.core.optim`
for every optimizer of every algorithm.

* :class:`Schedule` values against their closed forms (constant, linear, cosine,
  each with and without warm-up), at every step of a range that covers the
  warm-up, the decay and after it;
* :class:`LRSchedule` from a config: one-sentence errors naming the field; a
  constant schedule without warm-up *is* the float rate;
* no schedule (every algorithm's default) gives the float rate to every Adam,
  and ``{kind: constant}`` updates are bit-identical to the default's;
* DRQN/R2D2's old ``lr_decay_updates``/``lr_end`` decay and the shipped configs'
  ``lr_schedule`` give, bit for bit in float32, the rates the old decay formula
  gave at every step up to and past the end (the committed runs reproduce);
* each optimizer follows its own schedule, counted in its own gradient steps
  (REDQ/SAC/RLPD actor, critic, temperature; DrQ-v2 actor, critic + encoder;
  DRQN/DQN/R2D2 the Q-network), with warm-up;
* updates with schedules make no host sync (``meta`` device) and compile with
  ``fullgraph=True`` without recompiling as the step advances (``compile``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode

from rlfunc.algos import _qstate, drqn, drqv2, r2d2, redq, rlpd
from rlfunc.core.optim import Adam, LRSchedule, Schedule, scheduled_lr
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- closed forms
def closed_form(kind, v, e, decay, warmup, w0, steps):
    """float64 reference: warm-up w0 -> v over ``warmup`` steps, then the decay v -> e over ``decay``."""
    out = []
    for s in steps:
        if s < warmup:
            out.append(w0 + (s / warmup) * (v - w0))
            continue
        t = min(max((s - warmup) / decay, 0.0), 1.0) if decay else 0.0
        if kind == "constant":
            out.append(v)
        elif kind == "linear":
            out.append(v + t * (e - v))
        else:
            out.append(e + (v - e) * 0.5 * (1.0 + math.cos(math.pi * t)))
    return np.array(out)


CASES = [
    ("constant", 0, 0.0, None),
    ("constant", 10, 0.0, None),
    ("constant", 10, 0.25, None),
    ("linear", 0, 0.0, 0.1),
    ("linear", 7, 0.0, 0.0),
    ("linear", 7, 0.5, 0.3),
    ("cosine", 0, 0.0, 0.1),
    ("cosine", 0, 0.0, None),
    ("cosine", 12, 0.1, 0.05),
]


@pytest.mark.parametrize("kind,warmup,w0,end", CASES, ids=[f"{k}-w{w}-s{s}-e{e}" for k, w, s, e in CASES])
def test_schedule_values_match_their_closed_forms(kind, warmup, w0, end):
    lr, decay = 3e-4, 40
    spec = LRSchedule(kind, warmup_updates=warmup, decay_updates=None if kind == "constant" else decay,
                      end_factor=end, warmup_start_factor=w0)
    schedule = spec.at(lr)
    steps = np.arange(0, warmup + decay + 15)
    want = closed_form(kind, lr, lr * (end or 0.0), 0 if kind == "constant" else decay, warmup, lr * w0, steps)
    if kind == "constant" and not warmup:
        assert schedule == lr and isinstance(schedule, float)  # no schedule at all: the float path
        return
    got = schedule(torch.as_tensor(steps, dtype=torch.float32))
    assert got.dtype == torch.float32 and got.shape == (len(steps),)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=lr * 1e-6)  # float32 vs float64
    # The same values one 0-dim step at a time (what an optimizer passes).
    for s in (0, max(warmup - 1, 0), warmup, warmup + decay // 2, warmup + decay, warmup + decay + 14):
        assert float(schedule(torch.tensor(float(s)))) == pytest.approx(want[s], rel=2e-6, abs=lr * 1e-6)


def test_schedule_landmarks():
    """Warm-up starts at warmup_start_factor * lr (0: the first step does not move the
    parameters), reaches lr at warmup_updates; the decay ends at end_factor * lr and stays."""
    s = LRSchedule("cosine", warmup_updates=4, decay_updates=10, end_factor=0.1).at(1.0)
    at = lambda k: float(s(torch.tensor(float(k))))  # noqa: E731
    assert at(0) == 0.0 and at(2) == pytest.approx(0.5) and at(4) == 1.0
    assert at(9) == pytest.approx(0.55) and at(14) == pytest.approx(0.1) and at(10_000) == pytest.approx(0.1)
    lin = LRSchedule("linear", decay_updates=4).at(2.0)
    assert [float(lin(torch.tensor(k))) for k in range(6)] == [2.0, 1.5, 1.0, 0.5, 0.0, 0.0]


def test_adam_reads_its_schedule_at_its_own_step():
    sched = Schedule("linear", 1.0, 0.0, 4)
    opt = Adam(lr=sched)
    params = TensorDict({"w": torch.zeros(3)}, [])
    state = opt.init(params)
    rates = []
    for _ in range(6):
        rates.append(float(opt.learning_rate(state)))
        params, state = opt.step(TensorDict({"w": torch.ones(3)}, []), state, params)
    assert rates == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert Adam(lr=3e-4).learning_rate(state) == 3e-4  # a float rate stays a float


# --------------------------------------------------------------------------- config values
def test_lr_schedule_specs_parse_and_refuse_in_one_sentence():
    assert LRSchedule.parse(None) is None
    spec = LRSchedule.parse({"kind": "cosine", "warmup_updates": 1000.0, "decay_updates": 5, "end_factor": 0.1})
    assert spec == LRSchedule("cosine", 1000, 5, 0.1) and LRSchedule.parse(spec) is spec
    assert LRSchedule.parse(dataclasses.asdict(spec)) == spec  # what a run's config.yaml holds builds again
    bad = {
        "cosine": "must be a mapping such as",
        "{kind: exp}": None,
        "{kind: cosine}": "needs decay_updates",
        "{kind: linear, decay_updates: 0}": "needs decay_updates",
        "{kind: linear, decay_updates: 10, end_factor: 1.5}": "end_factor must be a number in",
        "{kind: constant, end_factor: 0.1}": "takes no end_factor",
        "{kind: constant, decay_updates: 10}": "takes no decay_updates",
        "{warmup: 10}": "did you mean 'warmup_updates'",
        "{kind: constant, warmup_updates: -1}": "warmup_updates must be an integer",
        "{kind: constant, warmup_start_factor: 0.5}": "warmup_updates is 0",
    }
    import yaml

    for text, what in bad.items():
        with pytest.raises(ValueError) as info:
            LRSchedule.parse(yaml.safe_load(text), "critic_lr_schedule")
        msg = str(info.value)
        assert msg.startswith("critic_lr_schedule ") and msg.endswith((".", "?")) and "\n" not in msg, msg
        assert what is None or what in msg, msg


@pytest.mark.parametrize(
    "algo,key,value,match",
    [
        ("redq", "agent.critic_lr_schedule", {"kind": "cosine"}, r"^agent\.critic_lr_schedule kind 'cosine' needs decay_updates"),
        ("sac", "agent.lr_schedule", "cosine", r"^agent\.lr_schedule must be a mapping"),
        ("rlpd", "agent.alpha_lr_schedule", {"kind": "linear", "decay": 5}, r"^agent\.alpha_lr_schedule has no key 'decay'"),
        ("drqv2", "agent.actor_lr_schedule", {"kind": "exp"}, r"^agent\.actor_lr_schedule kind must be one of"),
        ("drqn", "agent.lr_schedule", {"kind": "linear", "decay_updates": -3}, r"^agent\.lr_schedule kind 'linear' needs"),
        ("dqn", "agent.lr_schedule", 5, r"^agent\.lr_schedule must be a mapping"),
        ("r2d2", "agent.lr_schedule", {"kind": "constant", "end_factor": 0.1}, r"^agent\.lr_schedule kind 'constant' takes no"),
    ],
)
def test_bad_schedules_in_a_run_config_are_one_sentence_naming_the_key(algo, key, value, match):
    base = {
        "redq": "configs/redq/pendulum.yaml", "sac": "configs/sac/pendulum.yaml", "rlpd": "configs/rlpd/pendulum.yaml",
        "drqv2": "configs/drqv2/pendulum_pixels.yaml", "drqn": "configs/drqn/cue_memory.yaml",
        "dqn": "configs/dqn/cue_memory.yaml", "r2d2": "configs/r2d2/cue_memory.yaml",
    }[algo]
    extra = {"data.path": "prior.npz"} if algo == "rlpd" else {}
    with pytest.raises(ConfigError, match=match) as info:
        build_config(apply_overrides(load_config(str(ROOT / base)), {**extra, key: value}))
    assert "\n" not in str(info.value) and not re.search(r"[.!?]\s+[A-Z]", str(info.value))


def test_a_run_config_schedule_reaches_every_optimizer_of_its_algorithm():
    raw = apply_overrides(load_config(str(ROOT / "configs/redq/pendulum.yaml")), {
        "agent.lr_schedule": {"kind": "cosine", "warmup_updates": 1000, "decay_updates": 50_000, "end_factor": 0.1},
        "agent.critic_lr_schedule": {"kind": "linear", "decay_updates": 20_000},
    })
    agent = build_config(raw).agent
    assert isinstance(agent.lr_schedule, LRSchedule) and hash(agent)  # static, hashable: a compile constant
    actor, critic, alpha = redq._actor_opt(agent).lr, redq._critic_opt(agent).lr, redq._alpha_opt(agent).lr
    assert actor == alpha == Schedule("cosine", 3e-4, 3e-4 * 0.1, 50_000, 1000, 0.0)
    assert critic == Schedule("linear", 3e-4, 0.0, 20_000)


# --------------------------------------------------------------------------- defaults unchanged
def _adam_rates(algo: str, config) -> list:
    if algo in ("redq", "sac", "rlpd"):
        cfg = config.redq_config(2) if algo == "rlpd" else config
        return [redq._actor_opt(cfg).lr, redq._critic_opt(cfg).lr, redq._alpha_opt(cfg).lr]
    if algo == "drqv2":
        return [drqv2._actor_opt(config).lr, drqv2._critic_opt(config).lr]
    return [_qstate.q_optimizer(config).lr]


@pytest.mark.parametrize("algo", ["redq", "sac", "rlpd", "drqv2", "drqn", "r2d2"])
def test_no_schedule_gives_every_optimizer_its_float_rate(algo):
    """The default (and ``{kind: constant}``) hands Adam the Python float it always had, so the
    eager fused kernel and the traced math run exactly the arithmetic they ran before schedules."""
    cls = {"redq": redq.Config, "sac": redq.sac_config, "rlpd": rlpd.Config, "drqv2": drqv2.Config,
           "drqn": drqn.Config, "r2d2": r2d2.Config}[algo]
    default = cls()
    want = {"drqv2": 1e-4, "drqn": 1e-3, "r2d2": 1e-4}.get(algo, 3e-4)
    for rate in _adam_rates(algo, default):
        assert type(rate) is float and rate == want
    for rate in _adam_rates(algo, cls(lr_schedule={"kind": "constant"})):
        assert type(rate) is float and rate == want
    assert scheduled_lr(want, None, None) is want


# Tiny problems, one per algorithm: (init, update, state, batch args for update i).
def _redq_problem(module, **cfg):
    config = module.Config(hidden_sizes=(16, 16), num_critics=3, updates_per_step=2, batch_size=8, **cfg)
    state = module.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)), seed=0)
    G, B = 2, 8

    def inputs(i, device="cpu"):
        gen = torch.Generator().manual_seed(100 + i)
        batch = TensorDict({
            "obs": torch.randn(G, B, 3, generator=gen), "action": torch.rand(G, B, 2, generator=gen) * 2 - 1,
            "reward": torch.randn(G, B, generator=gen), "next_obs": torch.randn(G, B, 3, generator=gen),
            "terminated": (torch.rand(G, B, generator=gen) < 0.2).float(),
        }, batch_size=[G, B])
        noise = redq.draw_noise(state.get_non_tensor("config"), G, B, 2, generator=gen)
        return batch.to(device), noise.to(device)

    return module.update, state, inputs


def _windows(gen, T, B, **extra):
    return TensorDict({
        "obs": torch.randn(T, B, 3, generator=gen), "action": torch.randint(2, (T, B), generator=gen),
        "reward": torch.randn(T, B, generator=gen), "next_obs": torch.randn(T, B, 3, generator=gen),
        "terminated": torch.zeros(T, B, dtype=torch.bool), "mask": torch.ones(T, B, dtype=torch.bool), **extra,
    }, batch_size=[T, B])


def _drqn_problem(**cfg):
    config = drqn.Config(lstm_size=8, encoder_sizes=(8,), sequence_length=4, batch_size=3, target_period=2, **cfg)
    state = drqn.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    return drqn.update, state, lambda i, device="cpu": (_windows(torch.Generator().manual_seed(200 + i), 4, 3).to(device),)


def _r2d2_problem(**cfg):
    config = r2d2.Config(encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=2, sequence_length=3,
                         sequence_period=2, target_period=2, **cfg)
    state = r2d2.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)

    def inputs(i, device="cpu"):
        gen = torch.Generator().manual_seed(300 + i)
        carry = r2d2.carry_to_td(r2d2.initial_carry(config, 3))
        extra = {"init_carry": carry.expand(5, 3).clone(), "weight": torch.rand(3, generator=gen).expand(5, 3).clone()}
        return (_windows(gen, 5, 3, **extra).to(device),)

    return r2d2.update, state, inputs


def _drqv2_problem(**cfg):
    config = drqv2.Config(encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1,
                          frame_stack=2, batch_size=4, **cfg)
    state = drqv2.init(config, gym.spaces.Box(0, 255, (6, 12, 12), np.uint8), gym.spaces.Box(-1, 1, (2,)), seed=0)

    def inputs(i, device="cpu"):
        gen = torch.Generator().manual_seed(400 + i)
        batch = TensorDict({
            "obs": torch.randint(256, (4, 6, 12, 12), dtype=torch.uint8, generator=gen),
            "action": torch.rand(4, 2, generator=gen) * 2 - 1, "reward": torch.randn(4, generator=gen),
            "discount": torch.full((4,), 0.99**3),
            "next_obs": torch.randint(256, (4, 6, 12, 12), dtype=torch.uint8, generator=gen),
        }, batch_size=[4])
        return batch.to(device), drqv2.draw_noise(config, 4, 2, generator=gen).to(device)

    return drqv2.update, state, inputs


PROBLEMS = {
    "redq": lambda **c: _redq_problem(redq, **c),
    "rlpd": lambda **c: _redq_problem(rlpd, **c),
    "drqv2": _drqv2_problem,
    "drqn": _drqn_problem,
    "r2d2": _r2d2_problem,
}


def _run(problem, n):
    update, state, inputs = problem
    metrics = []
    for i in range(n):
        state, m = update(state, *inputs(i))
        metrics.append(m)
    return state, metrics


@pytest.mark.parametrize("algo", sorted(PROBLEMS))
def test_a_constant_schedule_updates_bit_identically_to_no_schedule(algo):
    plain, _ = _run(PROBLEMS[algo](), 3)
    const, _ = _run(PROBLEMS[algo](lr_schedule={"kind": "constant"}), 3)
    for k in plain.exclude("config").keys(True, True):
        assert torch.equal(plain[k], const[k]), k


# --------------------------------------------------------------------------- the old decay, bit for bit
def old_decay(lr, lr_end, updates, step):
    """DRQN/R2D2's decay as committed before schedules (``_qstate.q_learning_rate``): ``linear_schedule(lr,
    lr_end, lr_decay_updates)`` at the int64 update counter ``state["step"]``."""
    frac = torch.clamp(torch.as_tensor(step, dtype=torch.float32) / max(updates, 1), 0.0, 1.0)
    return lr + frac * (lr_end - lr)


SHIPPED_DECAYS = {
    # config: (lr, lr_decay_updates, lr_end) as committed with the runs
    "configs/drqn/cartpole_novel.yaml": (0.001, 74000, 0.0001),
    "configs/drqn/cartpole_flicker.yaml": (0.001, 74000, 0.0001),
    "configs/dqn/cartpole_novel.yaml": (0.001, 74000, 0.0001),
    "configs/r2d2/cartpole.yaml": (0.001, 25000, 0.0001),
}


@pytest.mark.parametrize("path", sorted(SHIPPED_DECAYS))
def test_shipped_configs_give_the_old_decay_bit_for_bit_at_every_step(path):
    """The configs' ``lr_schedule`` and the old keys (kept as an alias) give the committed runs'
    rates exactly, in float32, at every update from 0 to past the end of the decay: what the
    optimizer reads (its float32 step) against the old formula on the int64 update counter."""
    lr, updates, lr_end = SHIPPED_DECAYS[path]
    agent = build_config(load_config(str(ROOT / path))).agent
    assert agent.lr == lr and agent.lr_decay_updates is None
    assert agent.lr_schedule == LRSchedule("linear", decay_updates=updates, end_factor=0.1)
    alias = dataclasses.replace(agent, lr_schedule=None, lr_decay_updates=updates, lr_end=lr_end)
    steps = torch.arange(0, updates + 1000, dtype=torch.int64)
    want = old_decay(lr, lr_end, updates, steps)
    for config in (agent, alias):
        opt = _qstate.q_optimizer(config)
        got = opt.learning_rate({"step": steps.to(torch.float32)})
        assert got.dtype == torch.float32 and torch.equal(got, want)
        assert float(got[-1]) == pytest.approx(lr_end, rel=1e-6)  # the old formula's own rounding, kept
        for s in (0, 1, updates // 2, updates - 1, updates, updates + 1, updates + 999):  # 0-dim, as in update()
            assert torch.equal(opt.learning_rate({"step": torch.tensor(float(s))}), old_decay(lr, lr_end, updates, torch.tensor(s)))


@pytest.mark.parametrize("algo", ["drqn", "r2d2"])
def test_the_alias_and_lr_schedule_update_identically(algo):
    problem = PROBLEMS[algo]
    a, ma = _run(problem(lr=1e-3, lr_decay_updates=3, lr_end=1e-4), 5)
    b, mb = _run(problem(lr=1e-3, lr_schedule={"kind": "linear", "decay_updates": 3, "end_factor": 0.1}), 5)
    for k in a.exclude("config").keys(True, True):
        assert torch.equal(a[k], b[k]), k
    assert [float(m["lr"]) for m in ma] == [float(m["lr"]) for m in mb] == pytest.approx([1e-3, 7e-4, 4e-4, 1e-4, 1e-4])


def test_alias_and_schedule_together_must_agree():
    same = dict(lr=1e-3, lr_decay_updates=100, lr_end=1e-4)
    drqn.Config(**same, lr_schedule={"kind": "linear", "decay_updates": 100, "end_factor": 0.1})  # the same: fine
    with pytest.raises(ValueError, match=r"^lr_schedule and lr_decay_updates .* are both set and differ; set one of them: "
                                         r"lr_schedule null keeps .*, lr_decay_updates null keeps lr_schedule\.$"):
        drqn.Config(**same, lr_schedule={"kind": "cosine", "decay_updates": 100, "end_factor": 0.1})
    drqn.Config(**same, lr_schedule=None)  # the old keys alone: the old decay


# --------------------------------------------------------------------------- each optimizer, its own steps
def _frozen(a: TensorDict, b: TensorDict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a.keys(True, True))


STOP_AFTER_ONE = {"kind": "linear", "decay_updates": 1, "end_factor": 0.0}  # lr at step 0, then 0


@pytest.mark.parametrize("module", [redq, rlpd])
def test_redq_rlpd_schedules_are_per_optimizer_and_count_its_gradient_steps(module):
    """The critic takes G = 2 steps per update and the actor one: a schedule that stops after one
    step freezes the actor after the first update, the critic after its first step; the temperature
    (no override, no ``lr_schedule``) keeps its constant rate."""
    update, state, inputs = _redq_problem(module, actor_lr_schedule=STOP_AFTER_ONE, critic_lr_schedule=STOP_AFTER_ONE)
    s1, m1 = update(state, *inputs(0))
    assert int(s1["opt", "critic", "step"]) == 2 and int(s1["opt", "actor", "step"]) == 1
    assert float(m1["actor_lr"]) == pytest.approx(3e-4) and float(m1["critic_lr"]) == 0.0  # critic's 2nd step: 0
    assert float(m1["alpha_lr"]) == pytest.approx(3e-4)
    s2, m2 = update(s1, *inputs(1))
    assert _frozen(s1["params", "actor"], s2["params", "actor"])
    assert _frozen(s1["params", "critic"], s2["params", "critic"])
    assert not torch.equal(s1["params", "log_alpha"], s2["params", "log_alpha"])
    assert float(m2["actor_lr"]) == float(m2["critic_lr"]) == 0.0
    # lr_schedule reaches every optimizer that has no override of its own
    update, state, inputs = _redq_problem(module, lr_schedule=STOP_AFTER_ONE)
    s1, _ = update(state, *inputs(0))
    s2, _ = update(s1, *inputs(1))
    assert _frozen(s1["params"], s2["params"])


def test_drqv2_schedules_actor_and_critic_with_encoder():
    update, state, inputs = _drqv2_problem(critic_lr_schedule=STOP_AFTER_ONE)
    s1, m1 = update(state, *inputs(0))
    s2, m2 = update(s1, *inputs(1))
    assert _frozen(s1["params", "critic"], s2["params", "critic"]) and _frozen(s1["params", "encoder"], s2["params", "encoder"])
    assert not _frozen(s1["params", "actor"], s2["params", "actor"])
    assert float(m2["critic_lr"]) == 0.0 and float(m2["actor_lr"]) == pytest.approx(1e-4)
    update, state, inputs = _drqv2_problem(actor_lr_schedule=STOP_AFTER_ONE)
    s1, _ = update(state, *inputs(0))
    s2, _ = update(s1, *inputs(1))
    assert _frozen(s1["params", "actor"], s2["params", "actor"])
    assert not _frozen(s1["params", "critic"], s2["params", "critic"])


@pytest.mark.parametrize("algo", ["drqn", "r2d2"])
def test_warm_up_starts_from_zero_and_reaches_lr(algo):
    """``warmup_updates: 2``: the first update's rate is 0 (parameters unchanged, Adam's moments
    move), the second lr / 2, from the third the full rate."""
    update, state, inputs = PROBLEMS[algo](lr_schedule={"kind": "constant", "warmup_updates": 2})
    lr = state.get_non_tensor("config").lr
    s1, m1 = update(state, *inputs(0))
    assert _frozen(state["params"], s1["params"]) and float(m1["lr"]) == 0.0
    s2, m2 = update(s1, *inputs(1))
    s3, m3 = update(s2, *inputs(2))
    assert not _frozen(s1["params"], s2["params"])
    assert float(m2["lr"]) == pytest.approx(lr / 2) and float(m3["lr"]) == pytest.approx(lr)


# --------------------------------------------------------------------------- no host sync
SYNC_OPS = {"_local_scalar_dense", "nonzero", "is_nonzero", "masked_select", "item", "equal"}


class _OffDeviceOrSync(TorchDispatchMode):
    """Records host-sync ops and operands not on ``device`` (as tests/test_gpu_path.py's audit)."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device, self.found = device, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            self.found.append(f"sync op {name}")
        out = func(*args, **kwargs)
        flat = list(args) + list(kwargs.values()) + (list(out) if isinstance(out, (tuple, list)) else [out])
        for t in flat:
            for x in t if isinstance(t, (tuple, list)) else [t]:
                if isinstance(x, torch.Tensor) and x.device.type != self.device:
                    self.found.append(f"{name} touches a {x.device} tensor of shape {tuple(x.shape)}")
        return out


SCHEDULED = {
    "lr_schedule": {"kind": "cosine", "warmup_updates": 2, "decay_updates": 10, "end_factor": 0.1},
}


@pytest.mark.parametrize("algo", sorted(PROBLEMS))
def test_scheduled_updates_make_no_host_sync(algo):
    """Every op of a scheduled update (CPU): no ``.item()``, ``bool(t)``, ``nonzero``. (The
    ``meta``-device audit of tests/test_gpu_path.py cannot run a whole scheduled update: PyTorch has
    no meta kernel for the fused Adam with a tensor rate; the schedule itself is audited on meta below.)"""
    extra = {} if algo in ("drqn", "r2d2") else {"critic_lr_schedule": {"kind": "linear", "warmup_updates": 1, "decay_updates": 5}}
    update, state, inputs = PROBLEMS[algo](**SCHEDULED, **extra)
    with _OffDeviceOrSync("cpu") as mode:
        for i in range(3):
            state, metrics = update(state, *inputs(i))
    assert mode.found == [], mode.found[:5]
    assert "lr" in metrics.keys() or "critic_lr" in metrics.keys()


@pytest.mark.parametrize("spec", [SCHEDULED["lr_schedule"], {"kind": "linear", "decay_updates": 5}, {"kind": "constant", "warmup_updates": 3}])
def test_schedules_follow_the_step_device_without_host_syncs(spec):
    """The rate is made on the step's device from Python constants only: on ``meta`` (no values)
    nothing syncs and nothing touches another device, for the rate and its metric."""
    from rlfunc.core.optim import last_lr

    opt = Adam(lr=LRSchedule.parse(spec).at(1e-3))
    opt_state = TensorDict({"step": torch.zeros((), device="meta")}, [])
    with _OffDeviceOrSync("meta") as mode:
        rate = opt.learning_rate(opt_state)
        metric = last_lr(opt, opt_state, torch.zeros((), device="meta"))
    assert mode.found == [], mode.found
    assert rate.device.type == metric.device.type == "meta"


# --------------------------------------------------------------------------- compiled
@pytest.mark.compile
def test_drqn_scheduled_update_compiles_fullgraph_without_recompiling():
    """Across the warm-up boundary and into the decay: one graph (the rate is a function of the
    step tensor, never a Python value), matching eager; and the old decay's formula compiled
    gives the shipped schedule's rates bit for bit."""
    update, state, inputs = _drqn_problem(
        lr_schedule={"kind": "cosine", "warmup_updates": 2, "decay_updates": 3, "end_factor": 0.1}
    )
    torch._dynamo.reset()
    compiled = torch.compile(drqn.update, fullgraph=True)
    eager, comp = state, state.clone()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for i in range(6):
            eager, m_e = drqn.update(eager, *inputs(i))
            comp, m_c = compiled(comp, *inputs(i))
            torch.testing.assert_close(m_c["lr"], m_e["lr"], rtol=1e-6, atol=0)
    for k in eager.exclude("config").keys(True, True):
        torch.testing.assert_close(comp[k], eager[k], rtol=1e-4, atol=1e-5)

    lr, updates, lr_end = SHIPPED_DECAYS["configs/drqn/cartpole_novel.yaml"]
    new = Adam(lr=LRSchedule("linear", decay_updates=updates, end_factor=0.1).at(lr))
    new_c = torch.compile(lambda step: new.learning_rate({"step": step}), fullgraph=True)
    old_c = torch.compile(lambda step: old_decay(lr, lr_end, updates, step), fullgraph=True)
    with torch._dynamo.config.patch(error_on_recompile=True):
        for s in (0, 1, 2, 37_000, updates - 1, updates, updates + 1, 2 * updates):
            assert torch.equal(new_c(torch.tensor(float(s))), old_c(torch.tensor(s))), s


@pytest.mark.compile
def test_redq_step_mode_with_per_optimizer_schedules_compiles_and_matches_eager():
    update, state, inputs = _redq_problem(
        redq,
        lr_schedule={"kind": "cosine", "warmup_updates": 1, "decay_updates": 4, "end_factor": 0.1},
        critic_lr_schedule={"kind": "linear", "decay_updates": 3, "end_factor": 0.5},
    )
    torch._dynamo.reset()
    compiled = redq.make_update("step")
    eager, comp = state, state.clone()
    with torch._dynamo.config.patch(error_on_recompile=True):
        for i in range(3):
            eager, m_e = redq.update(eager, *inputs(i))
            comp, m_c = compiled(comp, *inputs(i))
    for k in ("actor_lr", "critic_lr", "alpha_lr", "critic_loss"):
        torch.testing.assert_close(m_c[k], m_e[k], rtol=1e-4, atol=1e-6)
    for k in eager.exclude("config").keys(True, True):
        torch.testing.assert_close(comp[k], eager[k], rtol=1e-4, atol=1e-5)


def test_a_schedule_longer_than_the_float32_step_counter_counts_is_refused():
    """Adam's step counter is float32 (as torch.optim's): past 2**24 adding 1 no longer changes it, so a
    schedule reaching beyond would freeze its rate there (review of the numerical core)."""
    from rlfunc.algos import r2d2, redq
    from rlfunc.core.optim import EXACT_STEPS, LRSchedule

    stuck = torch.tensor(float(EXACT_STEPS), dtype=torch.float32)
    assert torch.equal(stuck + 1, stuck)  # why
    assert LRSchedule.parse({"kind": "linear", "decay_updates": EXACT_STEPS}).decay_updates == EXACT_STEPS
    with pytest.raises(ValueError, match=r"spans 16,777,217 gradient steps.*2\*\*24"):
        LRSchedule.parse({"kind": "cosine", "warmup_updates": 1, "decay_updates": EXACT_STEPS})
    with pytest.raises(ValueError, match="warmup_updates"):
        LRSchedule.parse({"kind": "constant", "warmup_updates": EXACT_STEPS + 1})
    with pytest.raises(ValueError, match="critic_lr_schedule spans"):
        redq.Config(critic_lr_schedule={"kind": "linear", "decay_updates": 20_000_000})
    with pytest.raises(ValueError, match="lr_decay_updates spans"):
        r2d2.Config(lr_decay_updates=20_000_000)
