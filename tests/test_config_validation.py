"""Config validation is complete, before training (issue 22): each rule, each algorithm.

Every value of every algorithm's ``Config`` is checked against its meaning
(sizes, finiteness, ranges, choices), the ``train``/``env``/``data`` sections
likewise; keys an algorithm does not use are refused (keys of earlier versions:
tests/test_replay_keys.py); the warm-up must fit the run and the replay; wrappers are checked by name and argument; ``--set``
values YAML cannot read are one sentence; and replay and network storage that
would not fit in memory is one sentence with the bytes, before allocation.
"""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from helpers_configs import missing_env_module

from rlfunc.runtime.config import (
    ConfigError,
    apply_overrides,
    build_config,
    load_config,
    parse_overrides,
    to_dict,
)
from rlfunc.runtime.registry import ALGOS, get_algo

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]

BASES = {
    "redq": ("configs/redq/pendulum.yaml", {}),
    "sac": ("configs/sac/pendulum.yaml", {}),
    "rlpd": ("configs/rlpd/pendulum.yaml", {"data.path": "prior.npz"}),
    "drqn": ("configs/drqn/cue_memory.yaml", {}),
    "dqn": ("configs/dqn/cue_memory.yaml", {}),
    "r2d2": ("configs/r2d2/cue_memory.yaml", {}),
    "drqv2": ("configs/drqv2/pendulum_pixels.yaml", {}),
}
"""A valid shipped config per registered algorithm (RLPD's with a data path)."""



def base(algo: str) -> dict:
    path, extra = BASES[algo]
    return apply_overrides(load_config(str(ROOT / path)), extra)


def build(algo: str, overrides: dict | None = None):
    return build_config(apply_overrides(base(algo), overrides or {}))


def one_sentence(msg: str) -> bool:
    """One line, ending like a sentence, no second sentence inside (``e.g.`` is not an end)."""
    body = msg.replace("e.g.", "eg").replace("i.e.", "ie")
    return "\n" not in msg and msg.rstrip()[-1:] in ".?" and not re.search(r"[.!?]\s+[A-Z]", body)


def refused(algo: str, overrides: dict, match: str) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        build(algo, overrides)
    msg = str(info.value)
    assert one_sentence(msg), msg
    return msg


def test_every_registered_algorithm_has_a_base_config():
    assert set(BASES) == set(ALGOS)
    for algo in ALGOS:
        assert build(algo).algo == algo


# -- 1. every agent value against its meaning --------------------------------------------


def _agent_fields(algo: str):
    cls = get_algo(algo).config_cls
    defaults = {**{f.name: f.default for f in dataclasses.fields(cls)}, **get_algo(algo).config_defaults}
    return [(f.name, defaults[f.name]) for f in dataclasses.fields(cls)]


def _bad_values(default):
    """Values no field with this default accepts (counts, finite numbers, choices, flags, layer lists)."""
    if isinstance(default, bool):
        return ["maybe", 2]
    if isinstance(default, int):
        return [-1, "many", 1.5]
    if isinstance(default, float):
        return [float("nan"), float("inf"), "abc"]
    if isinstance(default, str):
        return ["bogus", 3]
    if isinstance(default, tuple):
        return [[0], "abc"]
    return []


NUMBER_OR_RULE = {"target_entropy"}
"""Fields whose default is a named rule (REDQ's ``"mbpo"``, SAC's ``"auto"``) but which take a number too."""

FIELD_CASES = [
    pytest.param(algo, name, value, id=f"{algo}-{name}-{value!r}")
    for algo in ALGOS
    for name, default in _agent_fields(algo)
    for value in _bad_values(default)
    if not (name in NUMBER_OR_RULE and isinstance(value, int))
]


@pytest.mark.parametrize("algo,name,value", FIELD_CASES)
def test_every_agent_field_refuses_a_meaningless_value(algo, name, value):
    """Go through every field of every Config: a negative count, a NaN/inf number, an unknown
    choice, a non-boolean flag, a zero-width layer: one sentence that names ``agent.<field>``."""
    refused(algo, {f"agent.{name}": value}, rf"^agent\.{name}\b")


OPTIONAL_FLOAT_CASES = [
    pytest.param(algo, name, id=f"{algo}-{name}")
    for algo in ALGOS
    for name, default in _agent_fields(algo)
    if default is None and name != "lr_decay_updates"
]


@pytest.mark.parametrize("algo,name", OPTIONAL_FLOAT_CASES)
def test_optional_numbers_are_finite(algo, name):
    refused(algo, {f"agent.{name}": float("nan")}, rf"^agent\.{name} must be")


RANGE_CASES = [
    # sizes and counts > 0
    ("redq", {"agent.batch_size": 0}, r"agent\.batch_size must be a positive integer, got 0\."),
    ("redq", {"agent.num_critics": 0}, r"agent\.num_critics must be a positive integer"),
    ("sac", {"agent.updates_per_step": 0}, r"agent\.updates_per_step must be a positive integer"),
    ("redq", {"agent.hidden_sizes": []}, r"agent\.hidden_sizes must be a non-empty list"),
    ("rlpd", {"agent.hidden_sizes": [256, 0]}, r"agent\.hidden_sizes must be a non-empty list of positive"),
    ("drqn", {"agent.encoder_sizes": [64, 0]}, r"agent\.encoder_sizes must be a list of positive"),
    ("r2d2", {"agent.head_sizes": [-3]}, r"agent\.head_sizes"),
    ("drqn", {"agent.lstm_size": 0}, r"agent\.lstm_size must be a positive integer"),
    ("drqn", {"agent.sequence_length": 0}, r"agent\.sequence_length must be a positive integer"),
    ("drqn", {"train.replay_size": 0}, r"train\.replay_size must be a positive integer"),
    ("drqn", {"agent.train_every": 0}, r"agent\.train_every must be a positive integer"),
    ("r2d2", {"train.replay_size": -1}, r"train\.replay_size must be a positive integer"),
    ("r2d2", {"agent.target_period": 0}, r"agent\.target_period must be a positive integer"),
    ("drqv2", {"agent.hidden_dim": 0}, r"agent\.hidden_dim must be a positive integer"),
    ("drqv2", {"agent.encoder_channels": [32, 0, 32, 32]}, r"agent\.encoder_channels"),
    ("drqv2", {"agent.encoder_strides": [2, 1]}, r"agent\.encoder_channels and encoder_strides"),
    ("drqv2", {"agent.frame_stack": 0}, r"agent\.frame_stack must be a positive integer"),
    # subsets and windows
    ("redq", {"agent.subset_size": 11}, r"agent\.subset_size must be between 1 and num_critics \(10\)"),
    ("sac", {"agent.subset_size": 3}, r"agent\.subset_size must be between 1 and num_critics \(2\)"),
    ("drqn", {"agent.sequence_period": 7}, r"agent\.sequence_period must be between 1 and sequence_length"),
    ("drqn", {"agent.n_step": 7}, r"agent\.n_step must be between 1 and sequence_length"),
    ("r2d2", {"agent.sequence_period": 9}, r"agent\.sequence_period must be between 1 and burn_in"),
    # learning rates finite and > 0
    ("redq", {"agent.actor_lr": 0}, r"agent\.actor_lr must be a finite number > 0"),
    ("rlpd", {"agent.critic_lr": -3e-4}, r"agent\.critic_lr must be a finite number > 0"),
    ("sac", {"agent.alpha_lr": "inf"}, r"agent\.alpha_lr must be a finite number"),
    ("drqn", {"agent.lr": 0.0}, r"agent\.lr must be a finite number > 0"),
    ("r2d2", {"agent.adam_eps": 0}, r"agent\.adam_eps must be a finite number > 0"),
    ("drqv2", {"agent.lr": "nan"}, r"agent\.lr must be a finite number"),
    ("drqn", {"agent.lr_end": 0.5}, r"agent\.lr_end must be between 0 and lr"),
    ("redq", {"agent.target_entropy": True}, r"agent\.target_entropy must be a number, 'mbpo' .* or 'auto'"),
    ("sac", {"agent.target_entropy": [1]}, r"agent\.target_entropy must be a number, 'mbpo'"),
    ("rlpd", {"agent.target_entropy": "mbpo"}, r"agent\.target_entropy must be of type float"),  # RLPD: -|A|/2 or a number
    ("r2d2", {"agent.lr_decay_updates": -1}, r"agent\.lr_decay_updates must be a number of updates >= 0"),
    # ordered ranges
    ("redq", {"agent.log_std_min": 2.0}, r"agent\.log_std_min must be below log_std_max \(2\.0\)"),
    ("rlpd", {"agent.log_std_max": -30}, r"agent\.log_std_min must be below log_std_max"),
    # probabilities in [0, 1], discounts in (0, 1]
    ("drqn", {"agent.eps_start": 1.5}, r"agent\.eps_start must be a probability in \[0, 1\]"),
    ("dqn", {"agent.eval_epsilon": -0.1}, r"agent\.eval_epsilon must be a probability"),
    ("r2d2", {"agent.priority_eta": 2}, r"agent\.priority_eta must be a probability"),
    ("r2d2", {"agent.importance_exponent": 1.5}, r"agent\.importance_exponent must be a probability"),
    ("r2d2", {"agent.epsilon_base": 0}, r"agent\.epsilon_base must be in \(0, 1\]"),
    ("redq", {"agent.gamma": 0}, r"agent\.gamma must be a discount in \(0, 1\]"),
    ("drqn", {"agent.gamma": 1.01}, r"agent\.gamma must be a discount"),
    ("drqv2", {"agent.gamma": -0.9}, r"agent\.gamma must be a discount"),
    ("redq", {"agent.tau": 0}, r"agent\.tau must be in \(0, 1\]"),
    ("drqv2", {"agent.tau": 1.5}, r"agent\.tau must be in \(0, 1\]"),
    # schedules that decay
    ("drqn", {"agent.eps_start": 0.1, "agent.eps_end": 0.5}, r"agent\.eps_end \(0\.5\) must not exceed eps_start \(0\.1\)"),
    ("drqn", {"agent.eps_start": 0.0}, r"agent\.eps_end \(0\.05\) must not exceed eps_start \(0\.0\): .* raise eps_start or lower eps_end\.$"),
    ("drqv2", {"agent.stddev_init": 0.1, "agent.stddev_final": 0.5}, r"agent\.stddev_final must not exceed stddev_init"),
    ("drqv2", {"agent.stddev_clip": 0}, r"agent\.stddev_clip must be a finite number > 0"),
    # choices
    ("redq", {"agent.init": "he"}, r"agent\.init must be one of 'xavier_uniform', 'orthogonal', 'torch_default'"),
    ("drqn", {"agent.lstm_init": "xavier_uniform"}, r"agent\.lstm_init must be one of"),
    ("sac", {"agent.ensemble_mode": "cuda"}, r"agent\.ensemble_mode must be one of"),
    ("drqn", {"agent.huber_delta": 0}, r"agent\.huber_delta must be a finite number > 0 or null"),
    ("r2d2", {"agent.max_grad_norm": -1}, r"agent\.max_grad_norm must be a finite number > 0 or null"),
]


@pytest.mark.parametrize("algo,overrides,match", RANGE_CASES, ids=[f"{a}-{next(iter(o))}" for a, o, _ in RANGE_CASES])
def test_agent_values_are_checked_against_their_meaning(algo, overrides, match):
    refused(algo, overrides, "^" + match)


def test_defaults_and_shipped_configs_are_unchanged_and_valid():
    """The papers' defaults validate as they are, and every shipped config still builds."""
    for algo in ALGOS:
        entry = get_algo(algo)
        entry.config_cls(**entry.config_defaults)
    for path in sorted((ROOT / "configs").rglob("*.yaml")):
        raw = load_config(str(path))
        if raw["algo"] == "rlpd":
            raw = apply_overrides(raw, {"data.path": "prior.npz"})
        assert "id" in raw["env"], path
        if missing_env_module(raw):  # an Atari config without the atari extra (test_config.py checks its sentence)
            continue
        build_config(raw)


# -- train, env and data sections --------------------------------------------------------

SECTION_CASES = [
    ("redq", {"train.seed": -1}, r"train\.seed must be an integer in \[0, 2\*\*32 - 1\], got -1\."),
    ("drqn", {"train.seed": 2**40}, r"train\.seed must be an integer in"),
    ("redq", {"train.total_steps": 0}, r"train\.total_steps must be a positive integer"),
    ("sac", {"train.eval_episodes": 0}, r"train\.eval_episodes must be a positive integer"),
    ("redq", {"train.log_every": -5}, r"train\.log_every must be a positive integer"),
    ("redq", {"train.learning_starts": -1}, r"train\.learning_starts must be >= 0"),
    ("r2d2", {"train.learning_starts": -1}, r"train\.learning_starts must be >= 0"),
    ("redq", {"train.threads": -1}, r"train\.threads must be >= 0"),
    ("redq", {"train.device": "tpu"}, r"train\.device must be 'cpu' or 'cuda\[:N\]'"),
    ("drqv2", {"train.device": "cuda:x"}, r"train\.device must be 'cpu' or 'cuda\[:N\]'"),
    ("redq", {"train.run_dir": ""}, r"train\.run_dir must be a directory path"),
    ("redq", {"train.compile_mode": "fast"}, r"train\.compile_mode must be 'step' or 'full'"),
    ("redq", {"train.matmul_precision": "tf32"}, r"train\.matmul_precision must be 'highest', 'high', 'medium' or null"),
    ("redq", {"train.progress": "sometimes"}, r"train\.progress must be of type bool"),
    ("redq", {"train.total_steps": 1.5}, r"train\.total_steps must be of type int"),
    ("redq", {"env.num_envs": 0}, r"env\.num_envs must be a positive integer, got 0\."),
    ("r2d2", {"env.num_envs": -2}, r"env\.num_envs must be a positive integer"),
    ("redq", {"env.id": ""}, r"env\.id must name a gymnasium environment"),
    ("redq", {"env.id": 5}, r"env\.id must be of type str"),
    ("redq", {"env.id": None}, r"env\.id must not be empty"),
    ("redq", {"env.kwargs": {1: 2}}, r"env\.kwargs keys must be keyword names"),
    ("redq", {"env.kwargs": [1]}, r"env\.kwargs must be of type dict"),
    ("rlpd", {"data.offline_ratio": float("nan")}, r"data\.offline_ratio must be in \[0, 1\]"),
    ("rlpd", {"data.offline_ratio": 1.5}, r"data\.offline_ratio must be in \[0, 1\]"),
    ("rlpd", {"data.format": "hdf5"}, r"data\.format must be 'auto', 'npz' or 'minari'"),
    ("rlpd", {"data.pretrain_steps": -1}, r"data\.pretrain_steps must be >= 0"),
    ("rlpd", {"data.path": ""}, r"data\.path must be a dataset file or directory"),
    ("drqv2", {"env.num_envs": 2}, r"drqv2 trains on one env \(env\.num_envs: 1\)"),
]


@pytest.mark.parametrize("algo,overrides,match", SECTION_CASES, ids=[f"{a}-{next(iter(o))}" for a, o, _ in SECTION_CASES])
def test_train_env_and_data_values(algo, overrides, match):
    refused(algo, overrides, "^" + match)


def test_missing_env_id_and_algo_are_errors_not_fallbacks():
    raw = base("redq")
    del raw["env"]["id"]
    with pytest.raises(ConfigError, match=r"^env\.id is missing; set the gymnasium environment"):
        build_config(raw)
    with pytest.raises(ConfigError, match=r"^env\.id is missing"):
        build_config({"algo": "sac"})
    raw = base("sac")
    del raw["algo"]
    with pytest.raises(ConfigError, match=r"^algo is missing; set it to one of dqn, drqn"):
        build_config(raw)
    with pytest.raises(ConfigError, match=r"^Unknown algo 7; choose one of dqn, drqn"):
        build_config({**base("redq"), "algo": 7})
    # the embedded default still names its env, so `rlfunc train` with no config works
    assert build_config(load_config(None)).env.id == "Pendulum-v1"


def test_sections_must_be_mappings():
    for section in ("env", "train", "agent", "data"):
        with pytest.raises(ConfigError, match=f"Section '{section}' must be a mapping"):
            build_config({**base("rlpd"), section: [1, 2]})
    with pytest.raises(ConfigError, match="A config must be a mapping"):
        build_config(["algo", "redq"])
    with pytest.raises(ConfigError, match=r"Unknown config key 'trainer'; did you mean 'train'\?"):
        build_config({**base("redq"), "trainer": {}})


# -- 2. warm-up <= total steps and <= replay capacity, in each learner's units ------------

WARMUP_CASES = [
    ("redq", {"train.learning_starts": 3001}, r"train\.learning_starts=3001 is more than train\.total_steps=3000"),
    ("sac", {"train.learning_starts": 2000, "train.replay_size": 1500},
     r"train\.learning_starts=2000 is more than the replay holds \(train\.replay_size=1500 transitions\)"),
    ("rlpd", {"train.total_steps": 100}, r"train\.learning_starts=200 is more than train\.total_steps=100"),
    ("drqv2", {"train.replay_size": 1000},
     r"train\.learning_starts=2000 is more than the replay holds \(train\.replay_size=1000 frames\)"),
    ("drqv2", {"train.total_steps": 1999}, r"train\.learning_starts=2000 is more than train\.total_steps=1999"),
    ("drqn", {"train.learning_starts": 2001}, r"train\.learning_starts=2001 is more than train\.total_steps=2000"),
    ("dqn", {"train.replay_size": 100},
     r"train\.learning_starts=500 is more than the replay holds \(train\.replay_size=100 windows, one every "
     r"agent\.sequence_period=1 steps: about 100 env steps\)"),
    ("r2d2", {"train.total_steps": 99},
     r"train\.learning_starts=100 windows cannot be stored in train\.total_steps=99 env steps"),
    ("r2d2", {"train.replay_size": 50},
     r"train\.learning_starts=100 windows is more than the replay holds \(train\.replay_size=50 windows\)"),
]


@pytest.mark.parametrize("algo,overrides,match", WARMUP_CASES, ids=[f"{a}-{i}" for i, (a, _, _) in enumerate(WARMUP_CASES)])
def test_warmup_fits_the_run_and_the_replay(algo, overrides, match):
    msg = refused(algo, overrides, "^" + match)
    assert "lower" in msg or "raise" in msg


def test_r2d2_paper_warmup_on_a_short_run_is_refused_not_silent():
    """The issue's case: R2D2's warm-up (Acme's 50000 windows) above what a run can store never learns."""
    refused("r2d2", {"train.learning_starts": 50_000, "train.replay_size": 100_000},
            r"^train\.learning_starts=50000 windows cannot be stored in train\.total_steps=4000")
    refused("r2d2", {"train.learning_starts": 3000, "train.replay_size": 2000},
            r"^train\.learning_starts=3000 windows is more than the replay holds \(train\.replay_size=2000 windows\)")


def test_warmup_equal_to_the_limits_is_fine():
    """Built as given (not refused, not lowered), at exactly the run's length and the replay's size."""
    redq = build("redq", {"train.learning_starts": 3000, "train.replay_size": 3000}).train
    assert (redq.learning_starts, redq.replay_size, redq.total_steps) == (3000, 3000, 3000)
    drqn = build("drqn", {"train.learning_starts": 2000}).train
    assert (drqn.learning_starts, drqn.total_steps) == (2000, 2000)
    r2d2 = build("r2d2", {"train.learning_starts": 4000, "train.replay_size": 4000}).train
    assert (r2d2.learning_starts, r2d2.replay_size, r2d2.total_steps) == (4000, 4000, 4000)


# -- 3. keys an algorithm does not use --------------------------------------------------


def test_compile_mode_and_data_only_where_used():
    for algo in ("drqn", "dqn", "r2d2", "drqv2"):
        refused(algo, {"train.compile_mode": "full"}, rf"^train\.compile_mode is not used by {algo}")
    for algo in ("redq", "sac", "rlpd"):
        assert build(algo, {"train.compile_mode": "full"}).train.compile_mode == "full"
    for algo in ("redq", "sac", "drqn", "dqn", "r2d2", "drqv2"):
        refused(algo, {"data.offline_ratio": 0.5}, rf"^data\.offline_ratio is set, but algo '{algo}' does not learn from prior data")
        refused(algo, {"data.path": "x.npz"}, r"^data\.path is set, but algo")


def test_defaults_that_are_merely_present_pass_and_resolved_configs_round_trip():
    """Unused keys are refused only when a config sets them; a resolved config (what rlfunc writes)
    leaves them out and builds again; an older resolved config that holds them is read with resolved=True."""
    for algo in ALGOS:
        cfg = build(algo)
        again = build_config(to_dict(cfg))
        assert again == cfg, algo
        if not hasattr(get_algo(algo).algo, "make_update"):
            d = to_dict(cfg)
            assert "compile_mode" not in d["train"]
            old = {**d, "train": {**d["train"], "compile_mode": "step"}}
            with pytest.raises(ConfigError, match="is not used by"):
                build_config(old)
            assert build_config(old, resolved=True) == cfg


# -- 5. wrappers checked by name and argument -------------------------------------------

WRAPPER_CASES = [
    ([{"flicker": {"q": 0.5}}], r"^env\.wrappers: 'flicker' has no argument 'q'; its arguments are p, fill\."),
    ([{"pixels": {"sizes": 84}}], r"^env\.wrappers: 'pixels' has no argument 'sizes'; its arguments are size, frame_stack, action_repeat\."),
    ([{"mask_velocity": {"env": 1}}], r"^env\.wrappers: 'mask_velocity' has no argument 'env'"),
    ([{"flicker": {"p": "often"}}], r"^env\.wrappers: 'flicker' argument 'p' must be a number, got 'often'\."),
    ([{"pixels": {"size": 8.5}}], r"^env\.wrappers: 'pixels' argument 'size' must be an integer"),
    ([{"mask_velocity": {"indices": 3}}], r"^env\.wrappers: 'mask_velocity' argument 'indices' must be a list of integers or null"),
    ([{"flicker": {"p": 2}}], r"^The flicker wrapper's p must be a probability in \[0, 1\], got 2"),
    ([{"flicker": {"p": float("nan")}}], r"^The flicker wrapper's p must be a probability"),
    ([{"flicker": {"fill": float("inf")}}], r"^The flicker wrapper's fill must be a finite number"),
    ([{"scale_obs": {"scale": 0}}], r"^The scale_obs wrapper's scale must be positive"),
    ([{"mask_velocity": {"indices": []}}], r"^The mask_velocity wrapper's indices must be a non-empty list"),
    (["flick"], r"^Unknown env wrapper 'flick' in env\.wrappers; did you mean 'flicker'\?"),
    ([{"flicker": 0.5}], r"^env\.wrappers entry 'flicker' must map to its arguments"),
    ([["flicker"]], r"^env\.wrappers entries must be a name or"),
    ([{"flicker": {}, "pixels": {}}], r"^env\.wrappers entries must be a name or"),
    ("flicker", r"^env\.wrappers must be of type list"),
]


@pytest.mark.parametrize("wrappers,match", WRAPPER_CASES, ids=[str(i) for i in range(len(WRAPPER_CASES))])
def test_wrapper_names_arguments_and_values_are_checked_by_build_config(wrappers, match):
    refused("drqn", {"env.wrappers": wrappers}, match)


def test_good_wrappers_and_yaml_number_strings_pass():
    cfg = build("drqn", {"env.wrappers": [{"flicker": {"p": "5e-1"}}, {"scale_obs": {"scale": 2}}]})
    assert cfg.env.wrappers[0] == {"flicker": {"p": "5e-1"}}  # the config keeps what the user wrote
    from rlfunc.envs import build_wrappers

    assert build_wrappers(cfg.env.wrappers)[0].keywords == {"p": 0.5}


# -- 7. --set values YAML cannot read ---------------------------------------------------

OVERRIDE_CASES = [
    ("agent.hidden_sizes=[64,64", r"^Override 'agent\.hidden_sizes=\[64,64' has a value YAML cannot read"),
    ("train.seed=!!python/object/apply:os.system ['true']", r"^Override .train\.seed=!!python.*has a value YAML cannot read \(could not determine a constructor"),
    ("train.seed=*anchor", r"^Override 'train\.seed=\*anchor' has a value YAML cannot read"),
    ("agent.lr=@1", r"^Override 'agent\.lr=@1' has a value YAML cannot read"),
    ("agent.lr={a: 1", r"^Override 'agent\.lr=\{a: 1' has a value YAML cannot read"),
    ("train.seed", r"^Override 'train\.seed' must look like section\.key=value"),
    ("=3", r"^Override '=3' must look like section\.key=value"),
    ("agent..lr=1", r"^Override 'agent\.\.lr=1' must look like section\.key=value"),
]


@pytest.mark.parametrize("item,match", OVERRIDE_CASES, ids=[str(i) for i in range(len(OVERRIDE_CASES))])
def test_malformed_overrides_are_one_sentence(item, match):
    with pytest.raises(ConfigError, match=match) as info:
        parse_overrides([item])
    assert one_sentence(str(info.value)), str(info.value)



def test_a_key_set_twice_takes_the_last_value():
    """As argparse options and the --set help say: a wrapper script's defaults can be overridden by appending."""
    assert parse_overrides(["train.seed=1", "agent.lr=0.001", "train.seed=3"]) == {"train.seed": 3, "agent.lr": 0.001}

def test_overrides_into_a_value_or_of_bad_shape():
    with pytest.raises(ConfigError, match=r"^Cannot set 'algo\.x': 'algo' is not a section"):
        apply_overrides(base("redq"), {"algo.x": 1})
    with pytest.raises(ConfigError, match=r"^Cannot set 'agent\.lr\.x': 'agent\.lr' is not a section"):
        apply_overrides(apply_overrides(base("drqn"), {"agent.lr": 0.1}), {"agent.lr.x": 1})
    with pytest.raises(ConfigError, match=r"^Override key 3 must look like section\.key"):
        apply_overrides(base("redq"), {3: 1})
    with pytest.raises(ConfigError, match=r"^The config holds a value of type object that YAML cannot represent"):
        apply_overrides({**base("redq"), "agent": {"lr": object()}}, {})


def test_config_files_that_cannot_be_read(tmp_path):
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(str(tmp_path))
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00algo")
    with pytest.raises(ConfigError, match=r"cannot be read \(it is not UTF-8 text\)"):
        load_config(str(binary))
    broken = tmp_path / "broken.yaml"
    broken.write_text("algo: redq\nenv: {id: [\n")
    with pytest.raises(ConfigError, match=r"is not valid YAML at line \d+, column \d+") as info:
        load_config(str(broken))
    assert one_sentence(str(info.value))


# -- 6. memory sized before allocation --------------------------------------------------

CARTPOLE = (gym.spaces.Box(-1.0, 1.0, (4,)), gym.spaces.Discrete(2))
PENDULUM = (gym.spaces.Box(-1.0, 1.0, (3,)), gym.spaces.Box(-1.0, 1.0, (1,)))
PIXELS = (gym.spaces.Box(0, 255, (9, 84, 84), dtype="uint8"), gym.spaces.Box(-1.0, 1.0, (1,)))
SPACES = {"redq": PENDULUM, "sac": PENDULUM, "rlpd": PENDULUM, "drqn": CARTPOLE, "dqn": CARTPOLE, "r2d2": CARTPOLE,
          "drqv2": PIXELS}

MEMORY_CASES = [
    ("redq", {"train.replay_size": 10**12, "train.total_steps": 10**12},
     r"^train\.replay_size=1000000000000 needs 36\.0 TB for the replay of Pendulum-v1 transitions \(36 bytes each\), "
     r"but only .* of memory is available; lower train\.replay_size\.$"),
    ("sac", {"agent.hidden_sizes": [10**9]},
     r"^The agent's networks \(agent\.hidden_sizes=\[1000000000\], agent\.num_critics=2\) need \d+\.\d [GT]B for "
     r"parameters, targets and optimizer state, but only .* is available; lower agent\.hidden_sizes or agent\.num_critics\.$"),
    ("rlpd", {"agent.hidden_sizes": [65536, 65536]}, r"^The agent's networks .* need .* GB"),
    ("drqn", {"train.replay_size": 10**12}, r"^train\.replay_size=1000000000000 needs .* for the replay of "
     r"rlfunc/CueMemory-v0 windows of 6 steps"),
    ("dqn", {"agent.lstm_size": 10**8}, r"^The agent's networks \(agent\.encoder_sizes=\[64\], agent\.lstm_size=100000000\) need "),
    ("r2d2", {"train.replay_size": 10**12}, r"^train\.replay_size=1000000000000 needs .* windows of 8 steps"),
    ("drqv2", {"train.replay_size": 10**12, "train.total_steps": 10**12},  # at most 10**12 steps (a typo past it)
     r"^train\.replay_size=1000000000000 needs .* for the pixel replay of Pendulum-v1"),
    ("drqv2", {"agent.hidden_dim": 10**7}, r"^The agent's networks .*agent\.hidden_dim=10000000\) need "),
]


@pytest.mark.parametrize("algo,overrides,match", MEMORY_CASES, ids=[f"{a}-{next(iter(o))}" for a, o, _ in MEMORY_CASES])
def test_storage_that_cannot_fit_is_one_sentence_before_allocation(algo, overrides, match):
    """The learner sizes its replay and the algorithm's state (on the meta device) before allocating
    either: a size that cannot fit is one sentence with the bytes, in well under a second."""
    cfg = build(algo, overrides)
    obs, act = SPACES[algo]
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=match) as info:
        get_algo(algo).make_learner(cfg, obs, act)
    assert time.perf_counter() - t0 < 5.0
    assert one_sentence(str(info.value)), str(info.value)


def test_replay_and_networks_that_fit_only_apart_are_refused_together(monkeypatch):
    from rlfunc.runtime import memory

    cfg = build("redq", {"train.replay_size": 1_000_000})  # 36 MB of replay, ~12 MB of networks
    monkeypatch.setattr(memory, "available_bytes", lambda device: 40_000_000)
    with pytest.raises(ConfigError, match=r"^Together train\.replay_size=1000000 \(36\.0 MB for the replay of "
                       r"Pendulum-v1 transitions \(36 bytes each\)\) and the agent's networks .* need \d+\.\d MB, but only "
                       r"40\.0 MB of memory is available; lower train\.replay_size or agent\.hidden_sizes or agent\.num_critics\.$"):
        get_algo("redq").make_learner(cfg, *PENDULUM)
    monkeypatch.setattr(memory, "available_bytes", lambda device: None)  # unknowable: not checked
    get_algo("redq").make_learner(build("redq", {"agent.hidden_sizes": [8], "train.replay_size": 10, "train.learning_starts": 10}), *PENDULUM)


def test_pixel_replay_counts_the_frames_a_run_writes(monkeypatch):
    """PixelReplay commits frame pages as they are written: a 1M-frame ring for a 20k-step run needs
    the bookkeeping for 1M slots and frames for 20k steps (450 MB), not 21 GB."""
    from rlfunc.runtime import memory
    from rlfunc.runtime.learners.pixel import PixelLearner

    cfg = build("drqv2", {"train.replay_size": 1_000_000})
    learner = PixelLearner.__new__(PixelLearner)
    learner._bind(get_algo("drqv2"), cfg, *PIXELS)
    need = learner._replay_need()
    assert need.nbytes == 1_000_000 * 27 + 20_001 * 3 * 84 * 84
    assert memory.format_bytes(need.nbytes) == "450.4 MB"


def test_available_memory_is_read_where_knowable():
    from rlfunc.runtime import memory

    avail = memory.available_bytes("cpu")
    if Path("/proc/meminfo").exists():
        assert avail is not None and avail > 0
    assert memory.available_bytes("meta") is None
    assert memory.format_bytes(68e9) == "68.0 GB" and memory.format_bytes(512) == "512 bytes"


def test_a_key_in_the_wrong_section_names_the_right_one():
    refused("redq", {"train.tau": 0.01}, r"^'train\.tau' is not in the train section; did you mean 'agent\.tau'\?$")
    refused("drqn", {"agent.seed": 3}, r"^'agent\.seed' is not in the agent section; did you mean 'train\.seed'\?$")
    refused("rlpd", {"env.offline_ratio": 0.5}, r"^'env\.offline_ratio' is not in the env section; did you mean 'data\.offline_ratio'\?$")


def test_train_defaults_alone_never_learn_and_are_refused():
    """TrainSection's defaults (3000 env steps, SAC's 5000-step uniform warm-up) would end the run
    before its first update: a config must set train.total_steps or train.learning_starts."""
    with pytest.raises(ConfigError, match=r"^train\.learning_starts=5000 is more than train\.total_steps=3000"):
        build_config({"algo": "sac", "env": {"id": "Pendulum-v1"}})
    assert build_config({"algo": "sac", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 5000}})
