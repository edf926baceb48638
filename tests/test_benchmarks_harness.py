"""benchmarks/harness.py, the timing harness every ``benchmarks/run.py`` subcommand shares (#27 §3):
interleaved windows in a rotated order, window sizing, the JSON writer's ``command``, and the
names the plug-ins reach as ``run.NAME``."""

from __future__ import annotations

import importlib.util
import json
import shlex
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import harness  # noqa: E402


def test_time_interleaved_rotates_the_order_and_times_every_window():
    calls: list[str] = []
    runners = {n: (lambda n=n: calls.append(n)) for n in "abc"}
    times = harness.time_interleaved(runners, repeats=3, steps={"a": 1, "b": 2, "c": 1}, device=torch.device("cpu"))
    assert {n: len(ts) for n, ts in times.items()} == {"a": 3, "b": 3, "c": 3}
    assert all(t >= 0 for ts in times.values() for t in ts)
    # repeat r starts at runner r: a b b c | b b c a | c a b b
    assert calls == list("abbc") + list("bbca") + list("cabb")


def test_warm_up_and_window_steps():
    n = {"x": 0}

    def step() -> None:
        n["x"] += 1

    warm = harness.warm_up({"x": step}, 3, torch.device("cpu"))
    assert n["x"] == 4 and warm["x"] >= 0  # one untimed call, three timed
    assert harness.window_steps({"slow": 2.0, "fast": 0.01, "zero": 0.0}, ["slow", "fast", "zero"], 1.0) == {
        "slow": 1, "fast": 100, "zero": 1_000_000}


def test_write_json_records_the_command(tmp_path, monkeypatch):
    monkeypatch.setattr(harness, "COMMAND", "python benchmarks/run.py update --quick")
    harness.write_json(tmp_path / "a" / "x.json", {"variants": []})
    harness.write_json(tmp_path / "y.json", {"command": "kept"})
    assert json.loads((tmp_path / "a" / "x.json").read_text()) == {
        "command": "python benchmarks/run.py update --quick", "variants": []}
    assert json.loads((tmp_path / "y.json").read_text()) == {"command": "kept"}
    assert not list(tmp_path.rglob("*.tmp"))


def test_error_text_and_machine_record():
    assert harness.error_text(ValueError("\n first\n\nsecond\nthird")) == "ValueError: first second"
    assert harness.error_text(ValueError("a\nb"), lines=1, limit=9) == "ValueErro"
    info = harness.machine_info(torch.device("cpu"), allocator_tuned=True)
    assert {"cpu", "cores", "torch", "tensordict", "python", "date", "allocator_tuned", "loadavg_at_start"} <= set(info)
    assert info["allocator_tuned"] is True and "gpu" not in info


def test_run_py_is_the_entry_point_and_hands_the_harness_to_its_plug_ins(tmp_path, monkeypatch):
    """The plug-ins reach the harness as run.NAME; main() sets the command every JSON records."""
    monkeypatch.setattr(harness, "COMMAND", None)  # restored after the test
    spec = importlib.util.spec_from_file_location("_bench_run_harness", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # run.py registers its plug-ins on sys.modules[__name__]
    spec.loader.exec_module(run)
    for name in ("time_interleaved", "machine_info", "write_json", "print_table", "sync", "matmul_ceiling",
                 "cpu_model", "warm_up", "window_steps", "error_text"):
        assert getattr(run, name) is getattr(harness, name), name
    assert run.RESULTS_DIR == ROOT / "benchmarks" / "results"
    assert {"update", "peers", "replay", "stored-state", "learn", "report"} <= set(run.SUBCOMMANDS)
    out = tmp_path / "RESULTS.md"
    assert run.main(["report", "--out", str(out)]) == 0 and out.is_file()
    assert harness.COMMAND == "python benchmarks/run.py report --out " + shlex.quote(str(out))
