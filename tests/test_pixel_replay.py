"""PixelReplay: frames stored once; frame stacks and n-step targets assembled at sample time
equal what the env's own frame stack and the official n-step sum give; windows never cross
an episode end; the ring drops starts whose frames were overwritten; checkpoints round-trip."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlfunc.envs.pixels import FrameStack
from rlfunc.replay.pixels import PixelReplay

torch.set_num_threads(1)

GAMMA, N, S = 0.9, 3, 3


def _frame(e: int, t: int) -> np.ndarray:
    f = np.zeros((3, 2, 2), np.uint8)
    f[0], f[1], f[2] = e, t, 7
    return f


def _fill(replay: PixelReplay, episodes: list[tuple[int, str]]):
    """Add episodes (length, 'term'|'trunc'); returns {(e, t): stacked obs} and rewards r(e, t)."""
    stacks, rewards = {}, {}
    for e, (length, end) in enumerate(episodes):
        fs = FrameStack(S)
        obs = fs.reset(_frame(e, 0))
        stacks[(e, 0)] = obs
        for t in range(length):
            nxt = fs.push(_frame(e, t + 1))
            stacks[(e, t + 1)] = nxt
            r = float(e * 100 + t)
            rewards[(e, t)] = r
            last = t == length - 1
            replay.add(obs, np.array([e, t], np.float32), r, nxt, last and end == "term", last and end == "trunc")
            obs = nxt
    return stacks, rewards


def _expected(episodes, e: int, t: int, stacks, rewards):
    length, end = episodes[e]
    m = min(N, length - t) if end == "term" else N
    reward = sum(GAMMA**i * rewards[(e, t + i)] for i in range(m))
    terminal = end == "term" and t + m == length
    discount = 0.0 if terminal else GAMMA**N
    return stacks[(e, t)], reward, discount, stacks[(e, t + m)]


def _check_samples(replay, episodes, stacks, rewards, live_from_episode: int = 0, draws: int = 600):
    batch = replay.sample(draws, generator=torch.Generator().manual_seed(0))
    seen = set()
    for i in range(draws):
        obs = batch["obs"][i].numpy()
        e, t = int(obs[-3, 0, 0]), int(obs[-2, 0, 0])
        seen.add((e, t))
        assert e >= live_from_episode
        length, end = episodes[e]
        if end == "trunc":
            assert t + N <= length, f"start {(e, t)} has no full window before a truncation"
        else:
            assert t < length
        want_obs, want_r, want_d, want_next = _expected(episodes, e, t, stacks, rewards)
        np.testing.assert_array_equal(obs, want_obs)
        np.testing.assert_array_equal(batch["next_obs"][i].numpy(), want_next)
        assert float(batch["reward"][i]) == pytest.approx(want_r, rel=1e-6)
        assert float(batch["discount"][i]) == pytest.approx(want_d, rel=1e-6)
        np.testing.assert_array_equal(batch["action"][i].numpy(), [e, t])
        assert int(batch["next_obs"][i][-3, 0, 0]) == e  # never across an episode end
    return seen


EPISODES = [(5, "trunc"), (2, "term"), (7, "term"), (1, "trunc"), (4, "trunc"), (3, "term"), (6, "trunc")]


def test_nstep_windows_never_cross_an_episode_end_and_stacks_match_the_env():
    replay = PixelReplay(1000, (3 * S, 2, 2), 2, frame_stack=S, nstep=N, gamma=GAMMA)
    stacks, rewards = _fill(replay, EPISODES)
    valid = {
        (e, t)
        for e, (length, end) in enumerate(EPISODES)
        for t in range(length)
        if (end == "term" or t + N <= length)
    }
    assert len(replay) == len(valid)
    seen = _check_samples(replay, EPISODES, stacks, rewards)
    assert seen == valid  # every valid start is drawn, nothing else
    assert replay.frames_stored == sum(length + 1 for length, _ in EPISODES)


def test_first_stacks_of_an_episode_repeat_the_first_frame():
    replay = PixelReplay(100, (3 * S, 2, 2), 2, frame_stack=S, nstep=1, gamma=GAMMA)
    _fill(replay, [(4, "trunc")])
    g = torch.tensor([0, 1, 2, 3])
    obs = replay.gather(g)["obs"]
    ts = obs[:, [1, 4, 7], 0, 0]  # the t channel of each stacked frame, oldest first
    assert ts.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 2], [1, 2, 3]]


def test_ring_overwrite_drops_starts_with_lost_frames():
    replay = PixelReplay(17, (3 * S, 2, 2), 2, frame_stack=S, nstep=N, gamma=GAMMA)
    episodes = EPISODES * 2
    stacks, rewards = _fill(replay, episodes)
    # all slots hold frames of the last episodes; samples must be exact and from live frames only
    total = sum(length + 1 for length, _ in episodes)
    oldest = total - 17
    starts, acc = [], 0
    for e, (length, _) in enumerate(episodes):
        starts.append(acc)
        acc += length + 1
    live_from = next(e for e, s0 in enumerate(starts) if s0 + episodes[e][0] >= oldest)
    _check_samples(replay, episodes, stacks, rewards, live_from_episode=live_from)
    valid = 0
    for e, (length, end) in enumerate(episodes):
        for t in range(length):
            ok = end == "term" or t + N <= length
            ok = ok and max(starts[e] + t - (S - 1), starts[e]) >= oldest
            valid += ok
    assert len(replay) == valid


def test_state_dict_round_trip_and_bytes_per_transition():
    replay = PixelReplay(50, (3 * S, 2, 2), 2, frame_stack=S, nstep=N, gamma=GAMMA)
    stacks, rewards = _fill(replay, EPISODES[:4])
    other = PixelReplay(50, (3 * S, 2, 2), 2, frame_stack=S, nstep=N, gamma=GAMMA)
    other.load_state_dict(replay.state_dict())
    g = torch.Generator().manual_seed(5)
    a = replay.sample(32, generator=g)
    g = torch.Generator().manual_seed(5)
    b = other.sample(32, generator=g)
    assert (a == b).all()
    assert len(other) == len(replay)
    big = PixelReplay(1000, (9, 84, 84), 6)
    frame = 3 * 84 * 84
    assert frame <= big.nbytes() / 1000 < frame + 64  # about one frame per slot
    with pytest.raises(ValueError, match="uint8"):
        replay.add(np.zeros((9, 2, 2), np.float32), [0, 0], 0.0, np.zeros((9, 2, 2), np.float32), False, False)


def test_empty_replay_error():
    replay = PixelReplay(10, (3 * S, 2, 2), 1, frame_stack=S, nstep=N)
    with pytest.raises(RuntimeError, match="n-step"):
        replay.sample(4)
