"""MinAtar and Atari for DRQN, R2D2 and the DQN control (#26 §1).

* every ``configs/*/minatar_*.yaml`` and ``configs/*/atari_*.yaml`` holds the settings its header
  names and trains a few hundred env steps with tiny overrides (sizes and budgets only; skipped
  with the install command when the minatar or atari extra is missing; a ``*_distributed`` config
  trains its agent in one process here, on Ray actors in ``tests/test_distributed_r2d2.py``);
* the Atari pipeline the configs build (``ale_py:ALE/<Game>-v5``, ``gymnasium.wrappers.
  AtariPreprocessing`` and ``FrameStackObservation`` by name, through rlfunc's env factory) gives
  the observations of gymnasium's reference wrappers for the same seed and actions, and the
  flicker wrapper zeroes whole frames of it;
* MinAtar envs repeat their episodes and flicker for a seed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import rlfunc
from rlfunc.envs import build_wrappers, make_env
from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import build_config, load_config

ROOT = Path(__file__).resolve().parents[1]
MINATAR = sorted(ROOT.glob("configs/*/minatar_*.yaml"))
ATARI = sorted(ROOT.glob("configs/*/atari_*.yaml"))
needs_minatar = pytest.mark.skipif(importlib.util.find_spec("minatar") is None,
                                   reason="needs the minatar extra: pip install -e '.[minatar]'")
needs_atari = pytest.mark.skipif(importlib.util.find_spec("ale_py") is None,
                                 reason="needs the atari extra: pip install -e '.[atari]'")

TINY = {"train.total_steps": 240, "train.eval_every": 240, "train.eval_episodes": 1, "train.checkpoint_every": 240,
        "train.progress": False, "train.tensorboard": False, "train.threads": 1, "train.compile": False,
        "env.num_envs": 2}
TINY_AGENT = {
    "dqn": {"train.learning_starts": 60, "train.replay_size": 500, "agent.batch_size": 4},
    "drqn": {"train.learning_starts": 60, "train.replay_size": 500, "agent.batch_size": 4, "agent.lstm_size": 16},
    "r2d2": {"train.learning_starts": 4, "train.replay_size": 100, "agent.batch_size": 4, "agent.lstm_size": 16,
             "agent.head_sizes": [16], "agent.burn_in": 2, "agent.sequence_length": 4, "agent.sequence_period": 2,
             "agent.samples_per_insert": 1},
}


def _paper_settings(cfg, path: Path) -> None:
    """The settings the config's header promises (what the overrides below do not touch)."""
    a, env = cfg.agent, cfg.env
    d = cfg.distributed
    assert (d is not None) == ("distributed" in path.name)
    if d is not None:  # Ray actors on the 16-core GPU machine: one core per actor, two for the learner and Ray
        assert env.num_envs == 1 and d.actors == 14 and d.actor_cpus == 1
    if "minatar" in path.name:
        assert env.id.startswith("MinAtar/") and a.encoder == "minatar" and tuple(a.encoder_sizes) == ()
        assert cfg.train.total_steps == 5_000_000 and (env.num_envs == 8 if d is None else d.envs_per_actor == 4)
    else:
        assert env.id.startswith("ale_py:ALE/") and a.encoder == "nature"
        # R2D2 acts over all 18 actions, as Acme's make_atari_environment; DRQN (2015) over the game's own set
        assert env.kwargs == {"frameskip": 1, "repeat_action_probability": 0.0,
                              **({"full_action_space": True} if cfg.algo == "r2d2" else {})}
        pre = env.wrappers[0]["gymnasium.wrappers.AtariPreprocessing"]
        assert pre == {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": False,
                       "grayscale_obs": True, "scale_obs": False}
    flicker = [w for w in env.wrappers or [] if isinstance(w, dict) and "flicker" in w]
    assert bool(flicker) == ("flicker" in path.name) and all(w["flicker"] == {"p": 0.5} for w in flicker)
    if cfg.algo == "r2d2":
        assert (a.gamma, a.n_step, a.lr, a.adam_eps, a.target_period, a.priority_eta) == (0.997, 5, 1e-4, 1e-3, 2500, 0.9)
        assert (a.priority_exponent, a.importance_exponent, a.epsilon_base, a.epsilon_alpha) == (0.9, 0.6, 0.4, 7.0)
        assert a.value_rescaling and a.dueling and a.initial_state == "stored"
        if "atari" in path.name:
            assert (a.burn_in, a.sequence_length, a.sequence_period, a.lstm_size, a.batch_size) == (40, 80, 40, 512, 64)
            assert {"gymnasium.wrappers.FrameStackObservation": {"stack_size": 4}} in env.wrappers
    elif cfg.algo == "drqn":
        assert a.core == "lstm" and a.initial_state == "zeros" and not a.double_q and a.n_step == 1
        assert (a.sequence_length, a.sequence_period) == (10, 1)
    else:
        assert a.core == "mlp" and a.sequence_length == 1 and "minatar" in path.name


def _smoke(path: Path, tmp_path: Path) -> None:
    cfg = build_config(load_config(str(path)))
    _paper_settings(cfg, path)
    overrides = {**TINY, **TINY_AGENT[cfg.algo]}
    if cfg.distributed is not None:  # its agent here, in one process; tests/test_distributed_r2d2.py runs it on Ray actors
        overrides["distributed"] = None
    if "atari" in path.name:  # a short evaluation game: 2,000 frames (500 agent steps) at most
        overrides["env.kwargs"] = {**cfg.env.kwargs, "max_num_frames_per_episode": 2000}
    rlfunc.train(str(path), overrides=overrides, run_dir=tmp_path / "run")
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 240
    assert "torso" in tensors["state", "params"].keys()
    assert int(tensors["state", "step"]) > 0, "no update ran"
    import csv

    with open(tmp_path / "run" / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    if "atari" in path.name:  # frames are emulator frames: AtariPreprocessing's skip of 4 per agent step
        assert rows and all(int(r["frames"]) == 4 * int(r["step"]) for r in rows)
    else:  # MinAtar has no frame skip: env steps are frames, and no frames column
        assert rows and "frames" not in rows[0]
    if cfg.algo == "r2d2" and "atari" in path.name:  # FrameStackObservation's stacks: one 84x84 plane per frame stored
        replay = tensors["replay"]
        assert int(replay["frame_stack"]) == 4 and tuple(replay["frames"].shape[1:]) == (84, 84)


@needs_minatar
@pytest.mark.parametrize("path", MINATAR, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_minatar_config_is_its_setting_and_trains(path, tmp_path):
    _smoke(path, tmp_path)


@needs_atari
@pytest.mark.parametrize("path", ATARI, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_atari_config_is_its_setting_and_trains(path, tmp_path):
    _smoke(path, tmp_path)


def _rollout(env, actions, seed):
    obs, _ = env.reset(seed=seed)
    out = [obs]
    for a in actions:
        obs, _, term, trunc, _ = env.step(a)
        out.append(obs)
        if term or trunc:
            out.append(env.reset()[0])
    return np.stack(out)


@needs_atari
@pytest.mark.parametrize("stack", [False, True])
def test_atari_pipeline_equals_gymnasiums_reference_wrappers(stack):
    import ale_py

    gym.register_envs(ale_py)
    cfg = build_config(load_config(str(ROOT / ("configs/r2d2/atari_pong.yaml" if stack else "configs/drqn/atari_pong_flicker.yaml"))))
    wrappers = [w for w in cfg.env.wrappers if not (isinstance(w, dict) and "flicker" in w)]
    ours = make_env(cfg.env.id, kwargs=cfg.env.kwargs, wrappers=build_wrappers(wrappers))
    ref = gym.wrappers.AtariPreprocessing(
        gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=stack),  # R2D2's: 18
        noop_max=30, frame_skip=4, screen_size=84, terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False,
    )
    if stack:
        ref = gym.wrappers.FrameStackObservation(ref, stack_size=4)
    actions = np.random.default_rng(0).integers(0, ours.action_space.n, 120)
    a, b = _rollout(ours, actions, seed=7), _rollout(ref, actions, seed=7)
    assert a.dtype == np.uint8 and a.shape == b.shape == (121, *((4, 84, 84) if stack else (84, 84)))
    np.testing.assert_array_equal(a, b)
    assert a[1:].std() > 0, "the frames change"
    if not stack:  # the DRQN config's flicker: whole frames zeroed, about half of them, the rest untouched
        flick = make_env(cfg.env.id, kwargs=cfg.env.kwargs, wrappers=build_wrappers(cfg.env.wrappers))
        c = _rollout(flick, actions, seed=7)
        blank = ~c.reshape(len(c), -1).any(axis=1)
        assert np.array_equal(c[~blank], a[~blank]) and 0.3 < blank.mean() < 0.7


@needs_minatar
def test_minatar_repeats_episodes_and_flicker_for_a_seed():
    wrappers = build_wrappers([{"flicker": {"p": 0.5}}])
    actions = np.random.default_rng(0).integers(0, 6, 200)
    runs = [_rollout(make_env("MinAtar/Seaquest-v0", wrappers=wrappers), actions, seed=3) for _ in range(2)]
    assert runs[0].shape == (len(runs[0]), 10, 10, 10) and runs[0].dtype == bool
    np.testing.assert_array_equal(runs[0], runs[1])
    other = _rollout(make_env("MinAtar/Seaquest-v0", wrappers=wrappers), actions, seed=4)
    assert not np.array_equal(runs[0][: len(other)], other[: len(runs[0])])


@needs_minatar
@pytest.mark.parametrize("algo", ["drqn", "r2d2"])
def test_a_pixel_run_resumes_with_its_frame_replay(algo, tmp_path):
    """A MinAtar run's checkpoint holds its frame replay (frames, frame numbers, windows): resume
    continues to a longer budget and keeps learning from it."""
    path = ROOT / "configs" / algo / "minatar_breakout_flicker.yaml"
    overrides = {**TINY, **TINY_AGENT[algo], "train.checkpoint_every": 120}
    rlfunc.train(str(path), overrides=overrides, run_dir=tmp_path / "run")
    tensors, _ = load_checkpoint(tmp_path / "run")
    steps_before = int(tensors["state", "step"])
    result = rlfunc.resume(tmp_path / "run", total_steps=360)
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert meta["env_step"] == 360 and int(tensors["state", "step"]) > steps_before
    assert result.env_steps == 360 and result.stop_reason == "total_steps"
