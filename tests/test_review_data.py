"""Regression tests from an adversarial review of the data layer: prior datasets, sum-trees and
the frame/sequence replays (each test names the defect it pins down)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tensordict import TensorDict

gym = pytest.importorskip("gymnasium")

from rlfunc.replay.frame_sequence import FrameSequenceReplay, PrioritizedFrameSequenceReplay  # noqa: E402
from rlfunc.replay.offline import DatasetError, OfflineDataset, load_dataset, read_npz  # noqa: E402
from rlfunc.replay.pixels import PixelReplay  # noqa: E402
from rlfunc.replay.population_sequence import PopulationPrioritizedSequenceReplay  # noqa: E402
from rlfunc.replay.population_sumtree import PopulationSumTree  # noqa: E402
from rlfunc.replay.prioritized import PrioritizedSequenceReplay  # noqa: E402
from rlfunc.replay.sumtree import SumTree  # noqa: E402

OBS = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)


def _arrays(n: int = 5) -> dict:
    return {
        "observations": np.zeros((n, 3)),
        "actions": np.zeros((n, 1)),
        "rewards": np.zeros(n),
        "next_observations": np.zeros((n, 3)),
        "terminals": np.zeros(n, dtype=bool),
    }


# --------------------------------------------------------------------------- prior datasets


@pytest.mark.parametrize("key", ["observations", "next_observations", "rewards"])
def test_float64_values_beyond_float32_are_refused_not_loaded_as_inf(tmp_path, key):
    """A finite float64 1e39 passed the NaN/inf check and became inf in the float32 rows."""
    arrays = _arrays()
    arrays[key].reshape(5, -1)[2, 0] = 1e39
    path = tmp_path / "big.npz"
    np.savez(path, **arrays)
    with pytest.raises(DatasetError, match=rf"'{key}' holds 1 value\(s\) beyond float32's range \(first in row 2\)"):
        load_dataset(path, OBS, ACT)
    arrays[key].reshape(5, -1)[2, 0] = 3e38  # just inside float32: loads, finite
    np.savez(path, **arrays)
    rows = load_dataset(path, OBS, ACT).rows
    assert all(bool(torch.isfinite(v).all()) for v in rows.values())


def test_non_zip_file_starting_with_pk_is_not_called_a_pickle(tmp_path):
    """b"PK" + garbage was reported as "stores Python objects (pickled arrays)"."""
    path = tmp_path / "bad.npz"
    path.write_bytes(b"PK" + b"\0" * 100)
    with pytest.raises(DatasetError, match="not a zip archive of arrays"):
        read_npz(path)
    np.savez(tmp_path / "empty.npz")  # an empty archive is a zip (PK\x05\x06) and holds no arrays
    assert read_npz(tmp_path / "empty.npz") == {}
    obj = _arrays()
    obj["observations"] = np.array([[object()] * 3] * 5, dtype=object)
    np.savez(tmp_path / "obj.npz", **obj)
    with pytest.raises(DatasetError, match="pickled arrays"):
        read_npz(tmp_path / "obj.npz")


@pytest.mark.parametrize("recorded", [np.array(b"Pendulum-v1"), np.array(["Pendulum-v1"]), np.array("Pendulum-v1")])
def test_env_id_recorded_as_bytes_or_one_element_array_matches(recorded):
    """An env id stored as bytes was compared as "np.bytes_(b'Pendulum-v1')" and refused."""
    arrays = dict(_arrays(), env_id=recorded)
    ds = OfflineDataset.from_arrays(arrays, OBS, ACT, env_id="Pendulum-v1")
    assert len(ds) == 5
    with pytest.raises(DatasetError, match="recorded in 'Pendulum-v1', but the run's env is 'Hopper-v5'"):
        OfflineDataset.from_arrays(arrays, OBS, ACT, env_id="Hopper-v5")


def test_unbounded_action_space_is_refused_instead_of_nan_actions():
    """An env action Box with infinite bounds rescaled every dataset action to NaN, silently."""
    unbounded = gym.spaces.Box(-np.inf, np.inf, (1,), np.float32)
    with pytest.raises(DatasetError, match="bounds must be finite with low < high"):
        OfflineDataset.from_arrays(_arrays(), OBS, unbounded)


@pytest.mark.parametrize("noise", [float("nan"), float("inf"), -0.1])
def test_collect_refuses_non_finite_noise(tmp_path, noise):
    """``noise=nan`` passed ``noise < 0`` and would step the env with NaN actions."""
    from rlfunc.runtime.dataset import collect

    out = tmp_path / "d.npz"
    with pytest.raises(ValueError, match="--noise must be a finite number >= 0"):
        collect(out, policy="random", env_id="Pendulum-v1", steps=2, noise=noise)
    assert not out.exists()


# --------------------------------------------------------------------------- sum-trees


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_sumtree_with_all_zero_leaves_returns_a_leaf_in_range(backend):
    """With every leaf zero the search stepped past the end (index 48 of a 40-leaf tree)."""
    tree = SumTree(40, fanout=16, backend=backend)
    idx = tree.sample(8, generator=torch.Generator().manual_seed(0))
    assert int(idx.max()) < 40
    assert int(tree.find(torch.zeros(3)).max()) < 40
    tree.update(torch.tensor([7]), torch.tensor([2.0]))  # one positive leaf: always it
    assert tree.sample(8, generator=torch.Generator().manual_seed(0)).tolist() == [7] * 8


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_population_sumtree_with_a_zero_member_stays_in_range(backend):
    tree = PopulationSumTree(2, 40, fanout=16, backend=backend)
    tree.update(torch.tensor([1]), torch.tensor([5]), torch.tensor([1.0]))  # member 1 has one leaf, member 0 none
    gens = [torch.Generator().manual_seed(k) for k in range(2)]
    idx = tree.sample(6, gens)
    assert int(idx.max()) < 40 and idx[1].tolist() == [5] * 6
    assert int(tree.row(0).sample(6, generator=gens[0]).max()) < 40


def _step(x, done=False):
    return TensorDict(
        {"x": torch.tensor([x]), "terminated": torch.tensor([done]), "truncated": torch.tensor([False])}, [1]
    )


def test_prioritized_replay_with_all_zero_priorities_refuses_in_one_sentence():
    """Priorities of 0 are allowed, but all of them 0 crashed sampling with an index_select error."""
    replay = PrioritizedSequenceReplay(4, 2)
    for t in range(4):
        replay.add(_step(t))
    replay.update_priorities(torch.tensor([0, 1]), torch.tensor([0.0, 0.0]))
    with pytest.raises(RuntimeError, match="every stored window has priority 0"):
        replay.sample(3, generator=torch.Generator().manual_seed(0))
    replay.update_priorities(torch.tensor([1]), torch.tensor([2.0]))
    batch = replay.sample(3, generator=torch.Generator().manual_seed(0))
    assert batch["window"][0].tolist() == [1, 1, 1]
    assert torch.equal(batch["weight"][0], torch.ones(3))


def test_population_prioritized_replay_names_the_member_with_all_zero_priorities():
    replay = PopulationPrioritizedSequenceReplay(4, 2, members=2)
    for k in range(2):
        for t in range(4):
            replay.add(k, _step(t))
    replay.update_priorities(torch.tensor([[0, 1], [0, 1]]), torch.tensor([[1.0, 1.0], [0.0, 0.0]]))
    gens = [torch.Generator().manual_seed(k) for k in range(2)]
    with pytest.raises(RuntimeError, match=r"of member\(s\) \[1\] has priority 0"):
        replay.sample(3, gens)


# --------------------------------------------------------------------------- frame replays


def _two_env_steps(t: int) -> TensorDict:
    """Env e's observation at episode step t is e * 100 + t (so a mixed window is visible)."""
    obs = torch.tensor([[t, t], [100 + t, 100 + t]], dtype=torch.int64)
    return TensorDict(
        {"obs": obs, "next_obs": obs + 1, "terminated": torch.zeros(2, dtype=torch.bool),
         "truncated": torch.zeros(2, dtype=torch.bool)},
        [2],
    )


def test_frame_sequence_small_ring_refuses_a_pending_window_whose_frames_were_overwritten():
    """With a ring smaller than default_frame_capacity, a window still pending when the ring came
    round was stored and sampled with the other env's newer frames (env 0 read 3, 4, 102, 103)."""
    replay = FrameSequenceReplay(capacity=8, sequence_length=4, num_envs=2, frame_capacity=5)
    for t in range(3):
        replay.add(_two_env_steps(t))
    with pytest.raises(RuntimeError, match=r"has overwritten frames of 2 window\(s\) before they were complete; "
                                           r"use a frame_capacity of at least \d+"):
        replay.add(_two_env_steps(3))
    assert len(replay) == 0  # nothing stored


def test_prioritized_frame_sequence_small_ring_evicts_such_windows_and_samples_only_whole_ones():
    replay = PrioritizedFrameSequenceReplay(capacity=16, sequence_length=2, num_envs=2, frame_capacity=5)
    gen = torch.Generator().manual_seed(0)
    refused = None
    for t in range(12):
        try:
            replay.add(_two_env_steps(t))
        except RuntimeError as exc:  # the write that would leave only evicted windows (session 31: refused, as uniform)
            refused = str(exc)
            break
        assert len(replay) == 0 or float(replay.tree.total()) > 0  # never only evicted windows (an all-zero tree)
        if len(replay):
            batch = replay.sample(8, generator=gen)
            obs, nxt = batch["obs"][..., 0], batch["next_obs"][..., 0]  # [T, B]
            assert torch.equal(obs[1] - obs[0], torch.ones_like(obs[0]))  # consecutive steps of one episode
            assert torch.equal(nxt, obs + 1)
            assert torch.equal(obs[0] % 100, batch["episode_start"][0])
    assert refused is not None and refused.startswith("The frame ring of 5 frames would overwrite a frame a stored window reads")
    assert "train.frame_capacity" in refused


# --------------------------------------------------------------------------- hand-computed math


def test_pixel_replay_nstep_and_frame_stacks_by_hand():
    """n = 2, gamma 0.5, stack of 2: an episode 10, 11, 12 (terminated after 2 steps), then 20, 21."""
    replay = PixelReplay(16, (2, 1, 1), 1, frame_stack=2, nstep=2, gamma=0.5)

    def stack(a, b):
        return np.array([a, b], dtype=np.uint8).reshape(2, 1, 1)

    replay.add(stack(10, 10), [0.1], 1.0, stack(10, 11), False, False)
    replay.add(stack(10, 11), [0.2], 2.0, stack(11, 12), True, False)
    replay.add(stack(20, 20), [0.3], 4.0, stack(20, 21), False, True)  # new episode, truncated after 1 step
    assert len(replay) == 2  # starts 0 and 1 of episode 1; episode 2 is shorter than n and truncated
    batch = replay.gather(torch.tensor([0, 1]))
    assert batch["obs"][:, :, 0, 0].tolist() == [[10, 10], [10, 11]]
    assert batch["next_obs"][:, :, 0, 0].tolist() == [[11, 12], [11, 12]]  # never a frame of episode 2
    assert batch["reward"].tolist() == pytest.approx([1.0 + 0.5 * 2.0, 2.0])
    assert batch["discount"].tolist() == [0.0, 0.0]


def test_npz_that_unpacks_beyond_memory_is_refused_before_inflating(tmp_path, monkeypatch):
    """A compressed .npz of a few kilobytes can unpack to more than the machine holds (a "zip bomb");
    its size is read from the zip's directory and refused in one sentence, nothing inflated."""
    from rlfunc.replay import offline

    path = tmp_path / "bomb.npz"
    np.savez_compressed(path, observations=np.zeros((1000, 100), dtype=np.float64))  # 800 KB unpacked
    assert path.stat().st_size < 10_000
    monkeypatch.setattr(offline, "_physical_memory", lambda: 100_000)
    inflated = []
    monkeypatch.setattr(np, "load", lambda *a, **k: inflated.append(a) or pytest.fail("np.load was reached"))
    with pytest.raises(offline.DatasetError, match=r"unpacks to 0\.8 MB, more than this machine's 0\.1 MB of memory; use a smaller"):
        offline.read_npz(path)
    assert not inflated
