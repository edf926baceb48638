"""Pixel envs: the gymnasium `pixels` wrapper (Pendulum-v1) and DeepMind Control from pixels.

DMC tests skip when dm-control is not installed (`pip install -e '.[dmc]'`)."""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

from rlfunc.envs import build_wrappers, make_env
from rlfunc.envs.pixels import check_frame


def _pendulum(size=32, stack=3, repeat=2):
    return make_env(
        "Pendulum-v1",
        kwargs={"render_mode": "rgb_array"},
        wrappers=build_wrappers([{"pixels": {"size": size, "frame_stack": stack, "action_repeat": repeat}}]),
    )


def test_pendulum_pixels_shapes_stack_and_action_repeat():
    env = _pendulum()
    assert env.observation_space.shape == (9, 32, 32) and env.observation_space.dtype == np.uint8
    assert env.action_space.low.tolist() == [-1.0] and env.action_space.high.tolist() == [1.0]
    obs, _ = env.reset(seed=3)
    assert obs.dtype == np.uint8 and obs.shape == (9, 32, 32) and obs.any()
    assert np.array_equal(obs[0:3], obs[3:6]) and np.array_equal(obs[3:6], obs[6:9])  # reset frame repeated
    plain = gym.make("Pendulum-v1")
    plain.reset(seed=3)
    total, steps, done = 0.0, 0, False
    a = np.array([0.5], np.float32)
    while not done:
        nxt, r, term, trunc, _ = env.step(a)
        expected = sum(plain.step(a * 2.0)[1] for _ in range(2))  # action rescaled to [-2, 2]
        assert r == pytest.approx(expected, rel=1e-5)
        assert np.array_equal(nxt[0:6], obs[3:9])  # the stack shifts by one frame per agent step
        obs, total, steps, done = nxt, total + r, steps + 1, term or trunc
    assert steps == 100 and trunc and not term  # 200 frames = 100 agent steps


def test_pixels_wrapper_needs_rgb_array_and_black_frames_raise():
    with pytest.raises(ValueError, match="render_mode"):
        make_env("Pendulum-v1", wrappers=build_wrappers(["pixels"]))
    with pytest.raises(RuntimeError, match="all-black"):
        check_frame(np.zeros((3, 4, 4), np.uint8), "test")


def test_no_gl_backend_gives_a_clear_error(monkeypatch):
    import ctypes.util

    from rlfunc.envs import dmc

    monkeypatch.delenv("MUJOCO_GL", raising=False)
    monkeypatch.setattr(ctypes.util, "find_library", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install"):
        dmc.select_gl_backend()


def test_missing_dm_control_names_the_fix(monkeypatch):
    from rlfunc.envs import dmc

    monkeypatch.setitem(sys.modules, "dm_control", None)
    with pytest.raises(RuntimeError, match=r"\.\[dmc\]"):
        dmc.load_suite()


def test_dmc_ids_are_registered_without_importing_dm_control():
    assert "dmc/cartpole_balance-v0" in gym.registry and "dmc/walker_walk-v0" in gym.registry


def _skip_without_dmc():
    pytest.importorskip("dm_control", reason="dm-control not installed: pip install -e '.[dmc]'")
    from rlfunc.envs.dmc import select_gl_backend

    try:
        select_gl_backend()
    except RuntimeError as exc:  # no libEGL / libOSMesa on this machine
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def dmc_env():
    _skip_without_dmc()
    env = make_env("dmc/cartpole_balance-v0", kwargs={"size": 32, "action_repeat": 8, "fast_render": True})
    yield env
    env.close()


def test_dmc_pixels_observation_action_repeat_and_episode_end(dmc_env):
    env = dmc_env
    assert env.observation_space.shape == (9, 32, 32)
    base = env.unwrapped
    assert base.render_options == {"no_shadows": True, "no_reflections": True, "no_multisampling": True}
    assert int(base._env.physics.model.vis.quality.offsamples) == 0
    obs, _ = env.reset(seed=0)
    assert obs.any() and np.array_equal(obs[0:3], obs[6:9])
    obs2, _ = env.reset(seed=0)
    np.testing.assert_array_equal(obs, obs2)  # seeded resets reproduce the episode start
    steps, done, total = 0, False, 0.0
    while not done:
        obs, r, term, trunc, _ = env.step(np.zeros(1, np.float32))
        assert 0.0 <= r <= 8.0  # 8 summed frame rewards in [0, 1]
        total, steps, done = total + r, steps + 1, term or trunc
    assert steps == 1000 // 8 and trunc and not term  # DMC's time limit is a truncation
    assert total > 0


def test_dmc_default_render_is_the_papers():
    _skip_without_dmc()
    from rlfunc.envs.dmc import DMCPixels

    env = DMCPixels("cartpole", "balance", size=16)
    try:
        assert env.render_options == {"no_shadows": False, "no_reflections": False, "no_multisampling": False}
        assert int(env._env.physics.model.vis.quality.offsamples) > 0
        obs, _ = env.reset(seed=1)
        assert obs.shape == (9, 16, 16) and obs.any()
    finally:
        env.close()


def test_dmc_frames_equal_physics_render_and_are_not_views():
    """The env's kept camera gives physics.render's image (what the official dmc.py calls), each frame its own copy."""
    _skip_without_dmc()
    from rlfunc.envs.dmc import DMCPixels

    env = DMCPixels("cartpole", "swingup", size=24, frame_stack=1, action_repeat=1)
    try:
        first, _ = env.reset(seed=0)
        physics = env._env.physics
        np.testing.assert_array_equal(first, physics.render(24, 24, camera_id=0).transpose(2, 0, 1))
        frames = [first]
        for _ in range(5):
            obs, *_ = env.step(np.ones(1, np.float32))
            np.testing.assert_array_equal(obs, physics.render(24, 24, camera_id=0).transpose(2, 0, 1))
            frames.append(obs)
        assert not np.array_equal(frames[0], frames[-1])  # the cart moved; earlier frames were not overwritten
    finally:
        env.close()
