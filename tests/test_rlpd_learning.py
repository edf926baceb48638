"""Learning: with a small expert-ish Pendulum dataset, RLPD beats SAC from scratch at the same budget.

The prior data (tests/data/pendulum_expert_2k.npz, see tests/data/README.md) was
collected with ``rlfunc dataset collect`` from the project's own SAC agent with
action noise 0.2 (mean return -190). Both runs get the same 1,000 online env
steps, the same 100 uniformly random warm-up steps, the same evaluation (5
greedy episodes) and the same small 64-64 networks with batch 128 (to fit the
test budget on one CPU thread); RLPD keeps its own rules otherwise (10
LayerNorm critics, M = 2, half prior data in every mini-batch) with G = 5
critic steps per env step (the paper: 20). SAC is N = 2, G = 1.

Seen when written (1 thread, shared 2-core machine): RLPD about -125, SAC from
scratch about -1,500 at 1,000 steps.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlfunc.runtime.trainer import train

torch.set_num_threads(1)

DATA = Path(__file__).parent / "data" / "pendulum_expert_2k.npz"
ROOT = Path(__file__).resolve().parents[1]

COMMON = {
    "train.total_steps": 1000,
    "train.learning_starts": 100,
    "train.eval_every": 1000,
    "train.eval_episodes": 5,
    "train.checkpoint_every": 1000,
    "train.progress": False,
    "train.threads": 1,
    "train.seed": 0,
    "agent.hidden_sizes": [64, 64],
    "agent.batch_size": 128,
}


@pytest.mark.slow
def test_rlpd_with_prior_data_beats_sac_from_scratch(tmp_path):
    rlpd = train(
        str(ROOT / "configs/rlpd/pendulum.yaml"),
        overrides={**COMMON, "data.path": str(DATA), "agent.updates_per_step": 5, "agent.ensemble_mode": "bmm"},
        run_dir=tmp_path / "rlpd",
    )
    sac = train(str(ROOT / "configs/sac/pendulum.yaml"), overrides=COMMON, run_dir=tmp_path / "sac")
    assert rlpd.env_steps == sac.env_steps == 1000
    print(f"RLPD {rlpd.final_return:.1f} ({rlpd.wall_s:.0f} s), SAC {sac.final_return:.1f} ({sac.wall_s:.0f} s)")
    assert rlpd.final_return > -400, rlpd.evals
    assert rlpd.final_return > sac.final_return + 400, (rlpd.evals, sac.evals)
