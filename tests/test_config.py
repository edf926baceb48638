from pathlib import Path

import pytest

from helpers_configs import missing_env_module

from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config, parse_overrides

ROOT = Path(__file__).resolve().parents[1]


def test_default_config_is_redq_pendulum_with_paper_agent():
    cfg = build_config(load_config(None))
    assert cfg.algo == "redq" and cfg.env.id == "Pendulum-v1"
    a = cfg.agent
    assert (a.num_critics, a.subset_size, a.updates_per_step, a.batch_size) == (10, 2, 20, 256)
    assert a.tau == 0.005 and a.gamma == 0.99 and a.hidden_sizes == (256, 256)


def test_repo_configs_load():
    for path in ["configs/redq/pendulum.yaml", "configs/redq/hopper.yaml", "configs/sac/pendulum.yaml"]:
        cfg = build_config(load_config(path))
        assert cfg.agent.num_critics in (2, 10)
    sac = build_config(load_config("configs/sac/pendulum.yaml")).agent
    assert (sac.num_critics, sac.subset_size, sac.updates_per_step) == (2, 2, 1)


def test_every_shipped_config_builds():
    """Each YAML under configs/ validates (algo, env, train, agent, data); RLPD's need the user's data.path."""
    paths = sorted((ROOT / "configs").rglob("*.yaml"))
    assert len(paths) >= 15
    for path in paths:
        raw = load_config(str(path))
        if raw["algo"] == "rlpd":
            raw = apply_overrides(raw, {"data.path": "prior.npz"})
        if missing_env_module(raw):  # e.g. an Atari config without the atari extra: one sentence naming it
            with pytest.raises(ConfigError, match=r'is not installed; install it with pip install -e "\.\[\w+\]"'):
                build_config(raw)
            continue
        cfg = build_config(raw)
        assert cfg.algo == raw["algo"] and cfg.train.total_steps > 0, path


def test_unknown_key_names_closest():
    raw = apply_overrides(load_config(None), {"agent.num_critic": 5})
    with pytest.raises(ConfigError, match="agent.num_critic'.*did you mean 'num_critics'"):
        build_config(raw)
    with pytest.raises(ConfigError, match="did you mean 'train'"):
        build_config({"algo": "redq", "trian": {}})


def test_wrong_types_and_values():
    with pytest.raises(ConfigError, match="train.total_steps must be of type int"):
        build_config(apply_overrides(load_config(None), {"train.total_steps": "lots"}))
    with pytest.raises(ConfigError, match="subset_size"):
        build_config(apply_overrides(load_config(None), {"agent.subset_size": 20}))
    with pytest.raises(ConfigError, match="train.eval_every must be a positive integer"):
        build_config(apply_overrides(load_config(None), {"train.eval_every": 0}))
    # YAML's "3e-4" is a string in YAML 1.1; it is coerced to float
    cfg = build_config(apply_overrides(load_config(None), {"agent.critic_lr": "3e-4"}))
    assert cfg.agent.critic_lr == 3e-4


def test_unknown_env_and_algo():
    with pytest.raises(ConfigError, match="did you mean 'Pendulum-v1'"):
        build_config(apply_overrides(load_config(None), {"env.id": "Pendulm-v1"}))
    with pytest.raises(ConfigError, match="Unknown algo 'reqd'.*'redq'"):
        build_config({"algo": "reqd"})


def test_overrides_parse_yaml_values():
    o = parse_overrides(["train.seed=3", "agent.hidden_sizes=[64, 64]", "train.compile=true"])
    assert o == {"train.seed": 3, "agent.hidden_sizes": [64, 64], "train.compile": True}
    with pytest.raises(ConfigError, match="section.key=value"):
        parse_overrides(["train.seed"])


def test_missing_config_file():
    with pytest.raises(ConfigError, match="No config file 'configs/nope.yaml' and no packaged config of that name"):
        load_config("configs/nope.yaml")
