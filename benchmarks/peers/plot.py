"""The bar chart of ``benchmarks/run.py peers``: one horizontal-bar panel per task (``peers.png``)."""

from __future__ import annotations

from pathlib import Path


COLORS = {"rlfunc": "#1f77b4", "imperative": "#7f7f7f", "torchrl": "#d62728", "stable-baselines3": "#2ca02c"}


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


def plot(rows: list[dict], path: Path, title: str) -> Path | None:
    """One horizontal-bar panel per task; unavailable rows are labelled 'n/a'."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG written.", flush=True)
        return None
    tasks = list(dict.fromkeys(r["task"] for r in rows))
    heights = [max(1.5, 0.4 * sum(r["task"] == t for r in rows) + 0.8) for t in tasks]
    fig, axes = plt.subplots(len(tasks), 1, figsize=(12, sum(heights)), gridspec_kw={"height_ratios": heights},
                             squeeze=False)
    for ax, task in zip(axes[:, 0], tasks):
        sub = [r for r in rows if r["task"] == task]
        labels = [_short(f"{r['library']}: {r['variant']}", 55) for r in sub]
        vals = [r["throughput"] or 0.0 for r in sub]
        y = list(range(len(sub)))[::-1]
        ax.barh(y, vals, color=[COLORS.get(r["library"], "#999999") for r in sub])
        ax.set_yticks(y, labels, fontsize=7)
        top = max(vals) if any(vals) else 1.0
        for yi, r, v in zip(y, sub, vals):
            text = "n/a: " + _short(r.get("unavailable", ""), 60) if r["throughput"] is None else f"{v:.3g}" + (
                f" ({r['ratio_vs_rlfunc']:.2f}x)" if r.get("ratio_vs_rlfunc") is not None else "")
            ax.text(v + 0.01 * top, yi, text, va="center", fontsize=7)
        ax.set_xlim(0, top * 1.3)
        dev = sub[0].get("device", "cpu")
        ax.set_title(f"{task} ({sub[0]['unit']}, {sub[0]['threads']} thread(s)" + (f", {dev})" if dev != "cpu" else ")"),
                     fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.98))
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return path
