"""The results pipeline's review: README cells show the seeds' step range and mark cut-off runs,
learn-merge refuses contradictory inputs and keeps each run's machine, learn_minatar.py collect judges
runs against the budget it collects, learn-merge's PNG never draws a reused run directory, ``learn
--algo rlpd`` honours --first-seed, curves beyond 10 labels stay distinct, and summary()'s lists align.
Small synthetic records and JSONs only: nothing trains."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _record(label: str, seed: int, evals: list, total: int = 150_000, complete: bool | None = None, **extra) -> dict:
    return {"algo": label, "env": "CartPole-v1", "wrappers": None, "seed": seed, "evals": evals,
            "env_steps": evals[-1][0] if evals else 0, "final_return": evals[-1][1] if evals else None,
            "total_steps": total, "complete": (bool(evals) and evals[-1][0] >= total) if complete is None else complete,
            **extra}


def _learn_json(path: Path, runs: list[dict], **top) -> Path:
    from rlfunc.scale.results import summary

    path.write_text(json.dumps({**top, "runs": runs, "summary": summary(runs)}))
    return path


# ---------------------------------------------------------------- 1. README cells: step range, cut-off mark


def test_readme_cell_shows_the_seeds_step_range_and_marks_cut_off_runs(tmp_path, monkeypatch):
    from benchmarks import readme_tables as rt

    monkeypatch.setattr(rt, "RESULTS", tmp_path)
    machine = {"cpu": "AMD EPYC", "cores": 2}
    # seeds stopped at 70k / 65k / 65k of 150k (learn_drqn_n_step5_rescaled's shape)
    _learn_json(tmp_path / "stopped.json", [_record("drqn", 0, [[65_000, 23.9], [70_000, 29.3]]),
                                            _record("drqn", 1, [[65_000, 41.1]]), _record("drqn", 2, [[65_000, 46.7]])],
                machine=machine)
    cell = rt.Learned("stopped", "drqn", "CartPole").cell()
    assert "median **41** (29 / 41 / 47) @65k–70k of 150k steps (cut off), 3 seeds, 2-core AMD EPYC" in cell
    # DrQ-v2's agent steps shown as frames, with who cut the runs off
    _learn_json(tmp_path / "lease.json", [_record("drqv2", s, [[10_000, 970.0 + s]], total=50_000) for s in range(3)],
                machine=machine)
    cell = rt.Learned("lease", "drqv2", "cartpole_balance", 2, cut_off_by="the lease").cell()
    assert "@20k of 100k frames (cut off by the lease), 3 seeds" in cell
    # one seed of two cut off: the mark says which share
    _learn_json(tmp_path / "some.json", [_record("x", 0, [[150_000, 5.0]]), _record("x", 1, [[100_000, 3.0]])],
                machine=machine)
    assert "@100k–150k of 150k steps (1 of 2 seeds cut off), 2 seeds" in rt.Learned("some", "x", "t").cell()
    # complete runs whose last steps round alike (a distributed run ends past its budget) keep one number
    _learn_json(tmp_path / "done.json", [_record("r2d2", 0, [[150_002, 452.2]]), _record("r2d2", 1, [[150_003, 129.5]])],
                machine=machine)
    cell = rt.Learned("done", "r2d2", "t").cell()
    assert "@150k steps, 2 seeds" in cell and "cut off" not in cell


def test_readme_cell_refuses_a_summary_its_runs_do_not_give(tmp_path, monkeypatch):
    from benchmarks import readme_tables as rt

    monkeypatch.setattr(rt, "RESULTS", tmp_path)
    path = _learn_json(tmp_path / "edited.json", [_record("x", 0, [[1000, 5.0]], total=1000)], machine={"cpu": "c"})
    d = json.loads(path.read_text())
    d["summary"]["x"]["final_returns"] = [6.0]
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError, match="summary of 'x' is not its runs' final returns"):
        rt.Learned("edited", "x", "t").cell()


# ---------------------------------------------------------------- 2. learn-merge refuses contradictions


def _merge(tmp_path: Path, *inputs: str, out: str = "merged.json") -> int:
    from benchmarks.learn_bench import run_learn_merge

    return run_learn_merge(argparse.Namespace(inputs=list(inputs), out=tmp_path / out, title=None, note=None))


def test_learn_merge_refuses_a_repeated_label_and_seed(tmp_path, capsys):
    a = _learn_json(tmp_path / "a.json", [_record("redq", s, [[1000, -150.0 - s]], total=1000) for s in range(3)],
                    machine={"cpu": "c", "cores": 2})
    assert _merge(tmp_path, f"{a}:redq", f"{a}:redq") == 2
    err = capsys.readouterr().err.strip()
    assert "label 'redq' seed 0 comes twice" in err and err.count(". ") == 0 and err.endswith(".")
    assert not (tmp_path / "merged.json").exists()


@pytest.mark.parametrize("key, other, name", [("env", "Acrobot-v1", "env id"),
                                             ("wrappers", [{"flicker": {"p": 0.5}}], "wrappers"),
                                             ("total_steps", 2000, "total_steps")])
def test_learn_merge_refuses_a_label_over_different_envs_wrappers_or_budgets(tmp_path, capsys, key, other, name):
    a = _learn_json(tmp_path / "a.json", [_record("dqn", s, [[1000, 1.0]], total=1000) for s in range(2)])
    b_runs = [{**_record("other", s, [[1000, 2.0]], total=1000), key: other} for s in (5, 6)]
    b = _learn_json(tmp_path / "b.json", b_runs)
    assert _merge(tmp_path, str(a), f"{b}:other=dqn") == 2
    assert f"label 'dqn' would hold runs of different {name}" in capsys.readouterr().err
    assert not (tmp_path / "merged.json").exists()


def test_learn_merge_accepts_agent_settings_that_differ_in_later_keys(tmp_path):
    a = _learn_json(tmp_path / "a.json", [_record("r2d2", 0, [[1000, 1.0]], total=1000, agent={"lr": 1e-4})])
    b = _learn_json(tmp_path / "b.json", [_record("r2d2", 1, [[1000, 3.0]], total=1000,
                                                  agent={"lr": 1e-4, "forget_bias": 1.0})])
    assert _merge(tmp_path, str(a), str(b)) == 0
    assert json.loads((tmp_path / "merged.json").read_text())["summary"]["r2d2"]["seeds"] == 2


def test_learn_merge_keeps_each_runs_machine_and_readme_refuses_a_label_over_two(tmp_path, monkeypatch):
    from benchmarks import readme_tables as rt

    epyc, xeon = {"cpu": "AMD EPYC", "cores": 2}, {"cpu": "Intel(R) Xeon(R) Processor", "cores": 2}
    a = _learn_json(tmp_path / "a.json", [_record("redq", 0, [[1000, 1.0]], total=1000)], machine=epyc)
    b = _learn_json(tmp_path / "b.json", [_record("drqn", 1, [[1000, 2.0]], total=1000)], machine=xeon)
    assert _merge(tmp_path, str(a), str(b)) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert [r["machine"] for r in merged["runs"]] == [epyc, xeon] and "machine" not in merged
    monkeypatch.setattr(rt, "RESULTS", tmp_path)
    assert "2-core Intel Xeon" in rt.Learned("merged", "drqn", "CartPole").cell()
    assert "2-core AMD EPYC" in rt.Learned("merged", "redq", "Pendulum").cell()
    # one label over runs of both machines: refused when the README is generated
    assert _merge(tmp_path, str(a), f"{b}:drqn=redq", out="both.json") == 0
    with pytest.raises(ValueError, match=r"holds runs trained on different machines \(2-core AMD EPYC, 2-core Intel Xeon\)"):
        rt.Learned("both", "redq", "t").cell()


def test_learn_merge_of_one_machine_keeps_a_single_machine_record(tmp_path):
    m = {"cpu": "AMD EPYC", "cores": 2}
    a = _learn_json(tmp_path / "a.json", [_record("redq", 0, [[1000, 1.0]], total=1000)], machine=m)
    b = _learn_json(tmp_path / "b.json", [_record("sac", 0, [[1000, 2.0]], total=1000)], machine=m)
    assert _merge(tmp_path, str(a), str(b)) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    assert merged["machine"] == m and all("machine" not in r for r in merged["runs"])


def test_every_committed_learn_merge_json_passes_the_merge_checks():
    from benchmarks.learn_bench import merge_refusal

    merged = [p for p in sorted((ROOT / "benchmarks" / "results").glob("*.json"))
              if "learn-merge" in (json.loads(p.read_text()).get("command") or "")]
    assert len(merged) >= 20
    for p in merged:
        runs = json.loads(p.read_text())["runs"]
        assert merge_refusal(runs, [p.name] * len(runs)) is None, p.name


# ---------------------------------------------------------------- 3. learn_minatar.py collect --steps N


def _fake_minatar_run(runs: Path, name: str, total: int, rows: list[tuple[int, float, str]]) -> None:
    d = runs / name
    d.mkdir(parents=True)
    (d / "config.yaml").write_text(f"algo: dqn\nenv: {{id: MinAtar/Breakout-v0}}\n"
                                   f"train: {{total_steps: {total}, seed: {name[-1]}}}\nagent: {{}}\n")
    (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes,stop_reason\n"
                                + "".join(f"{s},1.0,{v},0,10,{why}\n" for s, v, why in rows))


def test_minatar_collect_counts_only_runs_that_reached_the_budget_or_a_return_stop(tmp_path, monkeypatch):
    import benchmarks.learn_minatar as lm

    runs = tmp_path / "runs" / "learn_minatar"
    _fake_minatar_run(runs, "dqn_breakout-450k-s0", 450_000, [(300_000, 9.0, ""), (450_000, 11.0, "")])
    _fake_minatar_run(runs, "dqn_breakout-450k-s1", 300_000, [(300_000, 2.0, "")])  # a copy whose resume failed
    _fake_minatar_run(runs, "dqn_breakout-450k-s2", 450_000,
                      [(300_000, 5.0, ""), (310_000, 3.0, "max_wall_s: 3600 s of training >= 3600")])  # a budget
    _fake_minatar_run(runs, "dqn_breakout-450k-s3", 450_000,
                      [(300_000, 7.0, ""), (320_000, 12.0, "stop_at_return: mean return 12.00 >= 12 at step 320000")])
    monkeypatch.setattr(lm, "ROOT", tmp_path)
    monkeypatch.setattr(lm, "RUNS", runs)
    monkeypatch.setattr(lm, "_machine", lambda note: {"cpu": "c", "cores": 2, "note": note})
    out = tmp_path / "out.json"
    assert lm.collect(out=out, steps=450_000) == 0
    d = json.loads(out.read_text())
    assert d["summary"]["dqn_breakout"]["final_returns"] == [11.0, 12.0]
    assert d["summary"]["dqn_breakout"]["env_steps"] == [450_000, 320_000]
    assert [(p["seed"], p["env_steps"]) for p in d["partial_runs"]] == [(1, 300_000), (2, 310_000)]
    assert [(r["seed"], r["complete"], r["total_steps"]) for r in d["runs"]] == [
        (0, True, 450_000), (1, False, 450_000), (2, False, 450_000), (3, True, 450_000)]


def test_collected_run_still_finishes_a_run_a_budget_rule_stopped_for_the_sweep(tmp_path):
    """rlfunc sweep must not retrain a run max_wall_s stopped: collected_run keeps it complete and names why."""
    from rlfunc.scale.results import collected_run, run_finished

    _fake_minatar_run(tmp_path, "r-s0", 450_000, [(310_000, 3.0, "max_wall_s: 3600 s of training >= 3600")])
    rec = collected_run(tmp_path / "r-s0")
    assert rec["complete"] and run_finished(tmp_path / "r-s0")
    assert rec["stop_reason"].startswith("max_wall_s:")


# ---------------------------------------------------------------- 4. learn-merge's PNG and reused run directories


def _run_dir(path: Path, rows: list[tuple[int, float]]) -> Path:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text("algo: dqn\nenv: {id: CartPole-v1}\ntrain: {total_steps: 2000, seed: 0}\n")
    (path / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n"
                                   + "".join(f"{s},1.0,{v},0,10\n" for s, v in rows))
    return path


def _spy_plots(monkeypatch) -> dict:
    from rlfunc.runtime import plot

    calls: dict = {}
    monkeypatch.setattr(plot, "plot_runs", lambda dirs, out, **kw: calls.setdefault("runs", (dirs, kw)) and Path(out))
    monkeypatch.setattr(plot, "plot_curves", lambda groups, out, **kw: calls.setdefault("curves", groups) and Path(out))
    return calls


def test_learn_merge_plots_a_reused_run_directory_from_the_records_evals(tmp_path, monkeypatch):
    recorded = [[1000, 0.0], [2000, 0.3]]
    stale = _run_dir(tmp_path / "r-s0", [(1000, 1.0), (2000, 1.6)])  # a later experiment's run in the same place
    a = _learn_json(tmp_path / "a.json", [_record("r2d2", 0, recorded, total=2000, run_dir=str(stale))])
    calls = _spy_plots(monkeypatch)
    assert _merge(tmp_path, str(a)) == 0
    assert "runs" not in calls
    ((steps, returns),) = calls["curves"]["r2d2"]
    assert steps.tolist() == [1000, 2000] and returns.tolist() == [0.0, 0.3]


def test_learn_merge_plots_run_directories_that_still_hold_their_runs(tmp_path, monkeypatch):
    rows = [(1000, 0.5), (2000, 0.25)]
    held = _run_dir(tmp_path / "r-s0", rows)
    a = _learn_json(tmp_path / "a.json", [_record("r2d2", 0, [list(r) for r in rows], total=2000, run_dir=str(held))])
    calls = _spy_plots(monkeypatch)
    assert _merge(tmp_path, str(a)) == 0
    assert "curves" not in calls and calls["runs"][0] == [held] and calls["runs"][1]["labels"] == ["r2d2"]


# ---------------------------------------------------------------- 5. learn --algo rlpd --first-seed


def test_learn_rlpd_trains_and_records_the_seeds_from_first_seed(tmp_path):
    from types import SimpleNamespace

    from benchmarks import harness, rlpd_bench
    from rlfunc.scale.results import summary

    asked: list = []

    def learn_entries(label, config, seeds, overrides, threads, population=True):
        asked.append((label, list(seeds)))
        return [{"name": f"{label}-s{s}", "label": label, "seed": s} for s in seeds], "separate"

    def run_learn_plan(plan, jobs, echo):
        return [_record(e["label"], e["seed"], [[250, -900.0], [500, -300.0]], total=500) for e in plan["runs"]], {}, {}

    fake_run = SimpleNamespace(learn_entries=learn_entries, learn_plan=lambda d, entries, seeds: {"runs": entries},
                               run_learn_plan=run_learn_plan, machine_info=lambda dev, allocator_tuned: {"cpu": "c"},
                               _summary=summary, write_json=harness.write_json, print_table=harness.print_table,
                               RESULTS_DIR=tmp_path)
    args = argparse.Namespace(runs_dir=tmp_path / "runs", overrides=[], steps=500, expert=None,
                              data=tmp_path / "prior.npz", learning_starts=200, preset="cpu", only=["rlpd", "sac_scratch"],
                              seeds=2, first_seed=5, threads=1, jobs=1, target=-200.0, note=None, out=tmp_path / "o.json",
                              population=True)
    assert rlpd_bench.run_learn_rlpd(args, fake_run) == 0
    assert asked == [("rlpd", [5, 6]), ("sac_scratch", [5, 6])]
    got = json.loads((tmp_path / "o.json").read_text())
    assert got["settings"]["first_seed"] == 5 and sorted({r["seed"] for r in got["runs"]}) == [5, 6]


# ---------------------------------------------------------------- 6. curves beyond matplotlib's 10 colours


def test_plot_curves_gives_every_label_of_a_large_figure_its_own_look(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.colors as mcolors
    import matplotlib.pyplot as plt
    import numpy as np

    from rlfunc.runtime.plot import plot_curves

    figures = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: figures.append(fig))
    steps = np.array([1000, 2000, 3000])
    groups = {f"label{k}": [(steps, np.array([k, k + 1.0, k + 2.0])), (steps, np.array([k, k + 2.0, k + 3.0]))]
              for k in range(16)}
    plot_curves(groups, tmp_path / "many.png")
    (fig,) = figures
    ax = fig.axes[0]
    looks = [(mcolors.to_hex(line.get_color()), line.get_linestyle()) for line in ax.lines]
    assert len(looks) == 16 and len(set(looks)) == 16
    bands = [mcolors.to_hex(c.get_facecolor()[0]) for c in ax.collections]
    assert bands == [c for c, _ in looks]  # each band in its line's colour
    close(fig)


# ---------------------------------------------------------------- 7. summary()'s lists align


def test_summary_lists_are_over_the_same_evaluated_runs():
    from rlfunc.scale.results import summary

    runs = [{"algo": "x", "final_return": 10.0, "evals": [[1000, 12.0], [1000, 10.0]], "env_steps": 1000},
            {"algo": "x", "final_return": None, "evals": [], "env_steps": 0},  # no evaluation yet
            {"algo": "x", "final_return": 20.0, "evals": [[2000, 20.0]], "env_steps": 2000}]
    s = summary(runs)["x"]
    assert s["seeds"] == 2
    assert s["final_returns"] == [10.0, 20.0] and s["env_steps"] == [1000, 2000] and s["best_eval_returns"] == [12.0, 20.0]
