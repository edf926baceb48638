"""Session-37 review of the stop and resume path of ``rlfunc sweep``. Each test fails on the code before
its fix:

* a stopped sweep (Ctrl-C, SIGTERM) wrote no results JSON or PNG for the runs that had finished; only
  ``--resume`` wrote them. It now writes them, naming the other runs under ``unfinished`` (empty when a sweep
  ran to its end), and its sentence says how many finished and where their results are;
* a run that finished while the sweep stopped (its task's answer cut off by the stop) is read back, as
  ``--resume`` reads it, instead of being left out;
* writing those results takes a stopped sweep a few seconds more, while its SIGTERM handler was back to
  Ray's driver handler (``sys.exit``): a second SIGTERM then left without a word on how to continue; there it
  is now a second Ctrl-C, whose sentence says how;
* a stopped sweep given ``--out`` (and the CLI's line after failed runs) said ``rlfunc sweep --resume DIR``,
  which writes ``DIR/results.json`` and leaves the ``--out`` file with the stopped results; it now says
  ``--out`` too;
* ``--resume`` with nothing left to train wrote a ``machine`` without the keys a sweep that used Ray writes
  (``embedded``, ``cluster_cpus``, ...), so readers of an uninterrupted sweep's JSON broke on it.

All but the first run without Ray: ``run_entries`` is replaced by one that stops at once, and finished runs
are faked as their ``config.yaml`` and ``eval.csv`` (what :func:`rlfunc.scale.results.run_finished` reads).
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from test_distributed_r2d2 import bounded  # noqa: F401 -- a fixture: each Ray test within 120 s
from test_review_sweep_faults import TINY, planned

from rlfunc.runtime.config import apply_overrides, build_config, to_dict

sweep_mod = importlib.import_module("rlfunc.scale.sweep")  # the package exports the function as `sweep`

MACHINE_KEYS = {"driver_host", "python", "ray_version", "embedded", "address", "cluster_cpus", "cluster_gpus", "nodes"}


def fake_run(sweep_dir: Path, entry: dict, steps: tuple[int, ...] = (150, 300)) -> None:
    """The run directory of ``entry`` as far as the results read it: finished at 300 steps, or not."""
    run_dir = sweep_dir / entry["name"]
    run_dir.mkdir(exist_ok=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(to_dict(build_config(apply_overrides(TINY, entry["overrides"])))))
    rows = "".join(f"{s},{-1000 + s},{s / 100}\n" for s in steps)
    (run_dir / "eval.csv").write_text("step,mean_return,time_s\n" + rows)


def stopping(monkeypatch, finish=(), trained=(), failed=None):
    """``run_entries`` replaced by a stop: the entries ``finish`` end their runs first (``trained``: those
    whose task's answer arrived before the stop), then SweepStopped, as Ctrl-C raises it."""
    def run_entries(plan, todo, *args, **kwargs):
        sweep_dir = Path(plan["sweep_dir"])
        for entry in todo:
            if entry["name"] in finish:
                fake_run(sweep_dir, entry)
        answers = {e["name"]: sweep_mod.entry_records(plan, e) for e in todo if e["name"] in trained}
        raise sweep_mod.SweepStopped("sweep stopped; finished runs are kept", answers, failed or {},
                                     {"driver_host": "here"})

    monkeypatch.setattr(sweep_mod, "run_entries", run_entries)


def names(plan: dict) -> list[str]:
    return [e["name"] for e in plan["runs"]]


# ----------------------------------------------------------------------------- 1. the results of a stopped sweep


def test_a_stopped_sweep_writes_the_results_of_its_finished_runs_and_names_the_others(bounded, tmp_path):
    """On a local Ray, SIGTERM while the second of two runs trains: the first run's results (JSON and PNG),
    the second named unfinished; --resume, once it is over, writes the JSON an uninterrupted sweep writes."""
    ray = pytest.importorskip("ray")
    sw = tmp_path / "sw"
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    stopped = {}

    def stop_when_the_second_run_trains():
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline:
            for metrics in sw.glob("g1-*/metrics.csv"):
                if len(metrics.read_text().splitlines()) >= 3:  # the header and 2 rows
                    os.kill(os.getpid(), signal.SIGTERM)
                    stopped["at"] = time.monotonic()
                    return
            time.sleep(0.05)

    watcher = threading.Thread(target=stop_when_the_second_run_trains, daemon=True)
    watcher.start()
    with pytest.raises(sweep_mod.SweepStopped) as stop:
        sweep_mod.sweep(config, "0", ["train.total_steps=300,100000"], sweep_dir=sw, max_concurrent=1,
                        echo=lambda line: None)
    watcher.join(timeout=5)
    assert "at" in stopped and not ray.is_initialized()
    plan = json.loads((sw / "sweep.json").read_text())
    first, second = names(plan)
    results = sw / "results.json"
    assert str(stop.value) == (f"sweep stopped with 1 of 2 runs finished, whose results are in {results}; the others "
                               f"continue from their checkpoints with `rlfunc sweep --resume {sw}`")
    saved = json.loads(results.read_text())
    assert [(r["name"], r["complete"], r["env_steps"]) for r in saved["runs"]] == [(first, True, 300)]
    assert saved["unfinished"] == [second] and saved["failed"] == {}
    assert list(saved["summary"]) == ["sac train.total_steps=300"] and saved["summary"]["sac train.total_steps=300"]["seeds"] == 1
    assert set(saved["machine"]) == MACHINE_KEYS and saved["machine"]["embedded"]
    assert (sw / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # the second run over (faked past its end): --resume trains nothing and writes the complete JSON
    with open(sw / second / "eval.csv", "a") as f:
        f.write("100000,1.0,-500.0,0.0,1,\n")
    resumed = sweep_mod.sweep(resume=sw, echo=lambda line: None)
    again = json.loads(results.read_text())
    assert [r["name"] for r in again["runs"]] == [first, second] and again["unfinished"] == []
    assert set(again) == set(saved) and set(again["settings"]) == set(saved["settings"])
    assert set(again["machine"]) == set(saved["machine"]), "the same machine keys as a sweep that used Ray"
    assert again["runs"][0] == saved["runs"][0], "the finished run's record as the stopped sweep wrote it"
    assert resumed["json"] == str(results)


@pytest.mark.parametrize("trained", [(), ("g0-s0",)], ids=["answer-cut-off", "answered"])
def test_a_run_that_finished_while_the_sweep_stopped_is_in_its_results(tmp_path, monkeypatch, trained):
    plan, sw = planned(tmp_path, TINY, seeds="0-1")
    first, second = names(plan)
    fake_run(sw, plan["runs"][1], steps=(150,))  # saved at the step it reached, not over
    stopping(monkeypatch, finish=[first], trained=trained)
    with pytest.raises(sweep_mod.SweepStopped) as stop:
        sweep_mod.run_sweep(plan, echo=lambda line: None)
    assert str(stop.value).startswith(f"sweep stopped with 1 of 2 runs finished, whose results are in {sw / 'results.json'};")
    saved = json.loads((sw / "results.json").read_text())
    assert [r["name"] for r in saved["runs"]] == [first] and saved["unfinished"] == [second]
    assert saved["summary"]["sac"]["final_returns"] == [-700.0]
    assert (sw / "results.png").is_file()


def test_a_sweep_stopped_after_every_run_finished_says_so(tmp_path, monkeypatch):
    plan, sw = planned(tmp_path, TINY, seeds="0-1")
    stopping(monkeypatch, finish=names(plan))
    with pytest.raises(sweep_mod.SweepStopped) as stop:
        sweep_mod.run_sweep(plan, echo=lambda line: None)
    assert str(stop.value) == f"sweep stopped after all 2 runs finished; their results are in {sw / 'results.json'}"
    assert json.loads((sw / "results.json").read_text())["unfinished"] == []


def test_a_sweep_stopped_before_any_run_finished_names_every_run_unfinished(tmp_path, monkeypatch):
    plan, sw = planned(tmp_path, TINY, seeds="0-2")
    first, broken, unstarted = names(plan)
    fake_run(sw, plan["runs"][0], steps=(150,))
    stopping(monkeypatch, failed={broken: "ValueError: boom"})
    with pytest.raises(sweep_mod.SweepStopped) as stop:
        sweep_mod.run_sweep(plan, echo=lambda line: None)
    results = sw / "results.json"
    assert str(stop.value) == (f"sweep stopped before any of its 3 runs finished and 1 failed; {results} names them, "
                               f"and they continue from their checkpoints with `rlfunc sweep --resume {sw}`")
    saved = json.loads(results.read_text())
    assert saved["runs"] == [] and saved["summary"] == {} and saved["unfinished"] == [first, unstarted]
    assert saved["failed"] == {broken: "ValueError: boom"}
    assert not (sw / "results.png").exists(), "no curve to draw"
    assert sweep_mod.results_path(sw, None, flag="--resume") == results, "--resume may write over it"


# ----------------------------------------------------------------------------- 2. a second signal while writing


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_second_signal_while_the_stopped_sweeps_results_are_written_says_how_to_continue(tmp_path, monkeypatch, signum):
    """After ``ray.init`` a driver's SIGTERM handler is Ray's ``sys.exit(signum)``: a second SIGTERM while
    the results were written left the process with no word. It is now a second Ctrl-C."""
    plan, sw = planned(tmp_path, TINY, seeds="0-1")
    stopping(monkeypatch, finish=names(plan)[:1])
    write = sweep_mod._write_json_atomic

    def interrupted(path, obj):
        if signum == signal.SIGINT:
            raise KeyboardInterrupt  # what Python's Ctrl-C handler raises (xdist workers may ignore SIGINT)
        os.kill(os.getpid(), signum)
        time.sleep(0.5)  # the handler runs here
        write(path, obj)

    monkeypatch.setattr(sweep_mod, "_write_json_atomic", interrupted)

    def ray_driver_sigterm(number, frame):  # what ray.init installs in the driver
        sys.exit(number)

    previous = signal.signal(signal.SIGTERM, ray_driver_sigterm)
    try:
        with pytest.raises(sweep_mod.SweepStopped) as stop:
            sweep_mod.run_sweep(plan, echo=lambda line: None)
        assert signal.getsignal(signal.SIGTERM) is ray_driver_sigterm, "the caller's handler put back"
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert str(stop.value) == ("sweep stopped again before its results JSON and PNG were both written; finished runs "
                               f"are kept, and `rlfunc sweep --resume {sw}` writes them and continues the others from "
                               "their checkpoints")
    assert not (sw / "results.json").exists() and not list(sw.glob(".results.json.tmp-*"))


# ----------------------------------------------------------------------------- 3. --out in the resume command


def test_a_stopped_sweep_given_out_says_to_resume_with_it(tmp_path, monkeypatch):
    plan, sw = planned(tmp_path, TINY, seeds="0-1")
    out = tmp_path / "mine.json"
    stopping(monkeypatch, finish=names(plan)[:1])
    with pytest.raises(sweep_mod.SweepStopped) as stop:
        sweep_mod.run_sweep(plan, out=out, echo=lambda line: None)
    assert str(stop.value).endswith(f"with `rlfunc sweep --resume {sw} --out {out}`")
    assert json.loads(out.read_text())["unfinished"] == names(plan)[1:] and not (sw / "results.json").exists()


def test_the_cli_line_after_failed_runs_resumes_with_the_same_out(tmp_path, monkeypatch, capsys):
    from rlfunc.runtime.cli import main

    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(TINY))
    out, sw = tmp_path / "mine.json", tmp_path / "sw"

    def failed_sweep(*args, **kwargs):
        return {"summary": {}, "json": str(out), "failed": {"g0-s0": "ValueError: boom"},
                "settings": {"sweep_dir": str(sw)}}

    monkeypatch.setattr(sweep_mod, "sweep", failed_sweep)
    with pytest.raises(SystemExit) as exited:
        main(["sweep", str(config), "--sweep-dir", str(sw), "--out", str(out)])
    assert exited.value.code == 1
    assert (f"rlfunc: 1 run(s) failed; fix the cause and continue with `rlfunc sweep --resume {sw} --out {out}`."
            in capsys.readouterr().err)


# ----------------------------------------------------------------------------- 4. --resume with nothing to train


def test_resume_with_nothing_to_train_writes_the_machine_keys_of_a_sweep_that_used_ray(tmp_path):
    pytest.importorskip("ray")  # sweep() refuses to run without it
    plan, sw = planned(tmp_path, TINY, seeds="0-1")
    for entry in plan["runs"]:
        fake_run(sw, entry)
    result = sweep_mod.sweep(resume=sw, echo=lambda line: None)
    saved = json.loads((sw / "results.json").read_text())
    assert set(saved["machine"]) == MACHINE_KEYS and saved["machine"]["cluster_cpus"] is None
    assert saved["machine"]["embedded"] is True and saved["unfinished"] == [] and result["failed"] == {}
