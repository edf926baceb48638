"""Smoke test of ``benchmarks/run.py population-replay`` (issue #24 §5): tiny shapes, one window."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_population_replay_bench_quick(tmp_path):
    out = tmp_path / "r.json"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "run.py"), "population-replay", "--quick", "--members", "1", "2",
           "--repeats", "1", "--steps", "1", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT,
                          env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr
    d = json.loads(out.read_text())
    assert d["benchmark"] == "population_replays" and "cpu" in d["machine"] and d["device"] == "cpu"
    assert [(r["replay"], r["members"]) for r in d["rows"]] == [
        (name, p) for name in ("r2d2", "drqn", "drqv2") for p in (1, 2)
    ]
    for r in d["rows"]:
        assert r["population_sample_ms"] > 0 and r["separate_sample_ms"] > 0 and r["sample_speedup"] > 0
        assert r["population_bytes"] == r["separate_bytes"] > 0, "one [P, ...] storage holds what P replays hold"
    assert all(r["update_priorities_speedup"] > 0 for r in d["rows"] if r["replay"] == "r2d2")
