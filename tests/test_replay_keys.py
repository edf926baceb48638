"""One key each for warm-up and replay size, for every algorithm (#23 §4).

``train.learning_starts`` (env steps before the first update; DrQ-v2 agent steps;
R2D2 windows stored) and ``train.replay_size`` (the replay's items: transitions,
frames or windows) replace ``train.random_steps``, ``agent.learning_starts``,
``agent.min_replay_size``, ``agent.buffer_windows`` and ``agent.replay_capacity``.

* every shipped config builds a learner whose replay capacity and warm-up are the
  numbers its old keys gave (so its committed runs are reproduced);
* each algorithm's defaults are the ones it had (the papers'; DrQ-v2's warm-up is now
  the official 2000 agent steps instead of REDQ's 5000);
* an old key in a config is one sentence naming the new key, its unit and the value;
  in a resolved config (a run's or checkpoint's) it is translated;
* the warm-up checks speak the new keys and units.
"""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from tensordict import TensorDict

from helpers_configs import missing_env_module

from rlfunc.runtime.config import RENAMED_KEYS, ConfigError, apply_overrides, build_config, load_config, to_dict
from rlfunc.runtime.registry import ALGOS, get_algo

ROOT = Path(__file__).resolve().parents[1]

# (warm-up, replay capacity) of every shipped config before the keys were unified, computed with
# git HEAD 367c51f's code from its configs' old keys: REDQ/SAC/RLPD/DrQ-v2 train.random_steps and
# train.replay_size; DRQN/DQN agent.learning_starts and agent.buffer_windows; R2D2
# agent.min_replay_size and agent.replay_capacity (units unchanged: env steps / transitions, agent
# steps / frames, env steps / windows, windows / windows).
BEFORE = {
    "dqn/cartpole_novel": (2000, 5000),
    "dqn/cue_memory": (500, 40000),
    "drqn/cartpole_flicker": (2000, 5000),
    "drqn/cartpole_novel": (2000, 5000),
    "drqn/cue_memory": (500, 5000),
    "drqv2/cartpole_balance": (2000, 1000000),
    "drqv2/cartpole_balance_cpu": (2000, 100000),
    "drqv2/cartpole_swingup": (2000, 1000000),
    "drqv2/pendulum_pixels": (2000, 100000),
    "drqv2/walker_walk": (2000, 1000000),
    "r2d2/cartpole": (250, 20000),
    "r2d2/cartpole_flicker": (250, 20000),
    "r2d2/cartpole_novel": (250, 20000),
    "r2d2/cartpole_novel_distributed": (250, 20000),
    "r2d2/cue_memory": (100, 5000),
    "redq/ant": (5000, 1000000),
    "redq/hopper": (5000, 1000000),
    "redq/humanoid": (5000, 1000000),
    "redq/pendulum": (1000, 1000000),
    "redq/walker2d": (5000, 1000000),
    "rlpd/hopper": (5000, 1000000),
    "rlpd/pendulum": (200, 1000000),
    "sac/ant": (5000, 1000000),
    "sac/hopper": (5000, 1000000),
    "sac/humanoid": (5000, 1000000),
    "sac/pendulum": (1000, 1000000),
    "sac/walker2d": (5000, 1000000),
}
SHIPPED = sorted(p.relative_to(ROOT / "configs").with_suffix("").as_posix() for p in (ROOT / "configs").rglob("*.yaml"))


def _spaces(cfg) -> tuple[gym.Space, gym.Space]:
    """Spaces of the config's kind (the replay's capacity and warm-up do not depend on them)."""
    if cfg.algo == "drqv2":
        return gym.spaces.Box(0, 255, (3 * cfg.agent.frame_stack, 84, 84), np.uint8), gym.spaces.Box(-1, 1, (1,))
    if cfg.algo in ("drqn", "dqn", "r2d2"):
        return gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
    return gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (1,))


def _rows(n: int, obs_space, act_space, terminated: bool) -> TensorDict:
    obs = torch.zeros((n, *obs_space.shape), dtype=torch.uint8 if obs_space.dtype == np.uint8 else torch.float32)
    action = torch.zeros(n, dtype=torch.int64) if isinstance(act_space, gym.spaces.Discrete) else torch.zeros(n, 1)
    return TensorDict(
        {
            "obs": obs, "next_obs": obs.clone(), "action": action, "reward": torch.zeros(n),
            "terminated": torch.full((n,), terminated), "truncated": torch.zeros(n, dtype=torch.bool),
            "env_id": torch.arange(n),
        },
        batch_size=[n],
    )


def _built(name: str):
    raw = load_config(str(ROOT / "configs" / f"{name}.yaml"))
    if raw["algo"] == "rlpd":  # no dataset here: online only (neither the replay nor the warm-up depends on it)
        raw = apply_overrides(raw, {"data.offline_ratio": 0.0})
    return build_config(raw)


def test_every_shipped_config_is_in_the_table_and_sets_no_old_name():
    """Every config of the table still ships; configs added after the keys were unified (MinAtar and
    Atari, with pixel encoders: tests/test_minatar_atari.py trains each) need no row, and no config
    sets an old key name."""
    assert set(BEFORE) <= set(SHIPPED), sorted(set(BEFORE) - set(SHIPPED))
    assert all("minatar_" in n or "atari_" in n for n in set(SHIPPED) - set(BEFORE)), sorted(set(SHIPPED) - set(BEFORE))
    for name in SHIPPED:
        raw = load_config(str(ROOT / "configs" / f"{name}.yaml"))
        for old in RENAMED_KEYS:
            section, key = old.split(".")
            assert key not in (raw.get(section) or {}), f"configs/{name}.yaml sets {old}"


@pytest.mark.parametrize("name", sorted(BEFORE))
def test_shipped_config_builds_the_replay_and_warm_up_it_had(name):
    """The built learner's replay holds exactly the old capacity and its first update comes exactly at
    the old warm-up: for REDQ/SAC/RLPD/DrQ-v2 at that many env (agent) steps, for DRQN/DQN at that many
    env steps on the learner's update period, for R2D2 once that many windows are stored."""
    torch.manual_seed(0)
    warmup, capacity = BEFORE[name]
    cfg = _built(name)
    assert (cfg.train.learning_starts, cfg.train.replay_size) == (warmup, capacity)
    obs_space, act_space = _spaces(cfg)
    learner = get_algo(cfg.algo).make_learner(cfg, obs_space, act_space)
    assert learner.replay.capacity == capacity
    n = int(cfg.env.num_envs)
    if cfg.algo == "r2d2":
        # every env's episode ends at each call: n one-step windows per call
        while learner.replay.windows_added + n < warmup:
            learner.observe(_rows(n, obs_space, act_space, terminated=True))
            assert not learner.ready(10**6)
        learner.observe(_rows(n, obs_space, act_space, terminated=True))
        assert len(learner.replay) >= warmup and learner.ready(10**6)
        return
    if cfg.algo == "drqv2":
        for last in (False, False, False, True):  # one short episode: a few valid n-step starts
            learner.observe(_rows(1, obs_space, act_space, terminated=last))
    else:
        learner.observe(_rows(n, obs_space, act_space, terminated=True))
    assert len(learner.replay) >= 1
    period = getattr(learner.config, "train_every", None) or getattr(learner.config, "update_every", 1)
    assert learner.ready(warmup), name
    assert not learner.ready(warmup - period), name
    if cfg.algo in ("redq", "sac", "rlpd"):  # uniform actions for exactly the warm-up's steps
        obs = np.full((1, *obs_space.shape), 0.5, dtype=np.float32)
        for step, uniform in ((warmup - 1, True), (warmup, False)):
            state = learner.generator.get_state()
            action = torch.as_tensor(learner.explore(obs, step))
            learner.generator.set_state(state)
            drawn = torch.rand((1, 1), generator=learner.generator) * 2.0 - 1.0
            assert torch.equal(action, drawn) == uniform, (name, step)


# -- defaults: the papers' (as before), in each learner's units ----------------------------------------

DEFAULTS = {  # algo: (train.learning_starts, train.replay_size, their units)
    "redq": (5000, 1_000_000, ("env steps", "transitions")),  # REDQ's start_steps, replay_size
    "sac": (5000, 1_000_000, ("env steps", "transitions")),
    "rlpd": (5000, 1_000_000, ("env steps", "transitions")),
    "drqn": (1000, 50_000, ("env steps", "windows")),  # drqn.Config's learning_starts, buffer_windows before
    "dqn": (1000, 50_000, ("env steps", "windows")),
    "r2d2": (50_000, 100_000, ("windows stored", "windows")),  # Acme's min_replay_size, max_replay_size
    "drqv2": (2000, 1_000_000, ("agent steps", "frames")),  # official num_seed_frames 4000 / action repeat 2
}


def _raw(algo: str, **train) -> dict:
    env = {"drqv2": "Pendulum-v1", "drqn": "CartPole-v1", "dqn": "CartPole-v1", "r2d2": "CartPole-v1"}.get(algo, "Pendulum-v1")
    raw = {"algo": algo, "env": {"id": env}, "train": {"total_steps": 10**6, **train}}
    if algo == "rlpd":
        raw["data"] = {"offline_ratio": 0.0}
    return raw


def test_defaults_are_each_algorithms_and_resolved_configs_write_them():
    assert set(DEFAULTS) == set(ALGOS)
    for algo, (warmup, size, units) in DEFAULTS.items():
        cfg = build_config(_raw(algo))
        assert (cfg.train.learning_starts, cfg.train.replay_size) == (warmup, size), algo
        learner = get_algo(algo).learner_cls
        assert (learner.learning_starts_unit, learner.replay_size_unit) == units, algo
        written = to_dict(cfg)["train"]
        assert (written["learning_starts"], written["replay_size"]) == (warmup, size)
        assert build_config(to_dict(cfg)) == cfg
        # null is "the algorithm's default" too
        assert build_config(_raw(algo, learning_starts=None, replay_size=None)) == cfg


def test_every_algorithm_honours_both_keys():
    for algo in ALGOS:
        cfg = build_config(_raw(algo, learning_starts=7, replay_size=123))
        assert (cfg.train.learning_starts, cfg.train.replay_size) == (7, 123), algo


# -- old names ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", sorted(ALGOS))
@pytest.mark.parametrize("old", sorted(RENAMED_KEYS))
def test_an_old_name_is_one_sentence_naming_the_new_key(algo, old):
    new = RENAMED_KEYS[old]
    unit = dict(zip(("train.learning_starts", "train.replay_size"), DEFAULTS[algo][2]))[new]
    raw = apply_overrides(_raw(algo), {old: 250})
    with pytest.raises(ConfigError) as info:
        build_config(raw)
    msg = str(info.value)
    assert msg == f"{old} was renamed {new} ({algo} counts it in {unit}); set {new}=250 instead.", msg


def test_old_names_from_the_command_line_are_one_line(tmp_path, capsys):
    from rlfunc.runtime.cli import main

    assert main(["train", "configs/drqn/cue_memory.yaml", "--run-dir", str(tmp_path / "r"),
                 "--set", "agent.buffer_windows=100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["rlfunc: error: agent.buffer_windows was renamed train.replay_size (drqn counts it in windows); "
                   "set train.replay_size=100 instead."]
    assert not (tmp_path / "r").exists()


def _old_format(cfg, *, every_train_key: bool) -> dict:
    """``cfg`` as an earlier rlfunc wrote it in a run's config.yaml or a checkpoint's meta: REDQ, SAC,
    RLPD and DrQ-v2 with train.random_steps; DRQN, DQN and R2D2 with their agent keys (and, with
    ``every_train_key``, the unused train.random_steps/replay_size defaults that files held before
    unused keys were left out)."""
    d = to_dict(cfg)
    train, agent = d["train"], d["agent"]
    warmup, size = train.pop("learning_starts"), train.pop("replay_size")
    if cfg.algo in ("drqn", "dqn"):
        agent.update(learning_starts=warmup, buffer_windows=size)
    elif cfg.algo == "r2d2":
        agent.update(min_replay_size=warmup, replay_capacity=size)
    else:
        train.update(random_steps=warmup, replay_size=size)
    if every_train_key and cfg.algo in ("drqn", "dqn", "r2d2"):
        train.update(random_steps=5000, replay_size=1_000_000)
    return d


@pytest.mark.parametrize("every_train_key", [False, True])
def test_resolved_configs_with_old_names_are_translated(every_train_key):
    """A checkpoint's stored config (build_config(resolved=True)) with the old keys loads as the same
    config; the same mapping as a user's config is refused, naming the new key."""
    for name in SHIPPED:
        if missing_env_module(load_config(str(ROOT / "configs" / f"{name}.yaml"))):
            continue  # an Atari config without the atari extra
        cfg = _built(name)
        old = _old_format(cfg, every_train_key=every_train_key)
        assert build_config(old, resolved=True) == cfg, name
        with pytest.raises(ConfigError, match=r"was renamed train\.(learning_starts|replay_size) "):
            build_config(old)


# -- warm-up checks in the new keys ----------------------------------------------------------------------

WARMUP_CASES = [
    ("redq", {"train.total_steps": 99, "train.learning_starts": 100},
     r"^train\.learning_starts=100 is more than train\.total_steps=99: the run would end before learning starts; "
     r"lower train\.learning_starts or raise train\.total_steps\.$"),
    ("sac", {"train.learning_starts": 2000, "train.replay_size": 1500},
     r"^train\.learning_starts=2000 is more than the replay holds \(train\.replay_size=1500 transitions\)"),
    ("drqv2", {"train.replay_size": 1000},
     r"^train\.learning_starts=2000 is more than the replay holds \(train\.replay_size=1000 frames\)"),
    ("drqn", {"train.replay_size": 100},
     r"^train\.learning_starts=1000 is more than the replay holds \(train\.replay_size=100 windows, one every "
     r"agent\.sequence_period=1 steps: about 100 env steps\)"),
    ("r2d2", {"train.total_steps": 40_000},
     r"^train\.learning_starts=50000 windows cannot be stored in train\.total_steps=40000 env steps"),
    ("r2d2", {"train.learning_starts": 200, "train.replay_size": 100},
     r"^train\.learning_starts=200 windows is more than the replay holds \(train\.replay_size=100 windows\), "
     r"so learning would never start; lower train\.learning_starts or raise train\.replay_size\.$"),
]


@pytest.mark.parametrize("algo,overrides,match", WARMUP_CASES, ids=[c[0] for c in WARMUP_CASES])
def test_warm_up_checks_use_the_new_keys(algo, overrides, match):
    with pytest.raises(ConfigError, match=match):
        build_config(apply_overrides(_raw(algo), overrides))
