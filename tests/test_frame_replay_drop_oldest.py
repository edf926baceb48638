"""The uniform frame replay (pixel DRQN) evicts the windows whose frames its ring comes round to,
as the prioritized one does, instead of stopping the run (rlfunc.replay.frame_sequence).

Before, :class:`FrameSequenceReplay` refused the write in one sentence naming ``train.frame_capacity``
(a known limitation: short episodes outgrow the default ring). Now such windows are left out of the
uniform draws until a new window takes their storage row; while none is stored the draws are exactly
:class:`SequenceReplay`'s, and the replay still refuses where evicting would leave nothing to sample.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.replay.frame_sequence import FrameSequenceReplay
from rlfunc.replay.sequence import SequenceReplay

ROOT = Path(__file__).resolve().parents[1]


def _episodes(replays, steps: int, length: int, t0: int = 0) -> int:
    """One env, episodes of exactly ``length`` steps; step ``t`` holds frames ``t % 251`` and ``(t + 1) % 251``
    and its own number as the action (so a sampled frame shows whether it is the window's own)."""
    for t in range(t0, t0 + steps):
        step = TensorDict({"obs": torch.full((1, 2), t % 251, dtype=torch.uint8),
                           "next_obs": torch.full((1, 2), (t + 1) % 251, dtype=torch.uint8),
                           "action": torch.tensor([t]), "terminated": torch.tensor([(t - t0) % length == length - 1]),
                           "truncated": torch.tensor([False])}, [1])
        for r in replays:
            r.add(step)
    return t0 + steps


def _mixed(replay, steps: int, t0: int = 0) -> int:
    """Two envs: env 0 plays one long episode, env 1 episodes of one step. Observation planes are
    ``(env, step % 251)``. With a ring of 10 frames (3 frames a step) env 0's windows of 4 steps always
    lose their first frames before they are stored, env 1's are whole when stored and lost 3 steps later."""
    for t in range(t0, t0 + steps):
        obs = torch.tensor([[0, t % 251], [1, t % 251]], dtype=torch.uint8)
        nxt = torch.tensor([[0, (t + 1) % 251], [1, (t + 1) % 251]], dtype=torch.uint8)
        replay.add(TensorDict({"obs": obs, "next_obs": nxt, "action": torch.tensor([t, t]),
                               "who": torch.tensor([0, 1]), "terminated": torch.tensor([False, True]),
                               "truncated": torch.tensor([False, False])}, [2]))
    return t0 + steps


def _intact_rows(replay) -> set[int]:
    """Stored rows whose window's frames the ring still holds (first frame not yet overwritten): the
    windows that must be sampleable, computed from the storage, not from the eviction bookkeeping."""
    first = replay.storage["obs_frame"][0, : len(replay)].numpy()
    return set(np.flatnonzero(first >= replay.frames_written - replay.frame_capacity).tolist())


def _assert_own_frames(batch: TensorDict) -> None:
    valid = batch["mask"]
    assert valid.any()
    t = batch["action"][valid]
    assert torch.equal(batch["obs"][..., -1][valid], (t % 251).to(torch.uint8))  # the window's own frames
    assert torch.equal(batch["next_obs"][..., -1][valid], ((t + 1) % 251).to(torch.uint8))
    if "who" in batch.keys():
        assert torch.equal(batch["obs"][..., 0][valid], batch["who"][valid].to(torch.uint8))


def test_short_episodes_evict_uniform_windows_instead_of_stopping():
    """The case that stopped pixel DRQN (episodes of exactly sequence_length steps: sequence_length + 1
    frames per window, more than the default ring counts) now evicts the oldest windows."""
    replay = FrameSequenceReplay(50, 6, 1, period=2)  # default ring: 172 frames
    _episodes([replay], 600, 6)
    assert len(replay) == 50 and replay.windows_evicted > 0
    assert 0 < replay.windows_sampleable < 50
    assert replay.windows_sampleable == len(_intact_rows(replay))
    _assert_own_frames(replay.sample(256, torch.Generator().manual_seed(0)))


def test_evicted_windows_are_never_sampled_and_reused_rows_are_again():
    """Env 0's windows are stored evicted (their first frames were overwritten while pending), env 1's are
    evicted 3 steps after they were stored; the draws cover exactly the intact windows, and a row that held
    an evicted window is drawn again once a new window took it."""
    replay = FrameSequenceReplay(6, 4, 2, frame_capacity=10)
    gen = torch.Generator().manual_seed(0)
    t, ever_evicted, reused, stored_env0 = 0, set(), set(), False
    for _ in range(40):
        t = _mixed(replay, 1, t)
        if not len(replay):
            continue
        intact = _intact_rows(replay)
        assert replay.windows_sampleable == len(intact) > 0
        batch = replay.sample(128, gen)
        drawn = set(batch["window"][0].tolist())
        assert drawn == intact  # every sampleable window, and no evicted one (128 draws over at most 6 rows)
        _assert_own_frames(batch)
        assert set(batch["who"][0].tolist()) == {1}  # env 0's windows, stored evicted, never
        stored_env0 |= bool((replay.storage["who"][0, : len(replay)] == 0).any())
        reused |= drawn & ever_evicted
        ever_evicted |= set(range(len(replay))) - intact
    assert replay.windows_evicted > 10 and ever_evicted and reused and stored_env0
    assert replay.windows_evicted > replay.windows_added // 2  # every env-0 window, every env-1 one but the last few


def test_without_evictions_the_draws_are_sequence_replays():
    """Draw for draw: while no evicted window is stored (before any eviction, and again once new windows
    took every evicted row), the same batches as SequenceReplay fed the same steps, from the same
    generator state, leaving the generators in the same state."""
    frames, ref = FrameSequenceReplay(50, 6, 1, period=2), SequenceReplay(50, 6, 1, period=2)

    def same_draws(seed):
        g1, g2 = torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed)
        for _ in range(4):
            a, b = frames.sample(32, g1), ref.sample(32, g2)
            assert set(a.keys()) == set(b.keys())
            for k in a.keys(True, True):
                assert torch.equal(a[k], b[k]), k
        assert torch.equal(g1.get_state(), g2.get_state())

    t = _episodes([frames, ref], 300, 100)  # long episodes: the default ring holds every stored window
    assert frames.windows_evicted == 0 and len(frames) == 50
    same_draws(1)
    t = _episodes([frames, ref], 300, 6, t)  # short ones: the oldest windows are evicted
    evicted = frames.windows_evicted
    assert evicted > 0 and frames.windows_sampleable < 50
    t = _episodes([frames, ref], 400, 100, t)  # long again: new windows take every evicted row
    assert frames.windows_sampleable == len(frames) == 50 and frames.windows_evicted >= evicted
    same_draws(2)


def test_the_evicted_windows_survive_a_checkpoint_and_old_checkpoints_load(tmp_path):
    from rlfunc.runtime.checkpoint import load_checkpoint, save_checkpoint

    replay = FrameSequenceReplay(6, 4, 2, frame_capacity=10)
    _mixed(replay, 25)
    assert 0 < replay.windows_sampleable < len(replay)
    save_checkpoint(tmp_path, "step_000000025", TensorDict({"replay": replay.state_dict()}, []), {"env_step": 25})
    tensors, _ = load_checkpoint(tmp_path)
    copy = FrameSequenceReplay(6, 4, 2, frame_capacity=10)
    copy.load_state_dict(tensors["replay"])
    assert (copy.windows_sampleable, copy.windows_evicted) == (replay.windows_sampleable, replay.windows_evicted)
    a, b = copy.sample(64, torch.Generator().manual_seed(0)), replay.sample(64, torch.Generator().manual_seed(0))
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k
    _mixed(replay, 5, 25)  # both go on evicting alike
    _mixed(copy, 5, 25)
    assert (copy.windows_sampleable, copy.windows_evicted) == (replay.windows_sampleable, replay.windows_evicted)

    # a checkpoint from before evictions were counted (no 'windows_evicted'): nothing evicted, and it goes on
    old = FrameSequenceReplay(50, 6, 1, period=2)
    t = _episodes([old], 120, 100)
    state = old.state_dict().exclude("windows_evicted")
    again = FrameSequenceReplay(50, 6, 1, period=2)
    again.load_state_dict(state)
    assert again.windows_evicted == 0 and again.windows_sampleable == len(again) == len(old)
    a, b = again.sample(16, torch.Generator().manual_seed(3)), old.sample(16, torch.Generator().manual_seed(3))
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k
    _episodes([again], 300, 6, t)
    assert again.windows_evicted > 0 and 0 < again.windows_sampleable < len(again)


def test_a_small_ring_whose_new_windows_keep_their_frames_runs_on_sampling_only_those():
    """One env, episodes of 3 steps with windows of 2 at every step, a ring of 5 frames: the first window of
    an episode is evicted when the next episode starts, and later its second, but the same add stores a new
    window that keeps its frames, so something is always left to sample. (It refused at that write before
    counting the add's own windows; a write that leaves nothing is refused: tests/test_frame_replay_all_evicted.py.)"""
    replay = FrameSequenceReplay(8, 2, 1, period=1, frame_capacity=5)
    _episodes([replay], 20, 3)
    assert replay.windows_evicted > 0 and replay.windows_sampleable >= 1
    _assert_own_frames(replay.sample(64, torch.Generator().manual_seed(0)))


def test_an_outbox_refuses_to_drain_evicted_windows():
    """A distributed actor's outbox hands its windows to the learner with priorities scored from its own ring:
    an evicted window (ring too small between drains) is refused at the drain, as the write was before."""
    outbox = FrameSequenceReplay(6, 4, 2, frame_capacity=10)
    _mixed(outbox, 2)
    assert outbox.windows_evicted == 0
    outbox.drain()
    outbox.drain_frames()
    _mixed(outbox, 4, 2)  # 5 windows (the outbox holds 6) but 12 frames in a ring of 10
    assert outbox.windows_evicted > 0
    with pytest.raises(RuntimeError, match=r"^\d+ of the \d+ windows to drain were evicted because the frame ring of 10 "
                                           r"frames came round to their frames first; drain more often or raise the "
                                           r"frame_capacity\.$"):
        outbox.drain()


def test_pixel_drqn_with_a_small_frame_ring_trains_to_the_end(tmp_path):
    """A near-random DRQN on MinAtar Breakout (short episodes) with a ring below the default: the run stopped
    at its first eviction; now it trains to the end with fewer sampleable windows than stored, as saved."""
    pytest.importorskip("minatar")
    import rlfunc
    from rlfunc.runtime.checkpoint import load_checkpoint

    torch.set_num_threads(1)
    seen = {}

    class Watch:
        def on_end(self, run, reason):
            seen["replay"] = run.learner.replay

    overrides = {
        "train.total_steps": 3000, "train.learning_starts": 1000, "train.replay_size": 1000,
        "train.frame_capacity": 1200, "train.eval_every": 100000, "train.checkpoint_every": 100000,
        "train.progress": False, "train.compile": False, "train.tensorboard": False, "train.threads": 1,
        "agent.lstm_size": 8, "agent.batch_size": 2, "agent.train_every": 400, "agent.eps_end": 1.0,
    }
    res = rlfunc.train(str(ROOT / "configs/drqn/minatar_breakout.yaml"), overrides=overrides, run_dir=tmp_path / "run",
                       callbacks=[Watch()])
    assert res.env_steps == 3000 and res.stop_reason == "total_steps" and res.gradient_steps > 0
    replay = seen["replay"]
    assert type(replay) is FrameSequenceReplay and replay.windows_evicted > 0
    assert 0 < replay.windows_sampleable < len(replay) == 1000
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 3000
    saved = FrameSequenceReplay(replay.capacity, replay.sequence_length, replay.num_envs, period=replay.period,
                                frame_capacity=replay.frame_capacity, frame_stack=replay.frame_stack)
    saved.load_state_dict(tensors["replay"])
    assert (saved.windows_sampleable, saved.windows_evicted) == (replay.windows_sampleable, replay.windows_evicted)
