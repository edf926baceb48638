"""A real, short REDQ learning run on Pendulum-v1.

Settings are the paper's structure at a size that fits the suite budget on a
2-core CPU: N=10 critics, M=2 target subset, G=10 critic updates per env step
(paper: 20), 64-64 networks (paper: 256-256), batch 128, 500 random steps.
Random policies score about -1200 on Pendulum; an untrained deterministic
policy about -1300; REDQ reaches about -150 by 2000 env steps here. A broken
target, subset, loss or optimizer misses the -400 threshold.
"""

import pytest

import rlfunc


@pytest.mark.slow
def test_redq_learns_pendulum(tmp_path):
    res = rlfunc.train(
        "configs/redq/pendulum.yaml",
        overrides={
            "train.total_steps": 2000,
            "train.learning_starts": 500,
            "train.eval_every": 1000,
            "train.eval_episodes": 5,
            "train.checkpoint_every": 2000,
            "train.progress": False,
            "agent.hidden_sizes": [64, 64],
            "agent.updates_per_step": 10,
            "agent.batch_size": 128,
        },
        run_dir=tmp_path / "redq",
    )
    assert res.env_steps == 2000
    assert res.final_return is not None and res.final_return > -400, res.evals
