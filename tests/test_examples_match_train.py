"""Each single-file example computes exactly what ``rlfunc train`` computes with the
matching config: same seed and step count -> bit-identical final parameters and the
same evaluation returns (CPU, eager). The example and the runtime's learner call the
same pure functions and draw from the same generator in the same order; if either
changes how it draws, these tests say so.
"""

from __future__ import annotations

import pytest
import torch

import rlfunc
from rlfunc.runtime.checkpoint import load_checkpoint

torch.set_num_threads(1)

RUN = {"train.progress": False, "train.checkpoint_every": 100_000, "train.compile": False}


def assert_same_run(example_out: dict, run_dir, train_result) -> None:
    assert example_out["evals"] == train_result.evals  # exact float equality
    tensors, _ = load_checkpoint(run_dir)
    trained = tensors["state", "params"]
    mine = example_out["state"]["params"]
    keys = set(trained.keys(True, True))
    assert keys == set(mine.keys(True, True))
    for key in keys:
        assert torch.equal(trained[key], mine[key]), f"params {key} differ"
    assert int(example_out["state"]["step"]) == int(tensors["state", "step"])


@pytest.mark.parametrize("variant", ["redq", "sac"])
def test_redq_example_matches_train(variant, tmp_path):
    from rlfunc.examples import redq_pendulum as ex

    n, g = (3, 2) if variant == "redq" else (2, 1)
    args = ex.Args(total_steps=200, learning_starts=100, num_critics=n, subset_size=2, updates_per_step=g,
                   batch_size=16, hidden=16, eval_every=100, eval_episodes=1)
    out = ex.main(args)
    overrides = {**RUN, "train.total_steps": 200, "train.learning_starts": 100, "agent.num_critics": n,
                 "agent.subset_size": 2, "agent.updates_per_step": g, "agent.batch_size": 16,
                 "agent.hidden_sizes": [16, 16], "train.eval_every": 100, "train.eval_episodes": 1}
    res = rlfunc.train(f"configs/{variant}/pendulum.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert_same_run(out, tmp_path / "run", res)


def test_rlpd_example_matches_train(tmp_path):
    from rlfunc.examples import rlpd_pendulum as ex
    from rlfunc.runtime.dataset import collect

    data = collect(tmp_path / "prior.npz", env_id="Pendulum-v1", steps=300, policy="random", seed=1)["path"]
    args = ex.Args(data_path=data, pretrain_steps=2, total_steps=150, learning_starts=50, num_critics=3,
                   updates_per_step=2, batch_size=16, hidden=16, eval_every=75, eval_episodes=1)
    out = ex.main(args)
    overrides = {**RUN, "data.path": data, "data.pretrain_steps": 2, "train.total_steps": 150,
                 "train.learning_starts": 50, "agent.num_critics": 3, "agent.updates_per_step": 2,
                 "agent.batch_size": 16, "agent.hidden_sizes": [16, 16], "train.eval_every": 75,
                 "train.eval_episodes": 1}
    res = rlfunc.train("configs/rlpd/pendulum.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert_same_run(out, tmp_path / "run", res)


def test_drqn_example_matches_train(tmp_path):
    from rlfunc.examples import drqn_cartpole as ex

    args = ex.Args(num_envs=3, total_steps=400, learning_starts=100, batch_size=8, lstm_size=16, target_period=20,
                   eps_decay_steps=300, replay_size=500, eval_every=200, eval_episodes=2)
    out = ex.main(args)
    overrides = {**RUN, "env.num_envs": 3, "train.total_steps": 400, "train.learning_starts": 100,
                 "agent.batch_size": 8, "agent.lstm_size": 16, "agent.target_period": 20,
                 "agent.eps_decay_steps": 300, "train.replay_size": 500, "train.eval_every": 200,
                 "train.eval_episodes": 2}
    res = rlfunc.train("configs/drqn/cartpole_novel.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert int(out["state"]["step"]) > 100  # updates ran (one every 2 env steps after 100)
    assert_same_run(out, tmp_path / "run", res)


def test_r2d2_example_matches_train(tmp_path):
    from rlfunc.examples import r2d2_cartpole as ex

    args = ex.Args(num_envs=3, total_steps=400, width=16, burn_in=2, sequence_length=4, sequence_period=2,
                   batch_size=8, target_period=20, replay_size=500, learning_starts=20, samples_per_insert=4.0,
                   eval_every=200, eval_episodes=2)
    out = ex.main(args)
    overrides = {**RUN, "env.num_envs": 3, "train.total_steps": 400, "agent.encoder_sizes": [16],
                 "agent.lstm_size": 16, "agent.head_sizes": [16], "agent.burn_in": 2, "agent.sequence_length": 4,
                 "agent.sequence_period": 2, "agent.batch_size": 8, "agent.target_period": 20,
                 "train.replay_size": 500, "train.learning_starts": 20, "agent.samples_per_insert": 4.0,
                 "train.eval_every": 200, "train.eval_episodes": 2}
    res = rlfunc.train("configs/r2d2/cartpole.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert int(out["state"]["step"]) > 20  # prioritized updates ran (and wrote priorities back)
    assert_same_run(out, tmp_path / "run", res)


DRQV2_ARGS = dict(size=16, frame_stack=2, learning_starts=40, replay_size=1000, batch_size=8, update_every=2,
                  channels=4, convs=2, feature_dim=8, hidden_dim=16, stddev_duration=100, eval_episodes=1)
DRQV2_AGENT = {"train.learning_starts": 40, "train.replay_size": 1000, "agent.batch_size": 8, "agent.update_every": 2,
               "agent.encoder_channels": [4, 4], "agent.encoder_strides": [2, 1], "agent.feature_dim": 8,
               "agent.hidden_dim": 16, "agent.stddev_duration": 100, "agent.frame_stack": 2,
               "train.eval_episodes": 1}


def test_drqv2_example_matches_train_on_pendulum_pixels(tmp_path):
    from rlfunc.examples import drqv2_dmc as ex

    out = ex.main(ex.Args(env_id="Pendulum-v1", action_repeat=2, total_steps=120, eval_every=60, **DRQV2_ARGS))
    overrides = {**RUN, **DRQV2_AGENT, "train.total_steps": 120, "train.eval_every": 60,
                 "env.wrappers": [{"pixels": {"size": 16, "frame_stack": 2, "action_repeat": 2}}]}
    res = rlfunc.train("configs/drqv2/pendulum_pixels.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert_same_run(out, tmp_path / "run", res)


def test_drqv2_example_matches_train_on_dmc(tmp_path):
    pytest.importorskip("dm_control", reason="dm-control not installed: pip install -e '.[dmc]'")
    from rlfunc.examples import drqv2_dmc as ex

    out = ex.main(ex.Args(action_repeat=8, fast_render=True, total_steps=50, eval_every=50, **DRQV2_ARGS))
    overrides = {**RUN, **DRQV2_AGENT, "train.total_steps": 50, "train.eval_every": 50,
                 "env.kwargs": {"size": 16, "frame_stack": 2, "action_repeat": 8, "fast_render": True}}
    res = rlfunc.train("configs/drqv2/cartpole_balance.yaml", overrides=overrides, run_dir=tmp_path / "run")
    assert_same_run(out, tmp_path / "run", res)
