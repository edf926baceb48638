"""The frame sequence replays (rlfunc.replay.frame_sequence): the same windows and samples as the
copying sequence replays for the same data, each frame stored once, and the bytes per stored frame."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.replay.frame_sequence import (
    FrameSequenceReplay,
    PrioritizedFrameSequenceReplay,
    default_frame_capacity,
    frame_replay_bytes,
    outbox_frame_capacity,
)
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay


def _feed(replays, steps=300, num_envs=3, seed=0, frame=(2, 5, 5), carry=False, skip_resets=True):
    """The same random episodes (random lengths, terminations and truncations, gymnasium's next-step
    autoreset rows skipped) into every replay; uint8 frames for the frame replays, float for the others."""
    rng = np.random.default_rng(seed)
    obs = rng.integers(0, 256, (num_envs, *frame), dtype=np.uint8)
    skip = np.zeros(num_envs, dtype=bool)
    for t in range(steps):
        nxt = rng.integers(0, 256, (num_envs, *frame), dtype=np.uint8)
        end = rng.random(num_envs)
        term, trunc = end < 0.04, (end >= 0.04) & (end < 0.06)
        ids = np.flatnonzero(~skip) if skip_resets else np.arange(num_envs)
        if ids.size:
            step = {
                "action": torch.as_tensor(rng.integers(0, 4, num_envs))[ids],
                "reward": torch.as_tensor(rng.standard_normal(num_envs), dtype=torch.float32)[ids],
                "terminated": torch.as_tensor(term)[ids],
                "truncated": torch.as_tensor(trunc)[ids],
            }
            c = None
            if carry:
                c = TensorDict({"h": torch.full((num_envs, 2), float(t))}, batch_size=[num_envs])[torch.as_tensor(ids)]
            for r in replays:
                pixels = isinstance(r, FrameSequenceReplay | PrioritizedFrameSequenceReplay)
                o, n = torch.as_tensor(obs[ids]), torch.as_tensor(nxt[ids])
                td = TensorDict({**step, "obs": o if pixels else o.float(), "next_obs": n if pixels else n.float()},
                                batch_size=[ids.size])
                r.add(td, c, env_ids=ids)
        done = term | trunc
        skip = done.copy()  # the next row of an env that ended is gymnasium's reset step: not stored
        obs = np.where(done.reshape(-1, 1, 1, 1), rng.integers(0, 256, obs.shape, dtype=np.uint8), nxt)


def _assert_same(a: TensorDict, b: TensorDict):
    assert set(a.keys()) == set(b.keys())
    for k in a.keys(True, True):
        x, y = a[k], b[k]
        if k in ("obs", "next_obs"):
            assert x.dtype == torch.uint8
            x = x.float()
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=str(k))


@pytest.mark.parametrize("period", [1, 4])
def test_uniform_samples_equal_sequence_replay(period):
    ref = SequenceReplay(40, 8, 3, period=period)  # 40 windows: the storage wraps several times
    frames = FrameSequenceReplay(40, 8, 3, period=period)
    _feed([ref, frames], steps=400)
    assert frames.frames_written > frames.frame_capacity  # the frame ring wrapped too
    assert len(ref) == len(frames) == 40 and ref.windows_added == frames.windows_added
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(5):
        _assert_same(frames.sample(16, g2), ref.sample(16, g1))


def test_prioritized_samples_equal_prioritized_replay_with_carry():
    ref = PrioritizedSequenceReplay(30, 10, 3, period=5)
    frames = PrioritizedFrameSequenceReplay(30, 10, 3, period=5)
    _feed([ref, frames], steps=300, carry=True)
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    for _ in range(4):
        a, b = frames.sample(8, g2), ref.sample(8, g1)
        _assert_same(a, b)
        p = torch.rand(8, generator=torch.Generator().manual_seed(int(a["window"][0, 0])))
        frames.update_priorities(a["window"][0], p)
        ref.update_priorities(b["window"][0], p)


def test_state_dict_round_trip_samples_the_same():
    frames = PrioritizedFrameSequenceReplay(20, 6, 2, period=3)
    _feed([frames], steps=120, num_envs=2)
    copy = PrioritizedFrameSequenceReplay(20, 6, 2, period=3)
    copy.load_state_dict(frames.state_dict())
    _feed([frames, copy], steps=30, num_envs=2, seed=1)  # pending episodes continue in both
    a, b = copy.sample(8, torch.Generator().manual_seed(0)), frames.sample(8, torch.Generator().manual_seed(0))
    assert set(a.keys()) == set(b.keys())
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k


def test_a_too_small_frame_ring_is_refused():
    frames = FrameSequenceReplay(40, 8, 3, period=4, frame_capacity=30)
    with pytest.raises(RuntimeError, match="frame_capacity of at least"):
        _feed([frames], steps=200)


def _short_episodes(replay, steps: int, length: int) -> None:
    """One env, episodes of exactly ``length`` steps; step ``t`` holds frames ``t % 251`` and ``(t + 1) % 251``
    and its own number as the action."""
    for t in range(steps):
        replay.add(TensorDict({"obs": torch.full((1, 2), t % 251, dtype=torch.uint8),
                               "next_obs": torch.full((1, 2), (t + 1) % 251, dtype=torch.uint8),
                               "action": torch.tensor([t]), "terminated": torch.tensor([t % length == length - 1]),
                               "truncated": torch.tensor([False])}, [1]))


def test_short_episodes_evict_prioritized_windows_and_refuse_uniform_ones():
    """Episodes of exactly sequence_length steps write sequence_length + 1 frames per window, more than the
    default ring counts (period + 1): the prioritized replay stops sampling the windows whose frames it
    is about to overwrite; the uniform one says in one sentence how large a ring would do."""
    prioritized = PrioritizedFrameSequenceReplay(50, 6, 1, period=2)
    _short_episodes(prioritized, 600, 6)
    assert prioritized.windows_evicted > 0 and len(prioritized) == 50
    batch = prioritized.sample(256, torch.Generator().manual_seed(0))
    valid = batch["mask"]
    assert torch.equal(batch["obs"][..., 0][valid], (batch["action"][valid] % 251).to(torch.uint8))  # intact frames
    assert torch.equal(batch["next_obs"][..., 0][valid], ((batch["action"][valid] + 1) % 251).to(torch.uint8))
    uniform = FrameSequenceReplay(50, 6, 1, period=2)
    with pytest.raises(RuntimeError, match=r"^The frame ring of 172 frames would overwrite a frame a stored window reads; "
                                           r"episodes shorter than .* hold up to 7 frames per window, so use a "
                                           r"frame_capacity of at least 376\.$"):
        _short_episodes(uniform, 600, 6)


def test_bytes_per_stored_frame_atari():
    """An 84x84 uint8 frame is 7,056 bytes; R2D2's windows (burn-in 40 + 80, period 40, 8 actors) add the
    frame numbers and step entries of each window (2.2 windows per 80 steps), and the ring's slack."""
    capacity, T, N, P = 250, 120, 8, 40
    replay = PrioritizedFrameSequenceReplay(capacity, T, N, period=P)
    steps = TensorDict(
        {"obs": torch.zeros(N, 84, 84, dtype=torch.uint8), "next_obs": torch.zeros(N, 84, 84, dtype=torch.uint8),
         "action": torch.zeros(N, dtype=torch.int64), "reward": torch.zeros(N), "terminated": torch.zeros(N, dtype=torch.bool),
         "truncated": torch.zeros(N, dtype=torch.bool)}, batch_size=[N])
    for _ in range(T):
        replay.add(steps)
    assert replay.frames.dtype == torch.uint8 and replay.frames.element_size() * replay.frames[0].numel() == 7056
    expected = frame_replay_bytes(capacity, T, N, P, 7056, window_extra=16)
    assert replay.nbytes() == expected
    assert default_frame_capacity(capacity, T, N, P) == capacity * (P + 1) + N * (3 * T + P + 2)
    # A 1M-frame Atari replay: 25,000 windows of R2D2's cover 1M env steps (one frame each). The ring
    # holds 1,028,216 frames (one per step, one per window for episode starts, the slack of 8 actors);
    # each window adds 120 steps x 31 bytes + 32: 7,348,920,896 bytes, 7,349 per stored frame (7,056 of
    # them the frame), where copying float32 obs and next_obs into each window would take ~169,000.
    big = frame_replay_bytes(25_000, T, N, P, 7056, window_extra=16)
    assert big == 1_028_216 * 7056 + 25_000 * (120 * 31 + 32) + 8 * 120 * 30 == 7_348_920_896
    assert round(big / 1_000_000) == 7349


@pytest.mark.parametrize("algo", ["drqn", "r2d2"])
def test_learner_memory_need_is_the_replays_real_bytes(algo):
    """The sequence learners size a pixel agent's replay (rlfunc.runtime.memory) with the frame replay's
    bytes, which is what it holds once frames are written: uint8 frames, each once."""
    import gymnasium as gym

    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.registry import get_algo

    raw = {"algo": algo, "env": {"id": "MinAtar/Breakout-v0", "num_envs": 2},
           "train": {"replay_size": 30, "learning_starts": 10, "total_steps": 100},
           "agent": {"encoder": "minatar", "encoder_sizes": [], "lstm_size": 8, "sequence_length": 4,
                     "sequence_period": 2, **({"burn_in": 2, "head_sizes": [8]} if algo == "r2d2" else {})}}
    obs_space, act_space = gym.spaces.Box(0, 1, (10, 10, 4), bool), gym.spaces.Discrete(6)
    learner = get_algo(algo).make_learner(build_config(raw), obs_space, act_space)
    n = 2
    rows = TensorDict({"obs": torch.ones(n, 10, 10, 4, dtype=torch.bool), "next_obs": torch.zeros(n, 10, 10, 4, dtype=torch.bool),
                       "action": torch.zeros(n), "reward": torch.ones(n), "terminated": torch.zeros(n, dtype=torch.bool),
                       "truncated": torch.zeros(n, dtype=torch.bool), "env_id": torch.arange(n)}, batch_size=[n])
    learner.explore(rows["obs"].numpy(), 0, np.ones(n, dtype=bool))
    for _ in range(8):
        learner.observe(rows)
    replay = learner.replay
    assert isinstance(replay, FrameSequenceReplay | PrioritizedFrameSequenceReplay)
    assert replay.frames.dtype == torch.uint8 and replay.frames[0].numel() == 400  # a MinAtar frame: 400 bytes
    assert learner._replay_need().nbytes == replay.nbytes()


def test_chunks_of_two_outboxes_are_renumbered_into_one_ring():
    """Distributed actors' outboxes (rlfunc.scale.distributed) send their new frames once plus windows of
    frame numbers; the learner's ring interleaves them, and its samples gather what each outbox held. A
    window reading a frame of a chunk that never arrived is left out; a new outbox (a restarted actor)
    numbers from 0 again."""
    learner = PrioritizedFrameSequenceReplay(300, 6, 1, period=2, frame_envs=4)
    ring = outbox_frame_capacity(40, 6, 2)
    outboxes = {"a": FrameSequenceReplay(40, 6, 2, period=2, frame_capacity=ring),
                "b": FrameSequenceReplay(40, 6, 2, period=2, frame_capacity=ring)}
    expected, dropped, seed = {}, 0, 0

    def ship(name, source, lose=False):
        nonlocal dropped, seed
        seed += 1
        outbox = outboxes[name]
        _feed([outbox], steps=12, num_envs=2, seed=seed)
        windows = outbox.drain()
        first, frames = outbox.drain_frames()
        assert frames.shape[0] <= 2 * 24  # one frame per step, one more per episode start, each once
        if lose:
            return first, first + frames.shape[0]
        gathered = outbox.with_frames(windows["steps"])
        rows = learner.add_chunk(source, first, frames, windows, torch.rand(windows.batch_size[0]) + 0.5)
        steps = windows["steps"]
        lo, hi = lost if source == ("a", 1) and lost else (0, 0)
        numbers = torch.cat([steps["obs_frame"], steps["next_frame"]], 1)
        valid = torch.cat([steps["mask"], steps["mask"]], 1)
        keep = ~(valid & (numbers >= lo) & (numbers < hi)).any(1)  # reads no frame of the lost chunk
        assert rows.numel() == int(keep.sum())
        dropped += len(keep) - rows.numel()
        for r, i in zip(rows.tolist(), torch.nonzero(keep).flatten().tolist()):
            expected[r] = gathered[i]

    lost = None
    for _ in range(3):
        ship("a", ("a", 1))
        ship("b", ("b", 1))
    lost = ship("a", ("a", 1), lose=True)  # this chunk never reaches the learner
    for _ in range(2):
        ship("a", ("a", 1))
        ship("b", ("b", 1))
    outboxes["a"] = FrameSequenceReplay(40, 6, 2, period=2, frame_capacity=ring)  # the actor restarted
    ship("a", ("a", 2))
    ship("b", ("b", 1))
    assert dropped > 0 and len(learner) == len(expected) > 60
    assert learner.frames_written < learner.frame_capacity  # nothing evicted: every stored window is intact
    sample = learner.sample(128, torch.Generator().manual_seed(0))
    for j, r in enumerate(sample["window"][0].tolist()):
        for key in ("obs", "next_obs", "action", "reward", "mask"):
            assert torch.equal(sample[key][:, j], expected[r][key]), key
