"""Smoke tests of ``python benchmarks/run.py peers`` (rlfunc vs Stable-Baselines3 and TorchRL).

Tiny shapes, ``--quick``, no compile: seconds, not a measurement. CI installs
neither peer, so one test hides them (``sys.modules[name] = None``) and checks the
'unavailable' rows; the other runs the replay task with whatever is installed and
checks each case.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch.set_num_threads(1)

ROW_KEYS = {"task", "library", "variant", "throughput", "unit", "ratio_vs_rlfunc", "threads", "device", "versions"}


def _run_module():
    spec = importlib.util.spec_from_file_location("_bench_run_peers", ROOT / "benchmarks" / "run.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # run.py registers its plug-ins on sys.modules[__name__]
    spec.loader.exec_module(mod)
    return mod


def _check_shape(data: dict, tasks: set[str]) -> list[dict]:
    assert {"cpu", "cores", "torch", "tensordict", "python", "date"} <= set(data["machine"])
    rows = data["rows"]
    assert {r["task"] for r in rows} == tasks
    for r in rows:
        assert ROW_KEYS <= set(r), (r["task"], r["variant"], ROW_KEYS - set(r))
        assert r["library"] in {"rlfunc", "imperative", "torchrl", "stable-baselines3"}
        assert r["threads"] == 1 and r["device"] == "cpu" and "torch" in r["versions"]
        if r["throughput"] is None:
            assert isinstance(r.get("unavailable"), str) and r["unavailable"], r
            assert r["ratio_vs_rlfunc"] is None
        else:
            assert r["throughput"] > 0 and "unavailable" not in r
    for task in tasks:
        mine = [r for r in rows if r["task"] == task and r["library"] == "rlfunc"]
        assert mine and all(r["throughput"] and r["throughput"] > 0 for r in mine), task
        assert max(r["ratio_vs_rlfunc"] for r in mine) == pytest.approx(1.0)
    return rows


def test_peers_quick_without_peers(tmp_path, monkeypatch):
    """Peers hidden: every task still runs, rlfunc rows measure, peer rows say they are not installed."""
    for name in ("torchrl", "stable_baselines3"):
        monkeypatch.setitem(sys.modules, name, None)  # `import name` now raises ImportError
    run = _run_module()
    out = tmp_path / "peers.json"
    rc = run.main(["peers", "--quick", "--tiny", "--no-compile", "--threads", "1", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    from benchmarks.peers import TASKS

    rows = _check_shape(data, set(TASKS))
    assert set(data["settings"]["peers"]) == {"torchrl", "stable-baselines3"}
    assert all("is not installed" in why for why in data["settings"]["peers"].values())
    peers = [r for r in rows if r["library"] in ("torchrl", "stable-baselines3")]
    assert peers and all(r["throughput"] is None for r in peers)
    # each task that has a TorchRL implementation says why it is missing
    for task in TASKS:
        trl = [r for r in peers if r["task"] == task and r["library"] == "torchrl"]
        assert trl and all("torchrl is not installed" in r["unavailable"] for r in trl), task
    sb3_loop = [r for r in peers if r["task"] == "pendulum_train_loop_utd20" and r["library"] == "stable-baselines3"]
    assert sb3_loop and "stable-baselines3 is not installed" in sb3_loop[0]["unavailable"]
    # the imperative baselines measured alongside
    assert all(r["throughput"] > 0 for r in rows if r["library"] == "imperative")
    assert {r["task"] for r in rows if r["library"] == "imperative"} == {
        "redq_critic_update", "sac_critic_update", "sequence_update"}
    if importlib.util.find_spec("matplotlib") is not None:
        assert out.with_suffix(".png").stat().st_size > 0
    # benchmarks/report.py renders it as a table (with the reasons) and links the PNG
    from benchmarks.report import build_report

    md = build_report(tmp_path)
    assert "| task | library | variant | throughput |" in md and "torchrl is not installed" in md
    assert "Smoke run" in md
    if out.with_suffix(".png").exists():
        assert "](results/peers.png)" in md


def test_peers_replay_with_installed_peers(tmp_path):
    """Whatever is installed: a peer row is measured if the peer imports, else it says it is not installed."""
    out = tmp_path / "peers.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "peers", "--quick", "--tiny", "--no-compile",
         "--threads", "1", "--only", "replay_sample", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "replay_sample" in proc.stdout  # the printed table
    data = json.loads(out.read_text())
    rows = _check_shape(data, {"replay_sample"})
    by = {(r["library"], r["variant"]): r for r in rows}
    assert by[("rlfunc", "UniformReplay")]["throughput"] > 0
    for library, module in (("torchrl", "torchrl"), ("stable-baselines3", "stable_baselines3")):
        mine = [r for r in rows if r["library"] == library]
        assert mine, library
        installed = data["settings"]["peers"][library] == "installed"  # it imported in the benchmark's process
        if installed:
            assert importlib.util.find_spec(module) is not None
        plain = [r for r in mine if not r.get("prioritized")]
        if installed:
            assert all(r["throughput"] > 0 for r in plain), plain
            assert all(r["versions"][library] != "not installed" for r in mine)
            for r in mine:  # TorchRL's prioritized buffer: measured, or the reason its C++ tree is missing
                assert r["throughput"] or "C++" in r["unavailable"], r
        else:
            assert all(r["throughput"] is None and library in r["unavailable"] for r in mine)


def test_peers_device_cuda_without_cuda_exits_2(tmp_path, monkeypatch, capsys):
    """``--device cuda`` where CUDA is not available: one sentence on stderr, exit code 2, nothing written."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    run = _run_module()
    out = tmp_path / "peers_cuda.json"
    rc = run.main(["peers", "--device", "cuda", "--quick", "--tiny", "--no-compile", "--out", str(out)])
    assert rc == 2
    err = capsys.readouterr().err
    assert "--device cuda" in err and "no CUDA device is available" in err
    assert not out.exists()


def test_peers_rows_record_device_and_report_renders_cuda(tmp_path):
    """Rows carry the device they ran on; report.py renders a peers_cuda.json as its own section with the GPU."""
    import argparse

    from benchmarks import peers
    from benchmarks.report import build_report

    v = peers.Variant("rlfunc", "eager", None)
    v.throughput, v.windows_s = 10.0, [0.1, 0.1]
    rows = peers._rows("replay_sample", "batches/s", {}, [v], 1, "cuda")
    assert rows[0]["device"] == "cuda" and rows[0]["ratio_vs_rlfunc"] == pytest.approx(1.0)
    assert peers._rows("replay_sample", "batches/s", {}, [v], 1)[0]["device"] == "cpu"  # the default
    ns = argparse.Namespace(threads=1, device="cuda", quick=True, tiny=False, no_compile=False, only=None)
    assert "--device cuda" in peers._command(ns)
    assert "--device" not in peers._command(argparse.Namespace(**{**vars(ns), "device": "cpu"}))
    data = {"machine": {"cpu": "x", "gpu": "NVIDIA Test GPU"}, "rows": rows,
            "settings": {"command": "python benchmarks/run.py peers --device cuda", "device": "cuda"}}
    (tmp_path / "peers_cuda.json").write_text(json.dumps(data))
    md = build_report(tmp_path)
    assert "## peers_cuda" in md and "gpu=NVIDIA Test GPU" in md and "device=cuda" in md
