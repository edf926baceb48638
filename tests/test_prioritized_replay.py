"""Prioritized sequence replay: priorities and importance weights, sequence layout, stored state, checkpoints."""

import pytest
import torch
from tensordict import TensorDict

from rlfunc.core.returns import sequence_priorities
from rlfunc.replay.prioritized import PrioritizedSequenceReplay, importance_weights
from rlfunc.replay.sequence import SequenceReplay

torch.set_num_threads(1)


def _code(env, episode, t):
    return 10_000 * env + 100 * episode + t + 1  # never 0: padding is distinguishable


def _feed(rb, lengths, steps, start=0):
    """Env e runs episodes of lengths[e] steps (the last of each truncated when e is odd)."""
    n = rb.num_envs
    for s in range(start, start + steps):
        codes, term, trunc = [], [], []
        for e in range(n):
            t, ep = s % lengths[e], s // lengths[e]
            codes.append(_code(e, ep, t))
            end = t == lengths[e] - 1
            term.append(end and e % 2 == 0)
            trunc.append(end and e % 2 == 1)
        c = torch.tensor(codes, dtype=torch.float32)
        step = TensorDict(
            {
                "obs": c[:, None],
                "action": torch.tensor(codes) % 3,
                "reward": c,
                "next_obs": c[:, None] + 0.5,
                "terminated": torch.tensor(term),
                "truncated": torch.tensor(trunc),
            },
            batch_size=[n],
        )
        # the actor's state before this step encodes the step itself
        carry = TensorDict({"h": c[:, None] * 2, "c": -c[:, None], "prev_action": torch.tensor(codes) % 5}, [n])
        rb.add(step, carry=carry)


def _replay(**kw):
    args = dict(capacity=64, sequence_length=6, num_envs=2, period=3)
    args.update(kw)
    return PrioritizedSequenceReplay(**args)


def test_importance_weights_on_known_probabilities():
    p = torch.tensor([0.1, 0.2, 0.4, 0.1], dtype=torch.float64)
    w = importance_weights(p, 10, 0.6)
    expected = torch.tensor([1.0, 2.0**-0.6, 4.0**-0.6, 1.0])  # (N P)^-0.6 / max
    torch.testing.assert_close(w, expected)
    assert w.dtype == torch.float32
    torch.testing.assert_close(importance_weights(p, 10, 0.0), torch.ones(4))
    with pytest.raises(ValueError, match=r"probabilities \[B\]"):
        importance_weights(p.view(2, 2), 10, 0.6)


def test_priorities_and_weights_from_a_known_td_matrix():
    rb = _replay(priority_exponent=0.5, importance_exponent=0.6)
    _feed(rb, [12, 12], 12)
    size = len(rb)
    assert size == 2 * 3  # starts 0, 3, 6 per env (windows of 6, period 3, episodes of 12)
    # new windows enter with the max priority so far (1.0): uniform at first
    torch.testing.assert_close(rb.tree.leaves[:size], torch.ones(size, dtype=torch.float64))
    td = torch.tensor([[1.0, -4.0, 0.0], [-3.0, 2.0, 8.0], [2.0, 100.0, -1.0]])  # [T=3, B=3]
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 1]], dtype=torch.bool)
    prio = sequence_priorities(td, mask)  # 0.9 max + 0.1 mean over valid steps
    torch.testing.assert_close(prio, torch.tensor([0.9 * 3 + 0.1 * 2.0, 0.9 * 4 + 0.1 * 3.0, 0.9 * 8 + 0.1 * 3.0]))
    rows = torch.tensor([0, 2, 5])
    rb.update_priorities(rows, prio)
    torch.testing.assert_close(rb.priorities(rows), prio.double())
    leaves = torch.ones(size, dtype=torch.float64)
    leaves[rows] = prio.double() ** 0.5
    torch.testing.assert_close(rb.tree.leaves[:size], leaves)
    assert float(rb.max_priority) == pytest.approx(float(prio.max()))
    batch = rb.sample(32, generator=torch.Generator().manual_seed(0))
    window = batch["window"][0]
    prob = leaves[window] / leaves.sum()
    torch.testing.assert_close(batch["probability"][0], prob)
    w = (size * prob) ** -0.6
    torch.testing.assert_close(batch["weight"][0], (w / w.max()).float())
    assert (batch["weight"] == batch["weight"][:1]).all()
    # a fresh window now enters with the largest priority seen (8.23 ** 0.5)
    _feed(rb, [12, 12], 3, start=12)
    new_rows = torch.arange(size, len(rb))
    torch.testing.assert_close(rb.tree.get(new_rows), torch.full((len(new_rows),), float(prio.max()) ** 0.5, dtype=torch.float64))


def test_sampling_follows_priorities_and_zero_is_never_sampled():
    rb = _replay(capacity=16, priority_exponent=1.0)
    _feed(rb, [12, 12], 12)
    n = len(rb)
    prio = torch.arange(n, dtype=torch.float64)  # row 0 -> priority 0
    rb.update_priorities(torch.arange(n), prio)
    g = torch.Generator().manual_seed(0)
    counts = torch.zeros(n)
    for _ in range(100):
        counts += torch.bincount(rb.sample(200, g)["window"][0], minlength=n)
    assert counts[0] == 0
    expected = prio[1:] / prio.sum() * counts.sum()
    chi2 = float(((counts[1:] - expected) ** 2 / expected).sum())
    assert chi2 < 20.5, chi2  # df = 4: 99.96% quantile


def test_windows_are_burn_in_plus_length_with_overlap_stored_state_and_masked_tail():
    """Sequences of 2 (burn-in) + 4 steps every 3 steps, inside one episode; tail zero-padded."""
    rb = _replay(capacity=64, sequence_length=6, period=3)
    _feed(rb, [7, 11], 22)
    batch = rb.sample(256, generator=torch.Generator().manual_seed(1))
    obs, mask = batch["obs"][..., 0], batch["mask"]
    seen = set()
    for b in range(batch.batch_size[1]):
        n = int(mask[:, b].sum())
        assert mask[:n, b].all() and not mask[n:, b].any()
        assert (obs[n:, b] == 0).all() and (batch["reward"][n:, b] == 0).all()
        codes = [int(x) - 1 for x in obs[:n, b]]
        env, ep, t0 = codes[0] // 10_000, (codes[0] % 10_000) // 100, codes[0] % 100
        assert codes == [_code(env, ep, t0 + k) - 1 for k in range(n)], "inside one episode"
        assert t0 % 3 == 0 and int(batch["episode_start"][0, b]) == t0
        # the stored state is the actor's state before the window's first step
        assert float(batch["init_carry", "h"][0, b, 0]) == 2 * float(obs[0, b])
        assert int(batch["init_carry", "prev_action"][0, b]) == (codes[0] + 1) % 5
        seen.add((env, ep, t0, n))
    # env 0: episodes of 7 -> windows at 0 (full) and 3 (4 valid + 2 padded), per episode
    assert (0, 0, 0, 6) in seen and (0, 0, 3, 4) in seen
    assert (1, 0, 3, 6) in seen and (1, 0, 6, 5) in seen  # env 1: length 11, truncated


def test_sample_equals_uniform_replay_gather_for_the_same_rows():
    rb = _replay()
    _feed(rb, [7, 9], 30)
    rb.update_priorities(torch.arange(len(rb)), torch.rand(len(rb), generator=torch.Generator().manual_seed(0)))
    fast = rb.sample(16, generator=torch.Generator().manual_seed(3))
    slow = SequenceReplay.sample(rb, 16, generator=torch.Generator().manual_seed(3))  # TensorDict indexing
    assert set(slow.keys(True, True)) <= set(fast.keys(True, True))
    for k in slow.keys(True, True):
        assert torch.equal(fast[k], slow[k]), k


def test_state_dict_round_trip_samples_and_continues_exactly():
    rb = _replay()
    _feed(rb, [7, 9], 25)
    rb.update_priorities(torch.tensor([1, 3]), torch.tensor([5.0, 0.0]))
    restored = _replay()
    restored.load_state_dict(rb.state_dict())
    torch.testing.assert_close(restored.tree.leaves, rb.tree.leaves)
    torch.testing.assert_close(restored.max_priority, rb.max_priority)
    for replay in (rb, restored):
        _feed(replay, [7, 9], 10, start=25)  # pending episode parts continue too
    assert len(restored) == len(rb)
    a = rb.sample(32, generator=torch.Generator().manual_seed(7))
    b = restored.sample(32, generator=torch.Generator().manual_seed(7))
    for k in a.keys(True, True):
        assert torch.equal(a[k], b[k]), k
    with pytest.raises(ValueError, match="priority_exponent=0.9"):
        _replay(priority_exponent=0.5).load_state_dict(rb.state_dict())
    with pytest.raises(ValueError, match="uniform SequenceReplay"):
        uniform = SequenceReplay(64, 6, num_envs=2, period=3)
        _replay().load_state_dict(uniform.state_dict())


def test_bad_input_errors():
    rb = _replay()
    with pytest.raises(RuntimeError, match="empty"):
        rb.sample(4)
    _feed(rb, [7, 9], 10)
    with pytest.raises(ValueError, match="non-negative"):
        rb.update_priorities(torch.tensor([0]), torch.tensor([-1.0]))
    with pytest.raises(ValueError, match="non-negative"):
        rb.update_priorities(torch.tensor([0]), torch.tensor([float("nan")]))
    with pytest.raises(IndexError, match="stored rows"):
        rb.update_priorities(torch.tensor([len(rb)]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="one priority per index"):
        rb.update_priorities(torch.tensor([0, 1]), torch.tensor([1.0]))
    with pytest.raises(ValueError, match="initial_priority"):
        _replay(initial_priority=0.0)
    fixed = _replay(initial_priority=2.0, priority_exponent=1.0)
    _feed(fixed, [7, 9], 10)
    fixed.update_priorities(torch.tensor([0]), torch.tensor([50.0]))
    _feed(fixed, [7, 9], 10, start=10)
    assert float(fixed.tree.get(torch.tensor([len(fixed) - 1]))) == 2.0  # constant, not the max
