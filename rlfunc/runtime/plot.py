"""Learning curves of one or more runs (mean and spread over seeds) to a PNG.

A population's run directory (``rlfunc train --seeds/--grid``: its ``member-<k>/`` are the runs,
it has no ``eval.csv`` of its own) stands for all its members: each is plotted as a run, so its
seeds are averaged and its grid values are separate curves (:func:`expand_runs`).
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml

__all__ = [
    "plot_runs",
    "plot_path",
    "plot_curves",
    "read_evals",
    "expand_runs",
    "run_label",
    "run_setting",
    "group_runs",
    "NOT_A_SETTING",
]


def read_evals(run_dir: str | Path, x: str = "step") -> tuple[np.ndarray, np.ndarray]:
    """``(x values, mean_returns)`` from a run's ``eval.csv``; ``x`` is its ``step`` or ``frames`` column."""
    path = _eval_csv(run_dir)
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    try:
        steps = np.array([int(float(r[x])) for r in rows])
        returns = np.array([float(r["mean_return"]) for r in rows])
    except (KeyError, TypeError, ValueError, OverflowError):
        raise ValueError(
            f"{str(path)!r} is not an eval.csv rlfunc wrote (a {x} or mean_return value is missing or not a number); "
            "pass run directories made by `rlfunc train`."
        ) from None
    if not len(steps):
        raise ValueError(f"{str(path)!r} has no evaluations yet; plot the run once it has evaluated.")
    return steps, returns


def _eval_csv(run_dir: str | Path) -> Path:
    """The run's ``eval.csv``; a run without one is one ``FileNotFoundError`` sentence."""
    path = Path(run_dir) / "eval.csv"
    if not Path(run_dir).exists():
        raise FileNotFoundError(f"{str(run_dir)!r} does not exist; pass run directories made by `rlfunc train`.")
    if not path.is_file() and (Path(run_dir) / "sweep.json").is_file():
        raise FileNotFoundError(
            f"{str(run_dir)!r} is a sweep's directory, whose curves `rlfunc sweep` drew beside its results JSON; "
            f"pass its runs' directories instead, e.g. {str(Path(run_dir) / '*')}/."
        )
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(run_dir)!r} has no eval.csv; pass run directories made by `rlfunc train` (a run writes it at its first evaluation)."
        )
    return path


def _logs_frames(run_dir: str | Path) -> bool:
    """Whether the run's ``eval.csv`` has a ``frames`` column (action-repeated envs: agent steps != frames)."""
    with open(_eval_csv(run_dir), newline="") as f:
        return "frames" in (next(csv.reader(f), None) or [])


def _members(run_dir: str | Path) -> list[Path]:
    """A population's member directories in member order (``member-0``, ``member-1``, ...); ``[]`` for
    a directory that is not a population's (it has an ``eval.csv`` of its own, or no ``member-0/``)."""
    path = Path(run_dir)
    if (path / "eval.csv").exists() or not (path / "member-0").is_dir():
        return []
    found = [p for p in path.glob("member-*") if p.is_dir() and p.name[len("member-"):].isdigit()]
    return sorted(found, key=lambda p: int(p.name[len("member-"):]))


def expand_runs(run_dirs: list[str | Path], labels: list[str] | None = None) -> tuple[list, list[str] | None]:
    """``(run_dirs, labels)`` with each population directory replaced by its members' directories (its
    label, if given, repeated for each); other run directories unchanged."""
    if labels is not None and len(labels) != len(run_dirs):
        raise ValueError(f"plot_runs got {len(labels)} labels for {len(run_dirs)} runs; pass one label per run.")
    dirs: list[str | Path] = []
    out_labels: list[str] | None = None if labels is None else []
    for i, d in enumerate(run_dirs):
        members = _members(d)
        dirs.extend(members or [d])
        if out_labels is not None:
            out_labels.extend([labels[i]] * max(len(members), 1))
    return dirs, out_labels


NOT_A_SETTING = frozenset(
    {
        "train.seed",
        "train.run_dir",
        "train.progress",
        "train.threads",
        "train.device",
        "train.log_every",
        "train.checkpoint_every",
        "train.keep_checkpoints",
        "train.keep_best",
        "train.checkpoint_replay",
        "train.on_checkpoint_error",
        "train.tensorboard",
        "train.wandb",
        "train.total_steps",
        "train.stop_at_return",
        "train.patience_evals",
        "train.max_updates",
        "train.max_wall_s",
    }
)
"""Config keys that do not change what a run learns (seeds, bookkeeping, budgets): runs that differ
only in these are seeds of one setting."""


RUN_CONFIG_VALUES = 10_000
"""The most values (mapping entries and list items, counted through YAML aliases) ``plot`` reads from a run's
config.yaml: one rlfunc writes holds a few hundred; a few hundred bytes of nested aliases expand past any limit."""


def _flat(node, prefix: str = "") -> dict[str, str]:
    if isinstance(node, dict):
        out: dict[str, str] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: yaml.safe_dump(node, default_flow_style=True).strip().removesuffix("...").strip()}


def run_setting(run_dir: str | Path) -> dict[str, str]:
    """The run's resolved config, flattened to ``{"agent.critic_lr": "0.001", ...}``, without
    :data:`NOT_A_SETTING` (what makes two runs seeds of one setting)."""
    cfg = _run_config(run_dir)
    try:  # through the config builder, so files written with older key names compare equal
        from rlfunc.runtime.config import ConfigError, build_config, to_dict

        cfg = to_dict(build_config(cfg, resolved=True))
    except (ConfigError, ValueError, TypeError, KeyError):
        pass  # not a config this rlfunc builds (e.g. hand-made test runs): its keys as written
    return {k: v for k, v in _flat(cfg).items() if k not in NOT_A_SETTING}


def run_label(run_dir: str | Path) -> str:
    """``algo env`` from the run's config."""
    cfg = _run_config(run_dir)
    return f"{cfg['algo']} {cfg['env']['id']}"


def _run_config(run_dir: str | Path) -> dict[str, Any]:
    """The run's ``config.yaml`` as a mapping with a string ``algo`` and ``env.id``; a missing, unreadable
    or damaged file is one sentence (``FileNotFoundError`` / ``ValueError``), not a traceback."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{str(run_dir)!r} has no config.yaml; pass run directories made by `rlfunc train`.")
    from rlfunc.runtime.config import _too_big, load_yaml

    try:
        cfg = load_yaml(path.read_text())
    except (yaml.YAMLError, UnicodeDecodeError):
        cfg = None
    if _too_big(cfg, RUN_CONFIG_VALUES):  # nested aliases: grouping would flatten and dump them for minutes
        raise ValueError(f"{str(path)!r} holds more than {RUN_CONFIG_VALUES:,} values once its YAML aliases are expanded, "
                         "so it is not a run config rlfunc wrote; restore it or leave that run out.")
    env = cfg.get("env") if isinstance(cfg, dict) else None
    if not (isinstance(cfg, dict) and isinstance(cfg.get("algo"), str) and isinstance(env, dict)
            and isinstance(env.get("id"), str)):
        raise ValueError(f"{str(path)!r} is not a run config rlfunc wrote; restore it or leave that run out.")
    return cfg


def group_runs(run_dirs: list[str | Path]) -> dict[str, list[str | Path]]:
    """Runs grouped by their whole setting (the resolved config except :data:`NOT_A_SETTING`), in
    the order first seen; each label is ``algo env`` plus the keys whose values differ between
    groups, e.g. ``redq Pendulum-v1 agent.critic_lr=0.001``."""
    settings = {str(d): run_setting(d) for d in run_dirs}
    groups: dict[tuple, list[str | Path]] = {}
    for d in run_dirs:
        groups.setdefault(tuple(sorted(settings[str(d)].items())), []).append(d)
    keys = sorted({k for key in groups for k, _ in key})
    differing = [k for k in keys if len({dict(key).get(k) for key in groups}) > 1 and k not in ("algo", "env.id")]
    # A section some groups have and others lack entirely (e.g. a distributed run beside a
    # single-process one) is named once, "distributed" / "no distributed", not key by key.
    sections = {k.split(".")[0] for k in differing if "." in k}
    partial = {sec for sec in sections
               if any(not any(k.startswith(sec + ".") for k, _ in key) for key in groups)}
    labelled: dict[str, list[str | Path]] = {}
    for key, members in groups.items():
        values = dict(key)
        parts = []
        for sec in sorted(partial):
            parts.append(sec if any(k.startswith(sec + ".") for k in values) else f"no {sec}")
        for k in differing:
            sec = k.split(".")[0]
            if sec in partial:
                having = [dict(g) for g in groups if any(j.startswith(sec + ".") for j, _ in g)]
                if k not in values or len({h.get(k) for h in having}) < 2:
                    continue  # the same in every group that has the section
            parts.append(f"{k}={values.get(k, 'unset')}")
        labelled[" ".join(filter(None, [run_label(members[0]), *parts]))] = members
    return labelled


def _curves(run_dirs: list[str | Path], labels: list[str] | None) -> dict[str, list[str | Path]]:
    """The runs of each curve: by the given labels (one per run, in the order first seen), else
    :func:`group_runs`."""
    if labels is None:
        return group_runs(run_dirs)
    if len(labels) != len(run_dirs):
        raise ValueError(f"plot_runs got {len(labels)} labels for {len(run_dirs)} runs; pass one label per run.")
    grouped: dict[str, list[str | Path]] = {}
    for d, label in zip(run_dirs, labels):
        grouped.setdefault(label, []).append(d)
    return grouped


def plot_runs(run_dirs: list[str | Path], out: str | Path, title: str | None = None,
              labels: list[str] | None = None) -> Path:
    """Plot eval curves; runs of one setting (:func:`group_runs`: the same resolved config but for
    the seed and bookkeeping) are averaged (line) with a min-max band, labelled by what differs.
    ``labels`` (one per run, e.g. a merged learn JSON's) groups and names the curves instead.

    Curves of different seeds are aligned on the steps they share. When every run logs env
    frames (action repeat, e.g. DrQ-v2), the x axis is frames, as in the papers' curves;
    otherwise it is environment steps. A population's run directory plots all its members
    (:func:`expand_runs`).
    """
    out = plot_path(out)
    run_dirs, labels = expand_runs(list(run_dirs), labels)
    x = "frames" if all(_logs_frames(d) for d in run_dirs) else "step"
    curves = {label: _once_each(members) for label, members in _curves(run_dirs, labels).items()}
    for members in curves.values():
        _warn_same_seed(members)
    groups = {label: [read_evals(d, x) for d in members] for label, members in curves.items()}
    return plot_curves(groups, out, title=title, frames=x == "frames")


def _once_each(run_dirs: list[str | Path]) -> list[str | Path]:
    """``run_dirs`` with each run once: a run given twice in one curve (``runs/a runs/a``, a glob that
    overlaps another, a population and one of its members) was averaged as two seeds and counted in the
    legend's ``n``; it is plotted once, with a line on stderr saying so. (Under two labels, e.g. a learn
    JSON merged with itself under a new label, it is one run in each curve.)"""
    seen: dict[Path, str | Path] = {}
    for d in run_dirs:
        key = Path(d).resolve()
        if key in seen:
            print(f"rlfunc: warning: the run {str(d)!r} is given twice (also as {str(seen[key])!r}); it is plotted "
                  "once, not averaged as two seeds.", file=sys.stderr)
            continue
        seen[key] = d
    return list(seen.values())


def _warn_same_seed(run_dirs: list[str | Path]) -> None:
    """A line on stderr for two runs of one curve with the same setting and the same ``train.seed``: the same
    run trained twice (or a copy, e.g. a population's member beside the single run it reproduces) is
    averaged as two seeds and counted in the legend's ``n``. Both stay plotted: on a GPU two such runs can
    differ, and which one to leave out is the user's choice."""
    seen: dict[tuple, str | Path] = {}
    for d in run_dirs:
        seed = _flat(_run_config(d)).get("train.seed")
        if seed is None:
            continue
        key = (seed, tuple(sorted(run_setting(d).items())))
        if key in seen:
            print(f"rlfunc: warning: the runs {str(seen[key])!r} and {str(d)!r} have the same setting and seed "
                  f"({seed}), so their curve averages one seed twice; leave one out to plot distinct seeds.",
                  file=sys.stderr)
            continue
        seen[key] = d


def plot_path(out: str | Path) -> Path:
    """Where the figure goes: ``out``, with ``.png`` added when it has no suffix (as matplotlib would
    add it, so the path reported is the file written); a directory or a format matplotlib cannot
    write is one ``ValueError`` sentence, before anything is read or drawn."""
    out = Path(out)
    if out.is_dir():
        raise ValueError(f"--out {str(out)!r} is a directory; pass a file name such as {str(out / 'curves.png')!r}.")
    above = next((p for p in out.parents if p.exists()), None)
    if above is not None and not above.is_dir():  # e.g. notes.txt/curves.png: mkdir would say "File exists"
        raise ValueError(f"--out {str(out)!r} has {str(above)!r}, a file, as a folder; pass a path inside a folder.")
    if not out.suffix:
        return out.with_name(out.name + ".png")
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return out  # plot_curves says how to install matplotlib
    formats = FigureCanvasBase.get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise ValueError(
            f"--out {str(out)!r} has the suffix {out.suffix!r}, a format matplotlib cannot write; "
            f"use one of {', '.join('.' + f for f in sorted(formats))} (e.g. curves.png)."
        )
    return out


_LINE_STYLES = ("-", "--", ":", "-.")
"""Line styles of the curves, one per 10 labels: matplotlib's 10 colours ``C0``-``C9`` repeat after 10."""
_POINT_MARKERS = ("o", "s", "^", "D")
"""Markers of one-evaluation curves (a point with its bar), one per 10 labels likewise."""


def _curve_style(k: int) -> dict[str, str]:
    """Colour and line style of the ``k``-th curve of a figure: the 10 colours with solid lines, then
    dashed, dotted, dash-dotted ones, so that up to 40 labels never look alike."""
    return {"color": f"C{k % 10}", "linestyle": _LINE_STYLES[(k // 10) % len(_LINE_STYLES)]}


def plot_curves(groups: dict[str, list[tuple[np.ndarray, np.ndarray]]], out: str | Path,
                title: str | None = None, frames: bool = False) -> Path:
    """Plot ``{label: [(steps, returns) per seed]}`` as :func:`plot_runs` does (mean line, min-max
    band); for curves whose run directories are gone, e.g. a learn JSON's ``evals``. ``frames``
    labels the x axis env frames instead of environment steps. The ``k``-th label's line and band
    take :func:`_curve_style` ``(k)``: after 10 labels the colours repeat with another line style."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise RuntimeError('Plotting needs matplotlib: pip install -e ".[plots]".') from exc
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, (label, curves) in enumerate(groups.items()):
        style = _curve_style(i)
        common = sorted(set.intersection(*[set(s.tolist()) for s, _ in curves]))
        if len(curves) > 1 and len(common) < min(len(s) for s, _ in curves):
            # Seeds evaluated at different steps (a distributed run evaluates at the chunk that crosses
            # each threshold): interpolate every curve at all their steps within the range they share.
            lo, hi = max(s.min() for s, _ in curves), min(s.max() for s, _ in curves)
            common = sorted({float(v) for s, _ in curves for v in s.tolist() if lo <= v <= hi})
        if not common:
            continue
        ys = np.stack([np.interp(common, s, r) for s, r in curves])
        mean = ys.mean(axis=0)
        if len(common) == 1:  # one evaluation (a short or cut-off run): a point with its min-max bar
            ax.errorbar(common, mean, yerr=[mean - ys.min(axis=0), ys.max(axis=0) - mean],
                        fmt=_POINT_MARKERS[(i // 10) % len(_POINT_MARKERS)], capsize=5,
                        label=f"{label} (n={len(curves)})", color=style["color"])
            continue
        ax.plot(common, mean, marker="o" if len(common) <= 5 else None, label=f"{label} (n={len(curves)})", **style)
        if len(curves) > 1:
            ax.fill_between(common, ys.min(axis=0), ys.max(axis=0), alpha=0.25, color=style["color"])
    ax.set_xlabel("env frames" if frames else "environment steps")
    ax.set_ylabel("evaluation return")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    out = plot_path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
