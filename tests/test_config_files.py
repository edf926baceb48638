"""The shipped config files hold settings with one-line reasons (#23 §4).

Each YAML under ``configs/`` opens with a short header (what it is, its source, the
committed result that it produced) whose first sentence is ``rlfunc configs``'s summary;
every other comment sits on the line of the setting it explains. Trial histories live in
``benchmarks/config_histories.md``, which ``python benchmarks/run.py report`` appends to
``benchmarks/RESULTS.md``; a config that points there names a section that exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from benchmarks.report import HISTORIES, build_report
from rlfunc.runtime.packaged import summary

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").rglob("*.yaml"))
HEADER_LINES = 12


def _header(path: Path) -> list[str]:
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return lines


def test_every_config_has_a_short_header_and_only_inline_comments_below_it():
    assert len(CONFIGS) >= 19
    for path in CONFIGS:
        name = path.relative_to(ROOT).as_posix()
        header = _header(path)
        assert 2 <= len(header) <= HEADER_LINES, f"{name}: header of {len(header)} lines"
        body = path.read_text().splitlines()[len(header):]
        own_line = [line for line in body if line.strip().startswith("#")]
        assert not own_line, f"{name}: a comment on a line of its own below the header: {own_line[0]!r}"
        for line in body:
            assert len(line) <= 160, f"{name}: {line!r}"
        assert isinstance(yaml.safe_load(path.read_text()), dict)


def test_every_header_names_its_result_and_its_summary_reads_well():
    for path in CONFIGS:
        name = path.relative_to(ROOT).as_posix()
        text = " ".join(line.lstrip("# ") for line in _header(path))
        assert re.search(r"Result|No committed result yet", text), f"{name}: the header does not say what it produced"
        for cited in re.findall(r"([\w.]+\.json)", text):
            assert (ROOT / "benchmarks" / "results" / cited).exists(), f"{name} cites {cited}, which is not committed"
        line = summary(path)  # rlfunc configs' one line: the header's first sentence
        assert 20 <= len(line) < 96 and line[0].isupper() and not line.endswith(("(", ",", "...")), (name, line)
        algo = yaml.safe_load(path.read_text())["algo"]
        assert {"drqv2": "drq-v2"}.get(algo, algo) in line.lower() or "control for" in line.lower(), (name, line)


def test_histories_are_in_the_report_and_every_pointer_finds_its_section(tmp_path):
    histories = HISTORIES.read_text()
    sections = set(re.findall(r"^## (.+)$", histories, flags=re.M))
    md = build_report(tmp_path)  # no JSONs: the report is the header and the histories
    assert "# How the shipped configs were chosen" in md and histories.rstrip() in md
    assert "How the shipped configs were chosen" not in build_report(tmp_path, histories=None)
    assert histories.rstrip() in (ROOT / "benchmarks" / "RESULTS.md").read_text(), (
        "benchmarks/RESULTS.md is older than benchmarks/config_histories.md: run python benchmarks/run.py report"
    )
    for path in CONFIGS:
        header = " ".join(line.lstrip("# ") for line in _header(path))
        for target in re.findall(r'benchmarks/RESULTS\.md, "([^"]+)"', header):
            assert target in sections, f"{path.name} points to a section {target!r} that config_histories.md lacks"
        own = f"configs/{path.relative_to(ROOT / 'configs').as_posix()}"
        if own in sections:
            assert f'benchmarks/RESULTS.md, "{own}"' in header, f"{own} has a history but its header does not point to it"
