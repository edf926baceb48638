"""Review of the mid-vector-step resume (pending_env_steps) and the uniform frame replay's eviction.

* A population whose last round crossed ``train.checkpoint_every`` wrote its checkpoint inside the
  round, before the final evaluation of its members (``train.total_steps`` not a multiple of
  ``train.eval_every``); the end of the run then saw the same env steps saved and wrote nothing, so the
  final checkpoint lacked the final evaluations, and every resume of the finished population evaluated
  again (a second row at the same step in each member's eval.csv) without saving either. A single run
  skips that periodic save when a final evaluation follows (``Trainer._count_rows``); the population
  now does the same, and saves after final evaluations it made.
"""

from __future__ import annotations

import csv
import json

import rlfunc
from rlfunc.runtime.checkpoint import load_checkpoint, meta_checksum


def _config(total, checkpoint_every, eval_every, seeds=None):
    config = {
        "algo": "sac",
        "env": {"id": "Pendulum-v1", "num_envs": 4, "wrappers": [{"time_limit": {"max_episode_steps": 6}}]},
        "train": {"total_steps": total, "learning_starts": 8, "replay_size": 200, "eval_every": eval_every,
                  "eval_episodes": 1, "checkpoint_every": checkpoint_every, "log_every": 12, "progress": False,
                  "tensorboard": False, "threads": 1, "keep_checkpoints": 10},
        "agent": {"hidden_sizes": [8], "batch_size": 8},
    }
    if seeds is not None:
        config["train"]["population"] = {"seeds": seeds}
    return config


def _eval_steps(path):
    with open(path / "eval.csv") as f:
        return [int(row["step"]) for row in csv.DictReader(f)]


def test_a_population_ending_in_a_checkpointed_round_keeps_its_final_evaluations(tmp_path):
    """total_steps 22 = checkpoint_every, eval_every 36: the last round (rows 21-24, 2 pending) crosses the
    checkpoint; the final evaluation at 22 follows it and must be in the final checkpoint."""
    run_dir = tmp_path / "pop"
    rlfunc.train(_config(total=22, checkpoint_every=22, eval_every=36, seeds=[0, 1]), run_dir=run_dir)
    meta = load_checkpoint(run_dir)[1]
    assert meta["env_steps"] == [22, 22] and meta["pending_env_steps"] == [2, 2]
    assert [[s for s, _ in member] for member in meta["evals"]] == [[22], [22]]  # was [[], []]
    written = {p.name: (p / "meta.json").stat().st_mtime_ns for p in (run_dir / "checkpoints").glob("step_*")}
    assert list(written) == ["step_000000022"]
    assert rlfunc.resume(run_dir).env_steps == 22  # finished: nothing to evaluate or write again
    for k in (0, 1):
        assert _eval_steps(run_dir / f"member-{k}") == [22]  # was [22, 22] (and one more per resume)
    assert {p.name: (p / "meta.json").stat().st_mtime_ns for p in (run_dir / "checkpoints").glob("step_*")} == written
    # a checkpoint the earlier code wrote (no final evaluations): the resume evaluates once and saves them
    meta_path = run_dir / "checkpoints" / "step_000000022" / "meta.json"
    old = {k: v for k, v in json.loads(meta_path.read_text()).items() if k != "checksum"}
    old["evals"] = [[], []]
    old["checksum"] = meta_checksum(old)
    meta_path.write_text(json.dumps(old))
    rlfunc.resume(run_dir)
    assert [[s for s, _ in member] for member in load_checkpoint(run_dir)[1]["evals"]] == [[22], [22]]
    rlfunc.resume(run_dir)
    assert [_eval_steps(run_dir / f"member-{k}") for k in (0, 1)] == [[22, 22], [22, 22]]  # not one more per resume
    # the single run, for comparison, already did so
    single = tmp_path / "single"
    rlfunc.train(_config(total=22, checkpoint_every=22, eval_every=36), run_dir=single)
    assert [s for s, _ in load_checkpoint(single)[1]["evals"]] == [22]
