"""Smoke tests of the MuJoCo locomotion configs (#26): REDQ and SAC (the REDQ paper's SAC baseline) on
Hopper, Walker2d, Ant and Humanoid -v5, and RLPD on Hopper with prior data made by ``rlfunc dataset
collect``. Each trains a few hundred env steps with tiny overrides (the configs' own agent shape and
budgets are what the YAML says; the overrides only shrink them) and checks that the run's state holds the
official REDQ code's target entropy for its env (``mbpo_target_entropy_dict``, Chen et al. 2021).
Skipped without the mujoco extra."""

from pathlib import Path

import pytest
import yaml

pytest.importorskip("mujoco", reason="needs the mujoco extra: pip install -e '.[mujoco]'")

import rlfunc  # noqa: E402
from rlfunc.runtime.checkpoint import load_checkpoint  # noqa: E402
from rlfunc.runtime.config import build_config, load_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# The official table (watchernyu/REDQ, redq/algos/core.py), by family; -|A| for comparison.
OFFICIAL = {"hopper": (-1.0, 3), "walker2d": (-3.0, 6), "ant": (-4.0, 8), "humanoid": (-2.0, 17)}
TINY = {
    "train.total_steps": 200, "train.learning_starts": 150, "train.replay_size": 1000, "train.eval_every": 200,
    "train.eval_episodes": 1, "train.checkpoint_every": 200, "train.progress": False, "train.tensorboard": False,
    "train.threads": 1, "agent.hidden_sizes": [16, 16], "agent.batch_size": 16,
}


@pytest.mark.parametrize("env", sorted(OFFICIAL))
@pytest.mark.parametrize("algo", ["redq", "sac"])
def test_config_is_the_paper_setting_and_trains(tmp_path, algo, env):
    path = ROOT / "configs" / algo / f"{env}.yaml"
    cfg = build_config(load_config(str(path)))
    agent, train = cfg.agent, cfg.train
    want = (10, 2, 20) if algo == "redq" else (2, 2, 1)
    assert (agent.num_critics, agent.subset_size, agent.updates_per_step) == want
    assert (agent.batch_size, agent.hidden_sizes, agent.gamma, agent.tau) == (256, (256, 256), 0.99, 0.005)
    assert agent.target_entropy == "mbpo" and cfg.env.id.endswith("-v5")
    assert (train.learning_starts, train.replay_size) == (5000, 1_000_000)
    assert train.total_steps == (125_000 if env == "hopper" else 300_000)  # the official mbpo_epoches

    overrides = dict(TINY, **({"agent.num_critics": 3, "agent.updates_per_step": 2} if algo == "redq" else {}))
    rlfunc.train(str(path), overrides=overrides, run_dir=tmp_path / "run")
    tensors, meta = load_checkpoint(tmp_path / "run")
    entropy, act_dim = OFFICIAL[env]
    assert float(tensors["state", "target_entropy"]) == entropy != -act_dim
    assert meta["env_step"] == 200
    stored = yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())
    assert stored["agent"]["target_entropy"] == "mbpo", "the run keeps the rule, so a resume resolves it again"


def test_rlpd_hopper_trains_on_collected_prior_data(tmp_path):
    """configs/rlpd/hopper.yaml on a dataset ``rlfunc dataset collect`` wrote (random policy here; the
    locomotion datasets of benchmarks/locomotion_data.py are made the same way from a trained agent)."""
    from rlfunc.runtime.cli import main

    data = tmp_path / "prior.npz"
    assert main(["dataset", "collect", "--env", "Hopper-v5", "--policy", "random", "--steps", "300",
                 "--out", str(data)]) == 0
    overrides = dict(TINY, **{"data.path": str(data), "agent.num_critics": 3, "agent.updates_per_step": 2})
    rlfunc.train(str(ROOT / "configs/rlpd/hopper.yaml"), overrides=overrides, run_dir=tmp_path / "run")
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 200 and float(tensors["state", "target_entropy"]) == -1.5  # RLPD: -|A|/2
