"""The README's Python code blocks run as written (so the README cannot rot)."""

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert blocks, "README has no python example"
    for block in blocks:
        exec(compile(block, str(README), "exec"), {})


def test_readme_names_the_setup_and_test_commands():
    text = README.read_text()
    assert 'pip install torch==2.13.0 -e ".[test,plots]" && rlfunc train' in text
    assert "python -m pytest -q" in text
    ci = (README.parent / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci
