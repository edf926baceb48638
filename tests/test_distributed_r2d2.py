"""Distributed R2D2 on Ray actors (rlfunc.scale.distributed, #25 §2).

Without Ray: windows moved from an actor's outbox equal the single-process replay's; an actor (in
this process) produces the single-process collector's windows, stored states and priorities for
the same seed and epsilons; the epsilon ladder is split over actors; the config and Ray-missing
sentences. Pixel agents (MinAtar): two actors' chunks, interleaved in the learner's frame replay,
hold the single-process pixel collector's windows (frames gathered by sample, stored states,
priorities), and each chunk carries each frame once plus small per-window metadata. With Ray (loopback, dashboard off, each test bounded, shut down after the module): a
Ray actor returns the in-process actor's chunk; a run whose actor is killed by pid goes on, the
actor is restarted, its death is counted once and the counters are exact; with max_restarts=0 one
death stops the run in one sentence; an actor Ray cannot place (another job holds its CPU) reserves
no steps and the run ends; with no actor placed the run stops in one sentence; parameter versions reach the actors; an
unreachable address and too many CPUs are one sentence; `rlfunc train` of the shipped configs
(CartPole and MinAtar), then `rlfunc resume`.
"""

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch
import yaml
from helpers_ray import InstantRay
from tensordict import TensorDict

from rlfunc.core.exploration import actor_epsilons
from rlfunc.envs import build_wrappers, make_vector_env
from rlfunc.replay.prioritized import PrioritizedSequenceReplay
from rlfunc.replay.sequence import SequenceReplay
from rlfunc.runtime.collector import Collector
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, to_dict
from rlfunc.runtime.registry import get_algo
from rlfunc.scale import distributed
from rlfunc.scale.distributed import ActorProcess, actor_epsilon_slice, window_priorities

ROOT = Path(__file__).resolve().parents[1]
HAS_RAY = importlib.util.find_spec("ray") is not None
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

TINY = {
    "algo": "r2d2",
    "env": {"id": "CartPole-v1", "wrappers": ["mask_velocity"]},
    "distributed": {"actors": 2, "envs_per_actor": 2, "param_sync_steps": 64, "param_sync_updates": 2,
                    "max_replay_ratio": 0.5},
    "train": {"total_steps": 2400, "learning_starts": 16, "replay_size": 500, "eval_every": 100000,
              "eval_episodes": 1, "checkpoint_every": 100000, "log_every": 200, "threads": 1,
              "tensorboard": False, "progress": False, "seed": 3},
    "agent": {"encoder_sizes": [16], "lstm_size": 16, "head_sizes": [16], "burn_in": 2, "sequence_length": 4,
              "sequence_period": 2, "batch_size": 8, "target_period": 50},
}


def _tiny(**overrides):
    return apply_overrides(TINY, overrides)


# ----------------------------------------------------------------------------- without Ray


def test_windows_drained_from_an_outbox_equal_the_directly_added_ones():
    g = torch.Generator().manual_seed(0)
    n, T = 3, 6
    direct = PrioritizedSequenceReplay(64, T, n, period=3)
    outbox, moved = SequenceReplay(20, T, n, period=3), PrioritizedSequenceReplay(64, T, n, period=3)
    for t in range(40):
        step = TensorDict({"obs": torch.randn(n, 2, generator=g), "reward": torch.randn(n, generator=g),
                           "terminated": torch.rand(n, generator=g) < 0.1,
                           "truncated": torch.zeros(n, dtype=torch.bool)}, [n])
        carry = TensorDict({"h": torch.randn(n, 4, generator=g)}, [n])
        direct.add(step, carry)
        outbox.add(step, carry)
        if t % 5 == 4 or t == 39:
            w = outbox.drain()
            moved.add_windows(w, torch.arange(w.batch_size[0], dtype=torch.float32) + 1.0)
    k = len(direct)
    assert k == len(moved) == moved.windows_added > 10
    assert (direct.storage[:, :k] == moved.storage[:, :k]).all()
    assert (direct._carry[:k] == moved._carry[:k]).all() and (direct._info[:k] == moved._info[:k]).all()
    assert len(outbox) == 0 and moved.priorities(torch.arange(k)).min() >= 1.0  # the given priorities, not the max


def test_an_actor_produces_the_single_process_collectors_windows_states_and_priorities():
    """One actor with 3 envs against the single-process R2D2 learner with the same 3 envs, seed and
    parameters: the same windows (every key), stored carries, window starts, and priorities equal
    to the R2D2 loss's on the single-process windows."""
    raw = _tiny(**{"distributed.actors": 1, "distributed.envs_per_actor": 3, "distributed.param_sync_steps": 150})
    single_raw = {k: v for k, v in raw.items() if k != "distributed"}
    single_raw = apply_overrides(single_raw, {"env.num_envs": 3, "train.learning_starts": 400})
    single = build_config(single_raw)
    env = make_vector_env("CartPole-v1", 3, wrappers=build_wrappers(["mask_velocity"]))
    learner = get_algo("r2d2").make_learner(single, env.single_observation_space, env.single_action_space)
    actor = ActorProcess(to_dict(build_config(raw)), 0)
    assert torch.equal(actor.epsilons, learner.epsilons) and torch.equal(actor.epsilons, actor_epsilons(3))
    published = TensorDict({"params": learner.state["params"], "target": learner.state["target"],
                            "version": torch.tensor(0)}, [])
    chunk = actor.collect(published, 150)

    collector = Collector(env, seed=single.train.seed)
    collector.reset(seed=single.train.seed)
    steps = 0
    while steps < chunk["env_steps"]:
        actions = learner.explore(collector.obs, steps, episode_start=collector.episode_start)
        rows, _ = collector.step(actions)
        learner.observe(rows)
        steps += rows.batch_size[0]
    assert steps == chunk["env_steps"]
    replay, windows = learner.replay, chunk["windows"]
    k = windows.batch_size[0]
    assert k == len(replay) > 20
    mine = windows["steps"].transpose(0, 1)
    for key in replay.storage.keys():
        assert torch.equal(mine[key], replay.storage[key][:, :k]), key
    for key in ("h", "c", "prev_action", "prev_reward"):
        assert torch.equal(windows["init_carry", key], replay._carry[key][:k]), key
    assert torch.equal(windows["start"], replay._info["start"][:k]) and torch.equal(windows["env"], replay._info["env"][:k])
    assert windows["init_carry", "h"].abs().sum() > 0  # states stored mid-episode, not only zeros
    batch = replay.storage[:, :k].clone()
    batch["init_carry"] = replay._carry[:k].expand(batch.batch_size[0], k)
    with torch.no_grad():
        _, aux = get_algo("r2d2").algo.loss(learner.state["params"], learner.state["target"], single.agent, batch)
    assert torch.equal(chunk["priorities"], aux["priorities"]) and (chunk["priorities"] > 0).all()
    assert chunk["version"] == 0 and chunk["returns"]


PIXEL = {
    "algo": "r2d2",
    "env": {"id": "MinAtar/Breakout-v0"},
    "distributed": {"actors": 2, "envs_per_actor": 3, "param_sync_steps": 60, "param_sync_updates": 2,
                    "max_replay_ratio": 0.5},
    "train": {"total_steps": 2400, "learning_starts": 4, "replay_size": 500, "eval_every": 100000,
              "eval_episodes": 1, "checkpoint_every": 100000, "log_every": 200, "threads": 1,
              "tensorboard": False, "progress": False, "seed": 3},
    "agent": {"encoder": "minatar", "encoder_sizes": [], "lstm_size": 16, "head_sizes": [16], "burn_in": 2,
              "sequence_length": 4, "sequence_period": 2, "batch_size": 8, "target_period": 50},
}
needs_minatar = pytest.mark.skipif(importlib.util.find_spec("minatar") is None,
                                   reason="needs the minatar extra: pip install -e '.[minatar]'")


@pytest.fixture(scope="module")
def pixel_chunks():
    """Two in-process MinAtar actors (3 envs each), 4 chunks each, and a distributed learner whose frame
    replay took them interleaved (actor 0, actor 1, actor 0, ...). Each chunk keeps, besides what the actor
    sent, its windows with the frames gathered from the actor's own outbox (``gathered``)."""
    cfg = build_config(PIXEL)
    env = make_vector_env("MinAtar/Breakout-v0", 3)
    entry = get_algo("r2d2")
    learner = entry.make_learner(cfg, env.single_observation_space, env.single_action_space)
    published = TensorDict({"params": learner.state["params"], "target": learner.state["target"],
                            "version": torch.tensor(0)}, [])
    actors = [ActorProcess(to_dict(cfg), k) for k in range(2)]
    chunks = []
    for _ in range(4):
        for actor in actors:
            chunk = actor.collect(published, 60)
            chunk["gathered"] = actor.outbox.with_frames(chunk["windows"]["steps"])
            chunk["rows"] = learner.replay.add_chunk((chunk["actor"], chunk["pid"]), chunk["frames_from"],
                                                     chunk["frames"], chunk["windows"], chunk["priorities"])
            chunks.append(chunk)
    return cfg, env, learner, actors, chunks


@needs_minatar
def test_pixel_actors_fill_the_learner_frame_replay_with_the_single_process_windows(pixel_chunks):
    """Actor 0's windows in the distributed learner's frame replay (frames gathered by sample, stored
    states, starts, priorities) are the single-process pixel collector's for the same seed and epsilons,
    although actor 1's frames interleave with its frames in the learner's ring."""
    cfg, env, learner, actors, chunks = pixel_chunks
    replay = learner.replay
    assert type(replay).__name__ == "PrioritizedFrameSequenceReplay" and replay.frame_envs == 6
    assert replay.frames_written == sum(c["frames"].shape[0] for c in chunks)  # every frame sent came in once
    single_raw = apply_overrides({k: v for k, v in PIXEL.items() if k != "distributed"},
                                 {"env.num_envs": 3, "train.learning_starts": 400})
    single = build_config(single_raw)
    ref = get_algo("r2d2").make_learner(single, env.single_observation_space, env.single_action_space)
    ref._epsilons = actors[0].epsilons.clone()  # the same epsilons (actor 0's slice of the ladder over 6 envs)
    ref.state = learner.state.clone()
    mine = [c for c in chunks if c["actor"] == 0]
    collector = Collector(env, seed=single.train.seed)
    collector.reset(seed=single.train.seed)
    steps = 0
    while steps < sum(c["env_steps"] for c in mine):
        actions = ref.explore(collector.obs, steps, episode_start=collector.episode_start)
        rows, _ = collector.step(actions)
        ref.observe(rows)
        steps += rows.batch_size[0]
    assert steps == sum(c["env_steps"] for c in mine)
    assert ref.replay.frames_written == sum(c["frames"].shape[0] for c in mine)  # frames once, as one process
    k = len(ref.replay)
    rows = torch.cat([c["rows"] for c in mine])
    assert rows.numel() == k > 30 and len(replay) == sum(c["rows"].numel() for c in chunks)
    expected = ref.replay.with_frames(ref.replay.storage[:, :k])
    got = replay.with_frames(replay.storage[:, rows])
    assert expected["obs"].dtype == torch.uint8 and expected["obs"].float().sum() > 0
    for key in expected.keys():
        assert torch.equal(got[key], expected[key]), key
    for key in ("h", "c", "prev_action", "prev_reward"):
        assert torch.equal(replay._carry[key][rows], ref.replay._carry[key][:k]), key
    assert torch.equal(replay._info["start"][rows], ref.replay._info["start"][:k])
    # priorities: the R2D2 loss's on the single-process windows, stored as the actor sent them
    batch = expected.clone()
    batch["init_carry"] = ref.replay._carry[:k].expand(batch.batch_size[0], k)
    sent = torch.cat([c["priorities"] for c in mine])
    scored = []  # the actor scores each chunk's windows as one batch: the same shapes here, so bit for bit
    for part in batch.split([c["rows"].numel() for c in mine], dim=1):
        with torch.no_grad():
            _, aux = get_algo("r2d2").algo.loss(learner.state["params"], learner.state["target"], single.agent, part)
        scored.append(aux["priorities"])
    assert torch.equal(sent, torch.cat(scored)) and (sent > 0).all()
    assert torch.allclose(replay.priorities(rows), sent.double(), rtol=1e-5)
    # sample gathers, through the renumbering, the frames each actor's outbox held (both actors)
    at = {int(r): (c, i) for c in chunks for i, r in enumerate(c["rows"].tolist())}
    sample = replay.sample(64, generator=torch.Generator().manual_seed(0))
    for j, r in enumerate(sample["window"][0].tolist()):
        c, i = at[r]
        for key in ("obs", "next_obs", "action", "mask"):
            assert torch.equal(sample[key][:, j], c["gathered"][key][i]), key
    assert {at[r][0]["actor"] for r in sample["window"][0].tolist()} == {0, 1}


@needs_minatar
def test_pixel_chunks_send_each_frame_once(pixel_chunks):
    """A chunk's bytes are its new frames, each once, plus small per-window metadata (frame numbers,
    action, reward, flags, the stored state, start, priority), not a copy of every window's frames."""
    cfg, env, learner, actors, chunks = pixel_chunks
    T = cfg.agent.burn_in + cfg.agent.sequence_length
    frame_bytes = 10 * 10 * 4  # MinAtar Breakout: 4 uint8 planes of 10 x 10
    copied = 0
    for c in chunks:
        k, m = c["windows"].batch_size[0], c["frames"].shape[0]
        carry = sum(v[0].numel() * v.element_size() for v in c["windows"]["init_carry"].values(True, True))
        per_window = T * (8 + 8 + 8 + 4 + 1 + 1 + 1) + carry + 8 + 8 + 4  # frame numbers, action, reward, flags, mask
        assert distributed.chunk_bytes(c) == m * frame_bytes + k * per_window
        assert c["frames"].dtype == torch.uint8 and m <= c["env_steps"] + 3 + len(c["returns"])  # + episode firsts
        copied += k * T * 2 * frame_bytes  # windows of copied frames: obs and next_obs of every step
    for actor in (0, 1):  # each frame number in exactly one chunk; windows read only frames already sent
        mine = [c for c in chunks if c["actor"] == actor]
        assert [c["frames_from"] for c in mine] == [sum(c["frames"].shape[0] for c in mine[:i]) for i in range(len(mine))]
        for c in mine:
            steps = c["windows"]["steps"]
            read = torch.cat([steps["obs_frame"][steps["mask"]], steps["next_frame"][steps["mask"]]])
            assert read.max() < c["frames_from"] + c["frames"].shape[0]
        read = torch.cat([torch.cat([c["windows"]["steps", k][c["windows"]["steps", "mask"]] for c in mine])
                          for k in ("obs_frame", "next_frame")]).unique()
        sent = sum(c["frames"].shape[0] for c in mine)
        assert sent - 3 * (T + 1) <= read.numel() <= sent  # all but the open episodes' frames are read
    # short random-policy Breakout episodes (about 8 steps) hold few overlapping windows, and still:
    assert sum(c["frames"].numel() for c in chunks) < copied / 1.5
    import pickle

    c = chunks[-1]
    wire = {key: v for key, v in c.items() if key not in ("gathered", "rows")}
    assert len(pickle.dumps(wire, protocol=5)) < distributed.chunk_bytes(c) + 16_000  # what Ray serializes


def test_resumed_and_restarted_actors_never_seed_the_evaluation_episodes():
    """A resumed run's fresh actors were seeded ``seed + index * envs + start_step``: resumed at env step
    10,000 (a multiple of checkpoint_every), they stepped through the evaluation episodes' seeds
    ``seed + 10_000 + j``. Fresh actors of a new run keep the single-process rule, ``seed + i``."""
    from rlfunc.scale.distributed import actor_seeds, spread_seed

    assert actor_seeds(3, 1, 4) == (7, 3 + 1 + 1_000_003)  # a new run: env i of the whole set seeds seed + i
    for seed in (0, 5, 2**32 - 1):
        eval_seeds = set(range(seed + 10_000, seed + 10_000 + 100))
        for start in range(1000, 200_001, 1000):
            for index in range(14):
                env_seed, noise_seed = actor_seeds(seed, index, 1, start)
                assert env_seed not in eval_seeds and 0 <= env_seed < 2**32 and 0 <= noise_seed < 2**32
    assert actor_seeds(0, 0, 1, 10_000) != actor_seeds(0, 0, 1, 11_000) != actor_seeds(0, 1, 1, 10_000)
    assert spread_seed(7, 123) == spread_seed(7, 123) != spread_seed(7, 124)  # reproducible, distinct


def test_the_epsilon_ladder_is_split_over_the_actors():
    slices = [actor_epsilon_slice(4, 3, k) for k in range(4)]
    assert torch.equal(torch.cat(slices), actor_epsilons(12))
    assert slices[0][0] == pytest.approx(0.4) and slices[-1][-1] == pytest.approx(0.4**8)


def test_chunks_arriving_together_are_held_by_min_replay_ratio_so_a_short_run_still_learns(tmp_path):
    """Every queued chunk is returned by one wait: the replay ratio's start is set when the replay first
    holds learning_starts windows (while inserting), so min_replay_ratio holds the actors asked again
    after those chunks. (Set only when the loop next asked whether to update, it let every chunk of a
    short run be collected first: the run ended with no update, a flaky CI failure.)"""
    raw = _tiny(**{"train.total_steps": 400, "train.learning_starts": 8, "distributed.param_sync_steps": 50,
                   "distributed.max_replay_ratio": 0.05, "distributed.min_replay_ratio": 0.04})
    trainer = distributed.DistributedTrainer(build_config(raw), tmp_path / "run", None, InstantRay())
    trainer.run()
    assert trainer.env_step >= 400 and trainer.ratio_from is not None
    steps = trainer.env_step - trainer.ratio_from
    assert 0.04 * (steps - 2 * 2 * 50) <= trainer.learner_calls <= 0.05 * steps and trainer.learner_calls >= 10


@pytest.mark.parametrize("change, sentence", [
    ({"algo": "drqn"}, r"^The distributed section is not available for drqn .*; remove it or use algo r2d2\.$"),
    ({"algo": "sac", "env": {"id": "Pendulum-v1"}, "agent": {}},
     r"^The distributed section trains R2D2 on Ray actors; algo 'sac' has no distributed path, remove the section\.$"),
    ({"env": {"id": "CartPole-v1", "num_envs": 4}}, r"^env\.num_envs=4 is not used by a distributed run; set distributed\.envs_per_actor"),
    ({"distributed": {"actorz": 2}}, r"^Unknown config key 'distributed\.actorz'; did you mean 'actors'\?$"),
    ({"distributed": {"min_replay_ratio": 1.0}}, r"^distributed\.min_replay_ratio must be between 0 \(off\) and distributed\.max_replay_ratio"),
])
def test_config_refusals_are_one_sentence(change, sentence):
    raw = {**TINY, **change}
    if change.get("algo") == "drqn":
        raw["agent"] = {}
    with pytest.raises(ConfigError, match=sentence):
        build_config(raw)


def test_ray_missing_is_one_sentence_before_anything_is_written(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ConfigError, match=r'needs Ray, which is not installed; install it with pip install -e "\.\[ray\]"\.$'):
        distributed.train(build_config(TINY), run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- with Ray


@pytest.mark.skipif(not HAS_RAY, reason="Ray is not installed (pip install -e '.[ray]')")
def test_an_unreachable_address_is_one_sentence_before_anything_is_written(tmp_path):
    """`rlfunc train` in a fresh process (the address check happens before any Ray starts or joins)."""
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(_tiny(**{"distributed.address": "127.0.0.1:1"})))
    proc = subprocess.run([sys.executable, "-m", "rlfunc.runtime.cli", "train", str(config), "--run-dir", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode != 0
    assert re.search(r"Cannot reach a Ray cluster at '127\.0\.0\.1:1' \([^)]*\); start one with `ray start --head` "
                     r"or check distributed\.address\.", proc.stderr), proc.stderr[-2000:]
    assert not (tmp_path / "run").exists()


@pytest.fixture(scope="module")
def ray_local():
    if not HAS_RAY:
        pytest.skip("Ray is not installed (pip install -e '.[ray]')")
    import ray

    ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False, num_cpus=2,
             log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture
def bounded():
    """Each Ray test ends within 120 s (SIGALRM)."""
    def expire(signum, frame):
        raise TimeoutError("test_distributed_r2d2: a test ran past 120 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(120)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


class KillActor0:
    """Kills actor 0's process (by pid) at the first log after learning started, then, at the first log
    after the learner trained on without it, waits for the restarted process to answer. Waiting early
    leaves most of the run for the new process's chunks: a restart (a fresh Python importing torch) takes
    seconds, and the whole run can take less on a fast idle machine."""

    def __init__(self):
        self.killed = self.restarted_pid = None
        self.calls_at_kill = self.calls_after = None

    def on_log(self, run, row):
        pids = [c[4] for c in run.chunks if c[0] == 0]
        if self.killed is None and run.learner_calls > 0 and pids:
            self.killed = pids[-1]
            self.calls_at_kill = run.learner_calls
            os.kill(self.killed, signal.SIGKILL)
        elif self.killed is not None and self.restarted_pid is None and run.learner_calls > self.calls_at_kill:
            self.calls_after = run.learner_calls
            for _ in range(120):  # calls fail with ActorUnavailableError while Ray restarts the process
                try:
                    self.restarted_pid = run.ray.get(run.actors[0].info.remote(), timeout=60)["pid"]
                    break
                except run.ray.exceptions.ActorUnavailableError:
                    time.sleep(0.5)


def test_a_killed_actor_is_restarted_the_learner_goes_on_and_the_counters_are_exact(ray_local, bounded, tmp_path):
    import rlfunc

    kill = KillActor0()
    runs = []
    result = rlfunc.train(_tiny(**{"train.total_steps": 3200}), run_dir=tmp_path / "run",
                          callbacks=[kill, type("Keep", (), {"on_end": lambda self, run, reason: runs.append(run)})()])
    run = runs[0]
    assert kill.killed is not None and run.actor_failures >= 1
    assert run.actor_deaths == 1, "one death, however many calls it failed"
    assert kill.restarted_pid not in (None, kill.killed)
    assert run.actor_restarts == 1 and {c[4] for c in run.chunks if c[0] == 0} == {kill.killed, kill.restarted_pid}
    assert kill.calls_after > kill.calls_at_kill  # the learner trained while the actor restarted
    # exact counters: every inserted chunk counted once, nothing of the dead actor's lost call
    assert result.env_steps == run.env_step == sum(c[2] for c in run.chunks) >= 3200
    assert run.learner.replay.windows_added == sum(c[3] for c in run.chunks)
    assert run.learner_calls == int(run.learner.state["step"]) == result.gradient_steps > 0
    assert run.learner_calls <= 0.5 * (run.env_step - run.ratio_from)  # the replay-ratio bound
    # parameter versions reach the actors, in order
    versions = {k: [c[1] for c in run.chunks if c[0] == k] for k in (0, 1)}
    assert max(versions[0] + versions[1]) > 0
    assert all(v == sorted(v) for v in versions.values())
    meta = json.loads(next((tmp_path / "run" / "checkpoints").glob("step_*/meta.json")).read_text())
    assert meta["env_step"] == run.env_step and meta["updates"] == run.learner_calls
    assert meta["distributed"]["param_version"] == run.version


def test_a_chunk_lost_with_its_node_is_collected_again_and_the_counters_stay_exact(
        ray_local, bounded, tmp_path, monkeypatch, capsys):
    """On a cluster a finished chunk lives in its node's object store; when that node is lost, ``ray.get``
    raises ObjectLostError, not an actor error, and the learner ended the run with a traceback. The chunk is
    dropped (its steps were never counted), its actor asked again, and the run goes on."""
    import rlfunc

    real_get, lost = ray_local.get, []

    def get(ref, *args, **kwargs):
        out = real_get(ref, *args, **kwargs)
        if not lost and isinstance(out, dict) and "windows" in out:
            lost.append(out["env_steps"])
            raise ray_local.exceptions.ObjectLostError(ref.hex(), None, "a test standing in for a lost node")
        return out

    monkeypatch.setattr(ray_local, "get", get)
    runs = []
    result = rlfunc.train(_tiny(**{"train.total_steps": 1600}), run_dir=tmp_path / "run",
                          callbacks=[type("Keep", (), {"on_end": lambda self, run, reason: runs.append(run)})()])
    run = runs[0]
    assert lost and run.actor_failures >= 1 and run.actor_deaths == 0
    assert result.env_steps == run.env_step == sum(c[2] for c in run.chunks) >= 1600
    assert run.learner.replay.windows_added == sum(c[3] for c in run.chunks)
    assert "was lost before the learner read it" in capsys.readouterr().err


def test_with_max_restarts_0_one_death_stops_the_run_in_one_sentence(ray_local, bounded, tmp_path, capsys):
    """Ray does not restart the actor: the run stops at its first death, which is counted once (both queued
    calls fail with it), and nothing says Ray restarts it. (It said so once per failed call, and stopped with
    "died 3 times" after one death.)"""
    import rlfunc

    class Kill:
        killed = None

        def on_log(self, run, row):
            if self.killed is None and any(c[0] == 0 for c in run.chunks):
                self.killed = [c[4] for c in run.chunks if c[0] == 0][-1]
                os.kill(self.killed, signal.SIGKILL)

    kill = Kill()
    with pytest.raises(ConfigError, match=(
        r"^Distributed actor 0 died 1 time and Ray restarts an actor at most distributed\.max_restarts=0 times, so "
        r"the run stopped at env step \d+: raise distributed\.max_restarts or find what ends the actor, then continue "
        r"with `rlfunc resume .*`: The actor died .*\.$")):
        rlfunc.train(_tiny(**{"train.total_steps": 100_000, "train.log_every": 100, "distributed.max_restarts": 0}),
                     run_dir=tmp_path / "run", callbacks=[kill])
    assert kill.killed is not None
    assert "restarts it" not in capsys.readouterr().err


@pytest.fixture
def hog(ray_local):
    """Holds CPUs of the 2-CPU Ray the way another job would: ``hog(n)`` starts an actor holding ``n``."""
    held, taken = [], []

    class Hog:  # defined here: Ray sends it by value (the workers cannot import the test module)
        def ping(self):
            return os.getpid()

    def start(cpus):
        actor = ray_local.remote(num_cpus=cpus)(Hog).remote()
        ray_local.get(actor.ping.remote(), timeout=60)
        held.append(actor)
        taken.append(cpus)
        # Ray's available_resources() is synced periodically: wait (bounded) until it shows the held CPUs, as
        # the run's "N of M free now" line reads it (under a loaded full suite it lagged and the line was missing).
        total = ray_local.cluster_resources().get("CPU", 0.0)
        deadline = time.monotonic() + 20
        while ray_local.available_resources().get("CPU", 0.0) > total - sum(taken) + 1e-9:
            assert time.monotonic() < deadline, "Ray never showed the held CPUs as taken"
            time.sleep(0.1)

    yield start
    for actor in held:
        ray_local.kill(actor)


def test_an_actor_ray_cannot_place_reserves_no_steps_and_the_run_ends(ray_local, bounded, hog, tmp_path, capsys):
    """Another job holds 1 of the 2 CPUs: one of the two actors is never placed. It is asked for nothing until
    it is up, so the other collects every step and the run ends, with exact counters. (Its two queued calls held
    back their steps: near the end the placed actor was asked for nothing and the run waited forever.) Which of
    the two Ray places is its scheduler's choice, not creation order: one run of the suite placed actor 1."""
    import rlfunc

    hog(1)
    runs = []
    result = rlfunc.train(_tiny(**{"train.total_steps": 800}), run_dir=tmp_path / "run",
                          callbacks=[type("Keep", (), {"on_end": lambda self, run, reason: runs.append(run)})()])
    run = runs[0]
    assert len({c[0] for c in run.chunks}) == 1  # one actor placed, whichever Ray chose
    assert result.env_steps == run.env_step == sum(c[2] for c in run.chunks)
    assert 800 <= run.env_step < 800 + 2  # at most envs_per_actor - 1 past the end
    assert run.learner.replay.windows_added == sum(c[3] for c in run.chunks)
    assert "the Ray cluster has 1 of 2 free now" in capsys.readouterr().err


def test_no_actor_running_stops_the_run_in_one_sentence(ray_local, bounded, hog, tmp_path, monkeypatch):
    """Other jobs hold every CPU: no actor can be placed, and after ACTOR_START_TIMEOUT_S the run stops in
    one sentence instead of waiting forever."""
    import rlfunc

    hog(2)
    monkeypatch.setattr(distributed, "ACTOR_START_TIMEOUT_S", 3.0)
    t0 = time.monotonic()
    with pytest.raises(ConfigError, match=(
        r"^No distributed actor has been running for 3 s: each asks Ray for 1 CPU and the Ray cluster has 0 of 2 CPUs "
        r"free; stop what holds them, lower distributed\.actor_cpus, or add nodes to the cluster\.$")):
        rlfunc.train(_tiny(**{"distributed.actors": 1}), run_dir=tmp_path / "run")
    assert time.monotonic() - t0 < 30


def test_a_ray_actor_returns_the_in_process_actors_chunk(ray_local, bounded):
    raw = to_dict(build_config(_tiny(**{"distributed.actors": 1})))
    cfg = build_config(raw, resolved=True)
    state = get_algo("r2d2").algo.init(cfg.agent, gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=1)
    published = TensorDict({"params": state["params"], "target": state["target"], "version": torch.tensor(7)}, [])
    remote = ray_local.remote(ActorProcess).options(num_cpus=1).remote(raw, 0)
    got = ray_local.get(remote.collect.remote(published, 100), timeout=60)
    ray_local.kill(remote)
    local = ActorProcess(raw, 0).collect(published, 100)
    assert got["version"] == 7 and got["env_steps"] == local["env_steps"]
    assert (got["windows"] == local["windows"]).all() and torch.equal(got["priorities"], local["priorities"])
    assert window_priorities(get_algo("r2d2").algo, published, cfg.agent, local["windows"]).shape == (local["windows"].batch_size[0],)


def test_too_many_cpus_is_one_sentence(ray_local, bounded):
    with pytest.raises(ConfigError, match=(
        r"^distributed\.actors=3 x distributed\.actor_cpus=1 ask for 3 CPUs but the Ray cluster has 2; lower "
        r"distributed\.actors or distributed\.actor_cpus, or add nodes to the cluster\.$"
    )):
        distributed.connect_for(build_config(_tiny(**{"distributed.actors": 3})))
    assert ray_local.is_initialized()  # a Ray this process had started is left running


def test_rlfunc_train_of_the_shipped_config_then_resume(ray_local, bounded, tmp_path, capsys):
    from rlfunc.runtime.cli import main

    sets = ["train.total_steps=1600", "train.learning_starts=16", "train.replay_size=400", "train.eval_every=800",
            "train.eval_episodes=1", "train.checkpoint_every=800", "train.compile=false", "train.progress=false",
            "train.tensorboard=false", "distributed.param_sync_steps=100", "agent.batch_size=8",
            "agent.lstm_size=16", "agent.encoder_sizes=[16]", "agent.head_sizes=[16]"]
    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "r2d2" / "cartpole_novel_distributed.yaml"), "--run-dir", str(run_dir)]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    first = json.loads((run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip() / "meta.json").read_text())
    assert first["env_step"] >= 1600 and first["config"]["distributed"]["actors"] == 2
    assert main(["resume", str(run_dir), "--total-steps", "2400"]) == 0
    assert "fresh actors" in capsys.readouterr().err
    last = json.loads((run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip() / "meta.json").read_text())
    assert last["env_step"] >= 2400 and last["updates"] > first["updates"]
    assert [int(line.split(",")[0]) for line in (run_dir / "eval.csv").read_text().splitlines()[1:]][-1] == last["env_step"]


@needs_minatar
def test_rlfunc_train_of_the_shipped_minatar_config_then_resume(ray_local, bounded, tmp_path, capsys):
    """The shipped pixel config on 2 Ray actors: frames arrive once per chunk into the learner's frame
    replay, it trains, checkpoints (frames included) and resumes with fresh actors."""
    from rlfunc.runtime.checkpoint import load_checkpoint
    from rlfunc.runtime.cli import main

    # 2 actors x 2 queued calls x 50 steps = half the run asked before the replay can hold anyone back
    sets = ["distributed.actors=2", "distributed.envs_per_actor=2", "distributed.param_sync_steps=50",
            "distributed.max_replay_ratio=0.05", "distributed.min_replay_ratio=0.04", "train.total_steps=400",
            "train.learning_starts=8", "train.replay_size=300", "train.eval_every=200", "train.eval_episodes=1",
            "train.checkpoint_every=200", "train.compile=false", "train.progress=false", "train.tensorboard=false",
            "agent.batch_size=8", "agent.lstm_size=16", "agent.head_sizes=[16]", "agent.burn_in=2",
            "agent.sequence_length=4", "agent.sequence_period=2"]
    run_dir = tmp_path / "run"
    args = ["train", str(ROOT / "configs" / "r2d2" / "minatar_breakout_distributed.yaml"), "--run-dir", str(run_dir)]
    assert main(args + [a for s in sets for a in ("--set", s)]) == 0
    tensors, first = load_checkpoint(run_dir)
    assert first["env_step"] >= 400 and first["updates"] > 0 and first["config"]["distributed"]["actors"] == 2
    written = int(tensors["replay", "frames_written"])
    assert first["env_step"] <= written <= first["env_step"] + 4 * (first["env_step"] // 20)  # + one per episode
    assert main(["resume", str(run_dir), "--total-steps", "600"]) == 0
    assert "fresh actors" in capsys.readouterr().err
    tensors, last = load_checkpoint(run_dir)
    assert last["env_step"] >= 600 and last["updates"] > first["updates"]
    assert int(tensors["replay", "frames_written"]) > written


def test_a_learner_held_below_min_replay_ratio_catches_up_without_piling_requests(ray_local, bounded, tmp_path):
    """With distributed.min_replay_ratio close to max_replay_ratio the learner is often behind and the
    actors are held; each held actor is asked again once, when the learner has caught up. (Each held
    actor used to be appended twice per loop turn, so the list of held actors doubled every update
    until the driver spent all its time rebuilding it: a 150k-step run stalled at its first log.)"""
    import rlfunc

    runs = []
    result = rlfunc.train(_tiny(**{"train.total_steps": 1000, "distributed.max_replay_ratio": 0.5,
                                   "distributed.min_replay_ratio": 0.45, "distributed.param_sync_steps": 32}),
                          run_dir=tmp_path / "run",
                          callbacks=[type("Keep", (), {"on_end": lambda self, run, reason: runs.append(run)})()])
    run = runs[0]
    assert result.env_steps == run.env_step >= 1000
    steps = run.env_step - run.ratio_from
    # the learner kept within the bounds: at most max, and at least min short of one actor request
    assert 0.45 * (steps - 2 * 2 * 32) <= run.learner_calls <= 0.5 * steps


needs_atari = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None,
                                 reason="needs the atari extra: pip install -e '.[atari]'")


@needs_atari
def test_stacked_atari_chunks_carry_planes_and_the_learner_rebuilds_the_actors_stacks():
    """configs/r2d2/atari_pong_distributed.yaml's observations are FrameStackObservation stacks of 4: the
    actors' outboxes and the learner's replay store each observation's newest 84x84 plane once, a chunk
    carries those planes (with the number of each one's previous frame), and the learner's stacks, rebuilt
    across chunks and interleaved actors, are the ones each actor's outbox holds (short games: episode
    starts inside the chunks)."""
    from rlfunc.runtime.config import load_config

    raw = apply_overrides(load_config(str(ROOT / "configs/r2d2/atari_pong_distributed.yaml")), {
        "distributed.actors": 2, "distributed.envs_per_actor": 1, "distributed.param_sync_steps": 30,
        "env.kwargs": {"frameskip": 1, "repeat_action_probability": 0.0, "max_num_frames_per_episode": 160},
        "train.replay_size": 200, "train.learning_starts": 4, "train.compile": False, "train.threads": 1,
        "agent.lstm_size": 16, "agent.head_sizes": [16], "agent.burn_in": 2, "agent.sequence_length": 4,
        "agent.sequence_period": 2, "agent.batch_size": 4})
    cfg = build_config(raw)
    env = make_vector_env(cfg.env.id, 1, kwargs=cfg.env.kwargs, wrappers=build_wrappers(cfg.env.wrappers))
    learner = get_algo("r2d2").make_learner(cfg, env.single_observation_space, env.single_action_space)
    env.close()
    replay = learner.replay
    assert replay.frame_stack == 4 and replay.frame_envs == 2
    need = learner._replay_need().nbytes
    assert need < 200 * 41 * 7_100 + 2 * 400 * 7_100 + 200 * 1_000  # a plane per frame, not a stack of 4
    published = TensorDict({"params": learner.state["params"], "target": learner.state["target"],
                            "version": torch.tensor(0)}, [])
    actors = [ActorProcess(to_dict(cfg), k) for k in range(2)]
    assert all(a.outbox.frame_stack == 4 for a in actors)
    chunks = []
    for _ in range(3):
        for actor in actors:
            chunk = actor.collect(published, 30)
            frames = chunk["frames"]
            assert isinstance(frames, TensorDict) and tuple(frames["frames"].shape[1:]) == (84, 84)
            assert distributed.chunk_bytes(chunk) >= frames.shape[0] * (7056 + 8)
            chunk["gathered"] = actor.outbox.with_frames(chunk["windows"]["steps"])
            chunk["rows"] = replay.add_chunk((chunk["actor"], chunk["pid"]), chunk["frames_from"], frames,
                                             chunk["windows"], chunk["priorities"])
            chunks.append(chunk)
    assert sum(len(c["returns"]) for c in chunks) >= 2  # episodes ended (and new ones started) inside chunks
    assert replay.frames_written == sum(c["frames"].shape[0] for c in chunks)
    for c in chunks:
        assert c["rows"].numel() == c["windows"].batch_size[0] > 0
        got = replay.with_frames(replay.storage[:, c["rows"]])
        want = c["gathered"].transpose(0, 1)  # the outbox's windows are [k, T], the storage [T, k]
        assert got["obs"].shape[-3:] == (4, 84, 84) and got["obs"].float().sum() > 0
        for key in ("obs", "next_obs", "mask"):
            assert torch.equal(got[key], want[key]), key
        # the rebuilt stacks are stacks: each next_obs's older planes are its obs's newer ones
        m = want["mask"]
        assert torch.equal(want["next_obs"][:, :, :3][m], want["obs"][:, :, 1:][m])
