"""Review of session 32's changes (its diff from 20a5d68): defects found and fixed.

* A frame sequence replay refused a mismatched add before writing its frames only for the step's
  keys: a carry of another width (or a carry where the buffer stores none) was refused after the
  frames entered the ring and ``_last_frame`` moved on, so the corrected retry of that step stored a
  window whose ``obs`` was the refused add's ``next_obs``.
* ``rlfunc.scale.sweep.check_runs_here`` made, reset and stepped the env once per distinct agent
  setting: a grid over a learning rate made the same (possibly pixel) env once per value.
* A full disk while a population member's log was written told the user to ``rlfunc resume`` the
  member's directory, which resume refuses (the population is what resumes).
"""

from __future__ import annotations

import errno
import importlib

import pytest
import torch
import yaml
from tensordict import TensorDict

from rlfunc.replay.frame_sequence import FrameSequenceReplay


def _step(t: int, done: bool = False) -> TensorDict:
    return TensorDict(
        {
            "obs": torch.full((1, 2), float(t)),
            "next_obs": torch.full((1, 2), float(t + 1)),
            "action": torch.zeros(1, dtype=torch.int64),
            "reward": torch.zeros(1),
            "terminated": torch.tensor([done]),
            "truncated": torch.tensor([False]),
        },
        batch_size=[1],
    )


def _carry(width: int) -> TensorDict:
    return TensorDict({"h": torch.zeros(1, width)}, batch_size=[1])


@pytest.mark.parametrize("bad", [_carry(5), None], ids=["carry-of-another-width", "no-carry"])
def test_a_frame_replay_refuses_a_mismatched_carry_before_writing_frames(bad):
    replay = FrameSequenceReplay(4, 2, 1, period=2, frame_capacity=16)
    replay.add(_step(0), _carry(3))
    written = replay.frames_written
    with pytest.raises(ValueError, match="carry"):
        replay.add(_step(1), bad)
    assert replay.frames_written == written  # was 3: the refused step's next_obs in the ring
    replay.add(_step(1), _carry(3))  # the same step again, corrected
    replay.add(_step(2, done=True), _carry(3))
    batch = replay.sample(16)
    obs, nxt, mask = batch["obs"][..., 0], batch["next_obs"][..., 0], batch["mask"]
    # every stored transition's next_obs is its obs + 1 (was: obs 2 -> next_obs 2 at step 1)
    assert torch.equal((nxt - obs)[mask], torch.ones(int(mask.sum())))


def test_check_runs_here_makes_each_distinct_env_once_across_agent_settings(tmp_path, monkeypatch):
    from rlfunc.runtime import trainer

    sweep_mod = importlib.import_module("rlfunc.scale.sweep")
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump({
        "algo": "sac",
        "env": {"id": "Pendulum-v1"},
        "train": {"total_steps": 400, "learning_starts": 100, "threads": 1, "tensorboard": False},
        "agent": {"hidden_sizes": [16, 16], "batch_size": 32},
    }))
    made = []
    real = trainer.make_env
    monkeypatch.setattr(trainer, "make_env", lambda *a, **k: made.append(a[0]) or real(*a, **k))
    plan = sweep_mod.plan_sweep(str(path), "0-1", ["agent.actor_lr=1e-3,3e-4,1e-4"])
    sweep_mod.check_runs_here(plan)
    assert made == ["Pendulum-v1"]  # was 3: one per learning rate
    made.clear()
    two = sweep_mod.plan_sweep(str(path), "0", ["env.kwargs.g=9.8,10.0", "agent.actor_lr=1e-3,3e-4"])
    sweep_mod.check_runs_here(two)
    assert len(made) == 2  # one per distinct env setting


def test_a_full_disk_in_a_population_member_names_the_population_to_resume(tmp_path):
    from rlfunc.runtime.checkpoint import save_checkpoint
    from rlfunc.runtime.cli import user_error_message

    run = tmp_path / "pop"
    for d in (run, run / "member-0"):
        d.mkdir(parents=True, exist_ok=True)
        (d / "config.yaml").write_text("algo: sac\n")
        save_checkpoint(d / "checkpoints", "step_000000100", TensorDict({"x": torch.zeros(1)}, []), {})
    msg = user_error_message(OSError(errno.ENOSPC, "No space left on device", str(run / "member-0" / "metrics.csv")))
    assert msg.endswith(f"continue with `rlfunc resume {run}`."), msg  # was: resume .../member-0, which is refused
    single = user_error_message(OSError(errno.ENOSPC, "No space left on device", str(run / "metrics.csv")))
    assert single.endswith(f"continue with `rlfunc resume {run}`."), single
