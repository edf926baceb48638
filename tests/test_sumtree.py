"""Vectorised sum-tree: exact prefix search, sampling frequencies, updates, checkpoints."""

import pytest
import torch

from rlfunc.replay.sumtree import SumTree

torch.set_num_threads(1)

BACKENDS = ["numpy", "torch"]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("capacity,fanout", [(1, None), (7, 3), (1000, None), (1000, 7), (12_345, None), (50, 64)])
def test_find_equals_brute_force_prefix_search(backend, capacity, fanout):
    g = torch.Generator().manual_seed(capacity)
    tree = SumTree(capacity, fanout=fanout, backend=backend)
    p = torch.randint(0, 4, (capacity,), generator=g).double()  # integers: sums are exact
    p[0] = 1.0
    tree.set_leaves(p)
    cum = p.cumsum(0)
    u = torch.randint(0, int(cum[-1]), (4000,), generator=g).double() + 0.5
    u = torch.cat([u, torch.tensor([0.0, float(cum[-1]) - 1e-9, float(cum[-1]), float(cum[-1]) * 2])])
    got = tree.find(u)
    expected = torch.searchsorted(cum, u, right=True).clamp(max=int(torch.nonzero(p).max()))
    assert torch.equal(got, expected)
    assert (p[got] > 0).all(), "a zero-priority leaf is never returned"
    torch.testing.assert_close(tree.total(), cum[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_sampling_frequencies_match_priorities(backend):
    """Chi-square goodness of fit with a fixed seed (df = 9; the 99.9% quantile is 27.9)."""
    priorities = torch.tensor([1.0, 2.0, 3.0, 4.0, 0.0, 10.0, 0.5, 0.0, 7.0, 2.5, 1.5, 8.0], dtype=torch.float64)
    tree = SumTree(len(priorities), fanout=5, backend=backend)  # 3 blocks, a partial last one
    tree.set_leaves(priorities)
    g = torch.Generator().manual_seed(0)
    draws = torch.cat([tree.sample(1000, generator=g) for _ in range(200)])
    counts = torch.bincount(draws, minlength=len(priorities)).double()
    assert counts[priorities == 0].sum() == 0
    expected = priorities / priorities.sum() * draws.numel()
    keep = priorities > 0
    chi2 = float(((counts[keep] - expected[keep]) ** 2 / expected[keep]).sum())
    assert chi2 < 27.9, chi2
    # same seed, same draws; both backends agree
    a = tree.sample(64, generator=torch.Generator().manual_seed(3))
    other = SumTree(len(priorities), fanout=5, backend="torch" if backend == "numpy" else "numpy")
    other.set_leaves(priorities)
    assert torch.equal(a, other.sample(64, generator=torch.Generator().manual_seed(3)))


@pytest.mark.parametrize("backend", BACKENDS)
def test_update_keeps_sums_consistent(backend):
    g = torch.Generator().manual_seed(1)
    tree = SumTree(300, fanout=16, backend=backend)
    ref = torch.zeros(300, dtype=torch.float64)
    for _ in range(30):
        idx = torch.randint(0, 300, (20,), generator=g)
        idx[1] = idx[0]  # repeated index: one of the values is kept
        vals = torch.rand(20, generator=g, dtype=torch.float64)
        vals[1] = vals[0]
        tree.update(idx, vals)
        ref[idx] = vals
    tree.update(torch.tensor([5, 6]), 0.25)  # scalar value
    ref[torch.tensor([5, 6])] = 0.25
    torch.testing.assert_close(tree.leaves, ref)
    torch.testing.assert_close(tree.total(), ref.sum())
    torch.testing.assert_close(tree.get(torch.tensor([[5, 6]])), ref[[5, 6]].view(1, 2))
    cum = ref.cumsum(0)
    u = torch.rand(1000, generator=g, dtype=torch.float64) * cum[-1] * 0.999
    mismatch = (tree.find(u) != torch.searchsorted(cum, u, right=True)).sum()
    assert int(mismatch) == 0


def test_state_dict_round_trip_and_errors():
    tree = SumTree(100)
    tree.update(torch.arange(0, 100, 3), torch.linspace(0.1, 3.0, 34, dtype=torch.float64))
    restored = SumTree(100)
    restored.load_state_dict(tree.state_dict())
    torch.testing.assert_close(restored.leaves, tree.leaves)
    torch.testing.assert_close(restored.total(), tree.total())
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    assert torch.equal(tree.sample(32, g1), restored.sample(32, g2))
    with pytest.raises(ValueError, match="capacity 50"):
        SumTree(50).load_state_dict(tree.state_dict())
    with pytest.raises(ValueError, match="non-negative"):
        SumTree(2).load_state_dict({"leaves": torch.tensor([1.0, -1.0], dtype=torch.float64)})
    with pytest.raises(ValueError, match="at least 1"):
        SumTree(0)
    with pytest.raises(ValueError, match="backend"):
        SumTree(4, backend="jax")
