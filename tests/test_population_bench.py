"""Smoke test of ``benchmarks/run.py population`` (issue #24): the env-step timing of SAC and RLPD
populations (and without the update, ``--collect-only``) and the update-only timing of all seven algorithms (DRQN and DQN also on MinAtar
shapes), tiny agents, one window each."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(tmp_path: Path, *argv: str) -> dict:
    out = tmp_path / "p.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "population", "--quick", "--members", "2",
           "--repeats", "1", "--steps", "1", "--out", str(out), *argv]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def test_env_step_timing_of_sac_and_rlpd_populations(tmp_path):
    for algo in ("sac", "rlpd"):
        d = _bench(tmp_path, "--algo", algo)
        (row,) = d["rows"]
        assert d["kind"] == "env_steps" and d["algo"] == algo and row["members"] == 2
        assert row["total_throughput_ratio"] > 0 and row["population_env_steps_per_s_total"] > 0
        assert row["population_state_mb"] > 0 and "cpu" in d["machine"] and len(row["loadavg_end"]) == 3


def test_collect_only_timing_of_a_population_without_its_update(tmp_path):
    d = _bench(tmp_path, "--algo", "sac", "--collect-only")
    (row,) = d["rows"]
    assert d["kind"] == "collect" and row["members"] == 2 and row["total_throughput_ratio"] > 0
    assert row["population_ms_per_env_step"] > 0 and row["cpu_time"]["separate_ms_per_env_step"] > 0
    assert d["matmul_precision"] == "highest"  # torch's default, recorded


def test_matmul_precision_is_set_for_both_sides_and_recorded(tmp_path):
    d = _bench(tmp_path, "--algo", "redq", "--update-only", "--matmul-precision", "high")
    assert d["matmul_precision"] == "high" and d["kind"] == "update_only"


@pytest.mark.parametrize("algo", ["redq", "sac", "rlpd", "drqv2", "drqn", "dqn", "r2d2"])
def test_update_only_timing_of_every_algorithm(tmp_path, algo):
    d = _bench(tmp_path, "--algo", algo, "--update-only")
    (row,) = d["rows"]
    assert d["kind"] == "update_only" and row["members"] == 2 and row["total_throughput_ratio"] > 0
    assert row["population_update_ms_all_members"] > 0 and "compiled" not in row
    if algo == "r2d2":
        assert d["agent"]["sequence_length"] == 4 and d["env"] is None  # vector shapes


@pytest.mark.parametrize("algo", ["drqn", "dqn"])
def test_update_only_timing_on_minatar_frames(tmp_path, algo):
    # MinAtar Breakout's frames through the packaged config's conv torso
    d = _bench(tmp_path, "--algo", algo, "--update-only", "--obs", "minatar")
    assert d["env"] == "MinAtar/Breakout-v0 shapes" and d["rows"][0]["total_throughput_ratio"] > 0
    assert d["agent"]["sequence_length"] == (1 if algo == "dqn" else 4) and d["agent"]["encoder_sizes"] == []


def test_obs_minatar_is_for_the_sequence_learners_update_only(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "population", "--algo", "redq",
                           "--update-only", "--obs", "minatar", "--quick"], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == (
        "population: --obs minatar is for --update-only with --algo drqn, dqn or r2d2.")


def test_a_bad_algorithm_is_one_sentence(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "population", "--algo", "drqn"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and done.stderr.strip() == (
        "population: --algo drqn is not one of redq, sac, rlpd (the others need --update-only).")


def test_whole_runs_of_a_config_as_a_population_and_as_single_runs(tmp_path):
    d = _bench(tmp_path, "--runs", "configs/dqn/cartpole_novel.yaml", "--run-steps", "300",
               "--set", "train.learning_starts=100", "--set", "train.eval_every=300", "--set", "train.eval_episodes=1",
               "--set", "agent.eps_decay_steps=200")
    assert d["kind"] == "whole_runs" and d["algo"] == "dqn" and d["run_steps"] == 300
    (row,) = d["rows"]
    assert row["members"] == 2 and row["vectorize"] == "vmap" and row["total_throughput_ratio"] > 0
    assert len(row["seconds_per_run"]["population"]) == len(row["seconds_per_run"]["separate"]) == 1
    assert "--runs configs/dqn/cartpole_novel.yaml" in d["command"]


def test_device_options_need_cuda_and_are_not_for_whole_runs():
    def stderr(*argv: str) -> tuple[int, str]:
        done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "population", "--quick", *argv],
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        return done.returncode, done.stderr.strip()

    assert stderr("--algo", "redq", "--cuda-graph") == (2, "population: --cuda-graph needs --device cuda.")
    assert stderr("--algo", "redq", "--update-only", "--cuda-graph") == (2, "population: --cuda-graph needs --device cuda.")
    assert stderr("--runs", "configs/redq/pendulum.yaml", "--device", "cuda") == (
        2, "population: --runs times whole runs as configured; set train.compile, train.device, train.cuda_graph and "
           "train.matmul_precision with --set, not --compile, --update-only, --collect-only, --device, --cuda-graph, "
           "--matmul-precision or --env.")
    assert stderr("--algo", "redq", "--collect-only", "--compile") == (
        2, "population: --collect-only times acting and storing without the update; drop --update-only, --compile "
           "and --cuda-graph.")
    import torch

    if not torch.cuda.is_available():
        assert stderr("--algo", "redq", "--update-only", "--device", "cuda") == (
            2, "population: --device cuda needs a CUDA build of torch and a visible GPU; this machine has none "
               "(use --device cpu).")


def test_the_jsons_record_the_device_and_the_env(tmp_path):
    d = _bench(tmp_path, "--algo", "sac", "--update-only", "--device", "cpu")
    assert d["device"] == "cpu" and d["cuda_graph"] is False and "cuda_max_memory_mb" not in d["rows"][0]
    pytest.importorskip("mujoco")
    d = _bench(tmp_path, "--algo", "redq", "--env", "Hopper-v5")  # the paper's REDQ shapes (17 obs, 3 actions)
    assert d["env"] == "Hopper-v5" and d["kind"] == "env_steps" and d["rows"][0]["total_throughput_ratio"] > 0


def test_default_names_say_what_was_timed_where():
    sys.path.insert(0, str(ROOT))
    from benchmarks.population_bench import default_name

    assert default_name("redq", False) == "population_redq.json"
    assert default_name("redq", True, device="cuda") == "population_redq_update_only_cuda.json"
    assert default_name("redq", False, device="cuda", env="Hopper-v5") == "population_redq_hopper_cuda.json"
    assert default_name("drqn", True, "minatar") == "population_drqn_minatar_update_only.json"
    assert default_name("redq", False, env="Hopper-v5", collect_only=True) == "population_redq_hopper_collect.json"
    assert default_name("redq", True, device="cuda", matmul_precision="high") == "population_redq_update_only_matmul_high_cuda.json"
    assert default_name("redq", True, matmul_precision="highest") == "population_redq_update_only.json"
