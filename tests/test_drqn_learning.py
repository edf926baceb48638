"""DRQN learning tests on the cue-recall memory task (rlfunc/CueMemory-v0).

One of two cues is shown only in the first observation; ``delay`` blank steps
later the action must match it (+1, else -1). A greedy memory-less policy sees
the same query observation whatever the cue, so it is right exactly as often as
the cue it always picks is drawn: 50% (mean return 0). Success rate here is
``(mean_return + 1) / 2`` over 100 greedy evaluation episodes.

* DRQN (cue inside its 6-step training window) reaches >= 90% within 2k env steps
  (the issue asks for 8k);
* the feed-forward DQN control stays at chance;
* DRQN with the cue *further back than its window* (delay 9, window 6) stays
  at chance: zero-state windows never contain both cue and query, so nothing
  ties the reward to the cue (FIDELITY.md: stored state does not extend memory
  past the trained window either), while the same delay inside a 10-step window
  is learned.
"""

from __future__ import annotations

import rlfunc

CUE = "configs/drqn/cue_memory.yaml"
COMMON = {"train.progress": False, "train.checkpoint_every": 100_000, "train.threads": 1}


def _success(result) -> list[float]:
    return [(r + 1.0) / 2.0 for _, r in result.evals]


def test_drqn_recalls_cue_within_window(tmp_path):
    res = rlfunc.train(CUE, overrides=COMMON, run_dir=tmp_path / "drqn")
    success = _success(res)
    assert res.env_steps == 2000 <= 8000
    assert success[-1] >= 0.9, f"DRQN success by eval step: {list(zip([s for s, _ in res.evals], success))}"


def test_feed_forward_dqn_stays_at_chance(tmp_path):
    res = rlfunc.train("configs/dqn/cue_memory.yaml", overrides=COMMON, run_dir=tmp_path / "dqn")
    success = _success(res)
    assert max(success) <= 0.65, f"a memory-less agent cannot beat chance (50%), got {success}"


def test_drqn_at_chance_when_cue_lies_beyond_the_window(tmp_path):
    res = rlfunc.train(CUE, overrides={**COMMON, "env.kwargs": {"delay": 9}}, run_dir=tmp_path / "far")
    success = _success(res)
    assert max(success) <= 0.75, f"cue 9 steps back, window 6: expected chance, got {success}"
    # control: the same delay inside a 10-step window is learned (the window, not the delay, is the limit)
    res = rlfunc.train(
        CUE,
        overrides={**COMMON, "env.kwargs": {"delay": 9}, "agent.sequence_length": 10, "train.total_steps": 1500},
        run_dir=tmp_path / "near",
    )
    assert _success(res)[-1] >= 0.9, f"delay 9 inside a 10-step window should be learned, got {_success(res)}"
