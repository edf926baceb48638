"""Review of the Python runtime API a researcher calls from a notebook: ``rlfunc.load``, ``evaluate``,
``export``, ``Policy.predict``/``act``/``seed``/``initial_state`` and ``train``'s ``callbacks``.

Every wrong argument is one sentence (``ValueError``/``TypeError``) naming it, raised before anything runs or
is written; nothing is truncated (``episodes=2.0``, ``seed=1.5``) or read as its truth value
(``deterministic=1``, ``stochastic="no"``, ``episode_start=["no"]``). One tiny REDQ/Pendulum run is shared.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_predict import _obs, _policy

import rlfunc
from test_review_resources import TINY as RESOURCES_TINY  # noqa: E402 -- the tiny REDQ run the reviews share

TINY = {**RESOURCES_TINY, "train.total_steps": 40, "train.threads": 1}
SHORT = {**TINY, "train.total_steps": 25, "train.eval_every": 25, "train.checkpoint_every": 25}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("api") / "run"
    rlfunc.train(None, overrides=TINY, run_dir=run_dir)
    return run_dir


@pytest.fixture(scope="module")
def policy(run):
    return rlfunc.load(run)


def _one_sentence(exc: BaseException) -> None:
    msg = str(exc)
    assert "\n" not in msg and msg.endswith(".") and msg.count(". ") == 0, msg


# -- predict / act -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", [1, 0, 0.0, "yes", torch.tensor(True)])
def test_predict_and_act_take_only_bools_for_deterministic(policy, value):
    """``deterministic=0.0`` sampled and ``deterministic=1`` acted greedily: numbers were read as truth values."""
    obs = np.zeros(3, np.float32)
    with pytest.raises(ValueError, match="deterministic must be True or False") as info:
        policy.predict(obs, deterministic=value)
    _one_sentence(info.value)
    with pytest.raises(ValueError, match="deterministic must be None, True or False"):
        policy.act(obs, deterministic=value)
    assert policy.predict(obs, deterministic=np.bool_(True))[0].shape == (1,)


def test_observations_torch_cannot_hand_to_numpy_are_taken_or_one_sentence(policy):
    """A bfloat16 tensor raised torch's "Got unsupported ScalarType BFloat16", a meta tensor
    NotImplementedError, a ragged list numpy's "inhomogeneous shape" message."""
    want = policy.predict(np.full(3, 0.5, np.float32))[0]
    got = policy.predict(torch.full((3,), 0.5, dtype=torch.bfloat16))[0]
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert policy.predict(torch.full((2, 3), 0.5, dtype=torch.float16))[0].shape == (2, 1)
    with pytest.raises(ValueError, match="meta device") as info:
        policy.predict(torch.zeros(3, device="meta"))
    _one_sentence(info.value)
    with pytest.raises(ValueError, match="Observation is not an array of numbers"):
        policy.predict([1.0, [2.0], 3.0])


@pytest.mark.parametrize("seed", ["abc", None, 1.5, True, -1, 2**70])
def test_policy_seed_is_a_checked_integer(policy, seed):
    """``seed(1.5)`` was truncated to 1, ``seed(-1)`` accepted, others raised int()'s or torch's messages."""
    with pytest.raises(ValueError, match="seed must be an integer") as info:
        policy.seed(seed)
    _one_sentence(info.value)
    assert policy.seed(np.int64(3)) is policy


@pytest.mark.parametrize("name", ["drqn", "r2d2"])
def test_recurrent_predict_arguments_are_checked(name):
    p = _policy(name)
    obs = _obs(p, 2)
    _, state = p.predict(obs)
    # episode_start: "no" (a non-empty string) and 2.5 were True, resetting the state silently
    for bad in (["no", "no"], [2.5, 0]):
        with pytest.raises(ValueError, match="episode_start must be one bool per env"):
            p.predict(obs, state, episode_start=bad)
    assert p.predict(obs, state, episode_start=[1, 0])[0].shape == (2,)  # 0/1 numbers are bools
    assert p.predict(obs, state, episode_start=np.array([1.0, 0.0]))[0].shape == (2,)
    # a state of strings or ragged lists raised torch's / numpy's own messages
    for bad in (("a",) * len(state), ([1, [2]],) * len(state)):
        with pytest.raises(ValueError, match=r"state\[0\] is not an array of numbers"):
            p.predict(obs, bad)
    for n in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="num_envs must be an integer"):
            p.initial_state(n)
        with pytest.raises(ValueError, match="num_envs must be an integer"):
            p.reset(n)
    if name == "r2d2":
        with pytest.raises(ValueError, match="reward must be a number or one number per env"):
            p.predict(obs, state, reward="x")


# -- load / export / evaluate --------------------------------------------------------------------


def test_paths_may_be_bytes_and_non_paths_are_one_sentence(run, tmp_path):
    """bytes raised pathlib's "argument should be a str object ..."; None and numbers pathlib's own TypeError."""
    assert rlfunc.load(bytes(run)).obs_shape == (3,)
    assert rlfunc.export(bytes(run), bytes(tmp_path / "exp")).parent == tmp_path / "exp"
    for call, name in [
        (lambda: rlfunc.load(None), "path"),
        (lambda: rlfunc.load(3), "path"),
        (lambda: rlfunc.export(run, None), "out"),
        (lambda: rlfunc.export([run], tmp_path / "e2"), "path"),
        (lambda: rlfunc.evaluate(None), "path_or_policy"),
        (lambda: rlfunc.evaluate(run, episodes=1, video_dir=5), "video_dir"),
    ]:
        with pytest.raises(TypeError, match=f"^{name} must be a file-system path") as info:
            call()
        _one_sentence(info.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp"]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"episodes": 2.0}, "episodes must be an integer"),  # was a TypeError from range()
        ({"episodes": 1.5}, "episodes must be an integer"),
        ({"episodes": True}, "episodes must be an integer"),  # was one episode
        ({"episodes": "2"}, "episodes must be an integer"),
        ({"episodes": None}, "episodes must be an integer"),
        ({"episodes": 0}, "episodes must be an integer at least 1"),
        ({"seed": 1.5}, "seed must be an integer"),  # was truncated to 1
        ({"seed": -1}, "seed must be an integer"),  # was gymnasium's error after the env was made
        ({"seed": "x"}, "seed must be an integer"),
        ({"seed": None}, "seed must be an integer"),
        ({"stochastic": "no"}, "stochastic must be True or False"),  # "no" was a stochastic evaluation
        ({"env_id": 5}, "env_id must be a gymnasium environment id"),
        ({"allow_import": 5}, "allow_import must be a module name"),
    ],
)
def test_evaluate_arguments_are_checked_first(run, policy, kwargs, match):
    for target in (run, policy):
        with pytest.raises(ValueError, match=match) as info:
            rlfunc.evaluate(target, **{"episodes": 1, **kwargs})
        _one_sentence(info.value)


def test_evaluate_still_takes_numpy_integers(policy):
    out = rlfunc.evaluate(policy, episodes=np.int64(1), seed=np.int32(3), stochastic=np.bool_(False))
    assert len(out["returns"]) == 1


# -- callbacks -------------------------------------------------------------------------------------


class NoRunArg(rlfunc.Callback):
    def on_step(self):  # forgot ``run``
        return None


@pytest.mark.parametrize(
    "callbacks, match",
    [
        ("abc", "callbacks must be a list of callback objects"),  # was "callback 'a' has none of the hooks"
        ({"stop": rlfunc.Callback()}, "callbacks must be a list of callback objects"),
        ([NoRunArg()], r"NoRunArg.on_step cannot be called as on_step\(run\)"),  # was a traceback at step 1
    ],
)
def test_callbacks_refused_before_the_run_starts(tmp_path, callbacks, match):
    with pytest.raises(TypeError, match=match) as info:
        rlfunc.train(None, overrides=SHORT, run_dir=tmp_path / "r", callbacks=callbacks)
    _one_sentence(info.value)
    assert not (tmp_path / "r").exists()


def test_an_override_replacing_a_whole_section_is_refused_naming_the_dotted_form(tmp_path):
    """``overrides={"train": {"total_steps": 25}}`` replaced the config's whole train section: every other
    train setting fell back to the algorithm's defaults, and the refusal that followed (REDQ's default
    learning_starts 5000 against 25) named neither."""
    from rlfunc.runtime.config import ConfigError, apply_overrides, load_config

    with pytest.raises(ConfigError) as err:
        rlfunc.train(None, overrides={"train": {"total_steps": 25}}, run_dir=tmp_path / "r")
    assert str(err.value) == (
        "Override 'train' with a mapping would replace the whole train section, dropping the config's other train "
        "settings; give each key dotted, e.g. {'train.total_steps': ...}.")
    assert not (tmp_path / "r").exists()
    raw = apply_overrides(load_config(None), {"train.total_steps": 25, "algo": "sac"})  # dotted keys still merge
    assert raw["train"]["total_steps"] == 25 and raw["train"]["learning_starts"] == load_config(None)["train"]["learning_starts"]


def test_numpy_numbers_are_config_values_as_python_numbers_are(tmp_path):
    """``for s in np.arange(3): train(..., {"train.seed": s})`` was refused ("must be of type int, got
    np.int64(0)") while ``np.float64(25)`` passed; numpy bools stay refused as bools are."""
    import numpy as np

    from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config

    built = build_config(apply_overrides(load_config(None), {
        "train.seed": np.int64(3), "train.total_steps": np.float64(3000), "agent.actor_lr": np.float32(1e-3)}))
    assert (built.train.seed, built.train.total_steps) == (3, 3000) and type(built.train.seed) is int
    assert isinstance(built.agent.actor_lr, float) and abs(built.agent.actor_lr - 1e-3) < 1e-9
    with pytest.raises(ConfigError, match=r"train\.seed must be of type int"):
        build_config(apply_overrides(load_config(None), {"train.seed": np.bool_(True)}))


def test_resume_total_steps_is_checked_as_a_number_and_against_the_runs_steps_first(run):
    """``resume(run, total_steps="80")`` compared a str with an int deep in resume (a raw TypeError), and a
    total below the run's steps was refused about learning_starts rather than about the steps."""
    from rlfunc.runtime.config import ConfigError

    steps = TINY["train.total_steps"]
    for bad in ("80", 80.0, True):
        with pytest.raises(ConfigError, match=r"^--total-steps must be a whole number of env steps, got "):
            rlfunc.resume(run, total_steps=bad)
    with pytest.raises(ConfigError, match=rf"^--total-steps 10 is below the {steps} env steps the run already has"):
        rlfunc.resume(run, total_steps=10)


def test_train_and_resume_take_bytes_run_dirs_and_refuse_other_types_in_one_sentence(tmp_path, run):
    """``train``/``resume`` failed inside pathlib on ``bytes``, ``None`` (resume) or a number, and ``""`` meant
    the current directory, as load/export/evaluate did before they took ``as_path``."""
    import os

    out = tmp_path / "b"
    rlfunc.train(None, overrides=TINY, run_dir=os.fsencode(out))
    assert (out / "checkpoints").is_dir()
    for bad in (5, ""):
        with pytest.raises(TypeError, match=r"^run_dir must be a file-system path \(a str or pathlib\.Path\), got "):
            rlfunc.train(None, overrides=TINY, run_dir=bad)
    for bad in (None, 5, ""):
        with pytest.raises(TypeError, match=r"^run_dir must be a file-system path"):
            rlfunc.resume(bad)
    with pytest.raises(TypeError, match=r"^run_dir must be a file-system path"):
        rlfunc.train(None, overrides={**TINY, "train.population": {"seeds": [0, 1]}}, run_dir=3)
