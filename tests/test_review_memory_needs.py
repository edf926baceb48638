"""Memory sized before allocation, as measured against real allocations (a review of rlfunc.runtime.memory).

One test per finding:

1. DrQ-v2's pixel ring on a GPU is reserved whole (counted whole there, as written on the CPU), and a
   population's members build no ring of their own before the batched one replaces it;
2. RLPD's prior dataset is sized from its files and checked with the replay, before it is read;
3. a population checks its members' states (2P of them while stacking) with its P replays, and names
   the keys of its member count;
4. a uniform replay on another device is allocated there, never full-size in host memory first;
5. DrQ-v2 counts one update's working memory (augmented images, encoder activations), not only its rows;
6. a cgroup's reclaimable page cache (``inactive_file``) is not counted as used.

Available memory is simulated by monkeypatching :func:`rlfunc.runtime.memory.available_bytes` (or the
files :func:`rlfunc.runtime.memory._host_available` reads), as tests/test_config_validation.py does.
"""

from __future__ import annotations

import re
import zipfile
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict
from torch.utils._python_dispatch import TorchDispatchMode

from rlfunc.runtime import memory
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config
from rlfunc.runtime.registry import get_algo

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
PIXELS = (gym.spaces.Box(0, 255, (9, 84, 84), dtype=np.uint8), gym.spaces.Box(-1.0, 1.0, (1,)))
PENDULUM = (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)))
TRAIN = {"eval_episodes": 1, "log_every": 50, "progress": False, "tensorboard": False, "compile": False, "threads": 1}


def build(path: str, overrides: dict):
    return build_config(apply_overrides(load_config(str(ROOT / path)), overrides))


def bound(cls, algo: str, config, spaces):
    """A learner of ``cls`` that knows its config and spaces and has allocated nothing."""
    learner = cls.__new__(cls)
    learner._bind(get_algo(algo), config, *spaces)
    return learner


# -- 1. DrQ-v2's ring on a GPU; a population's members build none of their own --------------------------


def test_drqv2_ring_counts_whole_on_a_gpu_and_population_members_build_no_ring_of_their_own(tmp_path, monkeypatch):
    from rlfunc.replay.pixels import PixelReplay
    from rlfunc.runtime import population as pr
    from rlfunc.runtime.learners.pixel import PixelLearner

    frame, per_slot = 3 * 84 * 84, 27
    cpu = bound(PixelLearner, "drqv2", build("configs/drqv2/cartpole_balance.yaml", {}), PIXELS)
    cuda = bound(PixelLearner, "drqv2", build("configs/drqv2/cartpole_balance.yaml", {"train.device": "cuda"}), PIXELS)
    # 1M-frame ring, a 50k-step run: the CPU commits the frames written, a GPU reserves every slot's
    assert cpu._replay_need().nbytes == 1_000_000 * per_slot + 50_001 * frame
    assert cuda._replay_need().nbytes == 1_000_000 * (per_slot + frame)
    assert memory.format_bytes(cuda._replay_need().nbytes) == "21.2 GB"  # what the reviewer's H100 run took

    # A population of two: one batched ring ([2, capacity]) and no member's own PixelReplay first.
    built = []
    real_init = PixelReplay.__init__

    def counted(self, *args, **kwargs):
        built.append(type(self))
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(PixelReplay, "__init__", counted)
    raw = {
        "algo": "drqv2",
        "env": {"id": "Pendulum-v1", "kwargs": {"render_mode": "rgb_array"},
                "wrappers": [{"pixels": {"size": 32, "frame_stack": 3, "action_repeat": 2}}]},
        "train": {**TRAIN, "total_steps": 60, "learning_starts": 20, "replay_size": 500, "eval_every": 60,
                  "checkpoint_every": 60},
        "agent": {"batch_size": 8, "hidden_dim": 16, "feature_dim": 8, "encoder_channels": [4, 4, 4, 4]},
    }
    pt = pr.PopulationTrainer(build_config({**raw, "train": {**raw["train"], "population": {"seeds": [0, 1]}}}),
                              tmp_path / "pop")
    try:
        assert PixelReplay not in built  # only the batched replay's members (its rows), no ring per member
        assert pt.replay.storage["frames"].shape[:2] == (2, 500)
        assert [lr.replay for lr in pt.learners] == [pt.replay.member(0), pt.replay.member(1)]
    finally:
        pt.close_envs()
    # a single run still builds its own ring
    single = get_algo("drqv2").make_learner(build_config(raw), gym.spaces.Box(0, 255, (9, 32, 32), dtype=np.uint8), PIXELS[1])
    assert type(single.replay) is PixelReplay and built[-1] is PixelReplay


# -- 2. RLPD's prior dataset ----------------------------------------------------------------------------


def _pendulum_npz(path: Path, n: int) -> Path:
    rng = np.random.default_rng(0)
    obs = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    np.savez(path, observations=obs, actions=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
             rewards=rng.normal(size=n).astype(np.float32), next_observations=obs,
             terminals=np.zeros(n, bool), timeouts=np.zeros(n, bool))
    return path


def test_rlpd_prior_dataset_is_sized_from_its_files_and_checked_with_the_replay_before_it_is_read(tmp_path, monkeypatch):
    from rlfunc.replay import offline
    from rlfunc.runtime.learners.prior_data import PriorDataLearner

    n = 200_000
    path = _pendulum_npz(tmp_path / "prior.npz", n)
    with zipfile.ZipFile(path) as zf:
        unpacked = sum(i.file_size for i in zf.infolist())
    assert offline.dataset_size(path) == (unpacked, n)  # the zip's directory and the rewards' header: nothing read

    overrides = {"data.path": str(path), "train.replay_size": 1000, "train.learning_starts": 100, "train.total_steps": 500}
    config = build("configs/rlpd/pendulum.yaml", overrides)
    probe = bound(PriorDataLearner, "rlpd", config, PENDULUM)
    rest = [probe._replay_need(), memory.network_need(probe.algo, probe.config, *PENDULUM), probe._batch_need()]
    per = 4 * (2 * 3 + 1 + 2)
    dataset = unpacked + n * per  # the arrays as read, and the float32 rows made of them: 14.0 MB
    # Each fits alone (the replay, networks and batch: ~12 MB; the dataset: 14 MB), not together.
    room = sum(need.nbytes for need in rest) + dataset - 1_000_000
    monkeypatch.setattr(memory, "available_bytes", lambda device: room)
    loads = []
    monkeypatch.setattr(offline, "load_dataset", lambda *a, **k: loads.append(a))
    with pytest.raises(ConfigError, match=rf"^Together .* and data\.path={re.escape(str(path))} \({memory.format_bytes(dataset)} "
                       r"for the prior dataset \(200000 transitions, read and converted to float32 rows of 36 bytes\)\) "
                       r"need .*; lower train\.replay_size or agent\.hidden_sizes or agent\.num_critics.*, or use a "
                       r"smaller dataset\.$"):
        get_algo("rlpd").make_learner(config, *PENDULUM)
    assert loads == []  # refused before the dataset was read
    monkeypatch.setattr(memory, "available_bytes", lambda device: dataset - 1)  # the dataset alone does not fit
    with pytest.raises(ConfigError, match=rf"^data\.path={re.escape(str(path))} needs 14\.0 MB for the prior dataset .* but only .* of "
                       r"memory is available; use a smaller dataset or lower train\.replay_size\.$"):
        get_algo("rlpd").make_learner(config, *PENDULUM)

    # On a GPU the float32 rows are a device need, the read arrays a host need.
    gpu = PriorDataLearner.__new__(PriorDataLearner)
    gpu.data_cfg, gpu.dataset = config.data, None
    gpu._bind(get_algo("rlpd"), build("configs/rlpd/pendulum.yaml", {**overrides, "train.device": "cuda"}), *PENDULUM)
    host, device = gpu._data_needs()
    assert [h.nbytes for h in host] == [unpacked + n * per] and [d.nbytes for d in device] == [n * per]
    assert "data.path" in device[0].subject and device[0].fix == "use a smaller dataset or lower train.replay_size"


# -- 3. a population's members' states ------------------------------------------------------------------


def test_population_counts_its_members_states_and_names_its_member_keys(tmp_path, monkeypatch):
    from rlfunc.runtime import population as pr
    from rlfunc.runtime import population_members as members_of

    def config(replay_size: int, hidden: int):
        return build_config({
            "algo": "sac", "env": {"id": "Pendulum-v1"},
            "train": {**TRAIN, "total_steps": 100, "learning_starts": 10, "replay_size": replay_size, "eval_every": 100,
                      "population": {"seeds": [0, 1, 2]}},
            "agent": {"hidden_sizes": [hidden, hidden], "batch_size": 8},
        })

    cfg = config(100, 256)
    one = bound(get_algo("sac").learner_cls, "sac", members_of.member_specs(cfg)[0].config, PENDULUM)
    replay, state = one._replay_need().nbytes, memory.network_need(one.algo, one.config, *PENDULUM).nbytes
    # Room for 3 replays and 4 states: the old check (3 replays) passed, but 3 replays and 6 states do not fit.
    monkeypatch.setattr(memory, "available_bytes", lambda device: 3 * replay + 4 * state)
    with pytest.raises(ConfigError, match=r"^The agent's networks \(agent\.hidden_sizes=\[256, 256\], agent\.num_critics=2\) "
                       rf"of 3 members need {memory.format_bytes(6 * state)} for parameters, targets and optimizer state "
                       r"\(each member's and their stacked copy, .*\), but only .* of memory is available; lower "
                       r"agent\.hidden_sizes or agent\.num_critics or give fewer members \(train\.population\.seeds or "
                       r"train\.population\.grid, the CLI's --seeds or --grid\)\.$"):
        pr.PopulationTrainer(cfg, tmp_path / "a")
    # The replay's refusal names the member keys too (not "the population's size").
    big = config(10_000_000, 8)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 2 * 360_000_000)
    with pytest.raises(ConfigError, match=r"for each of 3 members needs .* lower train\.replay_size or give fewer members "
                       r"\(train\.population\.seeds or train\.population\.grid, the CLI's --seeds or --grid\)\.$") as info:
        pr.PopulationTrainer(big, tmp_path / "b")
    assert "population's size" not in str(info.value)
    monkeypatch.setattr(memory, "available_bytes", lambda device: 3 * replay + 6 * state + 100_000_000)
    pt = pr.PopulationTrainer(cfg, tmp_path / "c")  # room for both: built
    pt.close_envs()


# -- 4. a uniform replay on another device is allocated there -------------------------------------------


class _HostAllocations(TorchDispatchMode):
    """The largest CPU storage any op creates (views of a small storage, such as ``expand``'s, are small)."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.largest = max(self.largest, t.untyped_storage().nbytes())
        return out


@pytest.mark.parametrize("which", ["single", "population"])
def test_uniform_replay_on_another_device_is_never_built_in_host_memory(which):
    from rlfunc.replay.population import PopulationReplay
    from rlfunc.replay.uniform import UniformReplay

    cap = 100_000
    rows = TensorDict({"obs": torch.zeros(4, 17), "action": torch.zeros(4, 6), "reward": torch.zeros(4),
                       "next_obs": torch.zeros(4, 17), "terminated": torch.zeros(4)}, batch_size=[4])
    with _HostAllocations() as seen:  # `meta` stands in for `cuda`: nothing device-specific but the device
        if which == "single":
            replay = UniformReplay(cap, device="meta")
            replay.add(rows)
            storage = replay.storage
        else:
            replay = PopulationReplay(2, cap, device="meta")
            replay.add_rows([2, 2], rows)
            storage = replay.storage
    assert seen.largest < cap  # the rows themselves, never a [capacity] copy of a key (obs: 100k x 17 x 4 bytes = 6.8 MB)
    lead = (cap,) if which == "single" else (2, cap)
    assert storage.device.type == "meta" and storage.batch_size == lead
    assert {k: (v.dtype, tuple(v.shape)) for k, v in storage.items()} == {
        k: (v.dtype, (*lead, *v.shape[1:])) for k, v in rows.items()
    }
    on_cpu = UniformReplay(8)  # on the CPU: the same storage as before, zeros of the rows' dtypes
    on_cpu.add(rows)
    assert all(bool((v[4:] == 0).all()) and v.dtype == rows[k].dtype for k, v in on_cpu.storage.items())


# -- 5. DrQ-v2's update working memory ------------------------------------------------------------------


def test_drqv2_counts_an_updates_working_memory():
    """Measured on the CPU (peak RSS growth of one learn(), batch 256, 84x84x9, 4x32 convs): 871 MB; at
    batch 64 264 MB; 64x64 images at 256: 528 MB. The old count was the float32 rows alone (130 MB)."""
    from rlfunc.runtime.learners.pixel import PixelLearner

    def need(batch: int, size: int = 84):
        cfg = build("configs/drqv2/cartpole_balance.yaml", {"agent.batch_size": batch})
        spaces = (gym.spaces.Box(0, 255, (9, size, size), dtype=np.uint8), PIXELS[1])
        return bound(PixelLearner, "drqv2", cfg, spaces)._batch_need()

    for (batch, size), measured in {(256, 84): 871e6, (64, 84): 264e6, (256, 64): 528e6}.items():
        got = need(batch, size).nbytes
        assert measured <= got <= 1.1 * measured, (batch, size, got)
    n = need(256)
    assert n.subject == "agent.batch_size=256" and n.fix == "lower agent.batch_size"
    assert "working memory" in n.what


# -- 6. a cgroup's page cache ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 1])
def test_cgroup_page_cache_that_can_be_reclaimed_is_not_counted_as_used(tmp_path, monkeypatch, version):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       67108864 kB\nMemAvailable:   33554432 kB\n")  # 32 GiB free on the host
    limit, usage, inactive = 8_000_000_000, 5_700_000_000, 3_400_000_000  # a container that wrote checkpoints
    if version == 2:
        files = ("memory.max", "memory.current", "memory.stat", "inactive_file")
        stat = f"anon 2300000000\nfile 3400000000\nactive_file 0\ninactive_file {inactive}\n"
    else:
        files = ("memory.limit_in_bytes", "memory.usage_in_bytes", "memory.stat", "total_inactive_file")
        stat = f"cache 3400000000\nrss 2300000000\ninactive_file 1\ntotal_rss 2300000000\ntotal_inactive_file {inactive}\n"
    (tmp_path / files[0]).write_text(f"{limit}\n")
    (tmp_path / files[1]).write_text(f"{usage}\n")
    (tmp_path / files[2]).write_text(stat)
    monkeypatch.setattr(memory, "_MEMINFO", str(meminfo))
    monkeypatch.setattr(memory, "_CGROUPS", ((str(tmp_path / files[0]), str(tmp_path / files[1]),
                                              str(tmp_path / files[2]), files[3]),))
    assert memory.available_bytes("cpu") == limit - (usage - inactive)  # 5.7 GB, not limit - usage = 2.3 GB
    (tmp_path / files[2]).write_text("")  # no stat: the usage as it is
    assert memory.available_bytes("cpu") == limit - usage
    (tmp_path / files[0]).write_text("max\n")  # no limit: the host's MemAvailable
    assert memory.available_bytes("cpu") == 32 * 1024**3
