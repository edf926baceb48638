"""``train.frame_capacity``: the frame ring of pixel DRQN/R2D2/DQN replays as a config key (session 29).

A review found that the default ring holds only from episodes of about
``sequence_length x (period + 1) - period^2`` steps on, and that DRQN's uniform frame replay then
stopped the run asking for a ``frame_capacity`` no config key could set.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("minatar")

import rlfunc  # noqa: E402
from rlfunc.runtime.config import ConfigError, build_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# DRQN on MinAtar Breakout (windows at every step) kept near-random (short episodes, as early in training)
# with a small replay, so that the default ring comes round within a few thousand steps.
SHORT = {
    "train.total_steps": 4000, "train.learning_starts": 1000, "train.replay_size": 1000,
    "train.eval_every": 100000, "train.checkpoint_every": 100000, "train.progress": False, "train.compile": False,
    "train.tensorboard": False, "train.threads": 1,
    "agent.lstm_size": 8, "agent.batch_size": 2, "agent.train_every": 400, "agent.eps_end": 1.0,
}


def test_short_episodes_outgrow_the_default_ring_and_the_key_gives_it_room(tmp_path):
    """The default ring comes round: the uniform replay evicts its oldest windows and the run goes on (it
    stopped there before session 30); a ring of default_frame_capacity for windows of sequence_length + 1
    frames evicts none."""
    from rlfunc.replay.frame_sequence import default_frame_capacity
    from rlfunc.runtime.checkpoint import load_checkpoint

    replays = []

    class Watch:
        def on_end(self, run, reason):
            replays.append(run.learner.replay)

    res = rlfunc.train(str(ROOT / "configs/drqn/minatar_breakout.yaml"), overrides=SHORT, run_dir=tmp_path / "default",
                       callbacks=[Watch()])
    assert res.env_steps == 4000
    assert replays[0].windows_evicted > 0 and replays[0].windows_sampleable < len(replays[0])
    import csv

    with open(tmp_path / "default" / "metrics.csv", newline="") as f:  # DRQN logs the sampleable windows too
        logged = [float(r["replay_windows"]) for r in csv.DictReader(f) if r.get("replay_windows")]
    assert logged and min(logged) > 0 and logged[-1] < len(replays[0])
    need = default_frame_capacity(1000, 10, 8, 10)  # as if each window wrote sequence_length + 1 frames
    res = rlfunc.train(str(ROOT / "configs/drqn/minatar_breakout.yaml"),
                       overrides={**SHORT, "train.frame_capacity": need}, run_dir=tmp_path / "sized", callbacks=[Watch()])
    assert res.env_steps == 4000
    assert replays[1].frame_capacity == need and replays[1].windows_evicted == 0
    assert replays[1].windows_sampleable == len(replays[1])
    _, meta = load_checkpoint(tmp_path / "sized")
    assert meta["env_step"] == 4000


def test_the_key_sizes_the_ring_and_its_memory_estimate():
    from rlfunc.runtime.registry import get_algo
    from rlfunc.envs import env_spaces, make_vector_env

    raw = rlfunc.runtime.config.load_config(str(ROOT / "configs/r2d2/minatar_breakout.yaml"))
    sizes = {}
    for ring in (None, 50_000):
        config = build_config(rlfunc.runtime.config.apply_overrides(raw, {"train.frame_capacity": ring}))
        env = make_vector_env(config.env.id, config.env.num_envs, kwargs=config.env.kwargs)
        try:
            learner = get_algo(config.algo).make_learner(config, *env_spaces(env))
        finally:
            env.close()
        sizes[ring] = (learner.replay.frame_capacity, learner._replay_need().nbytes)
    default_ring, default_bytes = sizes[None]
    assert sizes[50_000][0] == 50_000 != default_ring
    frame = 10 * 10 * 4  # MinAtar Breakout: 4 planes of 10 x 10, one byte each
    assert sizes[50_000][1] - default_bytes == (50_000 - default_ring) * frame


def test_the_key_is_refused_where_there_is_no_frame_ring(tmp_path):
    with pytest.raises(ConfigError, match=r"^train\.frame_capacity is not used by redq; remove it"):
        build_config({"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": {"frame_capacity": 1000}})
    with pytest.raises(ConfigError, match=r"train\.frame_capacity must be a positive integer"):
        build_config({"algo": "drqn", "env": {"id": "CartPole-v1"}, "train": {"frame_capacity": 0}})
    with pytest.raises(ConfigError, match=r"^train\.frame_capacity sizes the frame ring of a pixel replay, but "
                                          r"agent\.encoder='mlp' stores whole observations; remove train\.frame_capacity\.$"):
        rlfunc.train(str(ROOT / "configs/drqn/cartpole_novel.yaml"),
                     overrides={"train.frame_capacity": 1000, "train.progress": False}, run_dir=tmp_path / "run")
