"""Learning curves of one or more runs (mean and spread over seeds) to a PNG."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np
import yaml

__all__ = ["plot_runs", "read_evals", "run_label"]


def read_evals(run_dir: str | Path, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """``(x values, mean_returns)`` from a run's ``eval.csv``; ``x`` is its ``step`` or ``frames`` column."""
    path = Path(run_dir) / "eval.csv"
    if not path.exists():
        raise FileNotFoundError(f"{str(run_dir)!r} has no eval.csv; pass run directories made by `rlfunc train`.")
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    steps = np.array([int(float(r[x])) for r in rows])
    returns = np.array([float(r["mean_return"]) for r in rows])
    return steps, returns


def _logs_frames(run_dir: str | Path) -> bool:
    """Whether the run's ``eval.csv`` has a ``frames`` column (action-repeated envs: agent steps != frames)."""
    with open(Path(run_dir) / "eval.csv", newline="") as f:
        return "frames" in (next(csv.reader(f), None) or [])


def run_label(run_dir: str | Path) -> str:
    """``algo env`` from the run's config (seeds of one setting share a label)."""
    cfg = yaml.safe_load((Path(run_dir) / "config.yaml").read_text())
    return f"{cfg['algo']} {cfg['env']['id']}"


def plot_runs(run_dirs: list[str | Path], out: str | Path, title: str | None = None) -> Path:
    """Plot eval curves; runs with the same label are averaged (line) with min-max band.

    Curves of different seeds are aligned on the steps they share. When every run logs env
    frames (action repeat, e.g. DrQ-v2), the x axis is frames, as in the papers' curves;
    otherwise it is environment steps.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError("Plotting needs matplotlib: pip install -e '.[plots]'.") from exc
    x = "frames" if all(_logs_frames(d) for d in run_dirs) else "step"
    groups: dict[str, list[tuple[np.ndarray, np.ndarray]]] = defaultdict(list)
    for d in run_dirs:
        groups[run_label(d)].append(read_evals(d, x))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, curves in groups.items():
        common = sorted(set.intersection(*[set(s.tolist()) for s, _ in curves]))
        if not common:
            continue
        ys = np.stack([np.interp(common, s, r) for s, r in curves])
        mean = ys.mean(axis=0)
        if len(common) == 1:  # one evaluation (a short or cut-off run): a point with its min-max bar
            ax.errorbar(common, mean, yerr=[mean - ys.min(axis=0), ys.max(axis=0) - mean], fmt="o", capsize=5,
                        label=f"{label} (n={len(curves)})")
            continue
        ax.plot(common, mean, marker="o" if len(common) <= 5 else None, label=f"{label} (n={len(curves)})")
        if len(curves) > 1:
            ax.fill_between(common, ys.min(axis=0), ys.max(axis=0), alpha=0.25)
    ax.set_xlabel("env frames" if x == "frames" else "environment steps")
    ax.set_ylabel("evaluation return")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
