"""Fuzzed bad configs through the CLI, across every registered algorithm (issue 22).

A seeded generator (deterministic: the same cases on every run) mutates a
valid config of each algorithm in the ways users get configs wrong: wrong
types, negative or zero sizes, NaN/inf numbers, out-of-range probabilities
and discounts, unknown keys, keys in the wrong section, malformed ``--set``
strings (YAML errors, constructor tags), bad wrapper names and arguments,
warm-ups longer than the run or the replay, keys the algorithm does not use,
keys of earlier versions (renamed),
a missing ``env.id``, and replays or networks too big for memory. Each runs
through ``rlfunc train`` in-process, delivered either in the config file or
as ``--set``, and must give:

* exit code 2 and one line on stderr, ``rlfunc: error: <one sentence>``, no traceback;
* nothing written: no file besides the config under the test's directory
  (the run directory may exist, empty); ``Trainer.run`` is never reached, so
  no env step is taken;
* within seconds.
"""

from __future__ import annotations

import dataclasses
import math
import random
import re
import time
import types
import typing
from pathlib import Path

import pytest
import torch
import yaml

from rlfunc.runtime import trainer as trainer_module
from rlfunc.runtime.cli import main
from rlfunc.runtime.config import RENAMED_KEYS, DataSection, EnvSection, TrainSection, apply_overrides, load_config
from rlfunc.runtime.registry import ALGOS, get_algo

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
SEED = 22
SECONDS = 10.0  # per case; each takes well under one on the 2-core CI machine

BASES = {
    "redq": ("configs/redq/pendulum.yaml", {}),
    "sac": ("configs/sac/pendulum.yaml", {}),
    "rlpd": ("configs/rlpd/pendulum.yaml", {"data.offline_ratio": 0.0}),
    "drqn": ("configs/drqn/cue_memory.yaml", {}),
    "dqn": ("configs/dqn/cue_memory.yaml", {}),
    "r2d2": ("configs/r2d2/cue_memory.yaml", {}),
    "drqv2": ("configs/drqv2/pendulum_pixels.yaml", {}),
}
"""A valid config per registered algorithm: every case below breaks exactly one thing in it."""

TRANSITION = ("redq", "sac", "rlpd", "drqv2")
SEQUENCE = ("drqn", "dqn", "r2d2")


def _base(algo: str) -> dict:
    path, extra = BASES[algo]
    return apply_overrides(load_config(str(ROOT / path)), extra)


def _unwrap(tp):
    """``X | None`` -> ``X``."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return tp


def _fields(cls, section: str):
    hints = typing.get_type_hints(cls)
    return [(section, f.name, _unwrap(hints[f.name])) for f in dataclasses.fields(cls)]


def _all_fields(algo: str):
    out = _fields(get_algo(algo).config_cls, "agent") + _fields(TrainSection, "train") + _fields(EnvSection, "env")
    if get_algo(algo).uses_data:
        out += _fields(DataSection, "data")
    return out


def _wrong_type(rng: random.Random, tp):
    """A value of another type than ``tp`` (never one ``tp`` accepts)."""
    if tp is bool:
        return rng.choice(["maybe", 2, [True], 0.5])
    if tp is int:
        return rng.choice(["many", 1.5, [1], {"a": 1}, True, "2.5"])
    if tp is float:
        return rng.choice(["abc", [1.0], {"x": 1}, True, "1e-3x"])
    if tp is str:
        return rng.choice([3, [1], {"a": "b"}, True, 2.5])
    if typing.get_origin(tp) is tuple:
        return rng.choice(["abc", 5, {"a": 1}, [[1]], ["x"]])
    if tp is dict or typing.get_origin(tp) is dict:
        return rng.choice(["abc", [1], 5])
    return rng.choice(["abc", 5, {"a": 1}])  # list (env.wrappers)


def _set(key: str, value) -> str:
    return f"{key}={yaml.safe_dump(value, default_flow_style=True).strip().removesuffix('...').strip()}"


def _typo(rng: random.Random, name: str, valid: set[str]) -> str:
    for _ in range(20):
        i = rng.randrange(len(name))
        kind = rng.randrange(3)
        if kind == 0:
            out = name[:i] + name[i + 1 :]
        elif kind == 1:
            out = name[:i] + rng.choice("aeiouxz_") + name[i:]
        else:
            out = name + rng.choice(["s", "_size", "2"])
        if out and out not in valid:
            return out
    return name + "_unknown"


PROBABILITIES = {
    "redq": [("agent.gamma", [0, 1.5, -0.2]), ("agent.tau", [0, 1.01])],
    "sac": [("agent.gamma", [0, 2]), ("agent.tau", [0, -0.5])],
    "rlpd": [("agent.gamma", [0, 1.5]), ("data.offline_ratio", [1.5, -0.1]), ("agent.tau", [0, 3])],
    "drqn": [("agent.eps_start", [1.5, -0.2]), ("agent.eval_epsilon", [2, -1]), ("agent.gamma", [0, 1.1])],
    "dqn": [("agent.eps_end", [1.5, -0.2]), ("agent.epsilon_base", [0, 1.2]), ("agent.gamma", [0, 7])],
    "r2d2": [("agent.priority_eta", [1.1, -0.1]), ("agent.importance_exponent", [1.5, -0.5]), ("agent.eval_epsilon", [3])],
    "drqv2": [("agent.gamma", [0, 1.5]), ("agent.tau", [0, 2])],
}

MALFORMED_SETS = [
    "agent.lr",
    "=3",
    "agent..lr=1",
    ".=1",
    "agent.hidden_sizes=[1,2",
    "train.seed={a",
    "agent.lr=!!python/object/apply:os.system ['touch PWNED']",
    "train.seed=!!python/name:os.system",
    "train.seed=*anchor",
    "agent.lr=@1",
    "agent.lr=`1`",
    "agent.lr='unterminated",
    "train.seed=[1, {a: ]",
    "train.total_steps=!!binary AAAA",
    "env.id=!!set {a, b}",
]

HUGE = {
    "redq": [("train.replay_size", 10**13), ("agent.hidden_sizes", [10**9])],
    "sac": [("train.replay_size", 10**13), ("agent.hidden_sizes", [10**5, 10**5])],
    "rlpd": [("train.replay_size", 10**13), ("agent.hidden_sizes", [10**9, 8])],
    "drqn": [("train.replay_size", 10**12), ("agent.lstm_size", 10**8)],
    "dqn": [("train.replay_size", 10**12), ("agent.encoder_sizes", [10**9])],
    "r2d2": [("train.replay_size", 10**12), ("agent.head_sizes", [10**9])],
    "drqv2": [("train.replay_size", 10**13), ("agent.hidden_dim", 10**7)],
}


def _warmups(algo: str, raw: dict) -> list[dict]:
    t = raw.get("train", {})
    total, warmup = t["total_steps"], t["learning_starts"]
    if algo == "r2d2":  # in windows: more than the replay holds, or than the run can store
        return [{"train.learning_starts": t["replay_size"] + 1},
                {"train.learning_starts": total + 1, "train.replay_size": total + 1}]
    if algo in TRANSITION:
        return [{"train.learning_starts": total + 1}, {"train.replay_size": max(warmup - 1, 1)}]
    return [{"train.learning_starts": total + 1}, {"train.replay_size": 1}]


WRAPPERS = [
    [{"flickr": {"p": 0.5}}],
    ["mask_velocty"],
    [{"flicker": {"prob": 0.5}}],
    [{"flicker": {"p": "often"}}],
    [{"flicker": {"p": 2}}],
    [{"flicker": {"p": -0.5}}],
    [{"flicker": {"p": float("nan")}}],
    [{"flicker": 0.5}],
    [["flicker"]],
    [{"flicker": {}, "mask_velocity": {}}],
    [{"scale_obs": {"scale": 0}}],
    [{"scale_obs": {"scale": [1, "x"]}}],
    [{"pixels": {"size": "big"}}],
    [{"mask_velocity": {"indices": [99]}}],  # value checked when the env is made
    [{"mask_velocity": {"indices": "1,3"}}],
    [{"pixels": {"size": 84}}],  # no render_mode: refused when the env is made
    "flicker",
]


def _cases() -> list:
    rng = random.Random(SEED)
    cases = []

    current: dict = {}

    def add(algo, kind, raw=None, sets=(), text=None):
        if raw is None and text is None:
            raw = current["raw"]  # the valid base; the --set items break it
        cases.append(pytest.param(algo, raw, list(sets), text, id=f"{algo}-{kind}-{len(cases)}"))

    for algo in sorted(ALGOS):
        raw = current["raw"] = _base(algo)
        fields = _all_fields(algo)
        valid = {f"{s}.{n}" for s, n, _ in fields}
        # wrong types: in the file and through --set
        for via_set in (False, True):
            section, name, tp = rng.choice(fields)
            value = _wrong_type(rng, tp)
            if via_set:
                add(algo, f"type-{section}.{name}", sets=[_set(f"{section}.{name}", value)])
            else:
                add(algo, f"type-{section}.{name}", raw=apply_overrides(raw, {f"{section}.{name}": value}))
        # negative / zero sizes and counts
        ints = [(s, n) for s, n, tp in fields if tp is int]
        s, n = rng.choice(ints)
        add(algo, f"negative-{s}.{n}", sets=[_set(f"{s}.{n}", rng.choice([-1, -100]))])
        sizes = [(s, n) for s, n, tp in fields if typing.get_origin(tp) is tuple]
        s, n = rng.choice(sizes)
        add(algo, f"size-{s}.{n}", raw=apply_overrides(raw, {f"{s}.{n}": rng.choice([[0], [64, -1], [0, 0]])}))
        # NaN / inf numbers
        floats = [(s, n) for s, n, tp in fields if tp is float]
        for via_set in (False, True):
            s, n = rng.choice(floats)
            value = rng.choice([math.nan, math.inf, -math.inf])
            if via_set:
                add(algo, f"nonfinite-{s}.{n}", sets=[f"{s}.{n}=" + rng.choice({math.inf: [".inf", "inf"], -math.inf: ["-.inf", "-inf"]}.get(value, [".nan", "nan", "NaN"]))])
            else:
                add(algo, f"nonfinite-{s}.{n}", raw=apply_overrides(raw, {f"{s}.{n}": value}))
        # out-of-range probabilities and discounts
        key, values = rng.choice(PROBABILITIES[algo])
        add(algo, f"range-{key}", sets=[_set(key, rng.choice(values))])
        # unknown keys, and keys in the wrong section
        s, n, _ = rng.choice(fields)
        add(algo, f"unknown-{s}", sets=[_set(f"{s}.{_typo(rng, n, {m for t, m, _ in fields if t == s})}", 1)])
        agent_only = [n for s, n, _ in fields if s == "agent" and f"train.{n}" not in valid]
        wrong = rng.choice(
            [
                {"sets": [_set(f"train.{rng.choice(agent_only)}", 1)]},
                {"sets": ["trainer.total_steps=10"]},
                {"sets": [_set(rng.choice(["train", "agent", "env"]), rng.choice([5, [1, 2], "x"]))]},
                {"sets": ["algo.name=redq"]},
                {"sets": [_set(rng.choice(["agent.lr.value", "train.seed.x", "env.id.name"]), 1)]},
            ]
        )
        add(algo, "section", **wrong)
        # malformed --set strings
        add(algo, "malformed-set", sets=[rng.choice(MALFORMED_SETS)])
        add(algo, "malformed-set", sets=["train.seed=1", rng.choice(MALFORMED_SETS)])
        # bad wrapper names, arguments and values
        add(algo, "wrapper", sets=[_set("env.wrappers", rng.choice(WRAPPERS))])
        # warm-up longer than the run or the replay
        add(algo, "warmup", sets=[_set(k, v) for k, v in rng.choice(_warmups(algo, raw)).items()])
        # keys the algorithm does not use
        if algo in SEQUENCE or algo == "drqv2":
            add(algo, "unused", sets=[_set("train.compile_mode", rng.choice(["full", "step"]))])
        # keys of earlier versions
        old = rng.choice(sorted(RENAMED_KEYS))
        add(algo, "renamed", raw=apply_overrides(raw, {old: rng.choice([0, 1000])}))
        if algo != "rlpd":
            add(algo, "unused-data", sets=[_set(rng.choice(["data.path", "data.offline_ratio"]), rng.choice(["x.npz", 0.5]))])
        # a missing env.id
        no_id = apply_overrides(raw, {})
        del no_id["env"]["id"]
        add(algo, "no-env-id", raw=no_id)
        # replays and networks too big for memory (checked before allocation, after the env's spaces are known)
        for key, value in HUGE[algo]:
            extra = {"train.total_steps": value} if key == "train.replay_size" else {}
            add(algo, f"huge-{key}", sets=[_set(key, value)] + [_set(k, v) for k, v in extra.items()])
    # files that are not configs
    add("none", "not-yaml", text="algo: redq\nenv: {id: [Pendulum-v1\n")
    add("none", "not-a-mapping", text="- algo\n- redq\n")
    add("none", "yaml-tag", text="algo: !!python/object/apply:os.system ['touch PWNED']\n")
    add("none", "no-algo", text="env: {id: Pendulum-v1}\ntrain: {total_steps: 100, learning_starts: 10}\n")
    return cases


CASES = _cases()


def _one_sentence(msg: str) -> bool:
    body = msg.replace("e.g.", "eg").replace("i.e.", "ie")
    return bool(msg) and msg.rstrip()[-1] in ".?" and not re.search(r"[.!?]\s+[A-Z]", body)


def test_every_algorithm_is_fuzzed_in_every_way():
    ids = [c.id for c in CASES]
    for algo in ALGOS:
        kinds = {i.split("-")[1] for i in ids if i.startswith(f"{algo}-")}
        assert {"type", "negative", "size", "nonfinite", "range", "unknown", "section", "malformed", "wrapper",
                "warmup", "renamed", "no", "huge"} <= kinds, (algo, kinds)
    assert len(CASES) >= 100


@pytest.mark.parametrize("algo,raw,sets,text", CASES)
def test_bad_config_is_one_sentence_exit_2_nothing_written(algo, raw, sets, text, tmp_path, capsys, monkeypatch):
    reached = []

    def run(self, *args, **kwargs):
        reached.append(True)
        raise RuntimeError("Trainer.run was reached: the bad config was not refused before training")

    monkeypatch.setattr(trainer_module.Trainer, "run", run)
    monkeypatch.chdir(tmp_path)  # anything written to a relative path would land here and be seen
    config = tmp_path / "config.yaml"
    config.write_text(text if text is not None else yaml.safe_dump(raw, sort_keys=False))
    argv = ["train", str(config), "--run-dir", str(tmp_path / "run")]
    for item in sets:
        argv += ["--set", item]
    t0 = time.perf_counter()
    rc = main(argv)
    elapsed = time.perf_counter() - t0
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert not reached
    assert rc == 2, (rc, out.err)
    assert len(lines) == 1 and lines[0].startswith("rlfunc: error: "), out.err
    assert "Traceback" not in out.err + out.out
    msg = lines[0][len("rlfunc: error: "):]
    assert _one_sentence(msg), msg
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file() and p != config)
    assert written == [], written
    assert elapsed < SECONDS, f"took {elapsed:.1f}s"
