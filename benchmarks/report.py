"""``python benchmarks/run.py report``: every ``benchmarks/results/*.json`` -> ``benchmarks/RESULTS.md``.

Only numbers that the benchmark commands wrote are shown; each table says the
command that produced it, the machine, threads, versions and date recorded in
its JSON. PNG figures beside a JSON (same stem) are linked. The hand-written
trial histories behind the shipped configs (``benchmarks/config_histories.md``,
citing those JSONs) are appended after the tables.
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
HISTORIES = ROOT / "benchmarks" / "config_histories.md"
"""How the shipped configs' settings were reached, trial by trial (hand-written markdown)."""


def _fmt(x, digits: int = 2) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)


def _machine(m: dict) -> str:
    keys = ("cpu", "cores", "device_name", "gpu", "torch", "tensordict", "python", "date", "allocator_tuned", "loadavg_at_start")
    return ", ".join(f"{k}={m[k]}" for k in keys if k in m)


def _command(stem: str) -> str | None:
    kind, _, name = stem.partition("_")
    if kind == "update":
        return f"python benchmarks/run.py update --algo {name}"
    if kind == "learn":
        return f"python benchmarks/run.py learn --algo {name} --seeds 3"
    if stem == "replay":
        return "python benchmarks/run.py replay"
    if stem == "peers":
        return "python benchmarks/run.py peers --threads 1"
    if stem.startswith("peers_"):  # peers_cuda.json: python benchmarks/run.py peers --device cuda
        return f"python benchmarks/run.py peers --threads 1 --device {stem.partition('_')[2]}"
    return None


def _update_table(d: dict) -> list[str]:
    lines = [
        "| variant | threads | updates/s | ratio vs imperative | FLOP efficiency | ms per env step |",
        "|---|---|---|---|---|---|",
    ]
    for v in d.get("variants", []):
        name = v.get("variant") if not v.get("unavailable") else f"{v.get('variant')} (unavailable: {v['unavailable']})"
        lines.append(
            f"| {name} | {v.get('threads')} | {_fmt(v.get('updates_per_s'), 1)} | "
            f"{_fmt(v.get('ratio_vs_imperative'))} | {_fmt(v.get('flop_efficiency'))} | {_fmt(v.get('ms_per_env_step'), 0)} |"
        )
    return lines


def _learn_table(d: dict) -> list[str]:
    lines = ["| algo | env | seed | env steps | final return | best eval | wall s |", "|---|---|---|---|---|---|---|"]
    for r in d.get("runs", []):
        best = max((v for _, v in r.get("evals", [])), default=None)
        lines.append(
            f"| {r.get('algo')} | {r.get('env')} | {r.get('seed')} | {r.get('env_steps')} | "
            f"{_fmt(r.get('final_return'), 1)} | {_fmt(best, 1)} | {_fmt(r.get('wall_s'), 0)} |"
        )
    return lines


def _peers_table(d: dict) -> list[str]:
    """``peers.json`` / ``peers_cuda.json``: one line per (task, library, variant); unavailable rows give their reason."""
    lines = [
        "| task | library | variant | throughput | unit | ratio vs best rlfunc | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in d.get("rows", []):
        note = r.get("unavailable") or r.get("note") or ""
        if r.get("compile_s") is not None:
            note = f"compile {r['compile_s']:.0f} s (excluded)"
        note = note.replace("|", "/")
        lines.append(
            f"| {r.get('task')} | {r.get('library')} | {r.get('variant')} | {_fmt(r.get('throughput'), 1)} | "
            f"{r.get('unit')} | {_fmt(r.get('ratio_vs_rlfunc'))} | {note} |"
        )
    settings = d.get("settings") or {}
    if d.get("quick") or settings.get("sizes") == "tiny":
        lines += ["", "Smoke run (--quick or --tiny): not a measurement."]
    if settings:
        device = settings.get("device") or next((r.get("device") for r in d.get("rows", [])), None) or "cpu"
        lines += ["", f"Settings: `{settings.get('command')}`; device={device}, threads={settings.get('threads')}, "
                      f"sizes={settings.get('sizes')}, "
                      f"repeats={settings.get('repeats')}, window_s={settings.get('window_s')}, "
                      f"segment_steps={settings.get('segment_steps')}, compile={settings.get('compile')}; "
                      f"peers: {settings.get('peers')}"]
    return lines


def _distributed_table(d: dict) -> list[str]:
    """``distributed_r2d2.json``: one line per actor count."""
    lines = ["| actors | envs/actor | env steps/s, learner paused | env steps/s, with learner | learner updates/s | "
             "replay ratio | paused vs linear | actor CPU ms/step | actor cores |", "|" + "---|" * 9]
    for r in d["rows"]:
        lines.append("| " + " | ".join([str(r["actors"]), str(r["envs_per_actor"]),
                                          _fmt(r["env_steps_per_s_learner_paused"], 0), _fmt(r["env_steps_per_s_with_learner"], 0),
                                          _fmt(r["learner_updates_per_s"], 1), _fmt(r["replay_ratio"], 3),
                                          _fmt(r["paused_speedup_vs_linear"], 2),
                                          _fmt(r.get("actor_cpu_ms_per_env_step_learner_paused"), 3),
                                          _fmt(r.get("actor_cpu_share_learner_paused"), 2)]) + " |")
    return lines


def _rows_table(d: dict) -> list[str]:
    rows = d.get("rows", [])
    if not rows:
        return []
    cols = [c for c in ("stored", "size", "batch", "sample_us", "update_us", "sample_us_min", "update_us_min") if c in rows[0]]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c), 1) for c in cols) + " |")
    return lines


def _episode_ends_table(d: dict) -> list[str]:
    lines = ["| checkpoint | env step | carried: mean return | carried: ends | windowed: mean return | windowed: ends |",
             "|---|---|---|---|---|---|"]
    for r in d["rows"]:
        ends = {m: ", ".join(f"{k} {v}" for k, v in r[m]["ends"].items()) for m in ("carried", "windowed")}
        lines.append(f"| `{r['checkpoint']}` | {r['env_step']} | {_fmt(r['carried']['mean_return'], 1)} | {ends['carried']} "
                     f"| {_fmt(r['windowed']['mean_return'], 1)} (window {r['window']}) | {ends['windowed']} |")
    return lines


def _reference_table(d: dict) -> list[str]:
    lines = ["| task | policy | median return | episodes |", "|---|---|---|---|"]
    for task, policies in d["tasks"].items():
        for policy, r in policies.items():
            lines.append(f"| {task} | {policy} | {_fmt(r['median'], 1)} | {len(r['returns'])} |")
    return lines


def _population_table(d: dict) -> list[str]:
    """``run.py population``: a population of P members vs P separate learners in one process, eager
    and (where timed) compiled; env steps (``kind`` env_steps), env steps without the update (collect), the pure update alone (update_only) or
    whole training runs of a config (whole_runs, by CPU time, with how the population updated)."""
    compiled = any("compiled" in r for r in d["rows"])
    if d.get("kind") == "whole_runs":
        head = ("| P | vectorize | population: env steps per CPU s total | separate: env steps per CPU s total | "
                "ratio (CPU time) | ratio (wall time) |")
        cells = lambda r: (f"{r['vectorize']} | {_fmt(r['cpu_time']['population_env_steps_per_cpu_s_total'])} | "  # noqa: E731
                           f"{_fmt(r['cpu_time']['separate_env_steps_per_cpu_s_total'])} | "
                           f"{_fmt(r['cpu_time']['total_throughput_ratio'])}x | {_fmt(r['total_throughput_ratio'])}x")
    elif d.get("kind") == "collect":
        head = ("| P | population: ms per env step (all members) | separate: ms per env step | ratio | "
                "ratio (CPU time) |")
        cells = lambda r: (f"{_fmt(r['population_ms_per_env_step'])} | {_fmt(r['separate_ms_per_env_step'])} | "  # noqa: E731
                           f"{_fmt(r['total_throughput_ratio'])}x | {_fmt(r['cpu_time']['total_throughput_ratio'])}x")
    elif d.get("kind") == "update_only":
        head = "| P | population: update ms (all members) | separate: update ms | ratio |"
        cells = lambda r: (f"{_fmt(r['population_update_ms_all_members'], 1)} | "  # noqa: E731
                           f"{_fmt(r['separate_update_ms_all_members'], 1)} | {_fmt(r['total_throughput_ratio'])}x")
    else:
        head = ("| P | population: env steps/s total | separate: env steps/s total | ratio | "
                "population: update ms/env step | separate: update ms/env step |")
        cells = lambda r: (f"{_fmt(r['population_env_steps_per_s_total'])} | "  # noqa: E731
                           f"{_fmt(r['separate_env_steps_per_s_total'])} | {_fmt(r['total_throughput_ratio'])}x | "
                           f"{_fmt(r['population_update_ms_per_env_step'], 1)} | {_fmt(r['separate_update_ms_per_env_step'], 1)}")
    width = head.count("|") - 1
    precision = d.get("matmul_precision")
    notes = d["notes"] + (f" float32 matmul precision: {precision} (torch.set_float32_matmul_precision)."
                          if precision not in (None, "highest") else "")
    lines = [notes, "", head + (" compiled: ratio |" if compiled else ""),
             "|" + "---|" * (width + (1 if compiled else 0))]
    for r in d["rows"]:
        extra = f" {_fmt(r['compiled']['total_throughput_ratio'])}x |" if "compiled" in r else (" - |" if compiled else "")
        lines.append(f"| {r['members']} | {cells(r)} |" + extra)
    return lines


def build_report(results_dir: Path = RESULTS, histories: Path | None = HISTORIES) -> str:
    """The report of every JSON in ``results_dir``, then ``histories`` (a markdown file) if it exists."""
    with_histories = histories is not None and histories.exists()
    out = [
        "# Benchmark results",
        "",
        "Generated by `python benchmarks/run.py report` from `benchmarks/results/*.json`; every number below was",
        "written by the command named above its table (older JSONs did not record theirs: the report says so).",
        "Machines here are shared: read ratios measured in one process run, not absolute numbers across runs.",
        "",
    ]
    if with_histories:
        out += [
            "The trials behind each shipped config's settings follow the tables: "
            "[How the shipped configs were chosen](#how-the-shipped-configs-were-chosen).",
            "",
        ]
    for path in sorted(results_dir.glob("*.json")):
        d = json.loads(path.read_text())
        if d.get("command"):
            command = f"Command: `{d['command']}`"
        elif (d.get("settings") or {}).get("commands"):  # learn_minatar.py records its commands there
            command = f"Commands: `{d['settings']['commands']}`"
        else:  # JSONs written before run.py recorded its command line: the default for the file's name
            written_as = Path(d.get("written_as", path.name)).stem  # the name it was written under, if renamed
            guess = _command(written_as)
            command = "Command: not recorded in the JSON" + (
                f" (the default command for {written_as}.json: `{guess}`)" if guess else ""
            )
        out += [f"## {path.stem}", "", command, ""]
        if "machine" in d:
            out += [f"Machine: {_machine(d['machine'])}", ""]
        if d.get("note"):
            out += [f"Note: {d['note']}", ""]
        if "variants" in d:
            out += _update_table(d)
        elif "runs" in d:
            out += _learn_table(d)
        elif d.get("benchmark") == "population":
            out += _population_table(d)
        elif d.get("benchmark") == "drqn_episode_ends":
            out += _episode_ends_table(d)
        elif d.get("benchmark") == "distributed":
            out += _distributed_table(d)
        elif "rows" in d and any("library" in r for r in d["rows"]):
            out += _peers_table(d)
        elif "rows" in d:
            out += _rows_table(d)
        elif d.get("benchmark") == "reference-returns":
            out += _reference_table(d)
        png = path.with_suffix(".png")
        if png.exists():
            out += ["", f"![{path.stem}](results/{png.name})"]
        out.append("")
    if with_histories:
        out += [histories.read_text().rstrip(), ""]
    return "\n".join(out)


def configure(p) -> None:
    p.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "RESULTS.md")


def run(args) -> int:
    args.out.write_text(build_report())
    print(f"wrote {args.out}")
    return 0
