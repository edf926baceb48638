"""Neither frame replay may hold only evicted windows (rlfunc.replay.frame_sequence).

The prioritized replay (pixel R2D2) used to refuse a write only where the ring came round to every stored
window at once, so a few adds could evict them one by one and leave an all-zero sum-tree: its CPU
``sample`` refused, but the accelerator branch skips that check (it would need a host sync) and drew
evicted or empty rows with non-finite weights. The uniform replay (pixel DRQN) refused too early: before the
same add stored new intact windows. Both now decide at the write, on the host, counting the windows the
add itself stores.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

import rlfunc.replay.prioritized as prioritized
from rlfunc.replay.frame_sequence import _EVICTED, FrameSequenceReplay, PrioritizedFrameSequenceReplay

MESSAGE = (r"^The frame ring of 4 frames would overwrite a frame a stored window reads; "
           r"use a frame_capacity of at least \d+ \(train\.frame_capacity\)\.$")


def _add(replay, t: int, envs: list[int]) -> None:
    """Env 0 plays one long episode, env 1 episodes of one step; planes are ``(env, step)``."""
    obs = torch.tensor([[e, t] for e in envs], dtype=torch.uint8)
    replay.add(TensorDict({"obs": obs, "next_obs": obs + 1, "action": torch.tensor([t] * len(envs)),
                           "terminated": torch.tensor([e == 1 for e in envs]),
                           "truncated": torch.zeros(len(envs), dtype=torch.bool)}, [len(envs)]), env_ids=envs)


def _evict_one_by_one(replay) -> None:
    """Env 1's one-step window, then env 0 alone: its first window is stored evicted (env 1's frames came
    between), and the next step's frames would overwrite env 1's window, the last one sampleable."""
    _add(replay, 0, [0, 1])
    _add(replay, 1, [0])
    assert len(replay) == 2 and replay.windows_sampleable == 1
    _add(replay, 2, [0])


@pytest.mark.parametrize("cls", [PrioritizedFrameSequenceReplay, FrameSequenceReplay])
def test_evicting_the_last_sampleable_window_is_refused_at_the_write(cls):
    replay = cls(8, 2, 2, period=2, frame_capacity=4)
    with pytest.raises(RuntimeError, match=MESSAGE):
        _evict_one_by_one(replay)
    assert replay.windows_sampleable == 1  # refused before anything was evicted or written


def test_prioritized_never_leaves_an_all_zero_tree_for_the_accelerator_branch(monkeypatch):
    """The non-CPU branch of PrioritizedSequenceReplay.sample draws without check_priority_total: with that
    check off (as there), every drawn window must still be a stored, intact one with a finite weight."""
    replay = PrioritizedFrameSequenceReplay(8, 2, 2, period=2, frame_capacity=4)
    with pytest.raises(RuntimeError, match=MESSAGE):
        _evict_one_by_one(replay)
    assert float(replay.tree.total()) > 0
    monkeypatch.setattr(prioritized, "check_priority_total", lambda totals: None)
    batch = replay.sample(32, torch.Generator().manual_seed(0))
    rows = batch["window"][0].numpy()
    assert (rows < len(replay)).all() and (replay._first_frame[rows] != _EVICTED).all()
    assert torch.isfinite(batch["weight"]).all()


def _episodes(replay, steps: int, length: int) -> None:
    for t in range(steps):
        replay.add(TensorDict({"obs": torch.full((1, 2), t, dtype=torch.uint8),
                               "next_obs": torch.full((1, 2), t + 1, dtype=torch.uint8),
                               "action": torch.tensor([t]), "terminated": torch.tensor([t % length == length - 1]),
                               "truncated": torch.tensor([False])}, [1]))
        if len(replay):
            assert replay.windows_sampleable >= 1


@pytest.mark.parametrize("cls", [FrameSequenceReplay, PrioritizedFrameSequenceReplay])
def test_a_write_whose_own_windows_stay_sampleable_is_not_refused(cls):
    """Episodes of 3 steps, windows of 2 at every step, a ring of 5 frames: an add evicts the last sampleable
    stored window but stores a whole one itself. The uniform replay refused there (it counted only the stored
    windows); both go on now, sampling only windows with their own frames."""
    replay = cls(8, 2, 1, period=1, frame_capacity=5)
    _episodes(replay, 20, 3)
    assert replay.windows_evicted > 0
    batch = replay.sample(64, torch.Generator().manual_seed(0))
    obs, nxt, mask = batch["obs"][..., 0].long(), batch["next_obs"][..., 0].long(), batch["mask"]
    assert torch.equal(nxt[mask], obs[mask] + 1)
    assert torch.equal(obs[0], batch["action"][0])  # each window's own frames
