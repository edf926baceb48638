"""The learn JSON's run records and summary, read back from ordinary run directories.

Shared by ``rlfunc sweep`` and ``benchmarks/run.py`` (``learn``, ``learn-collect``,
``learn-merge``): one schema for every learning-curve result. Nothing here imports Ray.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

__all__ = ["collected_run", "summary", "run_finished"]


def collected_run(run_dir: str | Path, label: str | None = None) -> dict:
    """One learn-JSON run record read back from a run directory: its evaluations so far, with the
    run's ``agent`` settings (overrides included) copied from its ``config.yaml``.

    ``final_return`` is the last evaluation so far, at ``env_steps``; ``complete`` says whether
    the run reached its ``total_steps`` (or a stopping rule ended it: ``stop_reason``, the last
    evaluation's, e.g. ``"max_wall_s: ..."``; ``None`` when no rule stopped it), which is when
    :func:`run_finished` (``rlfunc sweep``) stops training it; ``wall_s`` is the last evaluation's
    ``time_s`` (training time, resumed parts included)."""
    from rlfunc.runtime.plot import _run_config  # bounded: a config.yaml of nested aliases is one sentence

    run_dir = Path(run_dir)
    cfg = _run_config(run_dir)
    with open(run_dir / "eval.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    evals = [[int(r["step"]), float(r["mean_return"])] for r in rows]
    total = int(cfg["train"]["total_steps"])
    stop_reason = (rows[-1].get("stop_reason") or "") if rows else ""
    return {
        "algo": label or cfg.get("algo"),
        "env": cfg["env"]["id"],
        "wrappers": cfg["env"].get("wrappers"),
        "config": str(run_dir / "config.yaml"),
        "overrides": None,
        "agent": cfg.get("agent"),  # the run's effective agent settings: its config.yaml may not be kept
        "seed": cfg["train"].get("seed"),
        "env_steps": evals[-1][0] if evals else 0,
        "final_return": evals[-1][1] if evals else None,
        "evals": evals,
        "wall_s": float(rows[-1]["time_s"]) if rows else None,
        "run_dir": str(run_dir),
        "complete": bool(evals) and (evals[-1][0] >= total or bool(stop_reason)),
        "total_steps": total,
        "stop_reason": stop_reason or None,
    }


def run_finished(run_dir: str | Path) -> bool:
    """Whether the run in ``run_dir`` is over: its ``eval.csv`` reached ``train.total_steps``, or its
    last evaluation carries a stopping rule's reason. A missing or unreadable run is not finished."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file() or not (run_dir / "eval.csv").is_file():
        return False
    try:
        return bool(collected_run(run_dir)["complete"])
    except (OSError, ValueError, KeyError, TypeError):
        return False


def summary(runs: list[dict]) -> dict:
    """Per label (``algo``): the seeds, final and best evaluation returns, median final return and
    final env steps, over the label's runs that have evaluated (a ``final_return``): the k-th entry
    of ``final_returns``, ``best_eval_returns`` and ``env_steps`` is one run's."""
    out: dict[str, dict] = {}
    for label in dict.fromkeys(r["algo"] for r in runs):
        evaluated = [r for r in runs if r["algo"] == label and r["final_return"] is not None]
        finals = [r["final_return"] for r in evaluated]
        out[label] = {
            "seeds": len(finals),
            "final_returns": finals,
            "median_final_return": statistics.median(finals) if finals else None,
            # a record with a final return but no curve (none rlfunc writes) has its final as its best
            "best_eval_returns": [max(v for _, v in r["evals"]) if r.get("evals") else r["final_return"]
                                  for r in evaluated],
            "env_steps": [r["env_steps"] for r in evaluated],
        }
    return out
