"""DRQN in the runtime: train / resume / eval / plot, recurrent state in evaluation,
windows fed from vector envs, clear errors."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import rlfunc
from helpers_envs import register
from rlfunc.algos import drqn
from rlfunc.runtime.checkpoint import load_checkpoint

CUE = "configs/drqn/cue_memory.yaml"

TINY = {
    "agent.lstm_size": 16,
    "agent.encoder_sizes": [16],
    "agent.batch_size": 8,
    "train.learning_starts": 50,
    "train.replay_size": 500,
    "train.eval_episodes": 2,
    "train.progress": False,
    "train.compile": False,
}


def test_cli_train_resume_eval_plot_on_masked_cartpole(tmp_path, capsys):
    from rlfunc.runtime.cli import main

    run = tmp_path / "novel"
    sets = {**TINY, "env.num_envs": 2, "train.total_steps": 300, "train.eval_every": 150, "train.checkpoint_every": 150}
    args = ["train", "configs/drqn/cartpole_novel.yaml", "--run-dir", str(run)]
    for k, v in sets.items():
        args += ["--set", f"{k}={v}"]
    assert main(args) == 0
    assert "final eval return" in capsys.readouterr().out
    _, meta = load_checkpoint(run)
    assert meta["env_step"] == 300 and meta["updates"] > 0
    assert main(["resume", str(run), "--total-steps", "450"]) == 0
    tensors, meta = load_checkpoint(run)
    assert meta["env_step"] == 450
    assert "lstm" in tensors["state", "params"].keys()
    assert main(["eval", str(run), "--episodes", "2"]) == 0
    assert "mean return" in capsys.readouterr().out
    assert main(["plot", str(run), "--out", str(tmp_path / "c.png")]) == 0
    assert (tmp_path / "c.png").stat().st_size > 0
    steps = [int(line.split(",")[0]) for line in (run / "eval.csv").read_text().splitlines()[1:]]
    assert steps == [150, 300, 450]
    metrics = (run / "metrics.csv").read_text().splitlines()[0]
    assert "epsilon" in metrics and "td_abs" in metrics


def test_flicker_config_trains(tmp_path):
    res = rlfunc.train(
        "configs/drqn/cartpole_flicker.yaml",
        overrides={**TINY, "env.num_envs": 2, "train.total_steps": 200, "train.eval_every": 200},
        run_dir=tmp_path / "flicker",
    )
    assert res.env_steps == 200 and res.final_return is not None and res.final_return > 0


def test_resume_continues_exactly(tmp_path):
    """Checkpoints at episode boundaries (6-step cue episodes, one env) resume bit-exactly."""
    sets = {
        **TINY,
        "env.num_envs": 1,
        "agent.train_every": 2,
        "train.eval_every": 120,
        "train.checkpoint_every": 120,
    }
    straight = rlfunc.train(CUE, overrides={**sets, "train.total_steps": 240}, run_dir=tmp_path / "straight")
    rlfunc.train(CUE, overrides={**sets, "train.total_steps": 120}, run_dir=tmp_path / "split")
    resumed = rlfunc.resume(tmp_path / "split", total_steps=240)
    a, meta_a = load_checkpoint(straight.run_dir)
    b, meta_b = load_checkpoint(resumed.run_dir)
    assert meta_a["env_step"] == meta_b["env_step"] == 240
    assert meta_a["updates"] == meta_b["updates"] == (240 - 50) // 2 + 1
    for key in a["state"].keys(True, True):
        assert torch.equal(a["state"][key], b["state"][key]), key
    for key in a["replay"].keys(True, True):
        assert torch.equal(a["replay"][key], b["replay"][key]), key
    assert straight.evals == resumed.evals


def test_resume_mid_episode_flushes_open_windows(tmp_path):
    """A restore restarts every env: the replay closes the open episodes as padded windows."""
    sets = {**TINY, "env.num_envs": 3, "train.total_steps": 203, "train.checkpoint_every": 1000, "train.eval_every": 1000}
    rlfunc.train("configs/drqn/cartpole_novel.yaml", overrides=sets, run_dir=tmp_path / "r")
    tensors, _ = load_checkpoint(tmp_path / "r")
    assert int(tensors["replay", "ep_len"].sum()) > 0  # episodes were open at the checkpoint
    res = rlfunc.resume(tmp_path / "r", total_steps=206)
    tensors2, _ = load_checkpoint(res.run_dir)
    # every env restarted: the open episodes were closed, one new step each since
    assert tensors2["replay", "ep_len"].tolist() == [1, 1, 1]


def test_windows_from_vector_envs_never_cross_episodes(tmp_path):
    """obs = [episode id, t]: every stored window is one episode, consecutive steps."""
    register()
    sets = {
        **TINY,
        "env.id": "rlfunc_test/Counting-v0",
        "env.kwargs": {"term_at": 7, "discrete": True},
        "env.num_envs": 3,
        "agent.sequence_length": 4,
        "agent.sequence_period": 2,
        "train.total_steps": 300,
        "train.eval_every": 1000,
        "train.checkpoint_every": 1000,
    }
    rlfunc.train(CUE, overrides=sets, run_dir=tmp_path / "count")
    tensors, _ = load_checkpoint(tmp_path / "count")
    storage = tensors["replay", "storage"]
    obs, next_obs, mask = storage["obs"], storage["next_obs"], storage["mask"]
    n = int(tensors["replay", "size"])
    assert n > 50
    for w in range(n):
        m = mask[:, w]
        ep, t = obs[m, w, 0], obs[m, w, 1]
        assert (ep == ep[0]).all(), f"window {w} crosses episodes"
        assert torch.equal(t, t[0] + torch.arange(len(t), dtype=t.dtype))
        assert torch.equal(next_obs[m, w, 1], t + 1)
        assert int(t[0]) % 2 == 0  # windows start every sequence_period steps
    # terminated only on the episode's last step (t + 1 == term_at)
    term = storage["terminated"][mask]
    assert torch.equal(term.bool(), next_obs[mask][:, 1] == 7)


def test_evaluation_carries_state_within_and_resets_between_episodes(monkeypatch):
    """The eval policy threads the LSTM carry through an episode and zeroes it at each reset."""
    import gymnasium as gym

    from rlfunc.envs import make_env
    from rlfunc.runtime.evaluate import run_episodes
    from rlfunc.runtime.policy import Policy

    config = drqn.Config(lstm_size=8, encoder_sizes=(8,))
    env = make_env("rlfunc/CueMemory-v0", kwargs={"delay": 3})
    state = drqn.init(config, env.observation_space, env.action_space, seed=0)
    params = state["params"]
    calls = []
    real = drqn.greedy_action

    def spy(p, obs, carry, *, config=None):
        calls.append((obs.clone(), carry[0].clone(), carry[1].clone()))
        return real(p, obs, carry, config=config)

    monkeypatch.setattr(drqn, "greedy_action", spy)
    policy = Policy("drqn", params, config, None, None, env.observation_space.shape)
    run_episodes(policy, env, episodes=2, seed=0)
    assert len(calls) == 8  # 2 episodes x (delay + 1) steps
    for ep in range(2):
        steps = calls[4 * ep : 4 * ep + 4]
        h0, c0 = steps[0][1], steps[0][2]
        assert not h0.any() and not c0.any(), "carry must start from zeros at every episode"
        obs = torch.stack([o for o, _, _ in steps])  # [T, 1, O]
        carry = drqn.initial_carry(config, 1)
        for t in range(4):
            assert torch.allclose(steps[t][1], carry[0]) and torch.allclose(steps[t][2], carry[1])
            _, carry = drqn.q_step(params, obs[t], carry)
        assert steps[3][1].abs().sum() > 0, "carry must advance within the episode"
    assert isinstance(env.action_space, gym.spaces.Discrete)


def test_dqn_control_has_no_memory(tmp_path):
    res = rlfunc.train(
        "configs/dqn/cue_memory.yaml",
        overrides={**TINY, "train.total_steps": 200, "train.eval_every": 200},
        run_dir=tmp_path / "dqn",
    )
    tensors, meta = load_checkpoint(res.run_dir)
    keys = set(tensors["state", "params"].keys())
    assert "fc" in keys and "lstm" not in keys
    assert meta["config"]["agent"]["sequence_length"] == 1 and meta["config"]["agent"]["core"] == "mlp"
    policy = rlfunc.load(res.run_dir)
    a = policy.act(np.zeros(3, dtype=np.float32))
    assert a.shape == () and int(a) in (0, 1)


def test_drqn_on_continuous_actions_is_a_clear_error(tmp_path):
    from rlfunc.runtime.cli import main

    rc = main(["train", CUE, "--set", "env.id=Pendulum-v1", "--set", "env.kwargs={}", "--run-dir", str(tmp_path / "x")])
    assert rc == 2


def test_actor_ladder_gives_each_env_its_own_fixed_epsilon(tmp_path, monkeypatch):
    """``agent.exploration: actor_ladder``: the act call gets the Ape-X per-env rates at every
    step (no schedule), and a fixed ladder is not logged as an epsilon curve."""
    n = 4
    expected = torch.tensor([0.4 ** (1 + 7 * i / (n - 1)) for i in range(n)])
    used = []
    real = drqn.act

    def spy(params, obs, carry, epsilon, noise=None, *, reset=None):
        used.append(torch.broadcast_to(torch.as_tensor(epsilon), (obs.shape[0],)).clone())
        return real(params, obs, carry, epsilon, noise, reset=reset)

    monkeypatch.setattr(drqn, "act", spy)
    sets = {**TINY, "env.num_envs": n, "train.total_steps": 200, "train.eval_every": 200, "train.log_every": 100}
    run = tmp_path / "ladder"
    rlfunc.train(
        "configs/drqn/cartpole_novel.yaml", overrides={**sets, "agent.exploration": "actor_ladder"}, run_dir=run
    )
    assert len(used) >= 200 // n  # (a vector step that resets an env stores no row for it)
    for eps in used:
        torch.testing.assert_close(eps, expected)
    assert "epsilon" not in (run / "metrics.csv").read_text().splitlines()[0].split(",")

    used.clear()  # the default schedule: one rate for every env, decaying from 1
    rlfunc.train("configs/drqn/cartpole_novel.yaml", overrides=sets, run_dir=tmp_path / "schedule")
    assert float(used[0][0]) == 1.0 and all(float(e.min()) == float(e.max()) for e in used)
    assert float(used[-1][0]) < 1.0


def test_exploration_config_errors_are_clear():
    with pytest.raises(ValueError, match="exploration must be 'schedule'"):
        drqn.Config(exploration="ladder")
    with pytest.raises(ValueError, match="epsilon_base must be in"):
        drqn.Config(exploration="actor_ladder", epsilon_base=0.0)
