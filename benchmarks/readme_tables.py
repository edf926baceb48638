"""The README's result tables, generated from the committed ``benchmarks/results/*.json``.

``python -m benchmarks.readme_tables`` rewrites the README between the markers
``<!-- table:NAME -->`` and ``<!-- /table:NAME -->``; ``tests/test_readme.py``
fails when the README's tables differ from what the JSONs give, so a number in
them cannot drift from the JSON it links to (issue #27). Only the papers'
reference results and the row labels are text here; every measured number is
read from a JSON, and each cell links the JSON it came from.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
README = ROOT / "README.md"


def _load(stem: str) -> dict:
    return json.loads((RESULTS / f"{stem}.json").read_text())


def _link(stem: str) -> str:
    return f"[json](benchmarks/results/{stem}.json)"


def _steps(n: int) -> str:
    """``150k`` (also for 150,002: a distributed run ends with the chunk that crosses its budget), ``2.5k``."""
    k = n / 1000
    return f"{k:.0f}k" if abs(k - round(k)) < 0.01 else f"{k:.1f}k"


def _span_of(values: list[int]) -> str:
    """``65k`` or ``65k–70k``: the range of ``values`` as :func:`_steps` shows them."""
    lo, hi = _steps(min(values)), _steps(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def _label_runs(d: dict, stem: str, label: str) -> list[dict]:
    """The run records behind ``label``'s summary, in its order: the label's evaluated runs (only the
    complete ones where the JSON lists ``partial_runs``: ``learn_minatar.py collect`` summarizes those);
    a summary its runs do not give is one ``ValueError`` sentence."""
    runs = [r for r in d["runs"] if r["algo"] == label and r.get("final_return") is not None]
    if "partial_runs" in d:
        runs = [r for r in runs if r.get("complete")]
    if not runs:
        raise ValueError(f"benchmarks/results/{stem}.json has no evaluated run of {label!r}; leave its README cell out "
                         "until one has evaluated.")
    if [r["final_return"] for r in runs] != d["summary"][label]["final_returns"]:
        raise ValueError(f"benchmarks/results/{stem}.json's summary of {label!r} is not its runs' final returns; "
                         "rewrite the JSON with the command that made it.")
    return runs


@dataclass(frozen=True)
class Learned:
    """One measured learning result: ``label`` of ``stem``'s summary, on ``task``.

    The cell shows the seeds' final env steps (a range where they differ) and, when any of the runs
    stopped before its ``total_steps`` (``complete: false``), the budget and who cut them off."""

    stem: str
    label: str
    task: str
    frames_per_step: int = 1  # DrQ-v2 logs agent steps; its papers count frames (action repeat 2)
    machine: str | None = None  # for JSONs that predate the ``machine`` field (their note names it)
    digits: int = 0  # decimals of the returns (MinAtar's are a few points: one decimal)
    cut_off_by: str | None = None  # what stopped the incomplete runs early, for their mark (e.g. "the lease")

    def cell(self) -> str:
        d = _load(self.stem)
        s = d["summary"][self.label]
        runs = _label_runs(d, self.stem, self.label)
        f = self.frames_per_step
        unit = "frames" if f > 1 else "steps"
        at = _span_of([r["env_steps"] * f for r in runs])
        cut = [r for r in runs if r.get("complete") is False]
        if cut:
            totals = [r["total_steps"] * f for r in cut if r.get("total_steps")]
            who = f" by {self.cut_off_by}" if self.cut_off_by else ""
            some = "" if len(cut) == len(runs) else f"{len(cut)} of {len(runs)} seeds "
            at += f" of {_span_of(totals)} {unit} ({some}cut off{who})" if totals else f" {unit} ({some}cut off{who})"
        else:
            at += f" {unit}"
        n = self.digits
        returns = " / ".join(f"{r:.{n}f}" for r in s["final_returns"])
        named = self._machine(d, runs)  # checked also where the row names the machine itself
        machine = self.machine or named
        return (f"{self.task}: median **{s['median_final_return']:.{n}f}** ({returns}) @{at}, "
                f"{s['seeds']} seed{'s' if s['seeds'] != 1 else ''}, {machine} {_link(self.stem)}")

    def _machine(self, d: dict, runs: list[dict]) -> str:
        """The machine the runs name (their own ``machine``, else the JSON's); several are one sentence."""
        names = sorted({_machine_name(r.get("machine") or d.get("machine") or {}) for r in runs})
        if len(names) > 1:
            raise ValueError(f"benchmarks/results/{self.stem}.json's label {self.label!r} holds runs trained on "
                             f"different machines ({', '.join(names)}); merge each machine's runs under its own "
                             "label (learn-merge JSON:OLD=NEW) and give each its own README row.")
        return names[0] if names else _machine_name(d.get("machine") or {})


@dataclass(frozen=True)
class AlgoRow:
    algo: str
    paper: str
    config: str
    reference: str
    ours: tuple[Learned, ...]


ALGORITHMS = (
    AlgoRow("redq", "Chen et al. 2021", "`redq/hopper`, `redq/pendulum`",
            "Hopper 3517 @125k steps", (Learned("learn_redq", "redq", "Pendulum"),
                                        Learned("learn_redq_hopper_gpu", "redq", "Hopper-v5", cut_off_by="the lease"),
                                        Learned("learn_redq_hopper_population", "redq", "Hopper-v5, one population",
                                                cut_off_by="the lease"))),
    AlgoRow("sac", "Haarnoja et al. 2018 (REDQ with N=2, G=1)", "`sac/hopper`, `sac/pendulum`",
            "Pendulum ≈ −150 @20k steps (RL Zoo)", (Learned("learn_redq", "sac", "Pendulum"),
                                                    Learned("learn_sac_hopper", "sac", "Hopper-v5"))),
    AlgoRow("rlpd", "Ball et al. 2023", "`rlpd/hopper`, `rlpd/pendulum`",
            "D4RL locomotion ≈ 93–95 normalized @250k steps",
            (Learned("learn_rlpd", "rlpd", "Pendulum with prior data"),
             Learned("learn_rlpd_hopper_data", "rlpd_medium_expert", "Hopper, local medium-expert data (return 1638), reduced update"),
             Learned("learn_rlpd_hopper_data", "rlpd_expert", "Hopper, local expert data (return 2592), same update"),
             Learned("learn_rlpd_hopper_data", "rlpd_medium", "Hopper, local medium data (return 837, stays up without moving forward), same update"),
             Learned("learn_rlpd_hopper_data", "redq", "REDQ from scratch, same update"))),
    AlgoRow("drqv2", "Yarats et al. 2021", "`drqv2/cartpole_balance`",
            "DMC cartpole_balance 987 ± 13 @100k frames",
            (Learned("learn_drqv2_gpu", "drqv2", "cartpole_balance", 2, "NVIDIA H100", cut_off_by="the lease"),
             Learned("learn_drqv2_gpu_s0_94k", "drqv2", "cartpole_balance, last evaluation of a run that went on to 94k frames",
                     2, "NVIDIA H100", cut_off_by="the lease"),
             Learned("learn_drqv2_cpu", "drqv2", "cartpole_balance, fast render", 2, "2-core Intel Xeon"))),
    AlgoRow("drqn", "Hausknecht & Stone 2015", "`drqn/cartpole_novel`",
            "Flickering Pong 12.1 ± 2.2", (Learned("learn_drqn", "drqn", "CartPole, velocities masked"),
                                            Learned("learn_minatar_450k", "drqn_breakout", "MinAtar Breakout", digits=1),
             Learned("learn_minatar_drqn_stored_state", "drqn_breakout_stored_state",
                     "MinAtar Breakout, windows from the stored actor state (not the paper's zero state)", digits=1),
             Learned("learn_minatar_300k", "drqn_breakout_flicker", "MinAtar Breakout, flicker", digits=1),
             Learned("learn_minatar_500k", "drqn_seaquest_flicker", "MinAtar Seaquest, flicker", digits=1),
             Learned("learn_minatar_seaquest_full_500k", "drqn_seaquest", "MinAtar Seaquest", digits=1))),
    AlgoRow("dqn", "Mnih et al. 2015 (DRQN's control)", "`dqn/cartpole_novel`",
            "no memory: fails without velocities", (Learned("learn_drqn", "dqn", "CartPole, velocities masked"),
                                                    Learned("learn_minatar_450k", "dqn_breakout", "MinAtar Breakout", digits=1),
             Learned("learn_minatar_300k", "dqn_breakout_flicker", "MinAtar Breakout, flicker", digits=1),
             Learned("learn_minatar_500k", "dqn_seaquest_flicker", "MinAtar Seaquest, flicker", digits=1),
             Learned("learn_minatar_seaquest_full_500k", "dqn_seaquest", "MinAtar Seaquest", digits=1))),
    AlgoRow("r2d2", "Kapturowski et al. 2019", "`r2d2/cartpole_novel`, `r2d2/cartpole_novel_distributed`",
            "Atari-57 median ≈ 1920% human-normalized",
            (Learned("learn_r2d2_acme_init", "r2d2", "CartPole, velocities masked"),
             Learned("learn_r2d2_distributed_acme_init", "r2d2", "the same on 2 Ray actor processes"),
             Learned("learn_r2d2_acme_init", "r2d2_torch_init",
                     "CartPole, velocities masked, PyTorch's init (0.1.0's default)"),
             Learned("learn_minatar_450k_r2d2", "r2d2_breakout", "MinAtar Breakout", digits=1),
             Learned("learn_minatar_r2d2_acme_init", "r2d2_breakout_flicker", "MinAtar Breakout, flicker", digits=1),
             Learned("learn_minatar_r2d2_optimizer_steps_acme_init", "r2d2_breakout_flicker_batch8_target200_lr2.5e-4",
                     "MinAtar Breakout, flicker, 4x the optimizer steps, target every 4000 env steps, lr 2.5e-4 "
                     "(not the paper's)", digits=1),
             Learned("learn_minatar_r2d2_optimizer_steps_full_acme_init", "r2d2_breakout_batch8_target200_lr2.5e-4",
                     "MinAtar Breakout, the same settings", digits=1),
             Learned("learn_minatar_r2d2_optimizer_steps_seaquest_500k", "r2d2_seaquest_flicker_batch8_target200_lr2.5e-4",
                     "MinAtar Seaquest, flicker, the same settings", digits=1),
             Learned("learn_minatar_seaquest_full_500k", "r2d2_seaquest_batch8_target200_lr2.5e-4",
                     "MinAtar Seaquest, the same settings", digits=1),
             Learned("learn_minatar_100k_r2d2", "r2d2_seaquest_flicker", "MinAtar Seaquest, flicker", digits=1))),
)


@dataclass(frozen=True)
class SpeedRow:
    """Updates per second of one algorithm's update: the imperative baseline and rlfunc's best variant."""

    label: str
    cpu: str
    gpu: str | None
    window: int | None = None
    threads: int = 1


SPEED = (
    SpeedRow("REDQ, N=10, G=20 (critic updates/s)", "update_redq", "update_redq_cuda"),
    SpeedRow("RLPD, N=10 LayerNorm critics", "update_rlpd", "update_rlpd_cuda"),
    SpeedRow("DrQ-v2, 84x84x9, batch 256", "update_drqv2", "update_drqv2_cuda"),
    SpeedRow("R2D2, CartPole scale", "update_r2d2", "update_r2d2_cuda"),
    SpeedRow("DRQN, window 10", "update_drqn", "update_drqn_cuda", window=10),
)


@dataclass(frozen=True)
class PopulationRow:
    """P members in one process against P separate learners in the same process (``benchmarks/run.py
    population``): the ratio of their throughputs by CPU time, per P."""

    label: str
    stem: str
    compiled: bool = False  # the row's compiled timing (update-only JSONs timed with --compile)


POPULATIONS = (
    PopulationRow("REDQ, N=10, G=20, env steps", "population_redq"),
    PopulationRow("SAC, env steps", "population_sac"),
    PopulationRow("RLPD, env steps", "population_rlpd"),
    PopulationRow("DRQN, update only", "population_drqn_update_only"),
    PopulationRow("DQN, update only", "population_dqn_update_only"),
    PopulationRow("DRQN on flickering MinAtar, compiled, whole runs", "population_drqn_minatar_breakout_flicker_runs"),
    PopulationRow("DQN on MinAtar, whole runs", "population_dqn_minatar_breakout_flicker_runs"),
    PopulationRow("R2D2, update only", "population_r2d2_update_only"),
    PopulationRow("DrQ-v2, update only", "population_drqv2_update_only"),
    PopulationRow("REDQ at Hopper's shapes, update only, CUDA graphs", "population_redq_update_only_cuda"),
    PopulationRow("REDQ on Hopper, env steps without the update", "population_redq_hopper_collect"),
)
# How the population updated its members: update-only rows time population.vmap_update; env-step rows
# record train.population.vectorize per row (JSONs from before that option were vmapped).


def _vectorized(d: dict) -> str:
    if d.get("kind") == "update_only":
        return "vmap"
    if d.get("kind") == "collect":  # acting vmapped, the members' envs in one vector env
        return "one vector env"
    modes = {row.get("vectorize", "vmap") for row in d["rows"] if row["members"] > 1}
    return "/".join(sorted(modes)) or "vmap"

POPULATION_SIZES = (1, 2, 4, 8)


def _machine_name(m: dict) -> str:
    if m.get("gpu"):
        return str(m["gpu"]).replace(" 80GB HBM3", "")
    cpu = str(m.get("cpu", "?")).replace("Intel(R) Xeon(R) Processor", "Intel Xeon")
    return f"{m['cores']}-core {cpu}" if m.get("cores") else cpu


def _rate(x: float) -> str:
    return f"{x:.2f}" if x < 10 else f"{x:.1f}"


def _speed_cell(stem: str, row: SpeedRow) -> tuple[str, str, str]:
    d = _load(stem)
    variants = [v for v in d["variants"] if v.get("updates_per_s") and v.get("threads") == row.threads
                and (row.window is None or v.get("window") == row.window)]
    base = next(v for v in variants if v["variant"] == "imperative")
    best = max((v for v in variants if v["variant"] != "imperative"), key=lambda v: v["updates_per_s"])
    ours = f"{_rate(best['updates_per_s'])} (**{best['ratio_vs_imperative']:.2f}x**, {best['variant'].removeprefix('functional-')})"
    return _rate(base["updates_per_s"]), ours, f"{_machine_name(d['machine'])} {_link(stem)}"


def algorithms_table() -> str:
    lines = ["| algorithm | paper | packaged config | paper's result | ours (final evaluation return) |",
             "|---|---|---|---|---|"]
    for r in ALGORITHMS:
        ours = "<br>".join(x.cell() for x in r.ours)
        lines.append(f"| [{r.algo}](docs/algorithms/{r.algo}.md) | {r.paper} | {r.config} | {r.reference} | {ours} |")
    return "\n".join(lines)


def speed_table() -> str:
    lines = ["| update, 1 thread | CPU: imperative | CPU: rlfunc | GPU: imperative | GPU: rlfunc |",
             "|---|---|---|---|---|"]
    for r in SPEED:
        cpu = _speed_cell(r.cpu, r)
        gpu = _speed_cell(r.gpu, r) if r.gpu else ("—", "—", "")
        lines.append(f"| {r.label} | {cpu[0]} | {cpu[1]} {cpu[2]} | {gpu[0]} | {gpu[1]} {gpu[2]} |")
    return "\n".join(lines)


def populations_table() -> str:
    lines = ["| population vs separate runs (CPU: 1 thread, CPU time; GPU: wall time) | "
             + " | ".join(f"P={p}" for p in POPULATION_SIZES) + " | machine |", "|---" * (len(POPULATION_SIZES) + 2) + "|"]
    for r in POPULATIONS:
        d = _load(r.stem)
        on_gpu = str(d.get("device", "cpu")).startswith("cuda")  # the host's CPU time says nothing of the card's work
        by_p = {row["members"]: (lambda t: t["total_throughput_ratio"] if on_gpu else t["cpu_time"]["total_throughput_ratio"])(
                    row["compiled"] if r.compiled else row) for row in d["rows"]}
        cells = [f"{by_p[p]:.2f}x" if p in by_p else "not run" for p in POPULATION_SIZES]
        lines.append(f"| {r.label}, {_vectorized(d)} | " + " | ".join(cells) + f" | {_machine_name(d['machine'])} {_link(r.stem)} |")
    return "\n".join(lines)


TABLES = {"algorithms": algorithms_table, "speed": speed_table, "populations": populations_table}


def _span(name: str) -> re.Pattern:
    return re.compile(rf"<!-- table:{name} -->\n(.*?)<!-- /table:{name} -->", re.S)


def readme_with_tables(text: str) -> str:
    """``text`` with every marked table regenerated; a README without a table's markers is an error."""
    for name, build in TABLES.items():
        pattern = _span(name)
        if not pattern.search(text):
            raise ValueError(f"README.md has no <!-- table:{name} --> ... <!-- /table:{name} --> markers")
        table = build()
        text = pattern.sub(lambda m: f"<!-- table:{name} -->\n{table}\n<!-- /table:{name} -->", text)
    return text


def main() -> int:
    text = README.read_text()
    new = readme_with_tables(text)
    if new != text:
        README.write_text(new)
        print(f"updated the tables in {README}")
    else:
        print(f"{README}: tables already match benchmarks/results")
    return 0


if __name__ == "__main__":
    sys.exit(main())
