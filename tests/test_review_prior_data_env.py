"""Regression tests from a review of the prior-data path (RLPD's datasets), session 29.

Each test names the defect it pins down; each failed on the code before the fix.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

gym = pytest.importorskip("gymnasium")

import rlfunc  # noqa: E402
from rlfunc.replay import offline  # noqa: E402
from rlfunc.replay.offline import DatasetError, detect_format, load_dataset, read_npz  # noqa: E402
from rlfunc.runtime.dataset import collect  # noqa: E402

PENDULUM_OBS = gym.spaces.Box(np.array([-1.0, -1.0, -8.0], np.float32), np.array([1.0, 1.0, 8.0], np.float32), dtype=np.float32)
PENDULUM_ACT = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
MASK = [{"mask_velocity": {"indices": [2]}}]


@pytest.fixture(scope="module")
def bare_pendulum_data(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "pendulum.npz"
    collect(path, env_id="Pendulum-v1", policy="random", steps=400, seed=0)
    return path


# --------------------------------------------------------------------------- the env's config


def test_collect_records_the_envs_kwargs_and_wrappers(bare_pendulum_data):
    arrays = read_npz(bare_pendulum_data)
    assert json.loads(str(arrays["env_kwargs"])) == {}
    assert json.loads(str(arrays["env_wrappers"])) == []


def test_data_from_an_otherwise_wrapped_env_is_refused(bare_pendulum_data):
    """Data from a bare Pendulum loaded into a run that masks the velocity: same shapes, so it loaded
    and prior rows carried velocities the online rows do not have."""
    with pytest.raises(DatasetError, match=r"collected with env\.wrappers \[\], but the run's are \[\{'mask_velocity'"):
        load_dataset(bare_pendulum_data, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs={}, env_wrappers=MASK)
    ok = load_dataset(bare_pendulum_data, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs={}, env_wrappers=[])
    assert len(ok) == 400


def test_data_from_an_env_with_other_kwargs_is_refused_and_defaults_count(tmp_path, bare_pendulum_data):
    arrays = read_npz(bare_pendulum_data)
    path = tmp_path / "g5.npz"
    np.savez(path, **{**arrays, "env_kwargs": np.asarray(json.dumps({"g": 5.0}))})
    with pytest.raises(DatasetError, match=r"collected with env\.kwargs g=5\.0 \(the run: 10\.0\)"):
        load_dataset(path, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs={}, env_wrappers=[])
    # the constructor's default equals a value written out; a time limit or render mode changes no transition
    for recorded, run in (({"g": 10}, {}), ({}, {"g": 10.0}), ({"max_episode_steps": 50}, {"render_mode": "rgb_array"})):
        np.savez(path, **{**arrays, "env_kwargs": np.asarray(json.dumps(recorded))})
        assert len(load_dataset(path, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs=run, env_wrappers=[])) == 400


def test_env_constructor_defaults_that_are_arrays_compare_as_values():
    """Hopper-v5's constructor has array defaults: comparing them raised numpy's "truth value of an array
    is ambiguous" instead of loading a dataset collected in the same env."""
    assert offline._same_setting({"r": np.array([1.0, 2.0])}, {"r": [1, 2]})
    assert not offline._same_setting(np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    pytest.importorskip("mujoco")
    assert offline._differing_kwargs(offline.effective_env_kwargs("Hopper-v5", {}),
                                     offline.effective_env_kwargs("Hopper-v5", {"ctrl_cost_weight": 1e-3})) == []
    assert offline._differing_kwargs(offline.effective_env_kwargs("Hopper-v5", {}),
                                     offline.effective_env_kwargs("Hopper-v5", {"ctrl_cost_weight": 0.5})) == ["ctrl_cost_weight"]


def test_a_file_without_the_env_config_loads_as_before(tmp_path, bare_pendulum_data):
    """D4RL's files, and rlfunc's from before, record neither: nothing to compare."""
    arrays = {k: v for k, v in read_npz(bare_pendulum_data).items() if k not in ("env_kwargs", "env_wrappers")}
    path = tmp_path / "old.npz"
    np.savez(path, **arrays)
    assert len(load_dataset(path, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs={}, env_wrappers=MASK)) == 400


def test_unreadable_env_config_metadata_is_one_sentence(tmp_path, bare_pendulum_data):
    path = tmp_path / "bad.npz"
    np.savez(path, **{**read_npz(bare_pendulum_data), "env_wrappers": np.asarray("[not json")})
    with pytest.raises(DatasetError, match="'env_wrappers' is not the JSON text rlfunc dataset collect writes"):
        load_dataset(path, PENDULUM_OBS, PENDULUM_ACT, env_id="Pendulum-v1", env_kwargs={}, env_wrappers=[])


def test_an_rlpd_run_in_a_masked_env_refuses_bare_env_data_before_training(tmp_path, bare_pendulum_data):
    config = {
        "algo": "rlpd",
        "env": {"id": "Pendulum-v1", "wrappers": MASK},
        "data": {"path": str(bare_pendulum_data)},
        "train": {"total_steps": 50, "learning_starts": 10, "progress": False, "tensorboard": False},
    }
    with pytest.raises(DatasetError, match="env.wrappers"):
        rlfunc.train(config, run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "metrics.csv").exists()


# --------------------------------------------------------------------------- seeding of collections


def _episode_starts(arrays: dict) -> set[tuple]:
    ends = np.flatnonzero(arrays["terminals"] | arrays["timeouts"])
    starts = np.concatenate([[0], ends[:-1] + 1])
    return {tuple(np.round(arrays["observations"][i], 6)) for i in starts}


def test_collections_with_neighbouring_seeds_share_no_episode(tmp_path):
    """Every reset was seeded seed + episode, so episode i + 1 of seed s was episode i of seed s + 1."""
    a = read_npz(collect(tmp_path / "s0.npz", env_id="Pendulum-v1", policy="random", steps=600, seed=0)["path"])
    b = read_npz(collect(tmp_path / "s1.npz", env_id="Pendulum-v1", policy="random", steps=600, seed=1)["path"])
    assert len(_episode_starts(a)) == len(_episode_starts(b)) == 3
    assert not _episode_starts(a) & _episode_starts(b)
    again = read_npz(collect(tmp_path / "s0b.npz", env_id="Pendulum-v1", policy="random", steps=600, seed=0)["path"])
    for key in ("observations", "actions", "rewards", "next_observations"):
        np.testing.assert_array_equal(a[key], again[key])  # still reproducible from its seed


# --------------------------------------------------------------------------- memory


def test_unbounded_observations_are_not_copied_to_float64_for_a_bounds_check(monkeypatch):
    """Validation made float64 copies of every observation (twice the float32 rows) even for MuJoCo's
    unbounded spaces, where there is nothing to check."""
    n = 64
    arrays = {
        "observations": np.zeros((n, 3), np.float32),
        "actions": np.zeros((n, 1), np.float32),
        "rewards": np.zeros(n, np.float32),
        "next_observations": np.zeros((n, 3), np.float32),
        "terminals": np.zeros(n, bool),
    }
    copies = []

    class Spy(np.ndarray):
        def astype(self, dtype, *args, **kwargs):
            copies.append(np.dtype(dtype))
            return super().astype(dtype, *args, **kwargs)

    arrays["observations"] = arrays["observations"].view(Spy)
    unbounded = gym.spaces.Box(-np.inf, np.inf, (3,), np.float32)
    offline.validate_arrays(arrays, unbounded, PENDULUM_ACT)
    assert np.dtype(np.float64) not in copies
    offline.validate_arrays(arrays, PENDULUM_OBS, PENDULUM_ACT)  # bounded: checked (in chunks)
    assert np.dtype(np.float64) in copies


def test_bounds_are_checked_in_chunks_and_name_the_right_row(monkeypatch):
    monkeypatch.setattr(offline, "_CHECK_CHUNK_ELEMENTS", 12)  # 4 rows of 3 per chunk
    n = 10
    obs = np.zeros((n, 3), np.float32)
    obs[9, 2] = 9.0  # beyond Pendulum's 8 rad/s, in the third chunk
    arrays = {"observations": obs, "actions": np.zeros((n, 1)), "rewards": np.zeros(n),
              "next_observations": np.zeros((n, 3)), "terminals": np.zeros(n, bool)}
    with pytest.raises(DatasetError, match="'observations' row 9 lies outside"):
        offline.validate_arrays(arrays, PENDULUM_OBS, PENDULUM_ACT)


def test_a_population_reads_and_checks_its_dataset_once(tmp_path, monkeypatch, bare_pendulum_data):
    """Each member loaded, validated and hashed the file again: P copies at once before sharing one."""
    from rlfunc.runtime import population as pr
    from rlfunc.runtime.config import build_config

    calls = []
    real = offline.load_dataset

    def counting(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(offline, "load_dataset", counting)
    config = {
        "algo": "rlpd",
        "env": {"id": "Pendulum-v1"},
        "data": {"path": str(bare_pendulum_data)},
        "train": {"total_steps": 50, "learning_starts": 10, "replay_size": 100, "progress": False,
                  "tensorboard": False, "population": {"seeds": [0, 1, 2]}},
    }
    pt = pr.PopulationTrainer(build_config(config), tmp_path / "pop")
    try:
        assert len(calls) == 1
        assert all(lr.dataset is pt.dataset and lr.sampler.dataset is pt.dataset for lr in pt.learners)
    finally:
        pt.close_envs()


# --------------------------------------------------------------------------- formats


def test_an_explicit_format_that_disagrees_with_the_path_says_so(tmp_path, bare_pendulum_data):
    """data.format npz on a directory said the (existing) directory "does not exist"."""
    folder = tmp_path / "somedir"
    folder.mkdir()
    with pytest.raises(DatasetError, match="data.format is 'npz' but .* is a directory"):
        detect_format(folder, "npz")
    with pytest.raises(DatasetError, match="data.format is 'minari' but .* is a file"):
        detect_format(bare_pendulum_data, "minari")
    assert detect_format(bare_pendulum_data, "npz") == "npz"
