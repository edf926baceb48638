"""Sequence replay: episode-internal windows, padding masks, per-env assembly, stored state, checkpoints."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.replay.sequence import SequenceReplay

torch.set_num_threads(1)


def _code(env, episode, t):
    return 10_000 * env + 100 * episode + t + 1  # never 0, so padding (0) is distinguishable


def _feed(rb, lengths_per_env, steps, *, carry=True, truncate_every=None):
    """Drive ``rb`` with synthetic episodes: obs/carry encode (env, episode, t)."""
    n = rb.num_envs
    t = [0] * n
    ep = [0] * n
    for s in range(steps):
        codes, term, trunc = [], [], []
        for e in range(n):
            length = lengths_per_env[e][ep[e] % len(lengths_per_env[e])]
            codes.append(_code(e, ep[e], t[e]))
            end = t[e] == length - 1
            is_trunc = end and truncate_every is not None and ep[e] % truncate_every == 0
            term.append(end and not is_trunc)
            trunc.append(is_trunc)
        c = torch.tensor(codes, dtype=torch.float32)
        step = TensorDict(
            {
                "obs": c[:, None].repeat(1, 2),
                "action": torch.tensor(codes) % 3,
                "reward": c,
                "next_obs": c[:, None].repeat(1, 2) + 0.5,
                "terminated": torch.tensor(term),
                "truncated": torch.tensor(trunc),
            },
            batch_size=[n],
        )
        rb.add(step, carry=TensorDict({"h": c[:, None] * 2, "c": -c[:, None]}, [n]) if carry else None)
        for e in range(n):
            t[e] += 1
            if term[e] or trunc[e]:
                t[e] = 0
                ep[e] += 1


def _decode(x):
    x = int(x) - 1
    return x // 10_000, (x % 10_000) // 100, x % 100


def _check_windows(rb, storage_rows=None, flushed=False):
    st = rb.storage
    T, P = rb.sequence_length, rb.period
    rows = range(len(rb)) if storage_rows is None else storage_rows
    for r in rows:
        mask = st["mask"][:, r]
        n = int(mask.sum())
        assert n >= 1
        assert mask[:n].all() and not mask[n:].any(), "valid steps must be a prefix"
        obs = st["obs"][:, r, 0]
        assert (obs[n:] == 0).all() and (st["reward"][n:, r] == 0).all(), "padding must be zeros"
        ids = [_decode(v) for v in obs[:n]]
        env, episode, t0 = ids[0]
        assert t0 % P == 0 and int(rb._info["start"][r]) == t0 and int(rb._info["env"][r]) == env
        assert ids == [(env, episode, t0 + k) for k in range(n)], "a window never crosses an episode"
        if rb.stores_carry:
            assert float(rb._carry["h"][r, 0]) == 2 * float(obs[0])  # the carry before the first step
        if n < T and not flushed:  # a padded window ends its episode
            assert bool(st["terminated"][n - 1, r] | st["truncated"][n - 1, r])


@pytest.mark.parametrize("period", [1, 2, 3, 4])
def test_windows_stay_inside_episodes_and_cover_them(period):
    T = 4
    lengths = [[3, 7, 1, 4, 9], [5, 2, 8, 4]]
    rb = SequenceReplay(1000, T, num_envs=2, period=period)
    _feed(rb, lengths, steps=60, truncate_every=2)  # every other episode ends by truncation
    assert rb.storage["truncated"].any() and rb.storage["terminated"].any()
    _check_windows(rb)
    # every step of every finished episode is in some window (Acme ZERO_PAD coverage)
    st = rb.storage
    seen = {_decode(v) for v, m in zip(st["obs"][:, : len(rb), 0].flatten(), st["mask"][:, : len(rb)].flatten()) if m}
    for e in range(2):
        ep, total = 0, 0
        while True:
            length = lengths[e][ep % len(lengths[e])]
            if total + length > 60:
                break
            assert all((e, ep, t) in seen for t in range(length)), (e, ep)
            total += length
            ep += 1


def test_acme_zero_pad_layout():
    """T=3, P=2: length 4 -> [0,1,2], [2,3,pad]; length 3 -> [0,1,2]; length 2 -> [0,1,pad]."""
    rb = SequenceReplay(100, 3, num_envs=1, period=2)
    _feed(rb, [[4, 3, 2]], steps=9, carry=False)
    st = rb.storage
    got = [[_decode(v)[2] if m else None for v, m in zip(st["obs"][:, r, 0], st["mask"][:, r])] for r in range(len(rb))]
    assert got == [[0, 1, 2], [2, 3, None], [0, 1, 2], [0, 1, None]]
    assert not rb.stores_carry


def test_sample_is_time_major_with_mask_and_stored_carry():
    rb = SequenceReplay(200, 5, num_envs=3, period=5)
    _feed(rb, [[3, 6], [5], [12, 2]], steps=40)
    gen = torch.Generator().manual_seed(0)
    batch = rb.sample(16, generator=gen)
    assert batch.batch_size == torch.Size([5, 16])
    assert batch["obs"].shape == (5, 16, 2) and batch["mask"].dtype == torch.bool
    assert batch["init_carry", "h"].shape == (5, 16, 1)
    # per-window entries are constant along T, and the carry is the one before step 0
    assert (batch["window"] == batch["window"][0]).all()
    torch.testing.assert_close(batch["init_carry", "h"][0, :, 0], 2 * batch["obs"][0, :, 0])
    torch.testing.assert_close(batch["init_carry", "c"][0, :, 0], -batch["obs"][0, :, 0])
    # same generator seed -> same sample
    again = rb.sample(16, generator=torch.Generator().manual_seed(0))
    assert torch.equal(again["obs"], batch["obs"])


def test_ring_overwrites_oldest_windows():
    rb = SequenceReplay(5, 2, num_envs=1, period=2)
    _feed(rb, [[4]], steps=40, carry=False)  # 2 windows per episode, 20 windows in all
    assert len(rb) == 5
    _check_windows(rb)
    episodes = sorted({_decode(v)[1] for v in rb.storage["obs"][0, :, 0]})
    assert episodes == [7, 8, 9]  # only the newest windows survive


def test_env_ids_subset_skips_autoreset_rows():
    """Gymnasium next-step autoreset: the step after an episode end is not stored."""
    rb = SequenceReplay(50, 3, num_envs=2, period=3)
    rows = lambda vals, term: TensorDict(  # noqa: E731
        {
            "obs": torch.tensor(vals, dtype=torch.float32)[:, None],
            "terminated": torch.tensor(term),
            "truncated": torch.zeros(len(vals), dtype=torch.bool),
        },
        [len(vals)],
    )
    rb.add(rows([1.0, 11.0], [True, False]))  # env 0's episode ends after 1 step
    rb.add(rows([12.0], [False]), env_ids=[1])  # env 0 resets: no row for it
    rb.add(rows([2.0, 13.0], [False, True]), env_ids=torch.tensor([0, 1]))
    st = rb.storage
    windows = sorted(tuple(float(v) for v, m in zip(st["obs"][:, r, 0], st["mask"][:, r]) if m) for r in range(len(rb)))
    assert windows == [(1.0,), (11.0, 12.0, 13.0)]
    with pytest.raises(ValueError, match="env_ids"):
        rb.add(rows([1.0], [False]))
    with pytest.raises(ValueError, match="distinct"):
        rb.add(rows([1.0, 2.0], [False, False]), env_ids=[0, 0])


def test_flush_writes_open_tails():
    rb = SequenceReplay(50, 4, num_envs=2, period=4)
    _feed(rb, [[100], [100]], steps=6, carry=False)  # 1 full window per env, 2 pending steps each
    assert len(rb) == 2
    rb.flush([1])
    assert len(rb) == 3
    _check_windows(rb, flushed=True)
    assert int(rb.storage["mask"][:, 2].sum()) == 2
    rb.flush()
    assert len(rb) == 4


def test_state_dict_round_trip_continues_exactly():
    a = SequenceReplay(30, 4, num_envs=2, period=2)
    _feed(a, [[5, 3], [7]], steps=23)
    sd = a.state_dict()
    assert all(isinstance(v, torch.Tensor) for v in sd.values(include_nested=True, leaves_only=True))
    b = SequenceReplay(30, 4, num_envs=2, period=2)
    b.load_state_dict(sd)
    # continue both with the same stream: the pending episode parts must survive the checkpoint
    assert b._ep_len.tolist() == a._ep_len.tolist() and a._ep_len.any()
    for rb in (a, b):
        t = TensorDict(
            {"obs": torch.full((2, 2), 7.0), "action": torch.zeros(2, dtype=torch.long), "reward": torch.ones(2),
             "next_obs": torch.ones(2, 2), "terminated": torch.ones(2, dtype=torch.bool),
             "truncated": torch.zeros(2, dtype=torch.bool)},
            [2],
        )
        rb.add(t, carry=TensorDict({"h": torch.ones(2, 1), "c": torch.ones(2, 1)}, [2]))
    assert len(a) == len(b)
    sa = a.sample(8, torch.Generator().manual_seed(3))
    sb = b.sample(8, torch.Generator().manual_seed(3))
    assert (sa == sb).all()
    with pytest.raises(ValueError, match="period=2"):
        SequenceReplay(30, 4, num_envs=2, period=4).load_state_dict(sd)
    # a buffer that has not completed a window yet round-trips too
    c = SequenceReplay(30, 4, num_envs=2, period=2)
    _feed(c, [[9], [9]], steps=2)
    d = SequenceReplay(30, 4, num_envs=2, period=2)
    d.load_state_dict(c.state_dict())
    assert len(d) == 0 and d._ep_len.tolist() == [2, 2]
    _feed(c, [[9], [9]], steps=2)
    _feed(d, [[9], [9]], steps=2)
    assert len(c) == len(d) == 2 and (c.storage == d.storage).all()


def test_bad_input_errors():
    with pytest.raises(ValueError, match="period"):
        SequenceReplay(10, 4, period=5)
    rb = SequenceReplay(10, 2, num_envs=1)
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(2)
    with pytest.raises(KeyError, match="terminated"):
        rb.add(TensorDict({"obs": torch.zeros(1, 2)}, [1]))
    _feed(rb, [[3]], steps=1, carry=True)
    with pytest.raises(ValueError, match="carry"):
        _feed(rb, [[3]], steps=1, carry=False)


def test_assembles_from_a_real_vector_env():
    import gymnasium as gym

    import rlfunc.envs.memory  # noqa: F401  (registers rlfunc/CueMemory-v0)

    n = 3
    env = gym.vector.SyncVectorEnv([lambda: gym.make("rlfunc/CueMemory-v0", delay=2) for _ in range(n)])
    rb = SequenceReplay(100, 4, num_envs=n, period=1)
    obs, _ = env.reset(seed=0)
    skip = np.zeros(n, dtype=bool)
    rng = np.random.default_rng(0)
    for _ in range(30):
        action = rng.integers(2, size=n)
        next_obs, reward, term, trunc, _ = env.step(action)
        keep = np.flatnonzero(~skip)
        step = TensorDict(
            {
                "obs": torch.as_tensor(obs[keep]),
                "action": torch.as_tensor(action[keep]),
                "reward": torch.as_tensor(reward[keep], dtype=torch.float32),
                "next_obs": torch.as_tensor(next_obs[keep]),
                "terminated": torch.as_tensor(term[keep]),
                "truncated": torch.as_tensor(trunc[keep]),
            },
            [len(keep)],
        )
        rb.add(step, env_ids=keep)
        skip = term | trunc
        obs = next_obs
    st = rb.storage
    for r in range(len(rb)):
        m = st["mask"][:, r]
        assert int(m.sum()) == 3  # every episode is exactly delay + 1 = 3 steps
        assert st["obs"][0, r, :2].sum() == 1 and st["obs"][2, r, 2] == 1  # cue first, query last
        assert st["terminated"][2, r] and not st["terminated"][:2, r].any()
