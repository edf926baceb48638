"""Prior datasets (npz, Minari) and the offline/online mixer of rlfunc.replay.offline."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from rlfunc.replay.offline import (
    ACTION_CLIP_EPS,
    DatasetError,
    DatasetNotFoundError,
    DatasetWarning,
    MixedSampler,
    OfflineDataset,
    dataset_checksum,
    load_dataset,
    resolve_dataset_path,
    same_env_id,
    write_npz,
)
from rlfunc.replay.uniform import UniformReplay

torch.set_num_threads(1)

OBS_SPACE = gym.spaces.Box(np.array([-1, -1, -8], np.float32), np.array([1, 1, 8], np.float32))  # Pendulum's
ACT_SPACE = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)  # Pendulum's native torque bounds


def _arrays(n=50, seed=0, **changes):
    rng = np.random.default_rng(seed)
    a = {
        "observations": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "actions": rng.uniform(-2, 2, (n, 1)).astype(np.float32),
        "rewards": rng.normal(size=n).astype(np.float32),
        "next_observations": rng.uniform(-1, 1, (n, 3)).astype(np.float32),
        "terminals": np.zeros(n, dtype=bool),
        "timeouts": np.zeros(n, dtype=bool),
    }
    a.update(changes)
    return {k: v for k, v in a.items() if v is not None}


def _write(tmp_path, name="d.npz", **changes):
    return write_npz(tmp_path / name, _arrays(**changes))


def test_loads_npz_rescales_and_clips_actions(tmp_path):
    arrays = _arrays()
    arrays["actions"][:3, 0] = [2.0, -2.0, 1.0]
    path = write_npz(tmp_path / "d.npz", arrays)
    ds = load_dataset(path, OBS_SPACE, ACT_SPACE)
    assert len(ds) == 50 and ds.format == "npz" and ds.checksum == dataset_checksum(path)
    act = ds.rows["action"]
    lim = 1 - ACTION_CLIP_EPS
    torch.testing.assert_close(act[:3, 0], torch.tensor([lim, -lim, 0.5]))
    assert float(act.abs().max()) <= lim  # the open interval the tanh policy needs
    assert ds.rows["obs"].dtype == torch.float32 and ds.rows["terminated"].dtype == torch.float32
    assert set(ds.rows.keys()) == {"obs", "action", "reward", "next_obs", "terminated"}


def test_timeouts_are_not_terminals(tmp_path):
    term = np.zeros(50, dtype=bool)
    term[10] = True
    timeouts = np.zeros(50, dtype=bool)
    timeouts[[20, 49]] = True
    ds = load_dataset(_write(tmp_path, terminals=term, timeouts=timeouts), OBS_SPACE, ACT_SPACE)
    assert ds.rows["terminated"].nonzero().flatten().tolist() == [10]
    # no timeouts key at all is fine too; 0/1 floats are accepted as terminals
    ds2 = load_dataset(_write(tmp_path, "e.npz", timeouts=None, terminals=term.astype(np.float32)), OBS_SPACE, ACT_SPACE)
    assert ds2.rows["terminated"].sum() == 1


def test_missing_file_is_one_clear_error(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="does not exist.*rlfunc dataset collect"):
        load_dataset(tmp_path / "nope.npz", OBS_SPACE, ACT_SPACE)
    assert issubclass(DatasetNotFoundError, FileNotFoundError)


def test_wrong_observation_shape(tmp_path):
    path = _write(tmp_path, observations=np.zeros((50, 4), np.float32))
    with pytest.raises(DatasetError, match=r"'observations' rows have shape \(4,\).*shape \(3,\)"):
        load_dataset(path, OBS_SPACE, ACT_SPACE)


def test_wrong_action_shape_and_row_counts(tmp_path):
    with pytest.raises(DatasetError, match=r"'actions' rows have shape \(2,\).*shape \(1,\)"):
        load_dataset(_write(tmp_path, actions=np.zeros((50, 2), np.float32)), OBS_SPACE, ACT_SPACE)
    with pytest.raises(DatasetError, match="'rewards' has 49 rows but observations has 50"):
        load_dataset(_write(tmp_path, "b.npz", rewards=np.zeros(49, np.float32)), OBS_SPACE, ACT_SPACE)
    with pytest.raises(DatasetError, match=r"'rewards' must have shape \[N\]"):
        load_dataset(_write(tmp_path, "c.npz", rewards=np.zeros((50, 2), np.float32)), OBS_SPACE, ACT_SPACE)


def test_wrong_action_bounds(tmp_path):
    # actions already rescaled to [-1, 1] look fine; actions beyond the env's bounds do not
    acts = np.full((50, 1), 0.5, np.float32)
    acts[7] = 3.0
    with pytest.raises(DatasetError, match=r"1 action\(s\) lie outside the env's bounds.*row 7"):
        load_dataset(_write(tmp_path, actions=acts), OBS_SPACE, ACT_SPACE)
    # recorded bounds (rlfunc dataset collect) that differ from the env's
    path = _write(tmp_path, "b.npz", action_low=np.array([-1.0], np.float32), action_high=np.array([1.0], np.float32))
    with pytest.raises(DatasetError, match="recorded with action bounds action_low=\\[-1.0\\]"):
        load_dataset(path, OBS_SPACE, ACT_SPACE)


def test_nans_in_the_data(tmp_path):
    obs = _arrays()["next_observations"]
    obs[12, 1] = np.nan
    with pytest.raises(DatasetError, match="'next_observations' holds 1 NaN/inf value.*row 12"):
        load_dataset(_write(tmp_path, next_observations=obs), OBS_SPACE, ACT_SPACE)
    rew = np.zeros(50, np.float32)
    rew[3] = np.inf
    with pytest.raises(DatasetError, match="'rewards' holds 1 NaN/inf.*row 3"):
        load_dataset(_write(tmp_path, "b.npz", rewards=rew), OBS_SPACE, ACT_SPACE)


def test_missing_key_dtype_env_and_observation_bounds(tmp_path):
    arrays = _arrays()
    arrays["observation"] = arrays.pop("observations")
    with pytest.raises(DatasetError, match="missing key\\(s\\) 'observations' \\(found 'observation'\\)"):
        load_dataset(write_npz(tmp_path / "a.npz", arrays), OBS_SPACE, ACT_SPACE)
    with pytest.raises(DatasetError, match="'rewards' has dtype <U1"):
        load_dataset(_write(tmp_path, "b.npz", rewards=np.array(["x"] * 50)), OBS_SPACE, ACT_SPACE)
    with pytest.raises(DatasetError, match="'terminals' must be booleans or 0/1"):
        load_dataset(_write(tmp_path, "c.npz", terminals=np.full(50, 2.0)), OBS_SPACE, ACT_SPACE)
    with pytest.raises(DatasetError, match="recorded in 'Hopper-v5', but the run's env is 'Pendulum-v1'"):
        load_dataset(_write(tmp_path, "d.npz", env_id=np.asarray("Hopper-v5")), OBS_SPACE, ACT_SPACE, env_id="Pendulum-v1")
    obs = _arrays()["observations"]
    obs[5, 2] = 30.0  # angular velocity beyond Pendulum's +-8
    with pytest.raises(DatasetError, match="'observations' row 5 lies outside the env's observation bounds"):
        load_dataset(_write(tmp_path, "e.npz", observations=obs), OBS_SPACE, ACT_SPACE)
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(DatasetError, match="Cannot tell the format"):
        load_dataset(tmp_path / "f.txt", OBS_SPACE, ACT_SPACE)
    (tmp_path / "g.npz").write_bytes(b"not a zip")
    with pytest.raises(DatasetError, match="not a readable .npz"):
        load_dataset(tmp_path / "g.npz", OBS_SPACE, ACT_SPACE)


def _online(n, reward=-1.0):
    replay = UniformReplay(1000)
    replay.add(
        TensorDict(
            {
                "obs": torch.zeros(n, 3),
                "action": torch.zeros(n, 1),
                "reward": torch.full((n,), reward),
                "next_obs": torch.zeros(n, 3),
                "terminated": torch.zeros(n),
            },
            batch_size=[n],
        )
    )
    return replay


@pytest.mark.parametrize("ratio,b", [(0.5, 256), (0.5, 7), (0.25, 16), (0.0, 8), (1.0, 8)])
def test_every_mini_batch_has_exactly_round_b_ratio_offline_rows(tmp_path, ratio, b):
    ds = load_dataset(_write(tmp_path, rewards=np.full(50, 1000.0, np.float32)), OBS_SPACE, ACT_SPACE)
    replay = _online(30)
    sampler = MixedSampler(ds, replay, ratio)
    gen = torch.Generator().manual_seed(0)
    batch = sampler.sample(20, b, generator=gen)
    assert batch.batch_size == (20, b)
    offline = batch["reward"] == 1000.0
    k = round(b * ratio)
    assert (offline.sum(dim=1) == k).all()  # every one of the G mini-batches
    assert offline[:, :k].all() and not offline[:, k:].any()
    assert len(replay) == 30  # prior data is never copied into the online buffer


def test_mixer_draws_one_g_times_b_batch_and_is_seeded(tmp_path):
    ds = load_dataset(_write(tmp_path), OBS_SPACE, ACT_SPACE)
    calls = []
    orig_ds, orig_on = ds.sample, UniformReplay.sample
    replay = _online(40)
    ds.sample = lambda n, generator=None: calls.append(("offline", n)) or orig_ds(n, generator=generator)
    replay.sample = lambda n, generator=None: calls.append(("online", n)) or orig_on(replay, n, generator=generator)
    a = MixedSampler(ds, replay).sample(20, 256, generator=torch.Generator().manual_seed(3))
    assert calls == [("offline", 20 * 128), ("online", 20 * 128)]
    b = MixedSampler(ds, replay).sample(20, 256, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a["obs"], b["obs"])
    with pytest.raises(ValueError, match="offline ratio"):
        MixedSampler(ds, replay, 1.5)


def test_from_arrays_without_files():
    ds = OfflineDataset.from_arrays(_arrays(n=10), OBS_SPACE, ACT_SPACE)
    assert len(ds) == 10 and ds.sample(4).batch_size == (4,)


def _make_minari(root, env_id="Pendulum-v1", episodes=3, steps=20, dataset_id="rlfunc/test-v0", unflagged=()):
    """A dataset written by Minari's own create_dataset_from_buffers under ``root`` (its
    MINARI_DATASETS_PATH); episodes in ``unflagged`` end with neither flag set."""
    minari = pytest.importorskip("minari")
    from minari.data_collector import EpisodeBuffer

    env = gym.make(env_id)
    bufs = []
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        O, A, R, TE, TR = [obs], [], [], [], []
        for t in range(steps):
            a = env.action_space.sample()
            obs, r, te, tr, _ = env.step(a)
            tr = (tr or t == steps - 1) and ep not in unflagged
            O.append(obs), A.append(a), R.append(r), TE.append(te), TR.append(tr)
            if te or tr:
                break
        bufs.append(EpisodeBuffer(id=ep, observations=np.stack(O), actions=np.stack(A), rewards=np.array(R),
                                  terminations=np.array(TE), truncations=np.array(TR), infos={}))
    import os
    import warnings

    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(root)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            minari.create_dataset_from_buffers(dataset_id, bufs, env=env, algorithm_name="random", data_format="hdf5")
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH")
        else:
            os.environ["MINARI_DATASETS_PATH"] = old
    return root / dataset_id


def test_loads_a_local_minari_dataset(tmp_path):
    pytest.importorskip("h5py")
    path = _make_minari(tmp_path)
    for p in (path, path / "data"):
        ds = load_dataset(p, OBS_SPACE, ACT_SPACE, env_id="Pendulum-v1")
        assert ds.format == "minari" and len(ds) == 60
        # truncations (time limits) are not terminals
        assert float(ds.rows["terminated"].sum()) == 0.0
        assert float(ds.rows["action"].abs().max()) <= 1 - ACTION_CLIP_EPS
    # next_obs of row t is obs of row t+1 inside an episode
    torch.testing.assert_close(ds.rows["next_obs"][:19], ds.rows["obs"][1:20])
    with pytest.raises(DatasetError, match="action space Box.*but the env's is"):
        load_dataset(path, OBS_SPACE, gym.spaces.Box(-1.0, 1.0, (1,), np.float32))
    with pytest.raises(DatasetError, match="recorded in 'Pendulum-v1', but the run's env is 'Foo-v0'"):
        load_dataset(path, OBS_SPACE, ACT_SPACE, env_id="Foo-v0")


def test_minari_metadata_that_would_make_minari_build_its_env_is_refused(tmp_path):
    """Without recorded spaces, Minari calls gym.make on the env_spec its metadata names, which imports
    and calls an entry point from the file: rlfunc refuses such a dataset before Minari reads it."""
    data = tmp_path / "evil" / "data"
    data.mkdir(parents=True)
    marker = tmp_path / "marker"
    spec = {"id": "Evil-v0", "entry_point": "pathlib:Path.touch", "kwargs": {"self": str(marker)}}
    (data / "metadata.json").write_text(json.dumps({"data_format": "hdf5", "env_spec": json.dumps(spec), "total_episodes": 1}))
    with pytest.raises(DatasetError, match="observation_space and action_space.*runs code"):
        load_dataset(tmp_path / "evil", OBS_SPACE, ACT_SPACE)
    assert not marker.exists()


def test_missing_dataset_names_both_ways_to_make_one(tmp_path, monkeypatch):
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "store"))
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset(tmp_path / "nope.npz", OBS_SPACE, ACT_SPACE)
    text = str(info.value)
    assert f"`rlfunc dataset collect ... --out {tmp_path / 'nope.npz'}`" in text
    assert "a Minari dataset directory or the id of a dataset in Minari's local store" in text
    try:
        import minari  # noqa: F401
    except ImportError:
        return
    with pytest.raises(DatasetNotFoundError) as info:
        load_dataset("nobody/nothing-v0", OBS_SPACE, ACT_SPACE)
    text = str(info.value)
    assert "nor as a Minari dataset id in Minari's local store (no " + repr(str(tmp_path / "store" / "nobody" / "nothing-v0")) in text
    assert "--out FILE.npz" in text and "\n" not in text


def test_same_env_id_ignores_a_module_prefix():
    assert same_env_id("my_pkg:MyEnv-v0", "MyEnv-v0") and same_env_id("Pendulum-v1", "gymnasium:Pendulum-v1")
    assert not same_env_id("Pendulum-v1", "Pendulum-v0")
    arrays = _arrays(env_id=np.asarray("Pendulum-v1"))
    OfflineDataset.from_arrays(arrays, OBS_SPACE, ACT_SPACE, env_id="gymnasium:Pendulum-v1")  # the same env
    with pytest.raises(DatasetError, match="recorded in 'Pendulum-v1'"):
        OfflineDataset.from_arrays(arrays, OBS_SPACE, ACT_SPACE, env_id="my_pkg:Other-v0")


def test_a_minari_dataset_id_is_found_as_minari_finds_it_without_network(tmp_path, monkeypatch):
    """data.path may be a Minari id: resolved with minari.storage.get_dataset_path under
    MINARI_DATASETS_PATH; nothing is downloaded (no socket is opened); a path that exists wins."""
    pytest.importorskip("h5py")
    import socket

    store = tmp_path / "store"
    folder = _make_minari(store, dataset_id="rlfunc/idtest-v1")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))

    def no_network(*args, **kwargs):
        raise AssertionError("reading a local Minari dataset opened a network connection")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    assert resolve_dataset_path("rlfunc/idtest-v1") == folder
    by_id = load_dataset("rlfunc/idtest-v1", OBS_SPACE, ACT_SPACE, env_id="Pendulum-v1")
    by_dir = load_dataset(folder, OBS_SPACE, ACT_SPACE, env_id="Pendulum-v1")
    assert by_id.format == "minari" and len(by_id) == 60 and by_id.checksum == by_dir.checksum
    assert by_id.path == str(folder)
    torch.testing.assert_close(by_id.rows["obs"], by_dir.rows["obs"])
    # a local path of the same name wins over the store
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rlfunc" / "idtest-v1").mkdir(parents=True)
    assert resolve_dataset_path("rlfunc/idtest-v1") == Path("rlfunc/idtest-v1")
    # the unknown id of another store is not found, and says where it looked
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / "empty"))
    with pytest.raises(DatasetNotFoundError, match="no '" + str(tmp_path / "empty")):
        load_dataset("rlfunc/other-v1", OBS_SPACE, ACT_SPACE)


def test_rlpd_reads_a_minari_id_from_data_path(tmp_path, monkeypatch):
    pytest.importorskip("h5py")
    from rlfunc.runtime.config import build_config, load_config
    from rlfunc.runtime.trainer import Trainer

    store = tmp_path / "store"
    _make_minari(store, dataset_id="pendulum/random-v0")
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))
    raw = load_config(str(Path(__file__).resolve().parents[1] / "configs/rlpd/pendulum.yaml"))
    raw["data"] = {"path": "pendulum/random-v0"}
    raw["agent"] = {**(raw.get("agent") or {}), "hidden_sizes": [16, 16], "num_critics": 2}
    trainer = Trainer(build_config(raw), tmp_path / "run")
    dataset = trainer.learner.dataset
    assert dataset.format == "minari" and len(dataset) == 60 and dataset.path == str(store / "pendulum" / "random-v0")


def test_minari_episodes_without_an_end_flag_are_named_once(tmp_path):
    pytest.importorskip("h5py")
    import warnings

    path = _make_minari(tmp_path, episodes=4, unflagged=(0, 2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = load_dataset(path, OBS_SPACE, ACT_SPACE)
    ours = [w for w in caught if issubclass(w.category, DatasetWarning)]
    assert len(ours) == 1, [str(w.message) for w in caught]
    text = str(ours[0].message)
    assert "2 of 4 episodes end with neither a termination nor a truncation flag (episode 0, 2)" in text
    assert str(path / "data") in text
    assert len(ds) == 80 and float(ds.rows["terminated"].sum()) == 0.0  # read as cut: they bootstrap
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        load_dataset(_make_minari(tmp_path / "flagged"), OBS_SPACE, ACT_SPACE)
    assert not [w for w in caught if issubclass(w.category, DatasetWarning)]
