"""The GPU path (issue 7): fixed-address state, CUDA-graph capture, no host syncs in ``update``.

On CPU (always run):

* every algorithm's ``update`` runs on the ``meta`` device with no tensor on any
  other device and no host-sync op (``.item()``, ``bool(t)``, ``nonzero``):
  what it creates follows the state's device, and nothing waits for values;
* :class:`rlfunc.runtime.graphs.FixedStateUpdate` keeps every state tensor's
  ``data_ptr()`` over several updates and computes exactly what the plain
  update computes (REDQ, DRQN, R2D2);
* ``train.cuda_graph`` is validated, and the learners wire it.

With CUDA only (skipped here): every algorithm trains a few graph-replayed
updates on ``cuda`` that match eager, and a replay raises nothing under
``torch.cuda.set_sync_debug_mode("error")``.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode

from rlfunc.algos import drqn, drqv2, r2d2, redq, rlpd
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config
from rlfunc.runtime.graphs import FixedStateUpdate, tensor_keys

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


# --------------------------------------------------------------------------- tiny problems
def _redq_like(module, device, seed=0):
    config = (
        redq.Config(hidden_sizes=(16, 16), num_critics=2, updates_per_step=2, batch_size=8)
        if module is redq
        else rlpd.Config(hidden_sizes=(16, 16), num_critics=2, updates_per_step=2, batch_size=8)
    )
    obs_space, act_space = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,))
    state = module.init(config, obs_space, act_space, seed=seed, device=device)
    G, B = 2, 8

    def batch_and_noise(i):
        gen = torch.Generator().manual_seed(100 + i)
        batch = TensorDict(
            {
                "obs": torch.randn(G, B, 3, generator=gen),
                "action": torch.rand(G, B, 2, generator=gen) * 2 - 1,
                "reward": torch.randn(G, B, generator=gen),
                "next_obs": torch.randn(G, B, 3, generator=gen),
                "terminated": (torch.rand(G, B, generator=gen) < 0.2).float(),
            },
            batch_size=[G, B],
        ).to(device)
        cfg = state.get_non_tensor("config")
        noise = redq.draw_noise(cfg, G, B, 2, generator=gen).to(device)
        return (batch, noise)

    return state, batch_and_noise


def _windows(gen, T, B, **extra) -> TensorDict:
    """A random time-major ``[T, B]`` window batch (obs 3, 2 actions) plus ``extra`` keys (DRQN, R2D2)."""
    return TensorDict(
        {
            "obs": torch.randn(T, B, 3, generator=gen),
            "action": torch.randint(2, (T, B), generator=gen),
            "reward": torch.randn(T, B, generator=gen),
            "next_obs": torch.randn(T, B, 3, generator=gen),
            "terminated": torch.zeros(T, B, dtype=torch.bool),
            **extra,
        },
        batch_size=[T, B],
    )


def _drqn_problem(device, seed=0):
    config = drqn.Config(lstm_size=8, encoder_sizes=(8,), sequence_length=4, batch_size=3, target_period=2)
    state = drqn.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=seed, device=device)
    T, B = 4, 3

    def batch(i):
        gen = torch.Generator().manual_seed(200 + i)
        mask = torch.ones(T, B, dtype=torch.bool)
        mask[3:, 0] = False
        return (_windows(gen, T, B, mask=mask).to(device),)

    return state, batch


def _r2d2_problem(device, seed=0):
    config = r2d2.Config(
        encoder_sizes=(8,), lstm_size=8, head_sizes=(8,), burn_in=2, sequence_length=3, sequence_period=2,
        target_period=2,
    )
    state = r2d2.init(config, gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=seed, device=device)
    T, B = 5, 3

    def batch(i):
        gen = torch.Generator().manual_seed(300 + i)
        carry = r2d2.carry_to_td(r2d2.initial_carry(config, B))
        carry["h"] = torch.randn(B, 8, generator=gen)
        extra = {"init_carry": carry.expand(T, B).clone(), "weight": torch.rand(B, generator=gen).expand(T, B).clone()}
        return (_windows(gen, T, B, mask=torch.ones(T, B, dtype=torch.bool), **extra).to(device),)

    return state, batch


def _drqv2_problem(device, seed=0):
    config = drqv2.Config(
        encoder_channels=(4,), encoder_strides=(2,), feature_dim=8, hidden_dim=16, pad=1, frame_stack=2,
        batch_size=4,
    )
    obs_space = gym.spaces.Box(0, 255, (6, 12, 12), np.uint8)
    state = drqv2.init(config, obs_space, gym.spaces.Box(-1, 1, (2,)), seed=seed, device=device)
    B = 4

    def batch_and_noise(i):
        gen = torch.Generator().manual_seed(400 + i)
        batch = TensorDict(
            {
                "obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8, generator=gen),
                "action": torch.rand(B, 2, generator=gen) * 2 - 1,
                "reward": torch.randn(B, generator=gen),
                "discount": torch.full((B,), 0.99**3),
                "next_obs": torch.randint(256, (B, 6, 12, 12), dtype=torch.uint8, generator=gen),
            },
            batch_size=[B],
        ).to(device)
        return (batch, drqv2.draw_noise(config, B, 2, generator=gen).to(device))

    return state, batch_and_noise


PROBLEMS = {
    "redq": (redq.update, lambda d: _redq_like(redq, d)),
    "rlpd": (rlpd.update, lambda d: _redq_like(rlpd, d)),
    "drqn": (drqn.update, _drqn_problem),
    "r2d2": (r2d2.update, _r2d2_problem),
    "drqv2": (drqv2.update, _drqv2_problem),
}


# --------------------------------------------------------------------------- no syncs, device-following (CPU)
SYNC_OPS = {"_local_scalar_dense", "nonzero", "is_nonzero", "masked_select", "item", "equal"}


class _OffDeviceOrSync(TorchDispatchMode):
    """Records ops that would sync with the host, or that touch a tensor not on ``device``."""

    def __init__(self, device: str) -> None:
        super().__init__()
        self.device = device
        self.found: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func.overloadpacket.__name__
        if name in SYNC_OPS:
            self.found.append(f"sync op {name}")
        out = func(*args, **kwargs)
        flat = list(args) + list(kwargs.values()) + (list(out) if isinstance(out, (tuple, list)) else [out])
        for t in flat:
            ts = t if isinstance(t, (tuple, list)) else [t]
            for x in ts:
                if isinstance(x, torch.Tensor) and x.device.type != self.device:
                    self.found.append(f"{name} touches a {x.device} tensor of shape {tuple(x.shape)}")
        return out


@pytest.mark.parametrize("algo", sorted(PROBLEMS))
def test_update_follows_the_state_device_without_host_syncs(algo):
    """On ``meta`` tensors there are no values: any ``.item()``/``bool(t)`` raises, any CPU tensor
    created inside ``update`` shows up as an off-device operand (on CUDA that would be an implicit
    host-to-device copy, or a constant baked into a CUDA graph)."""
    update, problem = PROBLEMS[algo]
    state, inputs = problem("meta")
    args = inputs(0)
    with _OffDeviceOrSync("meta") as mode:
        new_state, metrics = update(state, *args)
    assert mode.found == [], mode.found[:5]
    assert all(v.device.type == "meta" for v in metrics.values(True, True))
    assert all(new_state.get(k).device.type == "meta" for k in tensor_keys(new_state))


def test_redq_update_without_noise_draws_on_the_batch_device():
    state, inputs = _redq_like(redq, "meta")
    batch, _ = inputs(0)
    batch = TensorDict(dict(batch.items()), batch_size=batch.batch_size)  # no TensorDict device, as replay rows
    assert batch.device is None
    with _OffDeviceOrSync("meta") as mode:
        redq.update(state, batch)  # noise drawn inside, on the batch's device
    assert mode.found == [], mode.found[:5]


# --------------------------------------------------------------------------- fixed addresses (CPU, eager)
def _ptrs(td: TensorDict) -> dict:
    return {k: td.get(k).data_ptr() for k in tensor_keys(td)}


@pytest.mark.parametrize("algo", ["redq", "drqn", "r2d2"])
def test_fixed_state_keeps_addresses_and_matches_the_plain_update(algo):
    update, problem = PROBLEMS[algo]
    state0, inputs = problem("cpu")
    fixed = FixedStateUpdate(update, state0)
    ptrs = _ptrs(fixed.state)
    assert ptrs and all(p != state0.get(k).data_ptr() for k, p in ptrs.items())  # owns its own buffers
    plain = state0
    state = fixed.state
    for i in range(4):
        args = inputs(i)
        plain, m_plain = update(plain, *args)
        state, m_fixed = fixed(state, *args)
        assert state is fixed.state
        assert _ptrs(state) == ptrs
        for k in m_plain.keys(True, True):
            torch.testing.assert_close(m_fixed[k], m_plain[k], rtol=0, atol=0)
    for k in tensor_keys(plain):
        torch.testing.assert_close(state.get(k), plain.get(k), rtol=0, atol=0, msg=f"{k} differs")
    assert int(state["step"]) == 4
    assert fixed.mode == "eager" and fixed.fallback_reason is None


def test_fixed_state_loads_another_state_in_place():
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    fixed = FixedStateUpdate(update, state0)
    ptrs = _ptrs(fixed.state)
    fixed(fixed.state, *inputs(0))
    restored = state0.clone()  # e.g. a checkpoint
    out, _ = fixed(restored, *inputs(1))  # copied into the buffers, then updated
    expected, _ = update(state0, *inputs(1))
    assert out is fixed.state and _ptrs(out) == ptrs
    for k in tensor_keys(expected):
        torch.testing.assert_close(out.get(k), expected.get(k), rtol=0, atol=0)
    bad = state0.clone()
    bad["params", "lstm", "weight_ih"] = torch.zeros(3, 3)
    with pytest.raises(ValueError, match="shape"):
        fixed(bad, *inputs(2))


def test_cuda_graph_on_a_cpu_state_warns_once_and_runs_eagerly():
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    with pytest.warns(RuntimeWarning, match="CUDA graph capture is off"):
        fixed = FixedStateUpdate(update, state0, cuda_graph=True)
    assert fixed.mode == "eager" and "not on a CUDA device" in fixed.fallback_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed(fixed.state, *inputs(0))
        fixed(fixed.state, *inputs(1))
    assert int(fixed.state["step"]) == 2


def test_failed_capture_falls_back_to_eager_with_one_warning(monkeypatch):
    """A capture that raises warns once, and this step and the next ones run the eager update on
    the same buffers (the failure is forced, so the test means the same with or without a GPU)."""

    def no_stream(*args, **kwargs):
        raise RuntimeError("forced capture failure")

    monkeypatch.setattr(torch.cuda, "Stream", no_stream)
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cpu")
    fixed = FixedStateUpdate(update, state0)
    fixed.cuda_graph = True  # as if the state were on CUDA
    assert fixed.mode == "cuda_graph"
    ptrs = _ptrs(fixed.state)
    plain = state0
    with pytest.warns(RuntimeWarning, match="capture failed"):
        fixed(fixed.state, *inputs(0))
    plain, _ = update(plain, *inputs(0))
    assert fixed.mode == "eager" and "forced capture failure" in fixed.fallback_reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fixed(fixed.state, *inputs(1))
    plain, _ = update(plain, *inputs(1))
    assert _ptrs(fixed.state) == ptrs
    for k in tensor_keys(plain):
        torch.testing.assert_close(fixed.state.get(k), plain.get(k), rtol=0, atol=0)


# --------------------------------------------------------------------------- config and learners (CPU)
def test_config_cuda_graph_needs_a_cuda_device():
    raw = load_config(None)
    with pytest.raises(ConfigError, match=r"train.cuda_graph needs train.device: cuda"):
        build_config(apply_overrides(raw, {"train.cuda_graph": True}))
    cfg = build_config(apply_overrides(raw, {"train.cuda_graph": True, "train.device": "cuda:0"}))
    assert cfg.train.cuda_graph is True  # validation does not need a GPU
    assert build_config(raw).train.cuda_graph is False
    with pytest.raises(ConfigError, match="cuda_graph"):
        build_config(apply_overrides(raw, {"train.cuda_grph": True}))


def _forced_cuda_graph_on_cpu(config_path, overrides):
    """A run config with ``train.cuda_graph`` on but on CPU (the config layer refuses it): the
    learner's wiring is exercised, and the wrapper takes its eager, fixed-address path."""
    cfg = build_config(apply_overrides(load_config(config_path), overrides))
    object.__setattr__(cfg.train, "cuda_graph", True)
    return cfg


def _learner(cfg):
    from rlfunc.envs import make_env
    from rlfunc.runtime.registry import get_algo

    env = make_env(cfg.env.id, kwargs=cfg.env.kwargs)
    entry = get_algo(cfg.algo)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture is off"):
        learner = entry.make_learner(cfg, env.observation_space, env.action_space)
    return learner, env


def test_transition_learner_wires_cuda_graph_to_fixed_buffers():
    cfg = _forced_cuda_graph_on_cpu(
        None,
        {"agent.hidden_sizes": [16, 16], "agent.num_critics": 2, "agent.updates_per_step": 2, "agent.batch_size": 8,
         "train.learning_starts": 0},
    )
    learner, env = _learner(cfg)
    assert isinstance(learner._update, FixedStateUpdate) and learner.state is learner._update.state
    ptrs = _ptrs(learner.state)
    obs, _ = env.reset(seed=0)
    rows = TensorDict(
        {
            "obs": torch.as_tensor(np.stack([obs] * 16)),
            "action": torch.rand(16, 1) * 2 - 1,
            "reward": torch.randn(16),
            "next_obs": torch.as_tensor(np.stack([obs] * 16)),
            "terminated": torch.zeros(16),
        },
        batch_size=[16],
    )
    learner.observe(rows)
    for _ in range(3):
        metrics = learner.learn()
    assert _ptrs(learner.state) == ptrs and int(learner.state["step"]) == 3
    assert torch.isfinite(metrics["critic_loss"])
    # A checkpoint restore hands the learner a new TensorDict: copied into the same buffers.
    learner.load_state_tensors(learner.state_tensors().clone())
    learner.learn()
    assert _ptrs(learner.state) == ptrs and int(learner.state["step"]) == 4


def test_sequence_learner_wires_cuda_graph_to_fixed_buffers():
    cfg = _forced_cuda_graph_on_cpu(
        "configs/drqn/cartpole_novel.yaml",
        {"agent.lstm_size": 8, "agent.encoder_sizes": [8], "agent.batch_size": 2, "agent.sequence_length": 4, "agent.sequence_period": 2, "agent.n_step": 2,
         "train.learning_starts": 0, "train.replay_size": 50},
    )
    learner, env = _learner(cfg)
    assert isinstance(learner._update, FixedStateUpdate)
    ptrs = _ptrs(learner.state)
    n = cfg.env.num_envs
    for t in range(12):
        obs = np.random.default_rng(t).normal(size=(n, *env.observation_space.shape)).astype(np.float32)
        rows = TensorDict(
            {
                "obs": torch.as_tensor(obs),
                "action": torch.zeros(n, dtype=torch.int64),
                "reward": torch.ones(n),
                "next_obs": torch.as_tensor(obs),
                "terminated": torch.zeros(n, dtype=torch.bool),
                "truncated": torch.zeros(n, dtype=torch.bool),
                "env_id": torch.arange(n),
            },
            batch_size=[n],
        )
        learner.explore(obs, t, np.full(n, t == 0))
        learner.observe(rows)
    for _ in range(2):
        learner.learn()
    assert _ptrs(learner.state) == ptrs and int(learner.state["step"]) == 2


@pytest.mark.parametrize("config_path, extra", [
    ("configs/r2d2/cartpole_novel.yaml", {"agent.lstm_size": 8, "agent.head_sizes": [8], "agent.batch_size": 2,
                                          "agent.burn_in": 0, "agent.sequence_length": 4, "agent.sequence_period": 2}),
    ("configs/drqn/cartpole_novel.yaml", {"agent.lstm_size": 8, "agent.encoder_sizes": [8], "agent.batch_size": 2,
                                          "agent.sequence_length": 4, "agent.sequence_period": 2, "agent.n_step": 2}),
])
def test_sequence_learners_add_their_metrics_on_the_learners_device(config_path, extra):
    """R2D2's ``replay_windows`` and DRQN's ``epsilon`` join the update's metrics, whose finiteness the trainer
    stacks in one ``torch.stack``: a CPU tensor among CUDA ones failed it at the first update on a GPU. Here the
    ``meta`` device stands in for CUDA (the learner's device and the update's metrics on it)."""
    from rlfunc.envs import make_env
    from rlfunc.runtime.registry import get_algo

    cfg = build_config(apply_overrides(load_config(config_path), {**extra, "train.learning_starts": 0, "train.replay_size": 50}))
    env = make_env(cfg.env.id, kwargs=cfg.env.kwargs)
    learner = get_algo(cfg.algo).make_learner(cfg, env.observation_space, env.action_space)
    learner.device = torch.device("meta")
    learner.replay.update_priorities = lambda *args: None  # R2D2's write-back, not under test
    metrics = TensorDict({"loss": torch.zeros((), device="meta"), "priorities": torch.zeros(2, device="meta")}, [])
    out = learner.after_update(metrics, torch.zeros(2, dtype=torch.int64))
    assert {v.device.type for v in out.values(True, True)} == {"meta"}, dict(out.items())


# --------------------------------------------------------------------------- CUDA only
@needs_cuda
@pytest.mark.parametrize("algo", sorted(PROBLEMS))
def test_cuda_graph_update_matches_eager_on_cuda(algo):
    update, problem = PROBLEMS[algo]
    state0, inputs = problem("cuda")
    eager = FixedStateUpdate(update, state0)
    graphed = FixedStateUpdate(update, state0, cuda_graph=True)
    ptrs = _ptrs(graphed.state)
    for i in range(4):
        args = inputs(i)
        _, m_e = eager(eager.state, *args)
        _, m_g = graphed(graphed.state, *args)
        assert graphed.mode == "cuda_graph", graphed.fallback_reason
        for k in m_e.keys(True, True):
            torch.testing.assert_close(m_g[k], m_e[k], rtol=1e-4, atol=1e-5, msg=f"metric {k} at update {i}")
    assert _ptrs(graphed.state) == ptrs and len(graphed._graphs) == 1
    for k in tensor_keys(eager.state):
        torch.testing.assert_close(graphed.state.get(k), eager.state.get(k), rtol=1e-4, atol=1e-5, msg=f"{k}")
    assert int(graphed.state["step"]) == 4


@needs_cuda
@pytest.mark.parametrize("algo", sorted(PROBLEMS))
def test_cuda_graph_replay_never_syncs(algo):
    update, problem = PROBLEMS[algo]
    state0, inputs = problem("cuda")
    graphed = FixedStateUpdate(update, state0, cuda_graph=True)
    graphed(graphed.state, *inputs(0))  # warm-up and capture (allowed to sync)
    assert graphed.mode == "cuda_graph", graphed.fallback_reason
    replay_without_sync(graphed, inputs(1), 3)
    assert int(graphed.state["step"]) == 4


def replay_without_sync(graphed, args, times: int) -> None:
    """``times`` replays of a recorded ``FixedStateUpdate`` under ``torch.cuda.set_sync_debug_mode("error")``:
    any host sync inside a replay raises."""
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(times):
            graphed(graphed.state, *args)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


@needs_cuda
def test_cuda_eager_update_never_syncs():
    """The plain (eager) REDQ and DRQN updates on CUDA: no host sync either."""
    for algo in ("redq", "drqn"):
        update, problem = PROBLEMS[algo]
        state, inputs = problem("cuda")
        args = inputs(0)
        update(state, *args)  # lazy CUDA init (cuBLAS handles) may sync once
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            update(state, *args)
        finally:
            torch.cuda.set_sync_debug_mode("default")


@needs_cuda
def test_cuda_graph_with_compiled_update_matches_eager():
    update, problem = PROBLEMS["drqn"]
    state0, inputs = problem("cuda")
    eager = FixedStateUpdate(update, state0)
    graphed = FixedStateUpdate(torch.compile(update, fullgraph=True), state0, cuda_graph=True)
    for i in range(3):
        _, m_e = eager(eager.state, *inputs(i))
        _, m_g = graphed(graphed.state, *inputs(i))
        assert graphed.mode == "cuda_graph", graphed.fallback_reason
        torch.testing.assert_close(m_g["loss"], m_e["loss"], rtol=1e-4, atol=1e-5)


def _tiny_redq_on_cuda(total_steps: int) -> dict:
    """A small REDQ run on CUDA with graph replay: 200 random steps, then learning, one evaluation at the end."""
    return {
        "train.device": "cuda",
        "train.cuda_graph": True,
        "train.total_steps": total_steps,
        "train.learning_starts": 200,
        "train.eval_every": total_steps,
        "train.eval_episodes": 1,
        "train.progress": False,
        "agent.hidden_sizes": [32, 32],
        "agent.num_critics": 2,
        "agent.updates_per_step": 2,
    }


@needs_cuda
def test_train_with_cuda_graph_on_cuda(tmp_path):
    import rlfunc

    res = rlfunc.train(
        None,
        overrides=_tiny_redq_on_cuda(total_steps=300),
        run_dir=tmp_path / "redq-cuda-graph",
    )
    assert res.env_steps == 300



@needs_cuda
def test_trainer_queues_the_updates_of_an_env_step_without_a_host_sync(tmp_path, monkeypatch):
    """The trainer reads an update's finiteness later (once per env step), not right after it."""
    import rlfunc
    from rlfunc.runtime.trainer import Trainer

    real, calls = Trainer._learn, {"n": 0}

    def strict(self):
        calls["n"] += 1
        if calls["n"] <= 2:  # warm-up and graph capture may sync
            return real(self)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return real(self)
        finally:
            torch.cuda.set_sync_debug_mode("default")

    monkeypatch.setattr(Trainer, "_learn", strict)
    res = rlfunc.train(
        None,
        overrides=_tiny_redq_on_cuda(total_steps=220),
        run_dir=tmp_path / "redq-no-sync",
    )
    assert res.env_steps == 220 and calls["n"] == 21


def test_graphs_module_doctest():
    import doctest

    import rlfunc.runtime.graphs as graphs

    result = doctest.testmod(graphs, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0


@needs_cuda
def test_a_host_sync_while_capturing_falls_back_on_the_default_stream():
    """An update with a host sync (legal in the warm-up, not while capturing) falls back to eager with the
    update's own error named, back on the stream the capture started from, and computes what eager does
    (tests/test_review_graphs.py emulates this on CPU)."""
    def update(state, x):
        bool((x > 0).all())  # a host sync
        return TensorDict({"w": state["w"] + x, "step": state["step"] + 1}, []), TensorDict({"s": x.sum()}, [])

    state = TensorDict({"w": torch.zeros(4, device="cuda"), "step": torch.zeros((), dtype=torch.int64, device="cuda")}, [])
    default = torch.cuda.current_stream()
    fixed = FixedStateUpdate(update, state, cuda_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fixed(fixed.state, torch.ones(4, device="cuda"))
        fixed(fixed.state, torch.ones(4, device="cuda"))
    torch.cuda.synchronize()
    assert fixed.mode == "eager" and "capturing" in fixed.fallback_reason, fixed.fallback_reason
    assert torch.cuda.current_stream() == default
    assert fixed.state["w"].tolist() == [2.0] * 4 and int(fixed.state["step"]) == 2
