"""``benchmarks/run.py learn`` runs its seeds as one population where
:func:`rlfunc.runtime.population_members.supports` says the config allows it (issue #24), and
otherwise as separate runs; the learn JSON keeps its schema either way."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlfunc.runtime import population_members as members_of
from rlfunc.runtime.config import build_config

ROOT = Path(__file__).resolve().parents[1]
BASE = {"algo": "redq", "env": {"id": "Pendulum-v1"}, "train": {"total_steps": 300, "learning_starts": 100}}


def _with(**train) -> dict:
    return {**BASE, "train": {**BASE["train"], **train}}


def test_supports_says_yes_or_gives_the_refusal_sentence():
    assert members_of.supports(build_config(BASE)) is None
    assert members_of.supports(build_config({**BASE, "algo": "sac"})) is None
    why = members_of.supports(build_config(_with(stop_at_return=-200.0)))
    assert why is not None and "does not support stopping rules" in why and why.endswith(".")
    why = members_of.supports(build_config(_with(max_updates=10)))
    assert why is not None and "train.max_updates" in why


def test_a_distributed_config_is_not_run_as_a_population():
    """benchmarks/run.py learn asks supports() before stacking seeds: a distributed R2D2 config's seeds
    are separate runs (each with its own actors), not a population the config check then refuses."""
    from rlfunc.runtime.config import POPULATION_AND_DISTRIBUTED, load_config

    config = build_config(load_config(ROOT / "configs/r2d2/cartpole_novel_distributed.yaml"))
    assert members_of.supports(config) == POPULATION_AND_DISTRIBUTED


@pytest.mark.parametrize("train", [{"max_wall_s": 10.0}, {"checkpoint_replay": False}])
def test_member_specs_refuses_with_the_same_sentence(train):
    from rlfunc.runtime.config import ConfigError

    config = build_config(_with(population={"seeds": [0, 1]}, **train))
    with pytest.raises(ConfigError) as info:
        members_of.member_specs(config)
    assert str(info.value) == members_of.supports(config)


# ----------------------------------------------------------------------------- benchmarks/run.py learn

import importlib.util  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import sys  # noqa: E402

TINY = ["--steps", "200", "--set", "agent.hidden_sizes=[16,16]", "--set", "agent.num_critics=2",
        "--set", "agent.updates_per_step=1", "--set", "agent.batch_size=32", "--set", "train.learning_starts=100",
        "--set", "train.eval_every=100", "--set", "train.eval_episodes=1", "--set", "train.checkpoint_every=100",
        "--set", "train.tensorboard=false"]


def _run_module():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    spec = importlib.util.spec_from_file_location("_bench_run_learn_pop", ROOT / "benchmarks" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # run.py registers its plug-ins on sys.modules[__name__]
    spec.loader.exec_module(mod)
    return mod


def _learn(tmp_path: Path, name: str, *argv: str, what: tuple = ("--config", "configs/redq/pendulum.yaml")) -> dict:
    out = tmp_path / f"{name}.json"
    assert _run_module().main(["learn", *what, "--seeds", "2", *TINY,
                               "--runs-dir", str(tmp_path / name), "--out", str(out), *argv]) == 0
    return json.loads(out.read_text())


def test_learn_runs_seeds_as_one_population_and_records_it(tmp_path):
    pop = _learn(tmp_path, "pop")
    sep = _learn(tmp_path, "sep", "--no-population")
    (entry,) = pop["settings"]["population"].values()
    assert entry["members"] == 2 and entry["run_dir"].endswith("redq-pop")
    assert [Path(r["run_dir"]).name for r in pop["runs"]] == ["member-0", "member-1"]
    assert {r["population"] for r in pop["runs"]} == {"redq-pop"} and {r["population"] for r in sep["runs"]} == {None}
    assert pop["machine"]["executor"].startswith("in-process")
    # the same learn-JSON schema either way, and each member equals its separate run (float tolerance)
    assert set(pop["runs"][0]) == set(sep["runs"][0]) and set(pop["summary"]["redq"]) == set(sep["summary"]["redq"])
    for a, b in zip(pop["runs"], sep["runs"]):
        assert (a["seed"], a["env_steps"], a["complete"]) == (b["seed"], 200, True)
        assert [s for s, _ in a["evals"]] == [s for s, _ in b["evals"]]
        assert all(math.isclose(x, y, rel_tol=1e-6) for (_, x), (_, y) in zip(a["evals"], b["evals"]))


def test_learn_jobs_without_ray_is_one_sentence_naming_the_extra(tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else find_spec(name, *a))
    rc = _run_module().main(["learn", "--config", "configs/redq/pendulum.yaml", "--seeds", "2", "--jobs", "2", *TINY,
                             "--runs-dir", str(tmp_path / "r"), "--out", str(tmp_path / "o.json")])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1
    assert 'pip install -e ".[ray]"' in err and "--jobs 1" in err
    assert not (tmp_path / "o.json").exists()


def test_learn_jobs_trains_populations_as_ray_tasks(tmp_path):
    pytest.importorskip("ray")
    import signal

    def expire(signum, frame):
        raise TimeoutError("learn on Ray ran past 240 s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(240)
    try:
        res = _learn(tmp_path, "ray", "--jobs", "2", what=("--algo", "redq"))  # REDQ and SAC: two populations at once
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    import ray

    assert not ray.is_initialized()  # the embedded Ray is shut down after the runs
    assert "Ray tasks" in res["machine"]["executor"] and res["machine"]["embedded"] is True
    assert [(r["algo"], r["seed"], r["population"], r["complete"]) for r in res["runs"]] == [
        ("redq", 0, "redq-pop", True), ("redq", 1, "redq-pop", True), ("sac", 0, "sac-pop", True), ("sac", 1, "sac-pop", True)]
