"""REDQ's default target entropy is the official code's (issue 23, section 8).

The official REDQ code (watchernyu/REDQ) defaults to ``target_entropy='mbpo'``:
``mbpo_target_entropy_dict = {'Hopper-v2': -1, 'HalfCheetah-v2': -3,
'Walker2d-v2': -3, 'Ant-v2': -4, 'Humanoid-v2': -2}`` in ``redq/algos/core.py``
("these numbers are from the MBPO paper"); ``'auto'`` is ``-act_dim``. Here:

* the table, and ``-|A|`` off it (where the official code has no value);
* any version of a MuJoCo id (gymnasium's ``-v4``/``-v5``, ``module:`` prefixes);
* the pure functions never see env names: ``config_for_env`` resolves ``"mbpo"``
  and the runtime calls it before ``init``; an unresolved ``init`` gives ``-|A|``;
* ``sac`` keeps the SAC paper's ``-|A|`` (``"auto"``), RLPD its ``-|A|/2``;
  ``null`` (configs written before) still means ``-|A|``;
* the shipped REDQ/SAC configs resolve to the values their comments state.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import pytest
import torch

from rlfunc.algos import redq, rlpd
from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config, to_dict
from rlfunc.runtime.registry import get_algo

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]

OFFICIAL = {"Hopper-v2": -1, "HalfCheetah-v2": -3, "Walker2d-v2": -3, "Ant-v2": -4, "Humanoid-v2": -2}
"""watchernyu/REDQ ``redq/algos/core.py``: ``mbpo_target_entropy_dict``, copied by hand."""

ACT_DIMS = {"Hopper": 3, "HalfCheetah": 6, "Walker2d": 6, "Ant": 8, "Humanoid": 17}


def _spaces(act_dim: int, obs_dim: int = 4):
    return gym.spaces.Box(-1, 1, (obs_dim,)), gym.spaces.Box(-1, 1, (act_dim,))


def test_the_table_is_the_official_one():
    assert {f"{k}-v2": v for k, v in redq.MBPO_TARGET_ENTROPY.items()} == OFFICIAL
    assert redq.Config().target_entropy == "mbpo"


@pytest.mark.parametrize("version", ["v2", "v4", "v5"])
@pytest.mark.parametrize("family", sorted(ACT_DIMS))
def test_mujoco_tasks_get_the_table_at_any_version(family, version):
    env_id = f"{family}-{version}"
    config = redq.config_for_env(redq.Config(hidden_sizes=(8,)), env_id)
    assert config.target_entropy == OFFICIAL[f"{family}-v2"]
    state = redq.init(config, *_spaces(ACT_DIMS[family]))
    assert float(state["target_entropy"]) == OFFICIAL[f"{family}-v2"]
    assert redq.target_entropy(redq.Config(), ACT_DIMS[family], env_id) == OFFICIAL[f"{family}-v2"]


@pytest.mark.parametrize(
    "env_id,act_dim,want",
    [
        ("gymnasium.envs.mujoco:Hopper-v5", 3, -1.0),  # gymnasium's module:env-id form
        ("Pendulum-v1", 1, -1.0),  # off the table: -|A| (the official code would raise KeyError)
        ("HumanoidStandup-v5", 17, -17.0),  # a different task, not Humanoid
        ("InvertedPendulum-v5", 1, -1.0),
        ("rlfunc_test/Counting-v0", 2, -2.0),
    ],
)
def test_ids_off_the_table_get_minus_act_dim(env_id, act_dim, want):
    assert redq.target_entropy(redq.Config(), act_dim, env_id) == want
    state = redq.init(redq.config_for_env(redq.Config(hidden_sizes=(8,)), env_id), *_spaces(act_dim))
    assert float(state["target_entropy"]) == want


def test_explicit_values_and_other_rules_are_not_touched_by_the_env():
    for value, want in [("auto", -3.0), (None, -3.0), (-0.5, -0.5), (2, 2.0)]:
        config = redq.Config(hidden_sizes=(8,), target_entropy=value)
        assert redq.config_for_env(config, "Hopper-v5") is config
        assert float(redq.init(config, *_spaces(3))["target_entropy"]) == want
    # unresolved "mbpo" in the pure init (no env id there): -|A|
    assert float(redq.init(redq.Config(hidden_sizes=(8,)), *_spaces(3))["target_entropy"]) == -3.0
    assert redq.sac_config().target_entropy == "auto"


def test_bad_target_entropy_is_one_sentence():
    for bad in ("mpbo", True, [1.0]):
        with pytest.raises(ValueError, match=r"^target_entropy must be a number, 'mbpo' \(the official per-environment "
                                             r"table, -\|A\| off it\) or 'auto' \(-\|A\|\), got .*\.$"):
            redq.Config(target_entropy=bad)
    with pytest.raises(ValueError, match=r"^target_entropy must be a number or null"):
        rlpd.Config(target_entropy="mbpo")


def _learner(algo: str, config_path: str, env_id: str, act_dim: int, **overrides):
    raw = apply_overrides(load_config(str(ROOT / config_path)), {
        "env.id": env_id, "agent.hidden_sizes": [8], "train.replay_size": 100, "train.learning_starts": 10,
        **overrides,
    })
    cfg = build_config(raw)
    return cfg, get_algo(algo).make_learner(cfg, *_spaces(act_dim, obs_dim=11))


def test_the_runtime_resolves_the_table_before_init():
    """``rlfunc train`` on Hopper: REDQ's state holds -1 (the table); SAC's -|A| = -3 (the SAC paper's);
    RLPD's -|A|/2. The run's resolved config keeps the rule, so a resume resolves it the same way."""
    cfg, learner = _learner("redq", "configs/redq/pendulum.yaml", "Hopper-v5", 3)
    assert float(learner.state["target_entropy"]) == -1.0
    assert learner.config.target_entropy == -1.0 and cfg.agent.target_entropy == "mbpo"
    assert to_dict(cfg)["agent"]["target_entropy"] == "mbpo"
    _, sac = _learner("sac", "configs/sac/pendulum.yaml", "Hopper-v5", 3)
    assert sac.config.target_entropy == "auto" and float(sac.state["target_entropy"]) == -3.0
    _, pend = _learner("redq", "configs/redq/pendulum.yaml", "Pendulum-v1", 1)
    assert float(pend.state["target_entropy"]) == -1.0
    _, legacy = _learner("redq", "configs/redq/pendulum.yaml", "Hopper-v5", 3, **{"agent.target_entropy": None})
    assert float(legacy.state["target_entropy"]) == -3.0  # null, as older configs wrote it: -|A|
    _, fixed = _learner("redq", "configs/redq/pendulum.yaml", "Hopper-v5", 3, **{"agent.target_entropy": -2.5})
    assert float(fixed.state["target_entropy"]) == -2.5


def test_rlpd_keeps_its_own_rule():
    raw = apply_overrides(load_config(str(ROOT / "configs/rlpd/pendulum.yaml")), {
        "env.id": "Hopper-v5", "data.offline_ratio": 0.0, "agent.hidden_sizes": [8], "train.replay_size": 100,
        "train.learning_starts": 10,
    })
    learner = get_algo("rlpd").make_learner(build_config(raw), *_spaces(3, obs_dim=11))
    assert float(learner.state["target_entropy"]) == -1.5


def test_shipped_configs_say_what_they_resolve_to():
    hopper = build_config(load_config(str(ROOT / "configs/redq/hopper.yaml")))
    assert hopper.agent.target_entropy == "mbpo" and hopper.env.id == "Hopper-v5"
    assert redq.config_for_env(hopper.agent, hopper.env.id).target_entropy == -1.0
    for path in ("configs/redq/pendulum.yaml", "configs/sac/pendulum.yaml"):
        cfg = build_config(load_config(str(ROOT / path)))
        assert redq.target_entropy(cfg.agent, 1, cfg.env.id) == -1.0  # Pendulum: |A| = 1
    assert build_config(load_config(str(ROOT / "configs/sac/pendulum.yaml"))).agent.target_entropy == "auto"
    with pytest.raises(ConfigError, match=r"^agent\.target_entropy must be a number, 'mbpo'"):
        build_config(apply_overrides(load_config(str(ROOT / "configs/redq/hopper.yaml")), {"agent.target_entropy": "MBPO"}))


def test_a_hopper_run_trains_with_the_official_target_entropy(tmp_path):
    """End to end through ``rlfunc.train`` on MuJoCo Hopper-v5 (skipped without the mujoco extra):
    the checkpointed state holds the table's -1, and ``rlfunc resume``'s config resolves it again."""
    pytest.importorskip("mujoco")
    import rlfunc
    from rlfunc.runtime.checkpoint import load_checkpoint

    overrides = {"train.total_steps": 30, "train.learning_starts": 20, "train.replay_size": 100, "train.eval_every": 30,
                 "train.eval_episodes": 1, "train.checkpoint_every": 30, "train.progress": False,
                 "agent.hidden_sizes": [8, 8], "agent.num_critics": 2, "agent.updates_per_step": 1,
                 "agent.batch_size": 4}
    rlfunc.train("configs/redq/hopper.yaml", overrides=overrides, run_dir=tmp_path / "run")
    tensors, meta = load_checkpoint(tmp_path / "run")
    assert float(tensors["state", "target_entropy"]) == -1.0
