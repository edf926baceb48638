"""``benchmarks/run.py learn`` runs its seeds as one population where
:func:`rlfunc.runtime.population.supports` says the config allows it (issue #24), and
otherwise as separate runs; the learn JSON keeps its schema either way."""

from __future__ import annotations

import pytest

from rlfunc.runtime import population as pr
from rlfunc.runtime.config import build_config

BASE = {"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 300, "learning_starts": 100}}


def _with(**train) -> dict:
    return {**BASE, "train": {**BASE["train"], **train}}


def test_supports_says_yes_or_gives_the_refusal_sentence():
    assert pr.supports(build_config(BASE)) is None
    assert pr.supports(build_config({**BASE, "algo": "sac"})) is None
    why = pr.supports(build_config(_with(stop_at_return=-200.0)))
    assert why is not None and "does not support stopping rules" in why and why.endswith(".")
    why = pr.supports(build_config({**BASE, "env": {"id": "Pendulum-v1", "num_envs": 2}}))
    assert why is not None and "needs env.num_envs=1" in why


@pytest.mark.parametrize("train", [{"max_wall_s": 10.0}, {"checkpoint_replay": False}])
def test_member_specs_refuses_with_the_same_sentence(train):
    from rlfunc.runtime.config import ConfigError

    config = build_config(_with(population={"seeds": [0, 1]}, **train))
    with pytest.raises(ConfigError) as info:
        pr.member_specs(config)
    assert str(info.value) == pr.supports(config)
