"""One version number: pyproject.toml's, ``rlfunc.__version__``, ``rlfunc --version`` and the newest
released version in CHANGELOG.md agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import rlfunc
from rlfunc.runtime.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _pyproject_version() -> str:
    text = (ROOT / "pyproject.toml").read_text()
    project = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, flags=re.S | re.M)
    assert project, "pyproject.toml has no [project] table"
    version = re.search(r'^version = "([^"]+)"', project.group(1), flags=re.M)
    assert version, "pyproject.toml's [project] table has no version"
    return version.group(1)


def _changelog_versions() -> list[str]:
    """The version headings of CHANGELOG.md, newest first ('Unreleased' included)."""
    return re.findall(r"^## \[([^\]]+)\]", (ROOT / "CHANGELOG.md").read_text(), flags=re.M)


def test_package_version_is_pyprojects():
    assert rlfunc.__version__ == _pyproject_version()


def test_cli_version_is_pyprojects(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    # _version() reads the installed distribution's metadata: a stale install (pyproject bumped, not
    # reinstalled) fails here; pip install -e . refreshes it.
    assert capsys.readouterr().out.strip() == f"rlfunc {_pyproject_version()}"


def test_changelog_newest_release_is_the_package_version():
    versions = _changelog_versions()
    assert versions and versions[0] == "Unreleased", "CHANGELOG.md starts with an [Unreleased] section"
    released = versions[1:]
    assert released, "CHANGELOG.md names no released version"
    assert released[0] == _pyproject_version(), (
        f"CHANGELOG.md's newest release is {released[0]}, the package is {_pyproject_version()}"
    )
    text = (ROOT / "CHANGELOG.md").read_text()
    dated = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, flags=re.M)
    assert dated == released, "every released version heading is '## [X.Y.Z] - YYYY-MM-DD'"
    as_numbers = [tuple(int(p) for p in v.split(".")) for v in released]
    assert as_numbers == sorted(as_numbers, reverse=True), "releases are listed newest first"
