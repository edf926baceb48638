"""Statements of docs/benchmarks.md that follow the repository's files, checked against them (session 37 docs review).

* The "Latest numbers" paragraph says which result JSONs ran on the 2-core Intel Xeon VM rather than the
  AMD EPYC: every JSON it names there is an Intel Xeon CPU run (its ``machine.cpu``, or its note where it
  has no ``machine``), and every such run is named, or is a trial of a day the paragraph names ("the
  DRQN trials of 2026-11-27"). A re-measured or new Xeon JSON left out of it read as an AMD EPYC number
  (``learn_drqn_n_step5_window20_xeon.json`` was).
* The GPU wheel sections size what travels to the device machine: the checkout (``git ls-files``) the page
  states, and the room each wheel set leaves of the tool's 64 MiB carry, follow the checkout's size
  today within 2 MiB (it had doubled, 6.7 -> 13.5 MB, under the stated 6.7 MB), and every set still fits
  beside it. When this fails, write the new sizes on the page (``PACK_MB`` in ``benchmarks/gpu_checks.sh``
  measures the checkout itself).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
PAGE = ROOT / "docs" / "benchmarks.md"
MIB = 1 << 20


def _machine_paragraph() -> str:
    text = PAGE.read_text()
    start = text.index("Machine: a 2-core AMD EPYC VM")
    end = text.index("ran on a 2-core Intel Xeon VM", start)
    return " ".join(text[start:end].split())


def _cpu_xeon_runs() -> dict[str, str]:
    """``{file name: date}`` of the CPU-only result JSONs that ran on an Intel Xeon."""
    found = {}
    for path in sorted(RESULTS.glob("*.json")):
        data = json.loads(path.read_text())
        machine = data.get("machine") or {}
        if machine:
            if "Xeon" in str(machine.get("cpu")) and not machine.get("gpu"):
                found[path.name] = str(machine.get("date", ""))[:10]
        elif "Intel Xeon" in str(data.get("note", "")) and not re.search(r"H100|H200", json.dumps(data)):
            found[path.name] = ""
    return found


def test_the_machine_paragraph_names_the_intel_xeon_runs_and_only_them():
    paragraph = _machine_paragraph()
    xeon = _cpu_xeon_runs()
    assert xeon, "no Intel Xeon CPU result JSON found"
    named = re.findall(r"`([\w.-]+\.json)`", paragraph.split(";", 1)[1])
    not_xeon = [n for n in named if n not in xeon]
    assert not not_xeon, f"docs/benchmarks.md names these as Intel Xeon runs, but their JSONs say otherwise: {not_xeon}"
    trials = re.findall(r"the (\w+) trials of (\d{4}-\d\d-\d\d)", paragraph)
    missing = [n for n, date in xeon.items() if n not in named
               and not any(n.startswith(f"learn_{algo.lower()}") and date == day for algo, day in trials)]
    assert not missing, (f"these result JSONs ran on the Intel Xeon VM but docs/benchmarks.md's machine paragraph "
                         f"(\"Latest numbers\") leaves them under the AMD EPYC: {missing}")


def _checkout_bytes() -> int:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    if proc.returncode != 0:
        pytest.skip("not a git checkout")
    files = [ROOT / f for f in proc.stdout.decode().split("\0") if f]
    return sum(f.stat().st_size for f in files if f.is_file())


def test_the_checkout_and_carry_sizes_on_the_page_are_todays():
    text = " ".join(PAGE.read_text().split())
    checkout = _checkout_bytes()
    stated = re.search(r"the checkout \((\d+(?:\.\d+)?) MB[^)]*`git ls-files`", text)
    assert stated, "docs/benchmarks.md no longer states the checkout's size as 'the checkout (N MB ... `git ls-files`'"
    assert abs(float(stated.group(1)) * 1e6 - checkout) <= 2 * MIB, (
        f"docs/benchmarks.md says the checkout is {stated.group(1)} MB; `git ls-files` sums to "
        f"{checkout / 1e6:.1f} MB now: update the page's sizes"
    )
    rows = re.findall(r"^\| (?:default|`\w+`)[^\n]*\| (\d+(?:\.\d+)?) MB \| (\d+) MiB \|$", PAGE.read_text(), flags=re.M)
    assert len(rows) >= 5, "the wheel-set table (size, carry left) was not found"
    for size_mb, left_mib in rows:
        left = (64 * MIB - float(size_mb) * 1e6 - checkout) / MIB
        assert left >= 1, f"a {size_mb} MB wheel set no longer fits the 64 MiB carry beside the {checkout / 1e6:.1f} MB checkout"
        assert abs(int(left_mib) - math.floor(left)) <= 2, (
            f"a {size_mb} MB wheel set leaves {left:.1f} MiB of the carry with today's checkout, the page says {left_mib}"
        )
