"""Defect review of the environment layer (rlfunc/envs): what a run does against what the
config, the docs and the papers say.

* ``make_env(..., seed=s)`` seeds its first reset, as its docstring says (it seeded only the
  action space: the first episode came from an unseeded generator);
* a wrapper argument annotated as a tuple (``AtariPreprocessing``'s ``screen_size``,
  ``ResizeObservation``'s and ``ReshapeObservation``'s ``shape``) can be written in a config,
  where YAML gives a list, and a list for an ``np.floating | np.ndarray`` argument
  (``RescaleAction``, ``RescaleObservation``) is read as the array: both were refused;
* the Atari pipeline of the packaged configs (checked against ale-py): one emulator frame per
  ALE step under ``AtariPreprocessing``'s skip of 4 (a double skip refused), 1-30 no-ops,
  the episode cap counted in emulator frames (no-ops included), the flicker's first frame;
* MinAtar's paper settings (sticky actions 0.1, difficulty ramping, 6 actions, ``[10, 10, C]``
  booleans), the masked entries of the velocity wrapper, the flicker after a restored generator
  (resume) and DrQ-v2's DMC settings (action repeat 2, 3 frames of 84x84, camera 0 / 2);
* MinAtar's "the same seed plays the same episode": minatar.Environment kept the previous episode's
  last action for an episode's first sticky step, so a seeded reset now clears it.
"""

from __future__ import annotations

import importlib.util

import gymnasium as gym
import numpy as np
import pytest

from rlfunc.envs import build_wrappers, make_env, make_vector_env

needs_atari = pytest.mark.skipif(
    importlib.util.find_spec("ale_py") is None or importlib.util.find_spec("cv2") is None,
    reason="needs the atari extra: pip install -e '.[atari]'",
)
needs_minatar = pytest.mark.skipif(importlib.util.find_spec("minatar") is None,
                                   reason="needs the minatar extra: pip install -e '.[minatar]'")

ATARI_PRE = {"noop_max": 30, "frame_skip": 4, "screen_size": 84, "terminal_on_life_loss": False,
             "grayscale_obs": True, "scale_obs": False}
ATARI_KW = {"frameskip": 1, "repeat_action_probability": 0.0}


# -- make_env's seed ----------------------------------------------------------------------------


def test_make_env_seed_seeds_the_first_reset():
    seeded = [make_env("CartPole-v1", seed=3) for _ in range(2)]
    reference = make_env("CartPole-v1")
    first = [env.reset()[0] for env in seeded]
    np.testing.assert_array_equal(first[0], first[1])
    np.testing.assert_array_equal(first[0], reference.reset(seed=3)[0])
    # later resets continue the seeded stream, as after reset(seed=3)
    np.testing.assert_array_equal(seeded[0].reset()[0], reference.reset()[0])
    # an explicit seed wins, and the action space is seeded too
    other = make_env("CartPole-v1", seed=3)
    np.testing.assert_array_equal(other.reset(seed=5)[0], make_env("CartPole-v1").reset(seed=5)[0])
    seeded_space = make_env("CartPole-v1", seed=7).action_space
    reference_space = make_env("CartPole-v1").action_space
    reference_space.seed(7)
    assert [seeded_space.sample() for _ in range(32)] == [reference_space.sample() for _ in range(32)]


def test_make_env_seed_seeds_the_flicker_of_the_first_episode():
    wrappers = build_wrappers([{"flicker": {"p": 0.5}}])

    def blanks(env):
        return [not o.any() for o in _episode(env, env.reset()[0], 40)]

    runs = [blanks(make_env("CartPole-v1", seed=11, wrappers=wrappers)) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2] and any(runs[0]) and not all(runs[0])


# -- wrapper arguments from a config --------------------------------------------------------------


def test_tuple_annotated_wrapper_arguments_take_a_yaml_list():
    (reshape,) = build_wrappers([{"gymnasium.wrappers.ReshapeObservation": {"shape": [1, 4]}}])
    assert make_env("CartPole-v1", wrappers=[reshape]).reset(seed=0)[0].shape == (1, 4)
    (bins,) = build_wrappers([{"gymnasium.wrappers.DiscretizeObservation": {"bins": [3, 4, 5]}}])
    assert bins.keywords["bins"] == (3, 4, 5)
    (resize,) = build_wrappers([{"gymnasium.wrappers.ResizeObservation": {"shape": [42, 42]}}])
    assert resize.keywords["shape"] == (42, 42)
    with pytest.raises(ValueError, match=r"argument 'shape' must be a list of 2 integers, got \[42\]\."):
        build_wrappers([{"gymnasium.wrappers.ResizeObservation": {"shape": [42]}}])


def test_array_arguments_in_a_union_take_a_yaml_list():
    (act,) = build_wrappers([{"gymnasium.wrappers.RescaleAction": {"min_action": [-0.5], "max_action": [0.5]}}])
    env = make_env("Pendulum-v1", wrappers=[act], rescale_actions=False)
    assert env.action_space.low.tolist() == [-0.5] and env.action_space.high.tolist() == [0.5]
    (scalar,) = build_wrappers([{"gymnasium.wrappers.RescaleAction": {"min_action": -0.5, "max_action": 0.5}}])
    assert make_env("Pendulum-v1", wrappers=[scalar], rescale_actions=False).action_space.high.tolist() == [0.5]
    (obs,) = build_wrappers([{"gymnasium.wrappers.RescaleObservation": {"min_obs": [0, 0, 0], "max_obs": [1, 1, 1]}}])
    env = make_env("Pendulum-v1", wrappers=[obs])
    ob, _ = env.reset(seed=0)
    assert env.observation_space.low.tolist() == [0, 0, 0] and np.all((0 <= ob) & (ob <= 1))


def test_wrapper_arguments_stay_yaml_in_the_config():
    """The tuple reaches the wrapper; the config keeps the list (it is written back as YAML)."""
    from rlfunc.runtime.config import build_config, to_dict

    spec = [{"gymnasium.wrappers.ReshapeObservation": {"shape": [1, 4]}}]
    cfg = build_config({"algo": "dqn", "env": {"id": "CartPole-v1", "wrappers": spec}})
    assert to_dict(cfg)["env"]["wrappers"] == spec


# -- Atari, as the packaged configs build it ------------------------------------------------------


def _atari(max_frames=None, **pre):
    kwargs = dict(ATARI_KW)
    if max_frames is not None:
        kwargs["max_num_frames_per_episode"] = max_frames
    wrappers = build_wrappers([{"gymnasium.wrappers.AtariPreprocessing": {**ATARI_PRE, **pre}}])
    return make_env("ale_py:ALE/Pong-v5", kwargs=kwargs, wrappers=wrappers)


@needs_atari
def test_atari_screen_size_as_a_list_from_a_config():
    env = _atari(screen_size=[64, 48])
    assert env.observation_space.shape == (48, 64) and env.reset(seed=0)[0].shape == (48, 64)


@needs_atari
def test_atari_pipeline_skips_four_emulator_frames_once():
    env = _atari()
    ale = env.unwrapped.ale
    assert env.unwrapped._frameskip == 1 and ale.getFloat("repeat_action_probability") == 0.0
    assert env.observation_space.shape == (84, 84) and env.action_space.n == 6  # Pong's minimal set
    env.reset(seed=0)
    before = ale.getEpisodeFrameNumber()
    env.step(0)
    assert ale.getEpisodeFrameNumber() - before == 4
    with pytest.raises(ValueError, match="frame"):  # the ALE's own skip (v5's default 4) as well: refused
        make_env("ale_py:ALE/Pong-v5", wrappers=build_wrappers([{"gymnasium.wrappers.AtariPreprocessing": ATARI_PRE}]))


@needs_atari
def test_atari_noops_and_frame_cap():
    env = _atari(max_frames=200)
    noops = set()
    for seed in range(40):
        env.reset(seed=seed)
        noops.add(env.unwrapped.ale.getEpisodeFrameNumber())
    assert min(noops) >= 1 and max(noops) <= 30 and len(noops) > 10
    steps, truncated = 0, False
    while not truncated:
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated
        steps += 1
    # the cap counts emulator frames, no-ops included: ALE v5's 108k frames are 27k agent steps at most
    assert env.unwrapped.ale.getEpisodeFrameNumber() == 200 and -(-(200 - 30) // 4) <= steps <= -(-(200 - 1) // 4)


@needs_atari
def test_atari_flicker_blanks_the_first_frame_too_and_copies_differ():
    wrappers = build_wrappers([{"gymnasium.wrappers.AtariPreprocessing": ATARI_PRE}, {"flicker": {"p": 0.5}}])
    venv = make_vector_env("ale_py:ALE/Pong-v5", 2, kwargs=ATARI_KW, wrappers=wrappers)
    firsts = []
    for seed in range(0, 40, 2):
        obs, _ = venv.reset(seed=[seed, seed + 1])
        firsts.append([not o.any() for o in obs])
    blank = np.asarray(firsts)
    assert 0.2 < blank.mean() < 0.8 and (blank[:, 0] != blank[:, 1]).any()
    venv.close()


# -- MinAtar and the velocity masks ---------------------------------------------------------------


@needs_minatar
def test_minatar_paper_settings():
    env = make_env("MinAtar/Seaquest-v0")  # Breakout has no difficulty ramp to switch
    game = env.unwrapped.game
    assert game.sticky_action_prob == 0.1 and game.env.ramping is True
    assert env.action_space.n == 6 and env.observation_space.shape == (10, 10, 10)
    obs, _ = env.reset(seed=0)
    assert obs.dtype == bool and obs.shape == (10, 10, 10)


def test_mask_velocity_masks_the_velocities():
    from rlfunc.envs.wrappers import VELOCITY_INDICES

    assert VELOCITY_INDICES["CartPole"] == (1, 3) and VELOCITY_INDICES["Pendulum"] == (2,)
    wrappers = build_wrappers(["mask_velocity"])
    for env_id, kept in (("CartPole-v1", (0, 2)), ("Pendulum-v1", (0, 1))):
        masked, full = make_env(env_id, wrappers=wrappers), make_env(env_id)
        m, f = masked.reset(seed=1)[0], full.reset(seed=1)[0]
        for _ in range(3):
            action = masked.action_space.sample() * 0 + (0 if env_id.startswith("Cart") else 0.5)
            m, *_ = masked.step(action)
            f, *_ = full.step(action)
        velocity = [i for i in range(len(f)) if i not in kept]
        assert np.all(m[velocity] == 0) and np.all(f[velocity] != 0)
        np.testing.assert_array_equal(m[list(kept)], f[list(kept)])


def _episode(env, obs, steps: int = 60) -> np.ndarray:
    """The observations from ``obs`` on, action 0 for up to ``steps`` steps or to the episode's end."""
    out = [obs]
    for _ in range(steps):
        ob, _, term, trunc, _ = env.step(0)
        out.append(ob)
        if term or trunc:
            break
    return np.stack(out)


@needs_minatar
def test_minatar_a_seeded_reset_fixes_the_episode():
    def play(env, seed):
        return _episode(env, env.reset(seed=seed)[0], 30)

    for seed in (11, 27):  # seeds whose first step is sticky
        fresh = play(make_env("MinAtar/Breakout-v0"), seed)
        env = make_env("MinAtar/Breakout-v0")
        env.reset(seed=1000)
        for _ in range(5):
            env.step(3)  # the previous episode ends on "right"
        after = play(env, seed)
        assert fresh.shape == after.shape and np.array_equal(fresh, after)


def test_flicker_continues_from_a_restored_generator():
    """A resumed run restores each env's ``np_random`` (Collector.rng_state/restore); the flicker
    draws from it, so the episodes after the checkpoint flicker as the uninterrupted run's."""
    wrappers = build_wrappers([{"flicker": {"p": 0.5}}])

    env = make_env("CartPole-v1", wrappers=wrappers)
    _episode(env, env.reset(seed=0)[0])
    state = env.unwrapped.np_random.bit_generator.state
    uninterrupted = _episode(env, env.reset()[0])
    resumed_env = make_env("CartPole-v1", wrappers=wrappers)
    resumed_env.reset(seed=99)
    resumed_env.unwrapped.np_random.bit_generator.state = state
    np.testing.assert_array_equal(_episode(resumed_env, resumed_env.reset()[0]), uninterrupted)


@pytest.mark.skipif(importlib.util.find_spec("dm_control") is None, reason="needs the dmc extra: pip install -e '.[dmc]'")
def test_dmc_is_drqv2s_environment():
    """Action repeat 2, 3 stacked 84x84 RGB frames, camera 0 (2 for quadruped): the official dmc.py."""
    from rlfunc.envs.dmc import select_gl_backend

    try:
        select_gl_backend()
    except RuntimeError as exc:  # no libEGL / libOSMesa on this machine (any other error is a failure)
        pytest.skip(str(exc))
    walker = gym.make("dmc/walker_walk-v0").unwrapped
    quadruped = gym.make("dmc/quadruped_walk-v0").unwrapped
    assert (walker.action_repeat, walker.stack.k, walker.size, walker.camera_id) == (2, 3, 84, 0)
    assert walker.observation_space.shape == (9, 84, 84) and quadruped.camera_id == 2
    assert not any(walker.render_options.values())  # the paper's rendering unless asked
    walker.close()
    quadruped.close()
