"""RLPD in the runtime: dataset collect, the data section, the mixed learner, checkpoints/resume."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from rlfunc.runtime.cli import main
from rlfunc.runtime.config import ConfigError, build_config, load_config
from rlfunc.runtime.trainer import Trainer

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
RLPD_YAML = str(ROOT / "configs/rlpd/pendulum.yaml")

TINY = [
    "train.total_steps=60",
    "train.learning_starts=50",
    "train.eval_every=30",
    "train.eval_episodes=1",
    "train.checkpoint_every=30",
    "train.progress=false",
    "agent.hidden_sizes=[16,16]",
    "agent.num_critics=3",
    "agent.updates_per_step=2",
    "agent.batch_size=8",
]


def _set(items):
    return [x for item in items for x in ("--set", item)]


def _random_data(tmp_path, steps=300, name="random.npz"):
    out = tmp_path / name
    assert main(["dataset", "collect", "--policy", "random", "--env", "Pendulum-v1", "--steps", str(steps), "--out", str(out)]) == 0
    return out


def test_collect_random_writes_a_d4rl_style_npz(tmp_path, capsys):
    out = _random_data(tmp_path)
    assert "300 transitions of Pendulum-v1" in capsys.readouterr().out
    with np.load(out, allow_pickle=False) as f:
        keys = set(f.files)
        assert {"observations", "actions", "rewards", "next_observations", "terminals", "timeouts"} <= keys
        assert f["observations"].shape == (300, 3) and f["actions"].shape == (300, 1)
        assert f["actions"].min() >= -2.0 and f["actions"].max() <= 2.0  # Pendulum's own bounds
        assert f["actions"].max() > 1.0  # not rescaled
        assert f["timeouts"].sum() == 1 and f["terminals"].sum() == 0  # 200-step time limit: a timeout
        assert str(f["env_id"]) == "Pendulum-v1"
        # consecutive rows inside an episode chain obs -> next_obs
        np.testing.assert_allclose(f["next_observations"][:199], f["observations"][1:200])


def test_train_collect_from_checkpoint_eval_resume(tmp_path, capsys):
    data = _random_data(tmp_path)
    run = tmp_path / "run"
    assert main(["train", RLPD_YAML, *_set(TINY + [f"data.path={data}"]), "--run-dir", str(run)]) == 0
    meta = (run / "checkpoints" / "step_000000060" / "meta.json").read_text()
    assert '"sha256"' in meta and str(data) in meta
    # the checkpoint holds no prior data
    ckpt_files = [p.name for p in (run / "checkpoints" / "step_000000060").rglob("*")]
    assert not any("offline" in n or "dataset" in n for n in ckpt_files)
    capsys.readouterr()
    # a dataset from the trained agent, with action noise
    out = tmp_path / "agent.npz"
    assert main(["dataset", "collect", "--checkpoint", str(run), "--steps", "250", "--noise", "0.3", "--out", str(out)]) == 0
    assert "250 transitions of Pendulum-v1" in capsys.readouterr().out
    with np.load(out) as f:
        assert f["actions"].shape == (250, 1) and float(f["noise"]) == pytest.approx(0.3)
    assert main(["eval", str(run), "--episodes", "1"]) == 0
    assert main(["resume", str(run), "--total-steps", "70"]) == 0
    assert (run / "checkpoints" / "step_000000070").exists()
    # the prior data changed since the checkpoint: resume refuses, one clear line
    data.write_bytes(out.read_bytes())
    capsys.readouterr()
    assert main(["resume", str(run), "--total-steps", "80"]) == 2
    err = capsys.readouterr().err
    assert "is not the one this run was trained with" in err and err.count("\n") == 1


def test_collect_errors(tmp_path, capsys):
    assert main(["dataset", "collect", "--steps", "10", "--out", str(tmp_path / "x.npz")]) == 2
    assert "Pass --env ID" in capsys.readouterr().err
    assert main(["dataset", "collect", "--policy", "random", "--env", "Pendulum-v1", "--steps", "10", "--out", str(tmp_path / "x.txt")]) == 2
    assert "must end in .npz" in capsys.readouterr().err


def test_data_section_is_validated_before_training(tmp_path):
    raw = load_config(RLPD_YAML)
    with pytest.raises(ConfigError, match="needs prior data: set data.path"):
        build_config(raw)
    with pytest.raises(ConfigError, match="did you mean 'offline_ratio'"):
        build_config({**raw, "data": {"path": "x.npz", "offline_ration": 0.5}})
    with pytest.raises(ConfigError, match="data.offline_ratio must be in"):
        build_config({**raw, "data": {"path": "x.npz", "offline_ratio": 1.5}})
    with pytest.raises(ConfigError, match="does not learn from prior data"):
        build_config({"algo": "redq", "env": {"id": "Pendulum-v1"}, "data": {"path": "x.npz"}})
    redq = build_config({"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": {"learning_starts": 1000}})
    assert "data" not in __import__("rlfunc.runtime.config", fromlist=["to_dict"]).to_dict(redq)
    online_only = build_config({**raw, "data": {"offline_ratio": 0.0}})
    assert online_only.data.path is None
    # a dataset of another env stops the run at construction, before any env step
    bad = tmp_path / "bad.npz"
    np.savez(bad, observations=np.zeros((5, 11), np.float32), actions=np.zeros((5, 3), np.float32),
             rewards=np.zeros(5, np.float32), next_observations=np.zeros((5, 11), np.float32),
             terminals=np.zeros(5, bool))
    cfg = build_config({**raw, "data": {"path": str(bad)}})
    with pytest.raises(ValueError, match=r"'observations' rows have shape \(11,\)"):
        Trainer(cfg, tmp_path / "never")
    assert not (tmp_path / "never").exists()
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Trainer(build_config({**raw, "data": {"path": str(tmp_path / "missing.npz")}}), tmp_path / "never")


def _learner(tmp_path, **data):
    from rlfunc.runtime.config import apply_overrides, parse_overrides

    path = _random_data(tmp_path)
    raw = apply_overrides(load_config(RLPD_YAML), parse_overrides(TINY + ["agent.batch_size=16", "agent.updates_per_step=4"]))
    raw["data"] = {"path": str(path), **data}
    trainer = Trainer(build_config(raw), tmp_path / "run")
    return trainer.learner


def test_learner_batches_hold_exactly_half_prior_rows(tmp_path):
    learner = _learner(tmp_path)
    # online rows are marked by a reward no prior row has
    from tensordict import TensorDict

    n = 40
    learner.observe(TensorDict({"obs": torch.zeros(n, 3), "action": torch.zeros(n, 1), "reward": torch.full((n,), 99.0),
                                "next_obs": torch.zeros(n, 3), "terminated": torch.zeros(n, dtype=torch.bool)}, [n]))
    assert len(learner.replay) == n  # only online rows in the online buffer
    assert learner.ready(learner.train_cfg.learning_starts)
    for _ in range(3):
        batch = learner.sample_batch()
        assert batch.batch_size == (4, 16)
        online = batch["reward"] == 99.0
        assert (online.sum(1) == 8).all() and ((~online).sum(1) == 8).all()
    metrics = learner.learn()
    assert int(learner.state["opt", "actor", "step"]) == 1 and int(learner.state["opt", "critic", "step"]) == 4
    assert torch.isfinite(metrics["critic_loss"])


def test_offline_pretraining_option(tmp_path):
    learner = _learner(tmp_path, pretrain_steps=3)
    from tensordict import TensorDict

    learner.observe(TensorDict({"obs": torch.zeros(2, 3), "action": torch.zeros(2, 1), "reward": torch.zeros(2),
                                "next_obs": torch.zeros(2, 3), "terminated": torch.zeros(2, dtype=torch.bool)}, [2]))
    learner.learn()
    assert learner.pretrained == 3
    assert int(learner.state["step"]) == 4  # 3 prior-only updates, then the online one
    learner.learn()
    assert int(learner.state["step"]) == 5  # pre-training runs once
    td = learner.state_tensors()
    assert int(td["data", "pretrained"]) == 3
