"""The documentation's Python code blocks run as written, as the README's do (tests/test_readme.py),
so a guide page cannot rot. Needs no docs extra: the pages are Markdown files."""

import re
import tempfile
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCKS = [
    pytest.param(page, i, block, id=f"{page.relative_to(DOCS)}:{i}")
    for page in sorted(DOCS.rglob("*.md"))
    for i, block in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S))
]


def test_the_guides_have_python_examples():
    assert {p.values[0].name for p in BLOCKS} >= {"concepts.md", "getting-started.md"}


@pytest.mark.parametrize("page, index, block", BLOCKS)
def test_docs_python_block_runs(page, index, block, tmp_path, monkeypatch):
    """A smoke test: the block runs without an error (its own asserts included). What it writes, to the
    working directory or to ``tempfile.mkdtemp()`` (docs/running.md), lands in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    exec(compile(block, f"{page}:{index}", "exec"), {"__name__": f"docs_example_{index}"})
