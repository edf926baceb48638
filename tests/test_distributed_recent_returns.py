"""Distributed R2D2 keeps the episode returns of metrics.csv's ``episode_return`` in its checkpoints, as
the single-run loop does (``recent_returns`` in meta.json): its loop kept them in a list of its own, so
every checkpoint saved ``[]`` and the first metrics row after a resume lost the returns before it (found
by the session-31 review of the resume changes). Runs in this process through the in-process Ray
stand-in of ``tests/helpers_ray.py``."""

import json

from helpers_ray import InstantRay
from test_distributed_r2d2 import _tiny

from rlfunc.runtime.config import build_config
from rlfunc.scale import distributed


def test_a_distributed_checkpoint_keeps_the_recent_episode_returns(tmp_path):
    raw = _tiny(**{"train.total_steps": 600, "train.checkpoint_every": 600, "train.log_every": 100000,
                   "distributed.param_sync_steps": 50})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay())
    trainer.run()
    assert trainer.collector.episodes > 0  # CartPole episodes of a barely trained policy end early
    latest = (tmp_path / "run" / "checkpoints" / "latest").read_text().strip()
    meta = json.loads((tmp_path / "run" / "checkpoints" / latest / "meta.json").read_text())
    recent = meta["recent_returns"]
    assert 0 < len(recent) <= max(10, trainer.collector.episodes)
    assert all(isinstance(r, float) and r > 0 for r in recent)
