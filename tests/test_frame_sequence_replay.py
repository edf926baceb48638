"""The frame sequence replays (rlfunc.replay.frame_sequence): the same windows and samples as the
copying sequence replays for the same data, each frame stored once, and the bytes per stored frame;
frame-stacked observations stored as one plane each with the same samples as whole stacks, the refusal
of observations that are not a plain frame stack, stacked checkpoints and distributed chunks."""

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


def test_short_episodes_evict_prioritized_and_uniform_windows():
    """Episodes of exactly sequence_length steps write sequence_length + 1 frames per window, more than the
    default ring counts (period + 1): both replays stop sampling the windows whose frames they are about to
    overwrite, instead of stopping the run (tests/test_frame_replay_drop_oldest.py has the uniform one's
    draws and its refusal where nothing would be left to sample)."""
    for replay in (PrioritizedFrameSequenceReplay(50, 6, 1, period=2), FrameSequenceReplay(50, 6, 1, period=2)):
        _short_episodes(replay, 600, 6)
        assert replay.windows_evicted > 0 and len(replay) == 50 and 0 < replay.windows_sampleable < 50
        batch = replay.sample(256, torch.Generator().manual_seed(0))
        valid = batch["mask"]
        assert torch.equal(batch["obs"][..., 0][valid], (batch["action"][valid] % 251).to(torch.uint8))  # intact frames
        assert torch.equal(batch["next_obs"][..., 0][valid], ((batch["action"][valid] + 1) % 251).to(torch.uint8))


def test_bytes_per_stored_frame_atari():
    """An 84x84 uint8 frame (single frames, as DRQN's flickering Pong; stacks: the stacked test below) is
    7,056 bytes; R2D2's windows (burn-in 40 + 80, period 40, 8 actors) add the frame numbers and step
    entries of each window (2.2 windows per 80 steps), and the ring's slack."""
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


# ---------------------------------------------- frame-stacked observations (FrameStackObservation)
def _feed_stacked(replays, steps=300, num_envs=3, seed=0, plane=(6, 6), stack=4, carry=False):
    """Random episodes of frame stacks as gymnasium's FrameStackObservation (padding_type="reset") makes
    them, each step's new plane random, into every replay (whole stacks into a frame_stack=1 replay, the
    old storage; planes into a stacked one); gymnasium's next-step autoreset rows skipped."""
    rng = np.random.default_rng(seed)
    reset = rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8)
    obs = np.repeat(reset, stack, axis=1)
    skip = np.zeros(num_envs, dtype=bool)
    for t in range(steps):
        nxt = np.concatenate([obs[:, 1:], rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8)], axis=1)
        reset = np.repeat(rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8), stack, axis=1)
        nxt = np.where(skip.reshape(-1, 1, 1, 1), reset, nxt)  # the autoreset row's next_obs: the reset stack
        end = rng.random(num_envs)
        term, trunc = end < 0.04, (end >= 0.04) & (end < 0.06)
        ids = np.flatnonzero(~skip)
        if ids.size:
            c = None
            if carry:
                c = TensorDict({"h": torch.full((num_envs, 2), float(t))}, batch_size=[num_envs])[torch.as_tensor(ids)]
            td = TensorDict({"obs": torch.as_tensor(obs[ids]), "next_obs": torch.as_tensor(nxt[ids]),
                             "action": torch.as_tensor(rng.integers(0, 4, num_envs))[ids],
                             "reward": torch.as_tensor(rng.standard_normal(num_envs), dtype=torch.float32)[ids],
                             "terminated": torch.as_tensor(term)[ids], "truncated": torch.as_tensor(trunc)[ids]},
                            batch_size=[ids.size])
            for r in replays:
                r.add(td.clone(), c, env_ids=ids)
        skip = (term | trunc) & ~skip  # the next row of an env that ended is gymnasium's reset step: not stored
        obs = nxt


@pytest.mark.parametrize("prioritized", [False, True])
def test_stacked_replay_samples_what_the_whole_observation_replay_samples(prioritized):
    """Stacks of 4 stored as one plane per step (plus one per episode start) sample, bit for bit, what the
    replay storing each whole stack samples for the same adds and seeds, after both rings wrapped."""
    if prioritized:
        old, new = (PrioritizedFrameSequenceReplay(30, 10, 3, period=5, frame_stack=k) for k in (1, 4))
    else:
        old, new = (FrameSequenceReplay(40, 8, 3, period=4, frame_stack=k) for k in (1, 4))
    _feed_stacked([old, new], steps=400, carry=prioritized)
    assert new.frames_written == old.frames_written > new.frame_capacity  # the same frames, the ring wrapped
    assert tuple(old.frames.shape[1:]) == (4, 6, 6) and tuple(new.frames.shape[1:]) == (6, 6)  # a plane each
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(5):
        a, b = new.sample(16, g2), old.sample(16, g1)
        assert set(a.keys()) == set(b.keys()) and a["obs"].shape[-3:] == (4, 6, 6)
        for key in a.keys(True, True):
            assert torch.equal(a[key], b[key]), key
        if prioritized:
            p = torch.rand(16, generator=torch.Generator().manual_seed(int(a["window"][0, 0])))
            new.update_priorities(a["window"][0], p)
            old.update_priorities(b["window"][0], p)
    assert new.nbytes() < old.nbytes() / 2


def test_stacks_at_episode_starts_repeat_the_reset_frame():
    """One env, episodes of 5 steps; step ``t``'s new plane is ``t + 1`` and its action ``t``: every sampled
    observation of step ``t`` (episode start ``s``) is the planes ``max(t - 3 + i, s)`` (i = 0..3), padding by the
    reset frame inside windows that start at an episode start or run over its end."""
    replay = FrameSequenceReplay(200, 6, 1, period=2, frame_stack=4)
    L, stack = 5, lambda j, s: torch.tensor([max(j - 3 + i, s) % 251 for i in range(4)], dtype=torch.uint8)
    for t in range(300):
        s = t - t % L
        replay.add(TensorDict({"obs": stack(t, s).reshape(1, 4, 1, 1).expand(1, 4, 2, 3).clone(),
                               "next_obs": stack(t + 1, s).reshape(1, 4, 1, 1).expand(1, 4, 2, 3).clone(),
                               "action": torch.tensor([t]), "terminated": torch.tensor([t % L == L - 1]),
                               "truncated": torch.tensor([False])}, [1]))
    batch = replay.sample(64, torch.Generator().manual_seed(0))
    seen = 0
    for t, o, n, m in zip(batch["action"].flatten().tolist(), batch["obs"].flatten(0, 1),
                          batch["next_obs"].flatten(0, 1), batch["mask"].flatten().tolist()):
        if m:
            s = t - t % L
            assert torch.equal(o[:, 0, 0], stack(t, s)) and torch.equal(n[:, 1, 2], stack(t + 1, s))
            seen += t == s
        else:
            assert not o.any() and not n.any()  # zeros on padded steps, as before
    assert seen > 0 and not batch["mask"].all()


@pytest.mark.parametrize("bad", ["not_a_stack", "zero_padding", "other_shape"])
def test_observations_that_are_not_a_plain_frame_stack_are_refused(bad):
    replay = FrameSequenceReplay(20, 4, 1, period=2, frame_stack=4)
    r, a, b = (torch.full((1, 1, 3, 3), v, dtype=torch.uint8) for v in (7, 8, 9))
    first, second = torch.cat([r] * 4, 1), torch.cat([r, r, r, a], 1)
    if bad == "zero_padding":  # gymnasium's padding_type="zero": the first observation is not its reset frame repeated
        z = torch.zeros_like(r)
        first, second = torch.cat([z, z, z, r], 1), torch.cat([z, z, r, a], 1)
    row = lambda o, n: TensorDict({"obs": o, "next_obs": n, "action": torch.tensor([0]),  # noqa: E731
                                   "terminated": torch.tensor([False]), "truncated": torch.tensor([False])}, [1])
    if bad == "other_shape":
        with pytest.raises(ValueError, match=r"^A replay of frame stacks of 4 takes observations \[n, 4, \.\.\.\]; "):
            replay.add(row(first[:, :3], second[:, :3]))
        return
    sentence = (r"^These observations are not a plain stack of 4 frames padded with the reset frame \(gymnasium's "
                r"FrameStackObservation with padding_type='reset'\): .*, so store whole observations with frame_stack=1\.$")
    if bad == "zero_padding":
        with pytest.raises(ValueError, match=sentence):
            replay.add(row(first, second))
        return
    replay.add(row(first, second))
    with pytest.raises(ValueError, match=sentence):  # planes that do not shift by one
        replay.add(row(second, torch.cat([r, r, b, a], 1)))
    assert replay.frames_written == 2  # nothing of the refused step was written
    replay.add(row(second, torch.cat([r, r, a, b], 1)))


def test_stacked_state_dict_round_trips_and_refuses_another_stack():
    frames = PrioritizedFrameSequenceReplay(20, 6, 2, period=3, frame_stack=4)
    env = {}
    _feed_stacked_continuing([frames], env, steps=120, seed=2)
    copy = PrioritizedFrameSequenceReplay(20, 6, 2, period=3, frame_stack=4)
    copy.load_state_dict(frames.state_dict())
    _feed_stacked_continuing([frames, copy], env, steps=30, seed=3)  # pending episodes continue in both
    a, b = copy.sample(8, torch.Generator().manual_seed(0)), frames.sample(8, torch.Generator().manual_seed(0))
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k
    with pytest.raises(ValueError, match=r"^Checkpointed replay stores observations as stacks of 4 frames .* "
                                         r"create the buffer with frame_stack=4\.$"):
        PrioritizedFrameSequenceReplay(20, 6, 2, period=3).load_state_dict(frames.state_dict())


def test_a_checkpoint_from_before_frame_stacks_still_loads():
    """Checkpoints of whole-observation replays written before frame_stack existed (no 'frame_stack' key) load."""
    frames = FrameSequenceReplay(30, 6, 2, period=3)
    _feed([frames], steps=100, num_envs=2)
    td = frames.state_dict()
    old = td.exclude("frame_stack")
    copy = FrameSequenceReplay(30, 6, 2, period=3)
    copy.load_state_dict(old)
    a, b = copy.sample(8, torch.Generator().manual_seed(1)), frames.sample(8, torch.Generator().manual_seed(1))
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k
    with pytest.raises(ValueError, match="stacks of 1 frames"):
        FrameSequenceReplay(30, 6, 2, period=3, frame_stack=4).load_state_dict(old)


def test_bytes_per_stored_step_of_stacked_atari():
    """R2D2's Atari observations are stacks of 4 84x84 planes (28,224 bytes); the replay stores one plane
    (7,056 bytes) and the number of the frame before it (8) per frame, so a 1M-step replay is ~7.4 GB."""
    capacity, T, N, P = 250, 120, 4, 40
    replay = PrioritizedFrameSequenceReplay(capacity, T, N, period=P, frame_stack=4)
    zeros = torch.zeros(N, 4, 84, 84, dtype=torch.uint8)
    steps = TensorDict(
        {"obs": zeros, "next_obs": zeros, "action": torch.zeros(N, dtype=torch.int64), "reward": torch.zeros(N),
         "terminated": torch.zeros(N, dtype=torch.bool), "truncated": torch.zeros(N, dtype=torch.bool)}, batch_size=[N])
    for _ in range(T):
        replay.add(steps)
    assert replay.frames.dtype == torch.uint8 and replay.frames[0].numel() == 7056  # one plane, not 28,224
    assert replay.nbytes() == frame_replay_bytes(capacity, T, N, P, 7056, frame_stack=4, window_extra=16)
    assert replay.frame_capacity == default_frame_capacity(capacity, T, N, P, 4) == capacity * (P + 1) + N * (3 * T + P + 8)
    # configs/r2d2/atari_pong.yaml: 25,000 windows of 120 steps, period 40, 16 envs. The ring holds
    # 1,031,528 frames of 7,064 bytes; the windows 120 x 31 + 32 bytes each: 7,381 bytes per stored step
    # (1M steps: 25,000 windows, one every 40 steps).
    big = frame_replay_bytes(25_000, T, 16, P, 7056, frame_stack=4, window_extra=16)
    assert big == 1_031_528 * 7064 + 25_000 * (120 * 31 + 32) + 16 * 120 * 30 == 7_380_571_392
    assert round(big / 1_000_000) == 7381
    whole = frame_replay_bytes(25_000, T, 16, P, 4 * 7056, window_extra=16)  # whole stacks (before): ~29 GB
    assert round(whole / 1e9) == 29


@pytest.mark.parametrize("stack", [1, 4])
def test_chunks_of_two_outboxes_are_renumbered_into_one_ring(stack):
    """Distributed actors' outboxes (rlfunc.scale.distributed) send their new frames once plus windows of
    frame numbers; the learner's ring interleaves them, and its samples gather what each outbox held. A
    window reading a frame of a chunk that never arrived is left out; a new outbox (a restarted actor)
    numbers from 0 again. Stacked observations (``stack`` 4): the chunks carry planes with the number of
    each one's previous frame, and the learner's stacks, rebuilt across chunks and interleaved actors, are
    the outboxes'; a window whose first stack's older planes were in the lost chunk is left out too."""
    learner = PrioritizedFrameSequenceReplay(300, 6, 1, period=2, frame_envs=4, frame_stack=stack)
    ring = outbox_frame_capacity(40, 6, 2, stack)
    new_outbox = lambda: FrameSequenceReplay(40, 6, 2, period=2, frame_capacity=ring, frame_stack=stack)  # noqa: E731
    outboxes = {"a": new_outbox(), "b": new_outbox()}
    expected, dropped, seed, lost = {}, 0, 0, None
    state = {}

    def ship(name, source, lose=False):
        nonlocal dropped, seed
        seed += 1
        outbox = outboxes[name]
        if stack == 1:
            _feed([outbox], steps=12, num_envs=2, seed=seed)
        else:  # episodes continue across chunks: feed from the env state kept per outbox
            _feed_stacked_continuing([outbox], state.setdefault(name, {}), steps=12, seed=seed)
        windows = outbox.drain()
        first, frames = outbox.drain_frames()
        if stack > 1:
            assert isinstance(frames, TensorDict) and tuple(frames["frames"].shape[1:]) == (6, 6)
        assert frames.shape[0] <= 2 * 24  # one frame (plane) per step, one more per episode start, each once
        if lose:
            return first, first + frames.shape[0]
        gathered = outbox.with_frames(windows["steps"])
        rows = learner.add_chunk(source, first, frames, windows, torch.rand(windows.batch_size[0]) + 0.5)
        steps = windows["steps"]
        lo, hi = lost if source == ("a", 1) and lost else (0, 0)
        numbers, valid = [steps["obs_frame"], steps["next_frame"]], [steps["mask"], steps["mask"]]
        if stack > 1:  # the older planes of each window's first stack
            numbers.append(outbox._stack_numbers(steps["obs_frame"][:, 0]))
            valid.append(torch.ones(numbers[-1].shape, dtype=torch.bool))
        numbers, valid = torch.cat(numbers, 1), torch.cat(valid, 1)
        keep = ~(valid & (numbers >= lo) & (numbers < hi)).any(1)  # reads no frame of the lost chunk
        assert rows.numel() == int(keep.sum())
        dropped += len(keep) - rows.numel()
        for r, i in zip(rows.tolist(), torch.nonzero(keep).flatten().tolist()):
            expected[r] = gathered[i]

    for _ in range(3):
        ship("a", ("a", 1))
        ship("b", ("b", 1))
    lost = ship("a", ("a", 1), lose=True)  # this chunk never reaches the learner
    for _ in range(2):
        ship("a", ("a", 1))
        ship("b", ("b", 1))
    outboxes["a"], state["a"] = new_outbox(), {}  # the actor restarted: new episodes, numbers from 0
    ship("a", ("a", 2))
    ship("b", ("b", 1))
    assert dropped > 0 and len(learner) == len(expected) > 60
    assert learner.frames_written < learner.frame_capacity  # nothing evicted: every stored window is intact
    sample = learner.sample(128, torch.Generator().manual_seed(0))
    if stack > 1:
        assert sample["obs"].shape[-3:] == (4, 6, 6)
    for j, r in enumerate(sample["window"][0].tolist()):
        for key in ("obs", "next_obs", "action", "reward", "mask"):
            assert torch.equal(sample[key][:, j], expected[r][key]), key


def _feed_stacked_continuing(replays, env: dict, steps: int, seed: int, num_envs: int = 2, plane=(6, 6)) -> None:
    """:func:`_feed_stacked` for replays whose episodes go on across calls (``env`` keeps their stacks)."""
    rng = np.random.default_rng(seed)
    if "obs" not in env:
        env["obs"] = np.repeat(rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8), 4, axis=1)
        env["skip"] = np.zeros(num_envs, dtype=bool)
    obs, skip = env["obs"], env["skip"]
    for _ in range(steps):
        nxt = np.concatenate([obs[:, 1:], rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8)], axis=1)
        reset = np.repeat(rng.integers(0, 256, (num_envs, 1, *plane), dtype=np.uint8), 4, axis=1)
        nxt = np.where(skip.reshape(-1, 1, 1, 1), reset, nxt)  # the autoreset row's next_obs: the reset stack
        end = rng.random(num_envs)
        term, trunc = end < 0.04, (end >= 0.04) & (end < 0.06)
        ids = np.flatnonzero(~skip)
        td = TensorDict({"obs": torch.as_tensor(obs[ids]), "next_obs": torch.as_tensor(nxt[ids]),
                         "action": torch.as_tensor(rng.integers(0, 4, num_envs))[ids],
                         "reward": torch.as_tensor(rng.standard_normal(num_envs), dtype=torch.float32)[ids],
                         "terminated": torch.as_tensor(term)[ids], "truncated": torch.as_tensor(trunc)[ids]},
                        batch_size=[ids.size])
        for replay in replays if ids.size else ():
            replay.add(td.clone(), env_ids=ids)
        skip = (term | trunc) & ~skip
        obs = nxt
    env["obs"], env["skip"] = obs, skip


def test_the_learners_frame_stack_is_the_envs_frame_stack_observation():
    """A pixel learner stores planes where env.wrappers ends in gymnasium's FrameStackObservation with its
    default reset padding and the observations are those stacks; whole observations otherwise."""
    import gymnasium as gym

    from rlfunc.runtime.config import build_config
    from rlfunc.runtime.learners.sequence import frame_stack_size
    from rlfunc.runtime.registry import get_algo

    stack = {"gymnasium.wrappers.FrameStackObservation": {"stack_size": 4}}
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    train = {"replay_size": 30, "learning_starts": 10, "total_steps": 100}
    def cfg(*wrappers):
        return build_config({"algo": "r2d2", "env": {"id": "CartPole-v1", "wrappers": list(wrappers)}, "train": train})

    assert frame_stack_size(cfg(stack), space) == 4
    assert frame_stack_size(cfg({"gymnasium.wrappers.FrameStackObservation": {"stack_size": 4, "padding_type": "zero"}}),
                            space) == 1
    assert frame_stack_size(cfg(stack), gym.spaces.Box(0, 255, (84, 84), np.uint8)) == 1
    assert frame_stack_size(cfg(), space) == 1
    raw = {"algo": "r2d2", "env": {"id": "CartPole-v1", "num_envs": 2, "wrappers": [stack]},
           "train": {"replay_size": 30, "learning_starts": 10, "total_steps": 100},
           "agent": {"encoder": "nature", "encoder_sizes": [], "lstm_size": 8, "sequence_length": 4,
                     "sequence_period": 2, "burn_in": 2, "head_sizes": [8]}}
    learner = get_algo("r2d2").make_learner(build_config(raw), space, gym.spaces.Discrete(6))
    assert learner.replay.frame_stack == 4
    obs = torch.zeros(2, 4, 84, 84, dtype=torch.uint8)
    rows = TensorDict({"obs": obs, "next_obs": obs, "action": torch.zeros(2), "reward": torch.ones(2),
                       "terminated": torch.zeros(2, dtype=torch.bool), "truncated": torch.zeros(2, dtype=torch.bool),
                       "env_id": torch.arange(2)}, batch_size=[2])
    learner.explore(obs.numpy(), 0, np.ones(2, dtype=bool))
    for _ in range(8):
        learner.observe(rows)
    assert tuple(learner.replay.frames.shape[1:]) == (84, 84)
    assert learner._replay_need().nbytes == learner.replay.nbytes()


def test_evicted_windows_are_not_counted_as_sampleable_and_a_resume_keeps_it():
    """The prioritized frame replay's evicted windows (frames about to be overwritten) stayed in its window
    count, so the learner's replay_windows metric showed windows that could no longer be sampled."""
    replay = PrioritizedFrameSequenceReplay(50, 6, 1, period=2)
    _short_episodes(replay, 600, 6)
    assert replay.windows_evicted > 0 and len(replay) == 50
    rows = (replay._cursor - replay._size + np.arange(replay._size)) % replay.capacity
    sampleable = replay.windows_sampleable
    assert 0 < sampleable < 50
    assert sampleable == int((replay._tree.probabilities(torch.as_tensor(rows)) > 0).sum())  # those with priority
    again = PrioritizedFrameSequenceReplay(50, 6, 1, period=2)
    again.load_state_dict(replay.state_dict())
    assert again.windows_sampleable == sampleable
    uniform = FrameSequenceReplay(50, 6, 1, period=2)
    _short_episodes(uniform, 100, 6)
    assert uniform.windows_sampleable == len(uniform)
