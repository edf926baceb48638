"""The ``rlfunc`` commands and config overrides that README.md and docs/**/*.md show are ones rlfunc accepts.

Nothing runs and nothing trains. ``test_doc_command_is_one_rlfunc_accepts`` puts each command through
rlfunc's own argument parser (:func:`rlfunc.runtime.cli.build_parser`) and, for ``train`` and
``sweep``, its config machinery (:mod:`rlfunc.runtime.config`; a sweep through
:func:`rlfunc.scale.sweep.plan_sweep`, which starts no Ray), and asserts:

* the subcommand exists, and every ``--option`` is one of its options written out in full
  (argparse itself would also take a prefix such as ``--run-di``);
* the command line parses (option values of the right type, choices, positionals);
* a config it names exists (a path or a packaged name), and that config with its ``--set``
  overrides (and ``--seeds``/``--grid``/``--vectorize``) builds.

``test_every_set_and_grid_key_in_the_docs_is_a_config_key``: every ``--set KEY=``/``--grid KEY=``
anywhere in the pages (prose and ``benchmarks/`` commands too) names a config key. The two
``..._are_found`` tests check the extraction, and that a misspelt option or key is reported.

Where commands are found: in fenced code blocks, each line that starts with ``rlfunc`` (after
``VAR=value`` prefixes; ``\\`` continuations joined, ``# comments`` dropped); in prose, each inline
code span from ``rlfunc SUBCOMMAND`` to the span's end (a span may wrap onto the next line).

Placeholders, by rule (never skipped silently):

* a token holding an ALL-CAPS word (``CONFIG``, ``RUN_DIR``, ``FILE.npz``), ``<...>`` or ``...``
  stands for a value and parses as ``1`` (valid for every path, count and number option here); as
  the value of ``KEY=VALUE`` it becomes the string ``placeholder`` (so it may only stand for a
  string key such as ``data.path``); a placeholder config is not built;
* ``...`` alone elides arguments and is dropped;
* ``a|b`` written without spaces offers alternatives: each one is checked;
* usage notation (a ``|`` token, or ``[``/``(`` groups: docs/running.md's synopsis) is checked for
  its subcommands and option names only;
* an inline span may leave out required arguments and a last option's value (prose names a
  command and the flag it is about: ``rlfunc resume --total-steps 15000``, ``rlfunc eval --video``,
  ``rlfunc sweep``, whose config is required in effect); a line of a code block may not;
* a config file a page has the reader write first (:data:`USER_FILES`) is not built.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

USER_FILES = {"my_reach.yaml": "docs/environments.md has the reader write it, naming their own module my_envs"}
"""Configs the docs' commands name that the reader writes first -> why they are not in the repository."""

STANDIN = "1"  # a placeholder token as the parser sees it
STANDIN_VALUE = "placeholder"  # a placeholder KEY=VALUE value
PLACEHOLDER = re.compile(r"<[^>]*>|\.\.\.|\b[A-Z][A-Z0-9_]*\b")
FENCE = re.compile(r"^ *```[^\n]*\n(.*?)^ *```", re.S | re.M)
SPAN = re.compile(r"`((?:[^`\n]|\n(?![ \t]*\n))+)`")  # inline code, wrapping lines but not paragraphs
COMMAND_LINE = re.compile(r"^\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(rlfunc\s.*)$")
IN_SPAN = re.compile(r"(?:^|\s)(rlfunc\s+(?:[a-z]|--).*)$", re.S)


def commands_in(text: str) -> list[tuple[int, str, bool]]:
    """``(line, command, inline)`` for every rlfunc command in Markdown ``text``."""
    found = []
    for block in FENCE.finditer(text):
        body = block.group(1)
        first = text.count("\n", 0, block.start(1)) + 1
        for offset, line in _joined_lines(body):
            match = COMMAND_LINE.match(re.sub(r"\s#.*$", "", line))  # `# comment` dropped
            if match:
                found.append((first + offset, " ".join(match.group(1).split()), False))
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)  # same line numbers, no code blocks
    for span in SPAN.finditer(prose):
        match = IN_SPAN.search(span.group(1))
        if match:
            found.append((prose.count("\n", 0, span.start()) + 1, " ".join(match.group(1).split()), True))
    return found


def _joined_lines(body: str) -> list[tuple[int, str]]:
    """The block's lines with ``\\`` continuations joined, each with its first line's offset."""
    out, pending, start = [], "", 0
    for i, line in enumerate(body.splitlines()):
        if not pending:
            start = i
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        out.append((start, pending + line))
        pending = ""
    return out


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _command_parser(args: list[str]) -> tuple[argparse.ArgumentParser | None, list[str], str]:
    """The parser of the (sub)command ``args`` start with, the args after it, and a problem if any."""
    from rlfunc.runtime.cli import build_parser

    parser = build_parser()
    if not args or args[0].startswith("-"):
        return parser, args, ""
    commands = _subparsers(parser)
    if args[0] not in commands:
        return None, args, f"`rlfunc {args[0]}` is not a command; rlfunc has {', '.join(commands)}"
    sub, rest = commands[args[0]], args[1:]
    if args[0] == "dataset":
        actions = _subparsers(sub)
        if not rest or rest[0] not in actions:
            return None, rest, f"`rlfunc dataset` needs an action, one of {', '.join(actions)}"
        sub, rest = actions[rest[0]], rest[1:]
    return sub, rest, ""


def _option_problems(parser: argparse.ArgumentParser, args: list[str], prog: str) -> list[str]:
    """Each ``--option`` in ``args`` that is not one of ``parser``'s, written out in full."""
    options = parser._option_string_actions
    known = ", ".join(sorted(o for o in options if o.startswith("--")))
    return [f"{prog} has no option {arg.split('=')[0]} (it has {known})"
            for arg in args if arg.startswith("--") and arg.split("=")[0] not in options]


def _is_usage(args: list[str]) -> bool:
    return any(a == "|" or a.startswith(("[", "(")) for a in args)


def _usage_problems(args: list[str]) -> list[str]:
    """Usage notation: each ``|``-separated subcommand exists, and every option is one of its own."""
    if not any(a.startswith("-") or a.startswith(("[", "(")) for a in args):  # `rlfunc train | eval | ...`
        groups = " ".join(args).split(" | ")
        return [p for g in groups for p in [_command_parser(g.split())[2]] if p]
    words = [w for a in args for w in [a.strip("[]()")] if w and w not in ("|", "...")]
    parser, rest, problem = _command_parser(words)
    if problem:
        return [problem]
    return _option_problems(parser, rest, parser.prog)


def _substitute(args: list[str]) -> list[str]:
    """Placeholders -> stand-ins (module docstring); a lone ``...`` is dropped."""
    out = []
    for i, arg in enumerate(args):
        if arg == "...":
            continue
        after_key = i > 0 and args[i - 1] in ("--set", "--grid") and "=" in arg
        if after_key:
            key, value = arg.split("=", 1)
            out.append(f"{key}={STANDIN_VALUE}" if PLACEHOLDER.search(value) else arg)
        elif not arg.startswith("--") and PLACEHOLDER.search(arg):
            out.append(STANDIN)
        else:
            out.append(arg)
    return out


def _variants(args: list[str]) -> list[list[str]]:
    """``a|b`` (no spaces) -> one argument list per alternative."""
    for i, arg in enumerate(args):
        if "|" in arg and arg != "|":
            return [v for alt in arg.split("|") for v in _variants([*args[:i], alt, *args[i + 1:]])]
    return [args]


def _parse(args: list[str]) -> tuple[argparse.Namespace | None, str]:
    """rlfunc's parser on ``args``: the namespace, or ``None`` and argparse's error line."""
    from rlfunc.runtime.cli import build_parser

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            return build_parser().parse_args(args), ""
    except SystemExit as exc:
        if exc.code == 0:  # --version, --help
            return None, ""
        return None, err.getvalue().strip().splitlines()[-1]


def _config_problem(args: argparse.Namespace, inline: bool) -> str:
    """A train or sweep command's config, built as the command builds it before it trains (one sentence)."""
    from rlfunc.runtime.config import ConfigError

    config = getattr(args, "config", None)
    if config == STANDIN or config in USER_FILES:
        return ""  # a placeholder or the reader's own file: nothing to build (module docstring)
    if inline and args.command == "sweep" and config is None and args.resume is None:
        return ""  # prose naming `rlfunc sweep`: its config left out (a sweep has no default config)
    try:
        if args.command == "sweep":
            _plan_sweep(args)
        elif args.command == "train":
            _build_train(args)
    except (ConfigError, ValueError) as exc:
        return f"its config does not build: {exc}"
    return ""


def _build_train(args: argparse.Namespace) -> None:
    """What :func:`rlfunc.runtime.population.train` checks before it makes the run directory."""
    from rlfunc.runtime.config import ConfigError, apply_overrides, build_config, load_config, parse_overrides
    from rlfunc.runtime.packaged import resolve_config
    from rlfunc.runtime.population_members import member_specs
    from rlfunc.runtime.specs import parse_grid, parse_seeds

    raw = load_config(None if args.config is None else resolve_config(args.config))
    raw = apply_overrides(raw, parse_overrides(args.overrides))
    spec = dict((raw.get("train") or {}).get("population") or {})
    if args.vectorize is not None and args.seeds is None and args.grid is None and not spec:
        raise ConfigError("--vectorize needs --seeds or --grid (a population)")
    for key, value in (("seeds", args.seeds and parse_seeds(args.seeds)), ("grid", args.grid and parse_grid(args.grid)),
                       ("vectorize", args.vectorize)):
        if value is not None:
            spec[key] = value
    if spec:
        raw["train"] = {**(raw.get("train") or {}), "population": spec}
    config = build_config(raw)
    if config.train.population is not None:
        member_specs(config)  # grid keys the algorithm takes as data, each member's config


def _plan_sweep(args: argparse.Namespace) -> None:
    """What ``rlfunc sweep`` checks before Ray starts (:func:`rlfunc.scale.sweep.sweep`)."""
    from rlfunc.runtime.config import ConfigError
    from rlfunc.scale.sweep import plan_sweep

    if args.resume is not None:
        if args.config is not None or args.seeds is not None or args.grid or args.overrides:
            raise ConfigError("--resume continues the stored plan; it takes no CONFIG, --seeds, --grid or --set")
        return  # the plan is read from SWEEP_DIR
    plan_sweep(args.config, "0" if args.seeds is None else args.seeds, args.grid, args.overrides, args.sweep_dir,
               args.gpus, args.population)


def problems(command: str, inline: bool) -> list[str]:
    """What is wrong with the rlfunc ``command`` (empty: rlfunc accepts it)."""
    args = shlex.split(command, comments=True)[1:]
    if _is_usage(args):
        return _usage_problems(args)
    found = []
    for variant in _variants(args):
        parser, rest, problem = _command_parser(variant)
        if problem:
            return [problem]
        found += _option_problems(parser, rest, parser.prog)
        last = parser._option_string_actions.get(rest[-1]) if rest else None
        if inline and last is not None and last.nargs != 0:
            variant = variant[:-1]  # prose naming an option (`rlfunc eval --video`), its value left out
        namespace, error = _parse(_substitute(variant))
        if error and not (inline and "the following arguments are required" in error):
            found.append(f"argparse refuses it: {error}")
        if namespace is not None and (problem := _config_problem(namespace, inline)):
            found.append(problem)
    return found


def unknown_key(dotted: str) -> str:
    """Why ``dotted`` (``section.key``) is no config key of any algorithm; empty if it is one. Keys below a
    mapping-valued field (``env.kwargs.*``, ``train.wandb.*``, ``train.population.*``) are that mapping's."""
    import dataclasses

    from rlfunc.runtime import config
    from rlfunc.runtime.registry import ALGOS

    sections = {"env": [config.EnvSection], "train": [config.TrainSection], "data": [config.DataSection],
                "distributed": [config.DistributedSection], "agent": [e.config_cls for e in ALGOS.values()]}
    section, _, rest = dotted.partition(".")
    if section not in sections:
        return f"{section!r} is no config section (they are {', '.join(sections)})"
    name, _, deeper = rest.partition(".")
    fields = {f.name: f for cls in sections[section] for f in dataclasses.fields(cls)}
    if name not in fields:
        return f"{section} has no key {name!r}"
    if deeper and "dict" not in str(fields[name].type):
        return f"{section}.{name} is not a mapping, so it has no key {deeper!r}"
    return ""


SET_OPTION = re.compile(r"--(set|grid|agent-set)[ =]+([a-z_]+(?:\.[a-z_]+)+)=")
SETS = sorted({(page.relative_to(ROOT).as_posix(), key)
               for page in PAGES for _, key in SET_OPTION.findall(" ".join(page.read_text().split()))})


COMMANDS = sorted({(page.relative_to(ROOT).as_posix(), line, command, inline)
                   for page in PAGES for line, command, inline in commands_in(page.read_text())})


def test_the_commands_are_found():
    """The extraction sees code-block lines (joined across ``\\``), prose spans across a line break, and
    every page that shows commands; a misspelt, abbreviated or unknown option is reported."""
    sample = "```bash\nX=1 rlfunc train a.yaml \\\n  --set train.seed=3  # note\n```\nRun `rlfunc eval\nRUN`.\n"
    assert commands_in(sample) == [(2, "rlfunc train a.yaml --set train.seed=3", False),
                                   (5, "rlfunc eval RUN", True)]
    pages = {c[0] for c in COMMANDS}
    assert {"README.md", "docs/running.md", "docs/datasets.md", "docs/populations.md", "docs/scale-out.md"} <= pages
    blocks = [c for c in COMMANDS if not c[3]]
    assert len(COMMANDS) >= 60 and len(blocks) >= 15, f"{len(COMMANDS)} commands found, {len(blocks)} in code blocks"
    assert problems("rlfunc train --set train.seed=1 --run-di x", inline=False)
    assert problems("rlfunc eval RUN --episode 3", inline=True)
    assert problems("rlfunc train [--sets key=value]", inline=False)
    assert problems("rlfunc evaluate RUN", inline=True)
    assert problems("rlfunc train configs/redq/pendulum.yaml --set train.sed=1", inline=False)
    assert problems("rlfunc train configs/redq/nope.yaml", inline=False)
    assert not problems("rlfunc train configs/redq/pendulum.yaml --set train.seed=1", inline=False)


@pytest.mark.parametrize(
    "page, line, command, inline", COMMANDS, ids=[f"{p}:{n}:{c[:60]}" for p, n, c, _ in COMMANDS]
)
def test_doc_command_is_one_rlfunc_accepts(page, line, command, inline, monkeypatch):
    monkeypatch.chdir(ROOT)  # config paths as the pages write them, from the repository root
    found = problems(command, inline)
    assert not found, f"{page}:{line}: `{command}`: " + "; ".join(found) + " -- fix the command in the page"


def test_the_overrides_are_found():
    """``--set``/``--grid`` keys are found in prose and in other tools' commands; a wrong key is reported."""
    assert ("docs/scale-out.md", "distributed.min_replay_ratio") in SETS  # a benchmarks/run.py command's --set
    assert ("docs/scale-out.md", "train.threads") in SETS  # prose: `--set\n  train.threads=4`
    assert unknown_key("train.seeds") and unknown_key("agent.critic_lrr") and unknown_key("train.seed.x")
    assert not unknown_key("env.kwargs.frame_stack") and not unknown_key("agent.initial_state")


@pytest.mark.parametrize("page, key", SETS, ids=[f"{p}:{k}" for p, k in SETS])
def test_every_set_and_grid_key_in_the_docs_is_a_config_key(page, key):
    """Every ``--set KEY=...``/``--grid KEY=...`` anywhere in the docs (prose, benchmarks commands too)
    names a config key of some algorithm (which algorithm's, the commands above check where they are rlfunc's)."""
    problem = unknown_key(key)
    assert not problem, f"{page}: --set/--grid {key}=...: {problem}; fix the key in the page"
