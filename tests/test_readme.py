"""The README's Python code blocks run as written (so the README cannot rot), its result tables are
what the committed JSONs give (benchmarks/readme_tables.py), and it stays a short summary."""

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


def test_readme_result_tables_match_the_jsons():
    """Every number in the README's algorithm and speed tables is read from the JSON its cell links;
    after a new result, `python -m benchmarks.readme_tables` rewrites them."""
    import sys

    sys.path.insert(0, str(README.parent))
    from benchmarks.readme_tables import readme_with_tables

    text = README.read_text()
    assert readme_with_tables(text) == text, "README tables are stale: run python -m benchmarks.readme_tables"
    cited = re.findall(r"\(benchmarks/results/([\w-]+)\.json\)", text)
    assert len(cited) >= 10
    for stem in cited:
        assert (README.parent / "benchmarks" / "results" / f"{stem}.json").is_file(), stem


def test_readme_is_short_and_its_links_resolve():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    for target in re.findall(r"\]\(((?:docs|benchmarks)/[^)#]+|[A-Z]+\.md)", text):
        generated = target.startswith("docs/reference/")  # written at build time by docs/hooks.py
        assert generated or (README.parent / target).exists(), target
