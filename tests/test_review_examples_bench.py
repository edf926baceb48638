"""Review of the one-file examples (rlfunc/examples/) and the benchmarks package (benchmarks/).

* Each example's defaults are its config's (docs/getting-started.md says so), and every
  command line in an example's docstring parses; the ones that name a config give that config.
* Every ``benchmarks/run.py`` subcommand answers ``--help``; the JSON writers that did not record
  the machine (``reference-returns``) or the command (``benchmarks/prioritized_replay.py``) do;
  no committed JSON beyond a named legacy list lacks either; ``report`` regenerates the committed
  RESULTS.md byte for byte.
* Numbers the algorithm pages quote are the ones their JSONs hold.

Fast: no training, no timing windows worth the name (OMP_NUM_THREADS=1 friendly).
"""

from __future__ import annotations

import importlib
import json
import re
import shlex
import statistics
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch.set_num_threads(1)


# --------------------------------------------------------------------------- examples


def _run_config(path: str, data_path: str | None = None):
    from rlfunc.runtime.config import build_config, load_config

    raw = load_config(ROOT / path)
    if data_path is not None:
        raw.setdefault("data", {})["path"] = data_path
    return build_config(raw)


def _example_view(name: str, a) -> dict:
    """What an example's Args mean in the config's terms (env, train, agent)."""
    train = {"total_steps": a.total_steps, "learning_starts": a.learning_starts, "replay_size": a.replay_size,
             "eval_every": a.eval_every, "eval_episodes": a.eval_episodes, "threads": a.threads}
    if name in ("redq_pendulum", "rlpd_pendulum", "redq_population"):
        agent = {"num_critics": a.num_critics, "updates_per_step": a.updates_per_step, "batch_size": a.batch_size,
                 "hidden_sizes": (a.hidden, a.hidden)}
        if name != "rlpd_pendulum":
            agent["subset_size"] = a.subset_size
        if name == "redq_pendulum":
            agent["critic_lr"] = a.critic_lr
        if name == "redq_population":  # one member per seed and rate: the config's seed and rate among them
            assert list(a.critic_lrs) == [3e-4] and 0 in a.seeds
        return {"env": {"id": a.env_id, "num_envs": 1, "wrappers": []}, "train": train, "agent": agent}
    if name == "drqn_cartpole":
        agent = {"sequence_length": a.sequence_length, "sequence_period": a.sequence_period, "n_step": a.n_step,
                 "encoder_sizes": (a.encoder_size,), "lstm_size": a.lstm_size, "batch_size": a.batch_size, "lr": a.lr,
                 "gamma": a.gamma, "target_period": a.target_period, "double_q": a.double_q,
                 "max_grad_norm": a.max_grad_norm or None, "eps_decay_steps": a.eps_decay_steps,
                 "train_every": a.train_every, "lr_decay": a.lr_decay_updates or None}
        wrappers = ["mask_velocity"] if a.mask_velocity else []
        return {"env": {"id": a.env_id, "num_envs": a.num_envs, "wrappers": wrappers}, "train": train, "agent": agent}
    if name == "r2d2_cartpole":
        agent = {"encoder_sizes": (a.width,), "lstm_size": a.width, "head_sizes": (a.width,), "burn_in": a.burn_in,
                 "sequence_length": a.sequence_length, "sequence_period": a.sequence_period, "gamma": a.gamma,
                 "lr": a.lr, "batch_size": a.batch_size, "target_period": a.target_period,
                 "samples_per_insert": a.samples_per_insert, "lr_decay": a.lr_decay_updates or None}
        wrappers = ["mask_velocity"] if a.mask_velocity else []
        return {"env": {"id": a.env_id, "num_envs": a.num_envs, "wrappers": wrappers}, "train": train, "agent": agent}
    assert name == "drqv2_dmc"
    agent = {"batch_size": a.batch_size, "lr": a.lr, "update_every": a.update_every, "feature_dim": a.feature_dim,
             "hidden_dim": a.hidden_dim, "stddev_duration": a.stddev_duration, "frame_stack": a.frame_stack,
             "encoder_channels": (a.channels,) * a.convs, "encoder_strides": (2,) + (1,) * (a.convs - 1)}
    shape = {"size": a.size, "frame_stack": a.frame_stack, "action_repeat": a.action_repeat}
    if a.env_id.startswith("dmc/"):
        env = {"id": a.env_id, "num_envs": 1, "wrappers": [], "kwargs": {**shape, "fast_render": a.fast_render}}
    else:
        env = {"id": a.env_id, "num_envs": 1, "wrappers": [{"pixels": shape}], "kwargs": {"render_mode": "rgb_array"}}
    return {"env": env, "train": train, "agent": agent}


def _config_view(rc, view: dict) -> dict:
    """The same keys read from a built run config."""
    agent = {}
    for key in view["agent"]:
        if key == "lr_decay":
            s = rc.agent.lr_schedule
            agent[key] = None if s is None else s.decay_updates
            if s is not None:
                assert (s.kind, s.end_factor, s.warmup_updates) == ("linear", 0.1, 0), s  # the example's schedule
        else:
            v = getattr(rc.agent, key)
            agent[key] = tuple(v) if isinstance(v, list) else v
    env = {"id": rc.env.id, "num_envs": rc.env.num_envs, "wrappers": list(rc.env.wrappers)}
    if "kwargs" in view["env"]:
        env["kwargs"] = {"fast_render": False, **rc.env.kwargs} if rc.env.id.startswith("dmc/") else dict(rc.env.kwargs)
    train = {k: getattr(rc.train, k) for k in view["train"]}
    return {"env": env, "train": train, "agent": agent}


EXAMPLE_CONFIGS = [
    ("redq_pendulum", "configs/redq/pendulum.yaml"),
    ("redq_population", "configs/redq/pendulum.yaml"),
    ("rlpd_pendulum", "configs/rlpd/pendulum.yaml"),
    ("drqn_cartpole", "configs/drqn/cartpole_novel.yaml"),
    ("r2d2_cartpole", "configs/r2d2/cartpole.yaml"),
    ("drqv2_dmc", "configs/drqv2/cartpole_balance.yaml"),
]


@pytest.mark.parametrize("name,config", EXAMPLE_CONFIGS)
def test_example_defaults_are_its_configs(name, config, tmp_path):
    """docs/getting-started.md: "A script's defaults are its config's" (compile aside)."""
    ex = importlib.import_module(f"rlfunc.examples.{name}")
    args = ex.Args()
    rc = _run_config(config, data_path=str(tmp_path / "prior.npz") if name == "rlpd_pendulum" else None)
    view = _example_view(name, args)
    assert _config_view(rc, view) == view
    if name == "rlpd_pendulum":
        assert (args.offline_ratio, args.pretrain_steps) == (rc.data.offline_ratio, rc.data.pretrain_steps)


def _docstring_commands(name: str) -> list[list[str]]:
    ex = importlib.import_module(f"rlfunc.examples.{name}")
    lines = [ln.strip() for ln in ex.__doc__.splitlines() if ln.strip().startswith(f"python -m rlfunc.examples.{name}")]
    return [shlex.split(ln.split("#", 1)[0])[3:] for ln in lines]


@pytest.mark.parametrize("name", [n for n, _ in EXAMPLE_CONFIGS])
def test_every_command_in_an_examples_docstring_parses(name):
    commands = _docstring_commands(name)
    assert commands, f"{name}'s docstring shows no command"
    ex = importlib.import_module(f"rlfunc.examples.{name}")
    for argv in commands:
        assert isinstance(ex.parse_args(argv), ex.Args)


@pytest.mark.parametrize("name,flags,config", [
    ("r2d2_cartpole", "--mask-velocity", "configs/r2d2/cartpole_novel.yaml"),
    ("drqv2_dmc", "--env-id Pendulum-v1", "configs/drqv2/pendulum_pixels.yaml"),
])
def test_an_examples_docstring_command_for_another_config_gives_that_config(name, flags, config):
    ex = importlib.import_module(f"rlfunc.examples.{name}")
    argv = next(c for c in _docstring_commands(name) if " ".join(c).startswith(flags))
    view = _example_view(name, ex.parse_args(argv))
    assert _config_view(_run_config(config), view) == view


def test_the_redq_examples_sac_flags_give_the_sac_configs_agent():
    """"SAC: --num-critics 2 --updates-per-step 1": the agent fields the flags set are sac/pendulum's; the
    target entropy differs by name (redq's 'mbpo' vs sac's 'auto') and not in value on Pendulum (-1 both)."""
    ex = importlib.import_module("rlfunc.examples.redq_pendulum")
    argv = next(c for c in _docstring_commands("redq_pendulum") if "--num-critics" in c)
    view = _example_view("redq_pendulum", ex.parse_args(argv))
    rc = _run_config("configs/sac/pendulum.yaml")
    assert _config_view(rc, view)["agent"] == view["agent"]


# --------------------------------------------------------------------------- benchmarks


@pytest.fixture()
def bench_run(monkeypatch):
    from benchmarks import harness

    monkeypatch.setattr(harness, "COMMAND", None)  # run.main sets it; restored after the test
    return importlib.import_module("benchmarks.run")


def test_every_benchmark_subcommand_answers_help(bench_run, capsys):
    parser = bench_run.build_parser()
    assert len(bench_run.SUBCOMMANDS) >= 14
    for name in bench_run.SUBCOMMANDS:
        with pytest.raises(SystemExit) as stop:
            parser.parse_args([name, "--help"])
        assert stop.value.code == 0, name
        assert f"usage: benchmarks/run.py {name}" in capsys.readouterr().out


def _records(d: dict) -> set[str]:
    """Which of machine (cpu, cores, torch, date) and command a JSON records, anywhere in it."""
    found: set[str] = set()

    def walk(x):
        if isinstance(x, dict):
            found.update(k for k in x if k in ("cpu", "gpu", "cores", "torch", "date", "command", "commands"))
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x[:20]:
                walk(v)

    walk(d)
    missing = set()
    if not found & {"cpu", "gpu"}:
        missing.add("cpu")
    missing |= {"cores", "torch", "date"} - found
    if not found & {"command", "commands"}:
        missing.add("command")
    return missing


def test_reference_returns_json_records_the_machine_and_the_command(bench_run, monkeypatch, tmp_path):
    from benchmarks import drqv2_bench

    monkeypatch.setattr(drqv2_bench, "reference_returns", lambda tasks, episodes, seed: {t: {} for t in tasks})
    out = tmp_path / "reference.json"
    assert bench_run.main(["reference-returns", "--tasks", "dmc/cartpole_balance-v0", "--episodes", "1",
                           "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert _records(d) == set(), _records(d)
    assert {"cpu", "cores", "torch", "date"} <= set(d["machine"])
    assert d["command"].startswith("python benchmarks/run.py reference-returns --tasks dmc/cartpole_balance-v0")


def test_prioritized_replay_json_records_the_command_and_the_machine(tmp_path, capsys):
    from benchmarks import prioritized_replay

    out = tmp_path / "pr.json"
    argv = ["--sizes", "256", "--batch", "4", "--reps", "2", "--rounds", "1", "--out", str(out)]
    prioritized_replay.main(argv)
    d = json.loads(out.read_text())
    assert _records(d) == set(), _records(d)
    assert d["command"] == "python benchmarks/prioritized_replay.py " + " ".join(shlex.quote(a) for a in argv)
    assert [r["size"] for r in d["rows"]] == [256]


# Committed before their writers recorded everything; the JSONs are results and stay as they are.
# (learn-collect now records its machine; reference-returns and prioritized_replay.py now record
# what they lacked.) A JSON fixed later should leave this list.
LEGACY_WITHOUT_MACHINE = {
    "learn_drqn_actor_ladder", "learn_drqn_dueling", "learn_drqn_eps_end_01", "learn_drqn_n_step5",
    "learn_drqn_n_step5_actor_ladder", "learn_drqn_n_step5_rescaled", "learn_drqn_scale_obs_10",
    "learn_drqv2_cpu", "learn_drqv2_gpu", "learn_drqv2_gpu_s0_94k", "reference_drqv2",
}
LEGACY_WITHOUT_COMMAND: set[str] = set()  # every JSON records its command now


def test_committed_jsons_record_machine_and_command_but_for_a_named_legacy_list():
    problems = {}
    for path in sorted(RESULTS.glob("*.json")):
        missing = _records(json.loads(path.read_text()))
        allowed = ({"cpu", "cores", "torch", "date"} if path.stem in LEGACY_WITHOUT_MACHINE else set()) | (
            {"command"} if path.stem in LEGACY_WITHOUT_COMMAND else set())
        if missing - allowed:
            problems[path.name] = sorted(missing - allowed)
    assert not problems, f"benchmark JSONs without their machine or command: {problems}"
    for stem in LEGACY_WITHOUT_MACHINE | LEGACY_WITHOUT_COMMAND:
        assert (RESULTS / f"{stem}.json").is_file(), f"{stem}.json is gone: drop it from the legacy list"


def test_report_regenerates_the_committed_results_md(bench_run, tmp_path, capsys):
    out = tmp_path / "RESULTS.md"
    assert bench_run.main(["report", "--out", str(out)]) == 0
    committed = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    assert out.read_text() == committed, "benchmarks/RESULTS.md is stale: run python benchmarks/run.py report"


# --------------------------------------------------------------------------- numbers the algorithm pages quote


def _doc(name: str) -> str:
    return " ".join((ROOT / "docs" / "algorithms" / name).read_text().split())


def _json(stem: str) -> dict:
    return json.loads((RESULTS / f"{stem}.json").read_text())


def _finals(stem: str, label: str, fmt: str = "{:.0f}", sep: str = " / ") -> tuple[str, str]:
    s = _json(stem)["summary"][label]
    return sep.join(fmt.format(x) for x in s["final_returns"]), fmt.format(s["median_final_return"])


def test_redq_page_quotes_learn_redq_json():
    text = _doc("redq.md").replace("−", "-")
    finals, median = _finals("learn_redq", "redq")
    assert f"REDQ median final {median} ({finals};" in text
    assert f"vs SAC {_finals('learn_redq', 'sac')[1]} " in text


def test_drqv2_page_quotes_its_jsons():
    text = _doc("drqv2.md")
    finals, median = _finals("learn_drqv2", "drqv2")
    assert f"median final {median} ({finals})" in text
    assert _finals("learn_drqv2_sigma100k", "drqv2")[0] in text
    assert f"**{_finals('learn_drqv2_cpu', 'drqv2', '{:.1f}')[0]}**" in text
    assert "(next row)" not in text  # the CPU row it points to is above it


def test_rlpd_page_quotes_population_redq_json_for_one_members_step():
    rows = _json("population_redq")["rows"]
    one = next(r for r in rows if r["members"] == 1)
    assert f"takes {one['population_update_ms_per_env_step']:.0f} ms" in _doc("rlpd.md")


def test_drqn_page_counts_the_stored_state_evaluations_above_the_control():
    by: dict[str, list[dict]] = {}
    for r in _json("learn_minatar_drqn_stored_state")["runs"]:
        by.setdefault(r["algo"], []).append({int(s): v for s, v in r["evals"]})

    def med(label, s):
        return statistics.median(e[s] for e in by[label])

    above = [s for s in sorted(by["dqn_breakout"][0]) if s > 100_000
             and med("drqn_breakout_stored_state", s) > med("dqn_breakout", s)]
    n_after = len([s for s in by["dqn_breakout"][0] if s > 100_000])
    up_to_200k = len([s for s in above if s <= 200_000])
    mid = len([s for s in above if 200_000 < s <= 300_000])
    late = len([s for s in above if s > 300_000])
    text = _doc("drqn.md")
    assert f"above the control's at {len(above)} of the {n_after} evaluations after 100k" in text
    assert re.search(rf"{up_to_200k} up to 200k, {mid} of the 20 from 205k to 300k and {late} of the 30 after 300k", text)
