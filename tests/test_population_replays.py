"""Replays batched over population members (#24 §5): member k's row of one [P, ...] storage
samples exactly what a single replay fed member k's data samples with member k's generator."""

import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.envs.pixels import FrameStack
from rlfunc.replay.pixels import PixelReplay
from rlfunc.replay.population_pixels import PopulationPixelReplay
from rlfunc.replay.population_sequence import PopulationPrioritizedSequenceReplay, PopulationSequenceReplay
from rlfunc.replay.population_sumtree import PopulationSumTree
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.replay.sumtree import SumTree
from rlfunc.runtime.checkpoint import load_checkpoint, save_checkpoint

torch.set_num_threads(1)

P = 3


def _equal_td(a: TensorDict, b: TensorDict) -> None:
    keys_a = set(a.keys(include_nested=True, leaves_only=True))
    assert keys_a == set(b.keys(include_nested=True, leaves_only=True))
    for key in keys_a:
        assert a[key].dtype == b[key].dtype, key
        assert torch.equal(a[key], b[key]), key


def _no_pickle(td: TensorDict, tmp_path) -> TensorDict:
    """Through the trainer's checkpoint format (raw tensor files, no pickle) and back."""
    save_checkpoint(tmp_path, "step_000000001", TensorDict({"replay": td}, batch_size=[]), {})
    return load_checkpoint(tmp_path / "step_000000001")[0]["replay"]


# ------------------------------------------------------------------ sum-tree
@pytest.mark.parametrize("backend", ["numpy", "torch"])  # torch: the path on accelerators
def test_population_sumtree_rows_are_single_trees(backend):
    C = 1000
    tree = PopulationSumTree(P, C, backend=backend)
    singles = [SumTree(C) for _ in range(P)]  # numpy backend on CPU, as the single replay uses
    g = torch.Generator().manual_seed(0)
    for _ in range(40):
        k = int(torch.randint(P, (1,), generator=g))
        n = int(torch.randint(1, 40, (1,), generator=g))
        idx = torch.randint(0, C, (n,), generator=g)
        v = torch.rand(n, generator=g, dtype=torch.float64) * 3
        singles[k].update(idx, v)
        tree.update(torch.tensor(k), idx, v)
    rows, vals = torch.randint(0, C, (P, 64), generator=g), torch.rand(P, 64, generator=g, dtype=torch.float64)
    tree.update_rows(rows, vals)  # every member's batch in one call, as update_priorities writes them
    for k in range(P):
        singles[k].update(rows[k], vals[k])
        assert torch.equal(tree.leaves[k], singles[k].leaves)
        assert torch.equal(tree._top[k], singles[k]._top) and torch.equal(tree._prefix[k], singles[k]._prefix)
    got = tree.sample(512, [torch.Generator().manual_seed(k) for k in range(P)])
    want = torch.stack([singles[k].sample(512, torch.Generator().manual_seed(k)) for k in range(P)])
    assert torch.equal(got, want)
    assert torch.equal(tree.probabilities(got), torch.stack([singles[k].probabilities(want[k]) for k in range(P)]))
    for k in range(P):  # one member alone, through its row (SumTree's interface)
        row = tree.row(k)
        assert torch.equal(row.sample(256, torch.Generator().manual_seed(9)), singles[k].sample(256, torch.Generator().manual_seed(9)))
        assert torch.equal(row.probabilities(want[k]), singles[k].probabilities(want[k])) and row.total() == singles[k].total()
    u = torch.rand(P, 300, generator=g, dtype=torch.float64) * 1.01 * tree.total().unsqueeze(1)  # some past the total
    assert torch.equal(tree.find(u), torch.stack([singles[k].find(u[k]) for k in range(P)]))
    other = PopulationSumTree(P, C, backend="torch" if backend == "numpy" else "numpy")
    other.load_state_dict(tree.state_dict())
    assert torch.equal(other._top, tree._top) and torch.equal(other.find(u), tree.find(u))


# -------------------------------------------------------------- data streams
class _Stream:
    """Member k's env data: 2 envs, random episode lengths, terminations and truncations,
    autoreset rows skipped with env_ids, an occasional flush."""

    def __init__(self, k: int, num_envs: int = 2) -> None:
        self.rng = np.random.default_rng(100 + k)
        self.k, self.n = k, num_envs
        self.t = np.zeros(num_envs, dtype=np.int64)
        self.length = self.rng.integers(1, 14, num_envs)
        self.code = 0

    def next(self):
        """One call's (step, carry, env_ids, flush) for this member."""
        n = self.n
        envs = np.arange(n)
        if self.rng.random() < 0.15:  # one env's autoreset row is not stored
            envs = envs[self.rng.random(n) < 0.5]
        m = len(envs)
        codes = torch.arange(self.code, self.code + m, dtype=torch.float32) + 1 + 1000 * self.k
        self.code += m
        end = self.t[envs] + 1 >= self.length[envs]
        trunc = end & (self.rng.random(m) < 0.4)
        term = end & ~trunc
        self.t[envs] += 1
        for e in envs[end]:
            self.t[e] = 0
            self.length[e] = self.rng.integers(1, 14)
        step = TensorDict(
            {
                "obs": torch.stack([codes, -codes], 1),
                "action": codes.long() % 4,
                "reward": codes * 0.5,
                "terminated": torch.as_tensor(term),
                "truncated": torch.as_tensor(trunc),
            },
            batch_size=[m],
        )
        carry = TensorDict({"h": codes[:, None] * 2, "c": TensorDict({"x": -codes[:, None, None].expand(m, 2, 1)}, [m])}, [m])
        flush = self.rng.random() < 0.03
        if flush:
            self.t[:] = 0
        return step, carry, envs.tolist(), flush


def _feed(pop, singles, streams, calls: int) -> None:
    for _ in range(calls):
        for k in range(P):
            step, carry, envs, flush = streams[k].next()
            pop.add(k, step.clone(), carry=carry.clone(), env_ids=envs)
            singles[k].add(step, carry=carry, env_ids=envs)
            if flush:
                pop.flush(k)
                singles[k].flush()


def _gens(seed: int):
    return [torch.Generator().manual_seed(seed + k) for k in range(P)]


SEQ = dict(capacity=24, sequence_length=5, num_envs=2, period=2)


def test_sequence_population_rows_equal_single_replays():
    pop = PopulationSequenceReplay(**SEQ, members=P)
    singles = [SequenceReplay(**SEQ) for _ in range(P)]
    streams = [_Stream(k) for k in range(P)]
    for rnd in range(6):
        _feed(pop, singles, streams, 25)
        for k in range(P):
            assert [s.windows_added for s in singles] == pop.windows_added
            _equal_td(pop.storage[k], singles[k].storage)
        batch = pop.sample(16, _gens(10 * rnd))
        assert batch.batch_size == torch.Size([P, 5, 16])
        for k in range(P):
            _equal_td(batch[k], singles[k].sample(16, _gens(10 * rnd)[k]))
    assert min(s.windows_added for s in singles) > 2 * SEQ["capacity"], "the rings wrapped"
    assert len({s.windows_added for s in singles}) > 1, "members hold different amounts of data"
    # one storage [P, T, capacity] for all members, the members' buffers are views of it
    assert pop.storage.batch_size == torch.Size([P, 5, 24])
    assert pop.member(1).storage["obs"].data_ptr() == pop.storage["obs"][1].data_ptr()
    assert pop.nbytes() > 0


def test_sequence_population_state_dict_round_trip(tmp_path):
    pop = PopulationSequenceReplay(**SEQ, members=P)
    singles = [SequenceReplay(**SEQ) for _ in range(P)]
    streams = [_Stream(k) for k in range(P)]
    _feed(pop, singles, streams, 40)
    again = PopulationSequenceReplay(**SEQ, members=P)
    again.load_state_dict(_no_pickle(pop.state_dict(), tmp_path))
    _equal_td(again.sample(8, _gens(3)), pop.sample(8, _gens(3)))
    _feed(again, singles, streams, 30)  # pending episode parts continue exactly
    for k in range(P):
        _equal_td(again.sample(8, _gens(5))[k], singles[k].sample(8, _gens(5)[k]))
    with pytest.raises(ValueError, match="members=3 but this buffer has 2"):
        PopulationSequenceReplay(**SEQ, members=2).load_state_dict(pop.state_dict())


def test_sequence_population_errors():
    pop = PopulationSequenceReplay(**SEQ, members=P)
    with pytest.raises(RuntimeError, match="every member"):
        pop.sample(4, _gens(0))
    with pytest.raises(IndexError, match=r"member must be in \[0, 3\)"):
        pop.add(3, _Stream(0).next()[0])
    with pytest.raises(ValueError, match="one generator per member"):
        pop.sample(4, _gens(0)[:2])


PRIO = dict(SEQ, priority_exponent=0.9, importance_exponent=0.6)


@pytest.mark.parametrize("initial_priority", [None, 2.0])
def test_prioritized_population_rows_equal_single_replays(initial_priority, tmp_path):
    pop = PopulationPrioritizedSequenceReplay(**PRIO, members=P, initial_priority=initial_priority)
    singles = [PrioritizedSequenceReplay(**PRIO, initial_priority=initial_priority) for _ in range(P)]
    streams = [_Stream(k) for k in range(P)]
    for rnd in range(8):
        _feed(pop, singles, streams, 20)
        batch = pop.sample(16, _gens(10 * rnd))
        for k in range(P):
            one = singles[k].sample(16, _gens(10 * rnd)[k])
            _equal_td(batch[k], one)
            assert torch.equal(pop.tree.leaves[k], singles[k].tree.leaves)
        # R2D2 writes the learner's priorities back for the windows it sampled
        windows = batch["window"][:, 0]
        prio = ((windows * 7919 + 13 * rnd) % 101).float() / 20  # a window drawn twice gets one priority; some 0
        pop.update_priorities(windows, prio)
        for k in range(P):
            singles[k].update_priorities(windows[k], prio[k])
            assert torch.equal(pop.tree.leaves[k], singles[k].tree.leaves)
        assert torch.equal(pop.max_priority, torch.stack([s.max_priority for s in singles]))
        # a member alone (a masked update): its row samples and reprioritizes as its single replay
        k = rnd % P
        alone = pop.member(k).sample(16, _gens(500 + rnd)[k])
        _equal_td(alone, singles[k].sample(16, _gens(500 + rnd)[k]))
        prio_k = ((alone["window"][0] * 31 + rnd) % 17).float()
        pop.member(k).update_priorities(alone["window"][0], prio_k)
        singles[k].update_priorities(alone["window"][0], prio_k)
        assert torch.equal(pop.tree.leaves[k], singles[k].tree.leaves)
        assert torch.equal(pop.max_priority, torch.stack([s.max_priority for s in singles]))
    w = batch["weight"][:, 0]
    assert torch.equal(w.amax(1), torch.ones(P)) and w.dtype == torch.float32
    assert pop.storage.batch_size == torch.Size([P, 5, 24]) and pop.tree.leaves.shape == (P, 24)
    # round trip, then both continue identically
    again = PopulationPrioritizedSequenceReplay(**PRIO, members=P, initial_priority=initial_priority)
    again.load_state_dict(_no_pickle(pop.state_dict(), tmp_path))
    _equal_td(again.sample(16, _gens(1)), pop.sample(16, _gens(1)))
    _feed(again, singles, streams, 20)
    for k in range(P):
        _equal_td(again.sample(16, _gens(2))[k], singles[k].sample(16, _gens(2)[k]))


def test_prioritized_population_update_errors():
    pop = PopulationPrioritizedSequenceReplay(**PRIO, members=P)
    _feed(pop, [SequenceReplay(**SEQ) for _ in range(P)], [_Stream(k) for k in range(P)], 30)
    rows = torch.zeros(P, 4, dtype=torch.int64)
    with pytest.raises(ValueError, match=r"shape \[3, B\]"):
        pop.update_priorities(rows[0], torch.ones(4))
    with pytest.raises(ValueError, match="finite and non-negative"):
        pop.update_priorities(rows, -torch.ones(P, 4))
    with pytest.raises(IndexError, match="stored rows"):
        pop.update_priorities(rows + 10_000, torch.ones(P, 4))
    with pytest.raises(ValueError, match="uniform PopulationSequenceReplay"):
        pop.load_state_dict(PopulationSequenceReplay(**SEQ, members=P).state_dict())


# ------------------------------------------------------------------ pixels
PIX = dict(capacity=40, obs_shape=(6, 3, 3), action_dim=2, frame_stack=3, nstep=3, gamma=0.9)


class _PixelStream:
    """Member k's pixel env: random frames, episode lengths 1-12, terminations, truncations, flushes."""

    def __init__(self, k: int) -> None:
        self.rng = np.random.default_rng(200 + k)
        self.fs = FrameStack(3)
        self.obs = None

    def feed(self, replays) -> None:
        """One step of this env, added to each of ``replays`` (callables taking add's arguments);
        True when the episode is cut here without an end flag (then flush the replays)."""
        rng = self.rng
        if self.obs is None:
            self.obs = self.fs.reset(rng.integers(0, 256, (2, 3, 3), dtype=np.uint8))
            self.left = int(rng.integers(1, 13))
        nxt = self.fs.push(rng.integers(0, 256, (2, 3, 3), dtype=np.uint8))
        action = rng.standard_normal(2).astype(np.float32)
        reward = float(rng.standard_normal())
        self.left -= 1
        end = self.left == 0
        term = end and rng.random() < 0.5
        trunc = end and not term
        for add in replays:
            add(self.obs, action, reward, nxt, term, trunc)
        flush = not end and rng.random() < 0.02  # e.g. a resumed collector resets its env
        self.obs = None if end or flush else nxt
        return flush


def test_pixel_population_rows_equal_single_replays(tmp_path):
    pop = PopulationPixelReplay(**PIX, members=P)
    singles = [PixelReplay(**PIX) for _ in range(P)]
    streams = [_PixelStream(k) for k in range(P)]
    for rnd in range(5):
        for _ in range(30):
            for k in range(P):
                if streams[k].feed([lambda *a, k=k: pop.add(k, *a), singles[k].add]):
                    pop.flush(k)
                    singles[k].flush()
        batch = pop.sample(32, _gens(10 * rnd))
        assert batch.batch_size == torch.Size([P, 32])
        for k in range(P):
            _equal_td(batch[k], singles[k].sample(32, _gens(10 * rnd)[k]))
            assert np.array_equal(pop.member(k).valid, singles[k].valid)
            assert len(pop.member(k)) == len(singles[k])
    assert min(s._written for s in singles) > 3 * PIX["capacity"], "the rings wrapped"
    assert len({len(s) for s in singles}) > 1, "members hold different numbers of valid starts"
    assert any(bool((batch["discount"][k] == 0).any()) for k in range(P)), "terminations inside windows"
    # one storage [P, capacity, ...]
    assert pop.storage["frames"].shape == (P, 40, 2, 3, 3) and pop.storage["frames"].dtype == torch.uint8
    assert pop.nbytes() == sum(s.nbytes() for s in singles)
    # checkpoint round trip, then both continue identically
    again = PopulationPixelReplay(**PIX, members=P)
    again.load_state_dict(_no_pickle(pop.state_dict(), tmp_path))
    _equal_td(again.sample(16, _gens(1)), pop.sample(16, _gens(1)))
    for _ in range(25):
        for k in range(P):
            if streams[k].feed([lambda *a, k=k: again.add(k, *a), singles[k].add]):
                again.flush(k)
                singles[k].flush()
    for k in range(P):
        _equal_td(again.sample(16, _gens(2))[k], singles[k].sample(16, _gens(2)[k]))


def test_pixel_population_errors():
    pop = PopulationPixelReplay(**PIX, members=P)
    with pytest.raises(RuntimeError, match=r"Members \[0, 1, 2\]"):
        pop.sample(4, _gens(0))
    with pytest.raises(ValueError, match="one generator per member"):
        pop.sample(4, _gens(0)[:1])
    with pytest.raises(IndexError, match="member must be"):
        pop.flush(5)
    with pytest.raises(ValueError, match="members=3 but this buffer has 2"):
        PopulationPixelReplay(**PIX, members=2).load_state_dict(pop.state_dict())


# ------------------------------------------------------------------ uniform transitions (REDQ, SAC, RLPD)
def _transitions(g: torch.Generator, n: int) -> TensorDict:
    return TensorDict({"obs": torch.randn(n, 3, generator=g), "reward": torch.randn(n, generator=g),
                       "terminated": (torch.rand(n, generator=g) < 0.1).float()}, batch_size=[n])


def test_uniform_population_rows_equal_single_replays_with_queued_writes(tmp_path, monkeypatch):
    """Member k's row of a PopulationReplay samples what a UniformReplay fed k's rows samples, while
    its writes are queued and flushed in batches: adds of 1-7 rows, rings that wrap onto their own
    queued rows (capacity 13), a queue bound crossed (FLUSH_ROWS 20), reads in between, and the
    checkpoint round trip."""
    from rlfunc.replay.population import PopulationReplay
    from rlfunc.replay.uniform import UniformReplay

    monkeypatch.setattr(PopulationReplay, "FLUSH_ROWS", 20)
    pop, singles = PopulationReplay(P, 13), [UniformReplay(13) for _ in range(P)]
    data = [torch.Generator().manual_seed(k) for k in range(P)]
    sizes = torch.Generator().manual_seed(99)
    for rnd in range(12):
        for _ in range(3):
            for k in range(P):
                rows = _transitions(data[k], int(torch.randint(1, 8, (1,), generator=sizes)))
                pop.member(k).add(rows)
                singles[k].add(rows)
                rows["obs"].zero_()  # the caller reuses its buffers: the queued copy is not affected
        assert [len(pop.member(k)) for k in range(P)] == [len(s) for s in singles]
        if rnd % 3 == 0:
            batch = pop.sample(9, _gens(rnd))
            for k in range(P):
                _equal_td(batch[k], singles[k].sample(9, _gens(rnd)[k]))
        elif rnd % 3 == 1:
            k = rnd % P
            _equal_td(pop.member(k).sample(5, torch.Generator().manual_seed(rnd)),
                      singles[k].sample(5, torch.Generator().manual_seed(rnd)))
    for k in range(P):
        _equal_td(pop.storage[k], singles[k].storage)
    restored = PopulationReplay(P, 13)
    restored.load_state_dict(_no_pickle(pop.state_dict(), tmp_path))
    _equal_td(restored.sample(9, _gens(7)), pop.sample(9, _gens(7)))
    for k in range(P):
        _equal_td(pop.member(k).state_dict(), singles[k].state_dict())


def test_uniform_population_writes_one_copy_per_key_for_every_member(monkeypatch):
    """P members' rows of two env steps reach the storage in one indexed write, at the next read."""
    from rlfunc.replay.population import PopulationReplay

    pop = PopulationReplay(P, 50)
    g = torch.Generator().manual_seed(0)
    for k in range(P):
        pop.member(k).add(_transitions(g, 1))
    writes = []
    original = TensorDict.__setitem__
    monkeypatch.setattr(TensorDict, "__setitem__", lambda self, key, value: (writes.append(key), original(self, key, value))[1])
    for k in range(P):
        pop.member(k).add(_transitions(g, 1))
    assert writes == []  # queued
    pop.sample(4, _gens(0))
    (members, slots), = writes  # both env steps' rows, every member's, in one write
    assert members.tolist() == [0, 1, 2, 0, 1, 2] and slots.tolist() == [0, 0, 0, 1, 1, 1]


def test_uniform_population_add_rows_equals_each_members_add(monkeypatch):
    """add_rows (every member's rows of an env step at once, member-major, some members with none, one
    with more rows than its ring holds) stores what each member's add of its own rows stores, queued
    as one write."""
    from rlfunc.replay.population import PopulationReplay

    monkeypatch.setattr(PopulationReplay, "FLUSH_ROWS", 30)
    together, one_by_one = PopulationReplay(P, 11), PopulationReplay(P, 11)
    g, sizes = torch.Generator().manual_seed(1), torch.Generator().manual_seed(2)
    for step in range(25):
        counts = [int(c) for c in torch.randint(0, 4, (P,), generator=sizes)]
        if step == 7:
            counts[1] = 14  # more than the capacity: only its newest 11 rows are kept
        rows = _transitions(g, sum(counts))
        together.add_rows(counts, rows)
        start = 0
        for k, c in enumerate(counts):
            one_by_one.member(k).add(rows[start : start + c])
            start += c
        assert together.sizes == one_by_one.sizes and together.cursors == one_by_one.cursors
        if step % 5 == 4:
            _equal_td(together.sample(6, _gens(step)), one_by_one.sample(6, _gens(step)))
    _equal_td(together.storage, one_by_one.storage)
    with pytest.raises(ValueError, match="counts summing to the 3 rows"):
        together.add_rows([1, 1, 0], _transitions(g, 3))
