import pytest
import torch
from tensordict import TensorDict

from rlfunc.replay.uniform import UniformReplay


def _rows(start, n):
    x = torch.arange(start, start + n, dtype=torch.float32)
    return TensorDict({"obs": x[:, None].repeat(1, 2), "reward": x}, batch_size=[n])


def test_ring_buffer_wraps_and_keeps_newest():
    buf = UniformReplay(5)
    buf.add(_rows(0, 3))
    buf.add(_rows(3, 4))
    assert len(buf) == 5
    assert sorted(buf.storage["reward"].tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]


def test_sample_is_uniform_over_stored_rows_and_seeded():
    buf = UniformReplay(100)
    buf.add(_rows(0, 10))
    a = buf.sample(2000, generator=torch.Generator().manual_seed(0))
    b = buf.sample(2000, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a["reward"], b["reward"])
    counts = torch.bincount(a["reward"].long(), minlength=10)
    assert counts.min() > 140 and counts.max() < 260  # ~200 each
    assert a["obs"].shape == (2000, 2)


def test_state_dict_roundtrip():
    buf = UniformReplay(8)
    buf.add(_rows(0, 11))
    clone = UniformReplay(8)
    clone.load_state_dict(buf.state_dict())
    assert len(clone) == len(buf)
    assert torch.equal(clone.storage["reward"], buf.storage["reward"])
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(clone.sample(16, g1)["reward"], buf.sample(16, g2)["reward"])
    with pytest.raises(ValueError, match="capacity"):
        UniformReplay(9).load_state_dict(buf.state_dict())


def test_empty_sample_raises():
    with pytest.raises(RuntimeError, match="empty"):
        UniformReplay(3).sample(1)
