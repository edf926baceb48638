"""R2D2 in the runtime: train / resume / eval on tiny settings, priorities written
back, per-actor epsilons, stored state with the previous action and reward, the
rate limiter, and the previous reward fed at evaluation."""

from __future__ import annotations

import numpy as np
import torch

import rlfunc
from helpers_envs import register
from rlfunc.algos import r2d2
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import build_config, load_config, apply_overrides

torch.set_num_threads(1)

CUE = "configs/r2d2/cue_memory.yaml"
NOVEL = "configs/r2d2/cartpole_novel.yaml"

TINY = {
    "agent.lstm_size": 16,
    "agent.encoder_sizes": [16],
    "agent.head_sizes": [16],
    "agent.burn_in": 2,
    "agent.sequence_length": 4,
    "agent.sequence_period": 3,
    "agent.batch_size": 8,
    "train.learning_starts": 10,
    "train.replay_size": 500,
    "agent.samples_per_insert": 16,
    "train.eval_episodes": 2,
    "train.progress": False,
    "train.compile": False,
}


def _learner(config_path: str, overrides: dict):
    """A learner, a collector and the run config, as the Trainer builds them."""
    from rlfunc.envs import build_wrappers, env_spaces, make_vector_env
    from rlfunc.runtime.collector import Collector
    from rlfunc.runtime.registry import get_algo

    cfg = build_config(apply_overrides(load_config(config_path), overrides))
    env = make_vector_env(cfg.env.id, cfg.env.num_envs, kwargs=cfg.env.kwargs, wrappers=build_wrappers(cfg.env.wrappers))
    obs_space, act_space = env_spaces(env)
    learner = get_algo(cfg.algo).make_learner(cfg, obs_space, act_space)
    collector = Collector(env, seed=cfg.train.seed)
    collector.reset(seed=cfg.train.seed)
    return learner, collector, cfg


def _drive(learner, collector, steps: int, learn: bool = False):
    out = []
    env_step = 0
    for _ in range(steps):
        actions = learner.explore(collector.obs, env_step, episode_start=collector.episode_start)
        rows, _ = collector.step(actions)
        learner.observe(rows)
        for _ in range(rows.batch_size[0]):  # as the Trainer: at most one update per env step
            env_step += 1
            if learn and learner.ready(env_step):
                out.append(learner.learn())
    return out


def test_cli_train_resume_eval_plot_on_masked_cartpole(tmp_path, capsys):
    from rlfunc.runtime.cli import main

    run = tmp_path / "novel"
    sets = {**TINY, "env.num_envs": 3, "train.total_steps": 300, "train.eval_every": 150, "train.checkpoint_every": 150}
    args = ["train", NOVEL, "--run-dir", str(run)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 0
    assert "final eval return" in capsys.readouterr().out
    tensors, meta = load_checkpoint(run)
    assert meta["env_step"] == 300 and meta["updates"] > 0
    # the replay is prioritized and the learner wrote priorities back (not all at the insert value)
    leaves = tensors["replay", "priority_leaves"]
    assert leaves.numel() == int(tensors["replay", "size"]) and len(torch.unique(leaves)) > 5
    assert main(["resume", str(run), "--total-steps", "450"]) == 0
    tensors, meta = load_checkpoint(run)
    assert meta["env_step"] == 450
    assert {"lstm", "encoder", "head"} <= set(tensors["state", "params"].keys())
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0
    steps = [int(line.split(",")[0]) for line in (run / "eval.csv").read_text().splitlines()[1:]]
    assert steps == [150, 300, 450]
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"td_abs", "priority_mean", "loss", "replay_windows"} <= set(header)
    assert "priorities" not in header  # the [B] priorities go to the replay, not to the log


def test_flicker_and_full_cartpole_configs_train(tmp_path):
    for name in ("cartpole_flicker", "cartpole"):
        res = rlfunc.train(
            f"configs/r2d2/{name}.yaml",
            overrides={**TINY, "env.num_envs": 2, "train.total_steps": 200, "train.eval_every": 200},
            run_dir=tmp_path / name,
        )
        assert res.env_steps == 200 and res.final_return is not None and res.final_return > 0


def test_priorities_are_written_back_for_the_sampled_windows(monkeypatch):
    learner, collector, _ = _learner(NOVEL, {**TINY, "env.num_envs": 2})
    _drive(learner, collector, 60)
    assert len(learner.replay) >= 10 and learner.ready(120)
    seen = {}
    real_sample, real_write = learner.replay.sample, learner.replay.update_priorities

    def sample(*a, **k):
        seen["batch"] = real_sample(*a, **k)
        return seen["batch"]

    def write(idx, prio):
        seen["write"] = (idx.clone(), prio.clone())
        real_write(idx, prio)

    monkeypatch.setattr(learner.replay, "sample", sample)
    monkeypatch.setattr(learner.replay, "update_priorities", write)
    metrics = learner.learn()
    idx, prio = seen["write"]
    assert torch.equal(idx, seen["batch"]["window"][0])
    assert prio.shape == (8,) and (prio > 0).all()
    torch.testing.assert_close(learner.replay.priorities(idx).float(), prio, rtol=1e-6, atol=1e-7)
    assert "priorities" not in metrics.keys()
    assert all(v.dim() == 0 for v in metrics.values())  # the trainer logs float(v) of each


def test_each_actor_has_its_own_fixed_epsilon(monkeypatch):
    n = 5
    learner, collector, _ = _learner(NOVEL, {**TINY, "env.num_envs": n})
    expected = torch.tensor([0.4 ** (1 + 7 * i / (n - 1)) for i in range(n)])
    torch.testing.assert_close(learner.epsilons, expected)
    used = []
    real = r2d2.act

    def spy(params, obs, prev_action, prev_reward, carry, epsilon, noise=None, reset=None):
        used.append(torch.as_tensor(epsilon).clone())
        return real(params, obs, prev_action, prev_reward, carry, epsilon, noise, reset)

    monkeypatch.setattr(r2d2, "act", spy)
    _drive(learner, collector, 30)
    assert len(used) == 30
    for eps in used:  # the same per-env epsilons at every step: no schedule
        torch.testing.assert_close(eps, expected)
    # behaviour: actor 0 (eps 0.4) often deviates from greedy, the last (eps 0.4^8) practically never
    obs = torch.zeros(n, 4)
    carry = r2d2.initial_carry(learner.config, n)
    params = learner.state["params"]
    greedy = r2d2.q_step(params, obs, carry)[0].argmax(-1)
    g = torch.Generator().manual_seed(0)
    deviates = torch.zeros(n)
    for _ in range(400):
        a, _ = real(params, obs, None, None, carry, learner.epsilons, r2d2.draw_act_noise(n, generator=g))
        deviates += (a != greedy).float()
    rate = deviates / 400  # 2 actions: a random action deviates half the time
    assert abs(rate[0] - 0.2) < 0.06 and rate[-1] < 0.01


def test_stored_state_holds_the_previous_action_and_reward(tmp_path):
    """Counting env (obs = [episode, t], reward = t after the step): every window's stored carry holds
    the reward and action of the step before its first one, and zeros at an episode start."""
    register()
    P, T = 3, 6
    sets = {
        **TINY,
        "env.id": "rlfunc_test/Counting-v0",
        "env.kwargs": {"term_at": 11, "discrete": True},
        "env.wrappers": [],
        "env.num_envs": 3,
        "agent.sequence_period": P,
        "agent.burn_in": 2,
        "agent.sequence_length": T - 2,
    }
    learner, collector, _ = _learner(NOVEL, sets)
    _drive(learner, collector, 120)
    rb = learner.replay
    n = len(rb)
    assert n > 30
    st, carry = rb.storage, rb._carry
    start_t = st["obs"][0, :n, 1]
    episode = st["obs"][0, :n, 0]
    env = rb._info["env"][:n]
    torch.testing.assert_close(carry["prev_reward"][:n], start_t)  # reward of step s-1 is s; 0 at s = 0
    first = start_t == 0
    assert first.any() and (~first).any()
    assert not carry["h"][:n][first].any() and not carry["prev_action"][:n][first].any()
    assert carry["h"][:n][~first].abs().sum(-1).min() > 0
    checked = 0
    for w in torch.nonzero(~first).flatten().tolist():
        same = (episode == episode[w]) & (env == env[w]) & (start_t == start_t[w] - P)
        if same.any():
            prev = int(torch.nonzero(same)[0])
            assert int(carry["prev_action"][w]) == int(st["action"][P - 1, prev])
            checked += 1
    assert checked > 10


def test_rate_limiter_keeps_samples_per_insert(tmp_path):
    spi, B, min_size = 16, 8, 10
    learner, collector, _ = _learner(NOVEL, {**TINY, "env.num_envs": 4})
    metrics = _drive(learner, collector, 60, learn=True)
    updates = len(metrics)
    allowed = spi * (learner.replay.windows_added - min_size) + B
    assert updates > 5
    assert updates * B <= allowed < (updates + 1) * B + spi * 4  # caught up to within one vector step of inserts


def test_resume_continues_exactly(tmp_path):
    """Checkpoints at episode boundaries (6-step cue episodes, one env) resume bit-exactly."""
    sets = {**TINY, "env.num_envs": 1, "train.eval_every": 120, "train.checkpoint_every": 120}
    straight = rlfunc.train(CUE, overrides={**sets, "train.total_steps": 240}, run_dir=tmp_path / "straight")
    rlfunc.train(CUE, overrides={**sets, "train.total_steps": 120}, run_dir=tmp_path / "split")
    resumed = rlfunc.resume(tmp_path / "split", total_steps=240)
    a, meta_a = load_checkpoint(straight.run_dir)
    b, meta_b = load_checkpoint(resumed.run_dir)
    assert meta_a["env_step"] == meta_b["env_step"] == 240
    assert meta_a["updates"] == meta_b["updates"] > 0
    for key in a["state"].keys(True, True):
        assert torch.equal(a["state"][key], b["state"][key]), key
    for key in a["replay"].keys(True, True):
        assert torch.equal(a["replay"][key], b["replay"][key]), key
    assert int(a["replay", "windows_added"]) == 40
    assert straight.evals == resumed.evals


def test_resume_mid_episode_flushes_open_windows(tmp_path):
    sets = {**TINY, "env.num_envs": 3, "train.total_steps": 203, "train.checkpoint_every": 1000, "train.eval_every": 1000}
    rlfunc.train(NOVEL, overrides=sets, run_dir=tmp_path / "r")
    tensors, _ = load_checkpoint(tmp_path / "r")
    assert int(tensors["replay", "ep_len"].sum()) > 0
    res = rlfunc.resume(tmp_path / "r", total_steps=206)
    tensors2, _ = load_checkpoint(res.run_dir)
    assert tensors2["replay", "ep_len"].tolist() == [1, 1, 1]


def test_evaluation_feeds_the_previous_action_and_reward(monkeypatch):
    """The eval policy threads (h, c, prev_action, prev_reward) through an episode -- the real
    previous reward, as in training -- and starts every episode from zeros."""
    from rlfunc.envs import build_wrappers, make_env
    from rlfunc.runtime.evaluate import run_episodes
    from rlfunc.runtime.policy import Policy

    config = r2d2.Config(lstm_size=8, encoder_sizes=(8,), head_sizes=(8,))
    env = make_env("CartPole-v1", wrappers=build_wrappers(["mask_velocity"]))
    params = r2d2.init(config, env.observation_space, env.action_space, seed=0)["params"]
    calls = []
    real = r2d2.greedy_action

    def spy(p, obs, carry, *, config=None, noise=None):
        calls.append(carry)
        out = real(p, obs, carry, config=config)
        calls[-1] = (carry, out[0].clone())
        return out

    monkeypatch.setattr(r2d2, "greedy_action", spy)
    returns = run_episodes(Policy("r2d2", params, config, None, None, (4,)), env, episodes=2, seed=0)
    assert len(calls) == sum(int(r) for r in returns)
    first_of_second = int(returns[0])
    for i, (carry, _) in enumerate(calls):
        if i in (0, first_of_second):
            assert not carry.h.any() and int(carry.prev_action) == 0 and float(carry.prev_reward) == 0.0
        else:
            assert float(carry.prev_reward) == 1.0  # CartPole's reward, not the 0 a reward-blind policy would see
            assert int(carry.prev_action) == int(calls[i - 1][1])


def test_r2d2_on_continuous_actions_is_a_clear_error(tmp_path, capsys):
    from rlfunc.runtime.cli import main

    rc = main(["train", CUE, "--set", "env.id=Pendulum-v1", "--set", "env.kwargs={}", "--run-dir", str(tmp_path / "x")])
    assert rc == 2
    assert "Discrete action space" in capsys.readouterr().err


def test_loaded_policy_acts(tmp_path):
    res = rlfunc.train(CUE, overrides={**TINY, "train.total_steps": 120, "train.eval_every": 120}, run_dir=tmp_path / "p")
    policy = rlfunc.load(res.run_dir)
    policy.reset(1)
    a = policy.act(np.zeros(3, dtype=np.float32))
    assert a.shape == () and int(a) in (0, 1)
    out = rlfunc.evaluate(res.run_dir, episodes=3)
    assert len(out["returns"]) == 3
