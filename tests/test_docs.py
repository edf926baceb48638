"""The documentation site builds strictly, and its reference pages cover the code they are made from.

``mkdocs build --strict`` runs once (a broken cross-reference, link or nav entry is a warning, so a
failure); then the built site is read: the API reference of ``redq.update`` is two clicks from the
front page, and the generated config and CLI pages name every key and every option. Needs the
``docs`` extra (``pip install -e ".[docs]"``); the tests skip without it, except the check that the
front page's set-up commands are the README's.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
INSTALL = 'the docs extra is not installed: pip install -e ".[docs]"'


def _bash_blocks_under_setup(path: Path) -> list[str]:
    text = path.read_text()
    section = re.search(r"^## Set-up.*?(?=^## |\Z)", text, flags=re.S | re.M)
    assert section, f"{path.name} has no '## Set-up' section"
    return re.findall(r"```bash\n(.*?)```", section.group(0), flags=re.S)


def test_front_page_setup_commands_are_the_readmes():
    readme = _bash_blocks_under_setup(ROOT / "README.md")
    docs = _bash_blocks_under_setup(ROOT / "docs" / "index.md")
    assert len(readme) == 2, f"README's Set-up section should hold the two set-up commands, found {readme}"
    assert docs == readme, "docs/index.md's Set-up commands differ from README.md's: copy them over"


@pytest.fixture(scope="module")
def docs_tools():
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=INSTALL)
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks  # docs/hooks.py: the generated pages
    finally:
        sys.path.remove(str(ROOT / "docs"))
    return hooks


@pytest.fixture(scope="module")
def site(docs_tools, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    env = dict(os.environ, NO_MKDOCS_2_WARNING="1", OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{log[-5000:]}"
    assert "WARNING" not in log, log
    return out


def _links(page: Path) -> list[str]:
    return [html.unescape(h) for h in re.findall(r'<a [^>]*href="([^"]+)"', page.read_text())]


def _follow(page: Path, href: str) -> tuple[Path, str]:
    target, _, anchor = href.partition("#")
    path = (page.parent / target).resolve() if target else page
    if path.is_dir() or target.endswith("/"):
        path = path / "index.html"
    return path, anchor


def test_redq_update_is_two_clicks_from_the_front_page(site):
    front = site / "index.html"
    api_links = [h for h in _links(front) if h.rstrip("/").endswith("reference/api")]
    assert api_links, "the front page does not link the API reference"
    api_index, _ = _follow(front, api_links[0])
    update_links = [h for h in _links(api_index) if h.endswith("#rlfunc.algos.redq.update")]
    assert update_links, "the API reference's front page does not link redq.update"
    page, anchor = _follow(api_index, update_links[0])
    assert page.is_file(), page
    assert f'id="{anchor}"' in page.read_text(), f"{page} has no anchor {anchor}"


def test_every_algorithm_update_is_documented(site, docs_tools):
    import importlib

    from rlfunc.runtime.registry import ALGOS

    for module in dict(docs_tools.api_groups())["Algorithms"]:
        if "update" in importlib.import_module(module).__all__:
            page = site / "reference" / "api" / module / "index.html"
            assert f'id="{module}.update"' in page.read_text(), module
    index = docs_tools.api_index_markdown()
    for name, entry in ALGOS.items():  # each algo: its update and Config (SAC and DQN: another's, changed)
        assert re.search(rf"^\| \[`{name}`\].*#{entry.module}\.update\).*#{entry.module}\.Config\)", index, flags=re.M), name


def _section(markdown: str, heading: str) -> str:
    start = markdown.index(heading)
    level = heading.split(" ", 1)[0]
    nxt = re.search(rf"^#{{1,{len(level)}}} ", markdown[start + len(heading):], flags=re.M)
    return markdown[start: start + len(heading) + (nxt.start() if nxt else len(markdown))]


def test_config_reference_has_every_key_with_its_default(docs_tools, site):
    from rlfunc.runtime import config as cfg
    from rlfunc.runtime.cli import algo_defaults
    from rlfunc.runtime.registry import ALGOS

    text = docs_tools.configs_markdown()
    sections = docs_tools.config_sections()
    assert {"env": cfg.EnvSection, "train": cfg.TrainSection, "data": cfg.DataSection,
            "distributed": cfg.DistributedSection}.items() <= dict(sections).items()
    for name, cls in sections:
        section = _section(text, f"## `{name}`")
        for f in dataclasses.fields(cls):
            assert f"| `{f.name}` | `{f.type}` |" in section, f"{name}.{f.name} is missing from the config reference"
    for name in ALGOS:
        section = _section(text, f"### `{name}` {{ #agent-{name} }}")
        defaults = algo_defaults(name)
        for key, value in defaults["agent"].items():
            assert re.search(rf"^\| `{key}` \| `[^`]+` \| `{re.escape(docs_tools.yaml_value(value))}` \|", section, flags=re.M), (
                f"agent.{key} of {name} (default {value!r}) is missing from the config reference"
            )
        assert f"`train.learning_starts` is {defaults['train']['learning_starts']:,}" in section
    built = (site / "reference" / "configs" / "index.html").read_text()
    assert all(f'id="agent-{name}"' in built for name in ALGOS)


def test_cli_reference_has_every_command_and_option(docs_tools, site):
    from rlfunc.runtime.cli import build_parser

    text = docs_tools.cli_markdown()
    commands = docs_tools.subcommands(build_parser())
    assert {"rlfunc train", "rlfunc eval", "rlfunc sweep", "rlfunc dataset collect"} <= {c.prog for c in commands}
    for command in commands:
        section = _section(text, f"## `{command.prog}`")
        for action in command._actions:
            for option in action.option_strings:
                if option not in ("-h", "--help"):
                    assert f"`{option}" in section, f"{command.prog} {option} is missing from the CLI reference"
    built = (site / "reference" / "cli" / "index.html").read_text()
    assert 'id="rlfunc-sweep"' in built and "--max-retries" in built


def test_a_role_naming_nothing_is_reported(docs_tools):
    import griffe

    from griffe_rest import convert, unresolved_roles

    loader = griffe.GriffeLoader(search_paths=[str(ROOT)])
    loader.load("rlfunc")
    collection = loader.modules_collection
    redq = collection.get_member("rlfunc.algos.redq")
    text = "See :func:`update`, :class:`Config`, :func:`torch.vmap`, :class:`ValueError` and :func:`no_such_function`."
    assert unresolved_roles(text, redq, collection) == [":func:`no_such_function`"]
    markdown = convert(text, redq, collection)
    assert '<autoref identifier="rlfunc.algos.redq.update" optional><code>update</code></autoref>' in markdown
    assert "<code>torch.vmap</code>" in markdown and ":func:" not in markdown
    # literal blocks, doctest and "<" outside code
    md = convert("Run it::\n\n    x = 1\n\nThen:\n\n>>> 1 + 1\n2\n\nruns/<algo> and ``a<b``")
    assert "Run it:\n\n```python\nx = 1\n```" in md
    assert "```pycon\n>>> 1 + 1\n2\n```" in md
    assert "runs/&lt;algo> and ``a<b``" in md


def test_benchmark_results_page_shows_every_plot(site):
    page = (site / "results" / "index.html").read_text()
    plots = sorted(p.name for p in (ROOT / "benchmarks" / "results").glob("*.png"))
    assert plots
    for name in plots:
        assert (site / "results" / name).is_file(), name
    shown = set(re.findall(r'<img [^>]*src="([^"]+\.png)"', page))
    referenced = set(re.findall(r"\]\(results/([^)]+\.png)\)", (ROOT / "benchmarks" / "RESULTS.md").read_text()))
    assert referenced and shown == referenced, "results/index.html should show the plots RESULTS.md shows"
