"""Smoke test of ``benchmarks/run.py update``: tiny problem, no compile, JSON fields present."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

torch.set_num_threads(1)

VARIANTS = {"imperative", "functional-eager-loop", "functional-eager-bmm", "functional-eager-vmap"}


def test_update_redq_quick(tmp_path):
    out = tmp_path / "update_redq.json"
    cmd = [
        sys.executable, str(ROOT / "benchmarks" / "run.py"), "update", "--algo", "redq",
        "--quick", "--no-compile", "--threads", "1",
        "--hidden", "32", "--critics", "2", "--utd", "4", "--batch", "32", "--out", str(out),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "imperative" in proc.stdout

    data = json.loads(out.read_text())
    machine = data["machine"]
    for key in ("cpu", "cores", "torch", "tensordict", "python", "date", "allocator_tuned"):
        assert key in machine, key
    assert machine["torch"] == torch.__version__
    assert isinstance(machine["allocator_tuned"], bool)

    graph = [r for r in data["variants"] if "unavailable" in r]  # CPU: the CUDA-graph row, with its reason
    assert [r["variant"] for r in graph] == ["functional-eager+cudagraph"]
    assert "--device cuda" in graph[0]["unavailable"] and graph[0]["updates_per_s"] is None
    rows = [r for r in data["variants"] if "unavailable" not in r]
    assert {r["variant"] for r in rows} == VARIANTS
    for r in rows:
        for key in ("variant", "updates_per_s", "ratio_vs_imperative", "flop_efficiency", "threads", "device",
                    "torch", "ms_per_env_step"):
            assert key in r, (r["variant"], key)
        assert r["threads"] == 1 and r["device"] == "cpu"
        assert r["updates_per_s"] > 0 and r["ms_per_env_step"] > 0
        assert abs(r["updates_per_s"] - 4 / (r["ms_per_env_step"] / 1e3)) < 1e-6 * r["updates_per_s"]
        assert 0 < r["flop_efficiency"] < 1.5
    imp = next(r for r in rows if r["variant"] == "imperative")
    assert imp["ratio_vs_imperative"] == 1.0
    assert data["flops"]["per_critic_update"] > 0


def test_redq_flop_count_matches_flop_counter():
    """The analytic FLOP count equals PyTorch's FlopCounterMode for baseline and functional update."""
    import argparse
    import importlib.util

    from torch.utils.flop_counter import FlopCounterMode

    spec = importlib.util.spec_from_file_location("_bench_run", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # the documented importlib recipe: run.py registers its plug-ins on itself
    spec.loader.exec_module(run)
    from benchmarks.baselines.redq import ImperativeREDQ

    G = 3
    args = argparse.Namespace(obs_dim=5, act_dim=2, utd=G, batch=8, critics=3, subset=2, hidden=[16, 16])
    redq, config, obs_space, act_space, batch, noise = run._redq_problem(args, torch.device("cpu"))
    expected = run.redq_flops(5, 2, (16, 16), 3, 2, 8, G)["per_critic_update"] * G
    state = redq.init(config("bmm"), obs_space, act_space)
    agent = ImperativeREDQ.from_functional_state(state)
    with FlopCounterMode(display=False) as fc:
        agent.update(batch, noise)
    assert fc.get_total_flops() == expected
    with FlopCounterMode(display=False) as fc:
        redq.update(state, batch, noise)
    assert fc.get_total_flops() == expected


def test_learn_merge_combines_runs_of_two_learn_files(tmp_path):
    """``learn-merge`` keeps the chosen labels' runs of each file, recomputes the summary, plots every run."""

    def fake_run(name: str, algo: str, seed: int, returns: list[float]) -> dict:
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(f"algo: {algo}\nenv: {{id: CartPole-v1}}\n")
        rows = "".join(f"{1000 * (i + 1)},0.0,{r},0.0,5\n" for i, r in enumerate(returns))
        (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n" + rows)
        evals = [[1000 * (i + 1), r] for i, r in enumerate(returns)]
        return {"algo": algo, "env": "CartPole-v1", "seed": seed, "env_steps": 1000 * len(returns),
                "final_return": returns[-1], "evals": evals, "wall_s": 1.0, "run_dir": str(d)}

    a = {"machine": {"cpu": "x"}, "runs": [fake_run("r0", "r2d2", 0, [10, 400]), fake_run("r1", "r2d2", 1, [20, 500])]}
    b = {"machine": {"cpu": "y"}, "runs": [fake_run("d0", "drqn", 0, [10, 100]), fake_run("q0", "dqn", 0, [9, 40])]}
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    out = tmp_path / "merged.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn-merge", str(tmp_path / "a.json"),
         f"{tmp_path / 'b.json'}:drqn", "--out", str(out), "--note", "shared DRQN runs"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    merged = json.loads(out.read_text())
    assert [r["algo"] for r in merged["runs"]] == ["r2d2", "r2d2", "drqn"]  # dqn left out
    assert merged["summary"]["r2d2"]["median_final_return"] == 450.0
    assert merged["summary"]["drqn"]["seeds"] == 1
    assert [s["labels"] for s in merged["settings"]["merged_from"]] == [["r2d2"], ["drqn"]]
    assert merged["note"] == "shared DRQN runs"
    assert out.with_suffix(".png").stat().st_size > 1000
    # ':old=new' keeps a label's runs under a new one: two files of one algorithm side by side
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn-merge", str(tmp_path / "a.json"),
         f"{tmp_path / 'a.json'}:r2d2=r2d2_single_process", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    merged = json.loads(out.read_text())
    assert [r["algo"] for r in merged["runs"]] == ["r2d2", "r2d2", "r2d2_single_process", "r2d2_single_process"]
    assert merged["summary"]["r2d2_single_process"]["median_final_return"] == 450.0
    # Run directories gone (runs/ is not kept): the PNG comes from the JSONs' own evaluations
    import shutil

    shutil.rmtree(tmp_path / "r0")
    out.with_suffix(".png").unlink()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn-merge", str(tmp_path / "a.json"),
         f"{tmp_path / 'b.json'}:drqn", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    assert "no PNG" not in proc.stderr
    assert out.with_suffix(".png").stat().st_size > 1000


def test_learn_collect_reads_back_runs_cut_off_before_learn_wrote_its_json(tmp_path):
    """``learn-collect`` rebuilds a learn JSON from run directories: last evaluation so far, cut-off runs named."""
    for name, seed, returns in (("s0", 0, [100.0, 700.0, 950.0]), ("s1", 1, [90.0, 600.0])):
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(
            f"algo: drqv2\nenv: {{id: dmc/cartpole_balance-v0}}\ntrain: {{total_steps: 3000, seed: {seed}}}\n"
            "agent: {batch_size: 64}\n")
        rows = "".join(f"{1000 * (i + 1)},{2000 * (i + 1)},{10.0 * (i + 1)},{r},0.0,10\n" for i, r in enumerate(returns))
        (d / "eval.csv").write_text("step,frames,time_s,mean_return,std_return,episodes\n" + rows)
    out = tmp_path / "collected.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn-collect", str(tmp_path / "s0"),
         str(tmp_path / "s1"), "--out", str(out), "--note", "cut off"],
        capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr
    got = json.loads(out.read_text())
    assert [(r["seed"], r["env_steps"], r["final_return"], r["complete"]) for r in got["runs"]] == [
        (0, 3000, 950.0, True), (1, 2000, 600.0, False)]
    assert got["summary"]["drqv2"]["median_final_return"] == 775.0
    assert got["runs"][0]["wall_s"] == 30.0 and got["note"] == "cut off"
    assert got["runs"][1]["agent"] == {"batch_size": 64}  # overrides survive the run directory
    assert "s1 (2000 of 3000)" in proc.stdout
    assert out.with_suffix(".png").stat().st_size > 1000
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "run.py"), "learn-collect", str(tmp_path),
                          "--out", str(tmp_path / "x.json")], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not run directories" in bad.stderr


def test_plot_of_runs_with_one_evaluation_draws_a_point_with_its_range(tmp_path):
    """Runs cut off after one evaluation still plot: the mean as a point, the seeds' min-max as its bar."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from rlfunc.runtime.plot import plot_runs

    dirs = []
    for seed, ret in enumerate((970.0, 988.0)):
        d = tmp_path / f"drqv2-s{seed}"
        d.mkdir()
        (d / "config.yaml").write_text("algo: drqv2\nenv: {id: dmc/cartpole_balance-v0}\n")
        (d / "eval.csv").write_text(f"step,frames,time_s,mean_return,std_return,episodes\n10000,20000,190.0,{ret},1.0,10\n")
        dirs.append(d)
    shown = {}
    real_errorbar, real_set_xlabel = matplotlib.axes.Axes.errorbar, matplotlib.axes.Axes.set_xlabel

    def spy(self, x, y, *args, **kwargs):
        shown["x"], shown["y"], shown["yerr"] = list(x), list(y), kwargs.get("yerr")
        return real_errorbar(self, x, y, *args, **kwargs)

    def spy_xlabel(self, label, *args, **kwargs):
        shown["xlabel"] = label
        return real_set_xlabel(self, label, *args, **kwargs)

    matplotlib.axes.Axes.errorbar, matplotlib.axes.Axes.set_xlabel = spy, spy_xlabel
    try:
        png = plot_runs(dirs, tmp_path / "one.png", title="one evaluation")
    finally:
        matplotlib.axes.Axes.errorbar, matplotlib.axes.Axes.set_xlabel = real_errorbar, real_set_xlabel
        plt.close("all")
    assert shown["x"] == [20000] and shown["y"] == [979.0]  # action-repeated runs plot against env frames
    assert shown["xlabel"] == "env frames"
    assert [float(v[0]) for v in shown["yerr"]] == [9.0, 9.0]
    assert png.stat().st_size > 1000


def test_update_accepts_all_and_cuda_graph_variant_is_unavailable_on_cpu():
    """``update --algo ALL`` parses (every algo in turn); the CUDA-graph variant explains itself on CPU."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("_bench_run_all", ROOT / "benchmarks" / "run.py")
    run = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = run  # run.py registers its plug-ins on sys.modules[__name__]
    spec.loader.exec_module(run)
    args = run.build_parser().parse_args(["update", "--algo", "ALL", "--device", "cuda"])
    assert args.algo == "ALL" and {"redq", "rlpd", "drqn", "r2d2", "drqv2"} <= set(run.UPDATE_ALGOS)
    name, step, info = run.cuda_graph_variant(None, None, (), torch.device("cpu"), compiled=True)
    assert name == "functional-compiled+cudagraph" and step is None and "--device cuda" in info["unavailable"]
    row = run.unavailable_row(name, info["unavailable"], 1, torch.device("cpu"))
    assert row["updates_per_s"] is None and row["variant"] == name


def test_reference_returns_of_cartpole_balance_put_doing_nothing_above_random(tmp_path):
    """The DrQ-v2 floor: on cartpole_balance the pole starts near upright, so the zero
    action keeps it up for a long time and beats uniform random actions by a wide margin.
    benchmarks/report.py renders the result as a table."""
    import pytest

    pytest.importorskip("dm_control", reason="dm-control not installed: pip install -e '.[dmc]'")
    from benchmarks import drqv2_bench
    from benchmarks.report import build_report

    ref = drqv2_bench.reference_returns(["dmc/cartpole_balance-v0"], episodes=1, seed=0)["dmc/cartpole_balance-v0"]
    assert set(ref) == set(drqv2_bench.REFERENCE_POLICIES)
    assert ref["zero"]["median"] > 600
    assert ref["uniform_random"]["median"] < ref["zero"]["median"] - 200
    (tmp_path / "reference_drqv2.json").write_text(json.dumps(
        {"benchmark": "reference-returns", "tasks": {"dmc/cartpole_balance-v0": ref}}))
    md = build_report(tmp_path)
    assert f"| dmc/cartpole_balance-v0 | zero | {ref['zero']['median']:.1f} | 1 |" in md


def test_report_names_a_recorded_command_and_never_invents_one(tmp_path):
    """A JSON's own ``command`` is shown as is; without one the report says so, giving the default
    command for the name the file was written under (``written_as`` after a rename), or none."""
    from benchmarks.report import build_report

    (tmp_path / "update_redq.json").write_text(json.dumps({"command": "python benchmarks/run.py update --algo redq --threads 2"}))
    (tmp_path / "update_drqv2_amd.json").write_text(json.dumps({"written_as": "benchmarks/results/update_drqv2.json"}))
    (tmp_path / "prioritized_replay.json").write_text(json.dumps({}))
    md = build_report(tmp_path)
    assert "Command: `python benchmarks/run.py update --algo redq --threads 2`" in md
    assert ("Command: not recorded in the JSON (the default command for update_drqv2.json: "
            "`python benchmarks/run.py update --algo drqv2`)") in md
    assert "drqv2_amd`" not in md
    assert "## prioritized_replay\n\nCommand: not recorded in the JSON\n" in md


def test_plot_groups_runs_by_their_whole_setting(tmp_path):
    """Runs differing only in seed (and bookkeeping) are one curve; another critic_lr is another
    curve, labelled by what differs."""
    from rlfunc.runtime.plot import group_runs

    def run(name, seed, lr, threads=1):
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(
            f"algo: redq\nenv: {{id: Pendulum-v1}}\ntrain: {{seed: {seed}, threads: {threads}, run_dir: runs}}\n"
            f"agent: {{critic_lr: {lr}, batch_size: 256}}\n"
        )
        return d

    dirs = [run("a0", 0, 0.001), run("a1", 1, 0.001, threads=2), run("b0", 0, 0.0003), run("b1", 1, 0.0003)]
    groups = group_runs(dirs)
    assert list(groups) == ["redq Pendulum-v1 agent.critic_lr=0.001", "redq Pendulum-v1 agent.critic_lr=0.0003"]
    assert [[d.name for d in g] for g in groups.values()] == [["a0", "a1"], ["b0", "b1"]]
    assert list(group_runs(dirs[:2])) == ["redq Pendulum-v1"]  # one setting: no key in the label


def test_plot_names_a_section_one_group_lacks_once_and_draws_seeds_evaluated_at_different_steps(tmp_path):
    """A distributed run beside a single-process one is labelled 'distributed' / 'no distributed', not by
    every key of the section; seeds evaluated at different steps (distributed runs evaluate at the chunk
    that crosses each threshold) are interpolated onto the steps they share and drawn."""
    import matplotlib

    matplotlib.use("Agg")
    from rlfunc.runtime.plot import group_runs, plot_runs

    def run(name, seed, section, steps):
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(
            f"algo: r2d2\nenv: {{id: CartPole-v1}}\ntrain: {{seed: {seed}}}\n" + section)
        rows = "".join(f"{s},0.0,{s / 10},0.0,5\n" for s in steps)
        (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n" + rows)
        return d

    dist = "distributed: {actors: 2, envs_per_actor: 4}\n"
    dirs = [run("d0", 0, dist, [1003, 2011, 3007]), run("d1", 1, dist, [1009, 2002, 3001]),
            run("s0", 0, "", [1000, 2000, 3000]), run("s1", 1, "", [1000, 2000, 3000])]
    assert list(group_runs(dirs)) == ["r2d2 CartPole-v1 distributed", "r2d2 CartPole-v1 no distributed"]
    drawn = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(self, x, y, *args, **kwargs):
        drawn.append((kwargs.get("label"), list(x)))
        return real_plot(self, x, y, *args, **kwargs)

    matplotlib.axes.Axes.plot = spy
    try:
        plot_runs(dirs, tmp_path / "p.png")
    finally:
        matplotlib.axes.Axes.plot = real_plot
    assert [label for label, _ in drawn] == ["r2d2 CartPole-v1 distributed (n=2)", "r2d2 CartPole-v1 no distributed (n=2)"]
    assert drawn[0][1] == [1009.0, 2002.0, 2011.0, 3001.0]  # within [1009, 3001], the range both seeds cover


def test_plot_runs_with_labels_draws_one_curve_per_label(tmp_path):
    """A merged learn JSON's labels name and group the curves (learn-merge passes them): runs whose
    configs differ only in a long data path get the short label, not the path."""
    import matplotlib
    import pytest

    matplotlib.use("Agg")
    from rlfunc.runtime.plot import plot_runs

    dirs = []
    for name, data in (("e0", "expert"), ("e1", "expert"), ("m0", "medium")):
        d = tmp_path / name
        d.mkdir()
        (d / "config.yaml").write_text(f"algo: rlpd\nenv: {{id: Hopper-v5}}\ndata: {{path: /long/path/hopper-{data}.npz}}\n")
        (d / "eval.csv").write_text("step,time_s,mean_return,std_return,episodes\n1000,0.0,1.0,0.0,5\n2000,0.0,2.0,0.0,5\n")
        dirs.append(d)
    drawn = []
    real_plot = matplotlib.axes.Axes.plot

    def spy(self, x, y, *args, **kwargs):
        drawn.append(kwargs.get("label"))
        return real_plot(self, x, y, *args, **kwargs)

    matplotlib.axes.Axes.plot = spy
    try:
        plot_runs(dirs, tmp_path / "p.png", labels=["rlpd_expert", "rlpd_expert", "rlpd_medium"])
    finally:
        matplotlib.axes.Axes.plot = real_plot
    assert drawn == ["rlpd_expert (n=2)", "rlpd_medium (n=1)"]
    with pytest.raises(ValueError, match="pass one label per run"):
        plot_runs(dirs, tmp_path / "q.png", labels=["rlpd_expert"])
