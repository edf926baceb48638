"""Parity: rlfunc's functional DrQ-v2 vs the imperative baseline (benchmarks/baselines/drqv2.py,
the official agent's structure).

Same parameters, batch and noise -> same critic loss and gradients (encoder and critic), same
actor loss and gradients, and the same encoder, critic, target critic and actor after one and
after three full updates. The official augmentation is a bilinear ``grid_sample`` on an integer
grid and ours an exact gather, so images agree to float rounding, not bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from tensordict import TensorDict

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.baselines.drqv2 import ImperativeDrQV2  # noqa: E402
from rlfunc.algos import drqv2  # noqa: E402
from rlfunc.core.augment import random_shift  # noqa: E402

torch.set_num_threads(1)

B, A, C, H = 8, 2, 9, 20
CONFIG = drqv2.Config(
    batch_size=B, feature_dim=10, hidden_dim=32, encoder_channels=(6, 6, 6), encoder_strides=(2, 1, 1), pad=3,
)
ATOL, RTOL = 2e-5, 2e-4


def _setup(seed: int = 0, agent_step: int = 30_000):
    obs_space = gym.spaces.Box(0, 255, (C, H, H), np.uint8)
    act_space = gym.spaces.Box(-1.0, 1.0, (A,), np.float32)
    state = drqv2.init(CONFIG, obs_space, act_space, seed=seed)
    state["agent_step"] = torch.tensor(agent_step)
    gen = torch.Generator().manual_seed(seed + 1)
    batches, noises = [], []
    for _ in range(3):
        batches.append(
            TensorDict(
                {
                    "obs": torch.randint(0, 256, (B, C, H, H), generator=gen, dtype=torch.uint8),
                    "action": torch.rand(B, A, generator=gen) * 2 - 1,
                    "reward": torch.randn(B, generator=gen),
                    "discount": torch.where(torch.rand(B, generator=gen) < 0.25, 0.0, 0.99**3),
                    "next_obs": torch.randint(0, 256, (B, C, H, H), generator=gen, dtype=torch.uint8),
                },
                batch_size=[B],
            )
        )
        noise = drqv2.draw_noise(CONFIG, B, A, generator=gen)
        noise["action"] = noise["action"] * 3.0  # make the 0.3 clip and the (-1, 1) clamp bite
        noises.append(noise)
    return state, batches, noises


def _close(a, b, what):
    torch.testing.assert_close(a, b, atol=ATOL, rtol=RTOL, msg=lambda m: f"{what}: {m}")


def _compare_params(state: TensorDict, agent: ImperativeDrQV2, what: str) -> None:
    p = state["params"]
    convs = [m for m in agent.encoder.convnet if isinstance(m, torch.nn.Conv2d)]
    for i, conv in enumerate(convs):
        _close(p["encoder", str(i), "weight"], conv.weight, f"{what} encoder {i}")
        _close(p["encoder", str(i), "bias"], conv.bias, f"{what} encoder bias {i}")
    for name, module, src in (
        ("critic", agent.critic, p["critic"]),
        ("target", agent.critic_target, state["target", "critic"]),
    ):
        _close(src["trunk", "0", "weight"], module.trunk[0].weight, f"{what} {name} trunk")
        _close(src["trunk", "norm0", "weight"], module.trunk[1].weight, f"{what} {name} trunk LN")
        for j, q in enumerate((module.Q1, module.Q2)):
            lin = [m for m in q if isinstance(m, torch.nn.Linear)]
            for i, layer in enumerate(lin):
                _close(src["q", str(i), "weight"][j], layer.weight, f"{what} {name} Q{j + 1} layer {i}")
                _close(src["q", str(i), "bias"][j], layer.bias, f"{what} {name} Q{j + 1} bias {i}")
    lin = [m for m in agent.actor.policy if isinstance(m, torch.nn.Linear)]
    for i, layer in enumerate(lin):
        _close(p["actor", "policy", str(i), "weight"], layer.weight, f"{what} actor layer {i}")
    _close(p["actor", "trunk", "0", "weight"], agent.actor.trunk[0].weight, f"{what} actor trunk")


def test_losses_and_gradients_match_baseline():
    state, batches, noises = _setup()
    batch, noise = batches[0], noises[0]
    agent = ImperativeDrQV2.from_functional_state(state)
    _compare_params(state, agent, "init")
    base = agent.update(batch, noise, step=int(state["agent_step"]))

    # functional pieces, step by step, with the same draws
    p = state["params"]
    std = drqv2.stddev(CONFIG, state["agent_step"])
    obs = random_shift(batch["obs"].float(), CONFIG.pad, noise["shift_obs"])
    nxt = random_shift(batch["next_obs"].float(), CONFIG.pad, noise["shift_next_obs"])
    y = drqv2.compute_target(
        CONFIG, p["actor"], state["target", "critic"], drqv2.encode(CONFIG, p["encoder"], nxt),
        batch["reward"], batch["discount"], std, noise["next_action"],
    )
    ec = TensorDict({"encoder": p["encoder"], "critic": p["critic"]}, [])
    grads, (loss, aux) = torch.func.grad_and_value(drqv2.critic_loss, has_aux=True)(
        ec, CONFIG, obs, batch["action"], y
    )
    assert abs(float(loss) - base["critic_loss"]) < 1e-4 * max(1.0, abs(base["critic_loss"]))
    assert abs(float(y.mean()) - base["critic_target_q"]) < 1e-4
    g_enc = agent.last_grads["encoder"]
    for i in range(len(CONFIG.encoder_channels)):
        _close(grads["encoder", str(i), "weight"], g_enc[f"convnet.{2 * i}.weight"], f"encoder grad {i}")
    g_crit = agent.last_grads["critic"]
    _close(grads["critic", "trunk", "0", "weight"], g_crit["trunk.0.weight"], "critic trunk grad")
    _close(grads["critic", "trunk", "norm0", "bias"], g_crit["trunk.1.bias"], "critic LN grad")
    for j in range(2):
        for i, idx in enumerate((0, 2, 4)):
            _close(grads["critic", "q", str(i), "weight"][j], g_crit[f"Q{j + 1}.{idx}.weight"], f"Q{j + 1} grad {i}")

    # the actor sees the critic after its step (functional: after the update's critic step)
    new_state, metrics = drqv2.update(state, batch, noise)
    a_grads, (a_loss, _) = torch.func.grad_and_value(drqv2.actor_loss, has_aux=True)(
        p["actor"], CONFIG, new_state["params", "critic"], aux["h"], std, noise["action"]
    )
    assert abs(float(a_loss) - base["actor_loss"]) < 1e-4 * max(1.0, abs(base["actor_loss"]))
    assert abs(float(metrics["actor_loss"]) - base["actor_loss"]) < 1e-4 * max(1.0, abs(base["actor_loss"]))
    g_act = agent.last_grads["actor"]
    for i, idx in enumerate((0, 2, 4)):
        _close(a_grads["policy", str(i), "weight"], g_act[f"policy.{idx}.weight"], f"actor grad {i}")
    _close(a_grads["trunk", "0", "weight"], g_act["trunk.0.weight"], "actor trunk grad")
    _compare_params(new_state, agent, "after one update")


def test_three_updates_match_baseline():
    state, batches, noises = _setup(seed=3, agent_step=0)
    agent = ImperativeDrQV2.from_functional_state(state)
    for k, (batch, noise) in enumerate(zip(batches, noises)):
        step = 2000 + 2 * k
        state["agent_step"] = torch.tensor(step)
        state, metrics = drqv2.update(state, batch, noise)
        base = agent.update(batch, noise, step=step)
        assert abs(float(metrics["critic_loss"]) - base["critic_loss"]) < 1e-4 * max(1.0, abs(base["critic_loss"]))
    _compare_params(state, agent, "after three updates")


def test_benchmark_cli_knows_drqv2():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_run_drqv2", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # the documented importlib recipe: run.py registers its plug-ins on itself
    sys.modules[spec.name] = run  # run.py's hooks look themselves up there
    spec.loader.exec_module(run)
    assert "drqv2" in run.UPDATE_ALGOS and "drqv2" in run.LEARN_ALGOS and "learn" in run.SUBCOMMANDS
    args = run.build_parser().parse_args(["update", "--algo", "drqv2", "--quick"])
    assert (args.batch, args.image_size, args.drqv2_hidden) == (256, 84, 1024)
    # the FLOP counts the benchmark reports: the functional update does no more work than the
    # baseline (whose actor backward also computes unused critic weight gradients, as the official code does)
    import argparse

    from benchmarks import drqv2_bench

    ns = argparse.Namespace(image_size=16, batch=4, act_dim=2, drqv2_hidden=16, device="cpu")
    drq, config, obs_space, act_space, batch, noise = drqv2_bench._problem(ns, torch.device("cpu"))
    state = drq.init(config, obs_space, act_space)
    f_fun = drqv2_bench.count_flops(lambda: drq.update(state, batch, noise))
    f_imp = drqv2_bench.count_flops(lambda: ImperativeDrQV2.from_functional_state(state).update(batch, noise, 0))
    assert 0.8 * f_imp <= f_fun <= f_imp
