"""MkDocs hooks (mkdocs.yml ``hooks:``): the reference pages, generated from the code at every build.

Nothing under ``reference/`` is a file in ``docs/``: each page is made here, in ``on_files``, from
the objects it documents, so it cannot drift from them:

* ``reference/configs.md``: every key of every config section (the dataclasses of
  :mod:`rlfunc.runtime.config`) and every algorithm's agent section (its ``Config``, with the
  defaults ``rlfunc algos NAME`` prints: :func:`rlfunc.runtime.cli.algo_defaults`);
* ``reference/cli.md``: every ``rlfunc`` command, from the parser ``rlfunc`` itself parses with
  (:func:`rlfunc.runtime.cli.build_parser`);
* ``changelog.md``: the repository's ``CHANGELOG.md``;
* ``reference/api/``: one page per public module (mkdocstrings renders its docstrings) and an index
  that links each algorithm's pure ``update``. ``on_config`` puts the module pages into the nav
  under the entry that names ``reference/api/index.md``.

``on_files`` also checks the cross-references (``:func:`name``` roles) of every docstring those
pages render: one that names nothing is a warning, so ``mkdocs build --strict`` fails on it.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib
import inspect
import io
import logging
import os
import pkgutil
import textwrap
import tokenize
import typing

import griffe
import yaml
from mkdocs.structure.files import File

from griffe_rest import CODE_SPANS, convert, unresolved_roles  # docs/ is on sys.path while mkdocs loads this file

_log = logging.getLogger("mkdocs.hooks.rlfunc")  # under "mkdocs": --strict counts its warnings

API_INDEX = "reference/api/index.md"

# The packages whose every public module is documented, and the single modules beside them.
_WALKED = {"Algorithms": "rlfunc.algos", "Core": "rlfunc.core", "Replay": "rlfunc.replay"}
_LISTED = {
    "Package": ["rlfunc"],
    "Environments": ["rlfunc.envs"],
    "Runtime": ["rlfunc.runtime.api", "rlfunc.runtime.policy", "rlfunc.runtime.callbacks",
                "rlfunc.runtime.checkpoint", "rlfunc.runtime.config"],
    "Scale-out": ["rlfunc.scale"],
}
_ORDER = ["Package", "Algorithms", "Core", "Replay", "Environments", "Runtime", "Scale-out"]


def api_groups() -> list[tuple[str, list[str]]]:
    """``[(group, [module, ...]), ...]``: the modules the API reference documents, one page each."""
    groups = dict(_LISTED)
    for group, package in _WALKED.items():
        pkg = importlib.import_module(package)
        groups[group] = [f"{package}.{m.name}" for m in pkgutil.iter_modules(pkg.__path__) if not m.name.startswith("_")]
    return [(group, groups[group]) for group in _ORDER]


def api_page(module: str) -> str:
    return f"reference/api/{module}.md"


def _summary(obj) -> str:
    doc = inspect.getdoc(obj) or ""
    return convert(" ".join(doc.split("\n\n", 1)[0].split()))


def api_index_markdown() -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the docstrings at every build (the same text `help()` shows).",
        "",
        "## Each algorithm's pure update",
        "",
        "`update(state, batch, noise) -> (state, metrics)`: one learning step, a pure function of its inputs.",
        "",
    ]
    for module in dict(api_groups())["Algorithms"]:
        mod = importlib.import_module(module)
        if "update" in getattr(mod, "__all__", ()):
            short = module.rsplit(".", 1)[1]
            link = f"{module}.md#{module}.update"
            lines.append(f"* [`{short}.update`]({link}): {_summary(mod.update)}")
    lines.append("")
    for group, modules in api_groups():
        lines += [f"## {group}", "", "| module | what it holds |", "| --- | --- |"]
        for module in modules:
            summary = _cell(inspect.getdoc(importlib.import_module(module)).split("\n\n", 1)[0])
            lines.append(f"| [`{module}`]({module}.md) | {summary} |")
        lines.append("")
    return "\n".join(lines)


def check_roles() -> list[str]:
    """``"object: :role:`target`"`` for each role, in a docstring the API pages render, that names nothing."""
    loader = griffe.GriffeLoader(search_paths=[os.path.dirname(os.path.dirname(os.path.abspath(__file__)))])
    loader.load("rlfunc")
    collection = loader.modules_collection
    broken = []

    def walk(obj):
        if obj.docstring is not None:
            broken.extend(f"{obj.path}: {role}" for role in unresolved_roles(obj.docstring.value, obj, collection))
        for member in obj.members.values():
            if not member.is_alias and not member.is_module and member.is_public:
                walk(member)

    for _, modules in api_groups():
        for module in modules:
            walk(collection.get_member(module))
    return broken


# ---------------------------------------------------------------------------------------------
# Configs


def yaml_value(value) -> str:
    """``value`` as one line of YAML, as a config file would spell it (``null``, ``[256, 256]``)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=10_000).strip()
    return text.removesuffix("\n...").strip()


def field_docs(cls) -> tuple[dict[str, str], dict[str, str]]:
    """``(docs, groups)`` from a dataclass's source (its bases' too). ``docs``: each field's own
    comment -- the one on its line, else the comment lines right above a field that stands alone
    under them, else the string literal right after it (an attribute docstring). ``groups``: a
    comment above a run of fields names the group; it is keyed by the group's first field."""
    docs: dict[str, str] = {}
    groups: dict[str, str] = {}
    for klass in reversed([k for k in cls.__mro__ if dataclasses.is_dataclass(k)]):
        source = textwrap.dedent(inspect.getsource(klass))
        lines = source.splitlines()
        comments = {
            tok.start[0]: (tok.start[1], tok.string.lstrip("#").strip())
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        }
        body = ast.parse(source).body[0].body

        def is_field(stmt) -> bool:
            return isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)

        for k, stmt in enumerate(body):
            if not is_field(stmt):
                continue
            name = stmt.target.id
            text = [c for n, (col, c) in comments.items() if stmt.lineno <= n <= stmt.end_lineno and col > stmt.col_offset]
            above = []
            n = stmt.lineno - 1
            while n >= 1 and lines[n - 1].strip().startswith("#"):
                above.insert(0, comments[n][1])
                n -= 1
            nxt = body[k + 1] if k + 1 < len(body) else None
            run = nxt is not None and is_field(nxt) and not lines[nxt.lineno - 2].strip().startswith("#") and (
                nxt.lineno == stmt.end_lineno + 1)
            if above and run:
                groups[name] = " ".join(above)
            elif above and not text:
                text = above
            if not text and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str):
                text = [nxt.value.value]
            docs[name] = " ".join(text)
    return docs, groups


def _cell(text: str) -> str:
    """Running text for a table cell: a pipe outside code would end the cell (inside code it does not)."""
    pieces = CODE_SPANS.split(convert(" ".join(text.split())))
    return "".join(p if k % 2 else p.replace("|", "\\|") for k, p in enumerate(pieces))


def _code_cell(text: str) -> str:
    return f"`{text}`"


def _field_table(cls, defaults: dict | None = None) -> list[str]:
    docs, groups = field_docs(cls)
    header = ["| key | type | default | what it does |", "| --- | --- | --- | --- |"]
    rows: list[str] = []
    for f in dataclasses.fields(cls):
        if f.name in groups or not rows:  # a commented group of fields gets its own table
            if rows:
                rows.append("")
            if f.name in groups:
                rows += [f"*{_cell(groups[f.name])}*", ""]
            rows += header
        if defaults is not None:
            default = _code_cell(yaml_value(defaults[f.name]))
        elif f.default is not dataclasses.MISSING:
            default = _code_cell(yaml_value(f.default))
        elif f.default_factory is not dataclasses.MISSING:
            default = _code_cell(yaml_value(f.default_factory()))
        else:
            default = "required"
        rows.append(f"| `{f.name}` | {_code_cell(str(f.type))} | {default} | {_cell(docs.get(f.name, ''))} |")
    return rows


def config_sections() -> list[tuple[str, type]]:
    """``[(name, dataclass), ...]``: the sections of :class:`rlfunc.runtime.config.RunConfig` that are
    dataclasses of their own (all but ``algo`` and ``agent``), in its order."""
    from rlfunc.runtime import config as cfg

    hints = typing.get_type_hints(cfg.RunConfig)
    out = []
    for f in dataclasses.fields(cfg.RunConfig):
        kinds = [t for t in (typing.get_args(hints[f.name]) or (hints[f.name],)) if dataclasses.is_dataclass(t)]
        if kinds:
            out.append((f.name, kinds[0]))
    return out


def configs_markdown() -> str:
    from rlfunc.runtime import config as cfg
    from rlfunc.runtime.cli import algo_defaults
    from rlfunc.runtime.registry import ALGOS

    sections = config_sections()
    lines = [
        "# Config reference",
        "",
        "Generated at every build from the config dataclasses (`rlfunc/runtime/config.py`) and each "
        "algorithm's `Config`; the defaults are what a config that leaves a key out gets. "
        "A config is a YAML file; `--set section.key=value` overrides one key on the command line.",
        "",
        convert(inspect.getdoc(cfg).split("\n\n", 1)[1]),  # the module docstring past its title line
        "",
        "## `algo`",
        "",
        "Required. One of: " + ", ".join(f"[`{name}`](#agent-{name})" for name in ALGOS) + ".",
        "",
    ]
    for name, cls in sections:
        lines += [f"## `{name}`", "", convert(inspect.getdoc(cls)), "", *_field_table(cls), ""]
    lines += [
        "## `agent`",
        "",
        "The algorithm's `Config`: every field, with the defaults `rlfunc algos NAME` prints. "
        "Each algorithm also sets `train.learning_starts` and `train.replay_size` when a config leaves them out.",
        "",
    ]
    for name, entry in ALGOS.items():
        defaults = algo_defaults(name)
        learner = entry.learner_cls
        train = defaults["train"]
        lines += [
            f"### `{name}` {{ #agent-{name} }}",
            "",
            f"{convert(entry.description)}. `{entry.module}.{entry.config_cls_name}`: {_summary(entry.config_cls)}",
            "",
            f"Unset, `train.learning_starts` is {train['learning_starts']:,} ({learner.learning_starts_unit}) "
            f"and `train.replay_size` is {train['replay_size']:,} ({learner.replay_size_unit}).",
            "",
            *_field_table(entry.config_cls, defaults["agent"]),
            "",
        ]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CLI


def subcommands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """Every subcommand's parser under ``parser``, nested ones (``dataset collect``) after their parent."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):  # aliases map to the same parser
                out.append(sub)
                out += subcommands(sub)
    return out


def _help_of(parser: argparse.ArgumentParser) -> dict[str, str]:
    helps = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for choice in action._choices_actions:
                helps[f"{parser.prog} {choice.dest}"] = choice.help or ""
    return helps


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | default | what it does |", "| --- | --- | --- |"]
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.option_strings:
            shown = ", ".join(action.option_strings)
            if action.nargs != 0:
                shown += f" {action.metavar or action.dest.upper()}"
        else:
            shown = action.metavar or action.dest
        default = "" if action.default in (None, False, [], argparse.SUPPRESS) or action.nargs == 0 else _code_cell(str(action.default))
        if action.required:
            default = "required"
        text = action.help or ""
        if isinstance(action, argparse._VersionAction):
            text = "print the version and exit"
        if action.choices:
            text += f" (one of: {', '.join(map(str, action.choices))})"
        rows.append(f"| `{shown}` | {default} | {_cell(text)} |")
    return rows


def cli_markdown() -> str:
    from rlfunc.runtime.cli import build_parser

    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines at the terminal's width
    try:
        parser = build_parser()
        commands = subcommands(parser)
        helps = _help_of(parser)
        for sub in commands:
            helps.update(_help_of(sub))
        lines = [
            "# Command line",
            "",
            "Generated at every build from the parser `rlfunc` parses its arguments with, so it lists "
            "what `rlfunc COMMAND --help` lists.",
            "",
            "```text",
            parser.format_usage().strip(),
            "```",
            "",
            *_argument_rows(parser),
            "",
        ]
        for sub in commands:
            anchor = sub.prog.replace(" ", "-")
            lines += [f"## `{sub.prog}` {{ #{anchor} }}", "", _cell(helps.get(sub.prog, "")) + ".", ""]
            if sub.description:
                lines += [_cell(sub.description), ""]
            lines += ["```text", sub.format_usage().strip(), "```", ""]
            if len(_argument_rows(sub)) > 2:  # a table only where the command takes arguments
                lines += [*_argument_rows(sub), ""]
        return "\n".join(lines)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# ---------------------------------------------------------------------------------------------
# The hooks


def on_config(config):
    """Expand the nav entry that names the API index into the index and one page per module."""

    def expand(items):
        for k, item in enumerate(items):
            if isinstance(item, dict):
                ((title, value),) = item.items()
                if value == API_INDEX:
                    pages = [API_INDEX] + [
                        {group: [{module: api_page(module)} for module in modules]} for group, modules in api_groups()
                    ]
                    items[k] = {title: pages}
                elif isinstance(value, list):
                    expand(value)

    expand(config["nav"] or [])
    return config


def on_files(files, config):
    for broken in check_roles():
        _log.warning("%s names nothing (not an rlfunc object, a builtin or an importable module's); fix the docstring", broken)
    root = os.path.dirname(config["config_file_path"])
    with open(os.path.join(root, "CHANGELOG.md"), encoding="utf-8") as f:
        changelog = f.read()
    pages = {
        "changelog.md": changelog,  # the repository's CHANGELOG.md, as it is
        "reference/configs.md": configs_markdown(),
        "reference/cli.md": cli_markdown(),
        API_INDEX: api_index_markdown(),
    }
    for _, modules in api_groups():
        for module in modules:
            pages[api_page(module)] = f"::: {module}\n"
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files
