"""A griffe extension (listed in mkdocs.yml) that turns rlfunc's docstring conventions into the
Markdown mkdocstrings renders.

rlfunc's docstrings are written for ``help()`` and doctest, in the reST habits of the Python
docs: ``:func:`name``` roles, ``::`` before an indented literal block, ``>>>`` examples. As
Markdown those would render as stray colons, paragraphs of code and nested block quotes, so each
docstring of the ``rlfunc`` package is rewritten once it is loaded:

* a role becomes inline code, linked to the object's entry in the API reference where the site
  documents it. The target is resolved like a name in the docstring's scope (the object, its
  bases, its parents, their imports). docs/hooks.py checks with :func:`unresolved_roles` that
  every role in the rendered modules names something (an rlfunc object, a builtin or an
  importable module's), so a broken reference fails ``mkdocs build --strict``;
* a ``::`` literal block and a ``>>>`` block become fenced code (``python`` when the block parses
  as Python statements, ``pycon`` for doctest, else plain text);
* ``<`` outside code is escaped, so ``runs/<algo>-<env>`` stays text and not an HTML tag.

Only the docs change; the sources and ``help()`` keep the reST text.
"""

from __future__ import annotations

import ast
import builtins
import html
import importlib.util
import re
import textwrap

import griffe

_ROLE = re.compile(r":(?:py:)?(func|class|meth|data|mod|attr|obj|exc|const):`(~?)([^`<>]+?)(?:\(\))?`")
CODE_SPANS = re.compile(r"(``.+?``|`[^`\n]+`)")  # code spans (reST literals, Markdown code) are left alone


class RestToMarkdown(griffe.Extension):
    """Rewrite every docstring of the ``rlfunc`` package when griffe has loaded it."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs) -> None:
        if pkg.name != "rlfunc":
            return
        for obj in _walk(pkg):
            if obj.docstring is not None:
                obj.docstring.value = convert(obj.docstring.value, obj, loader.modules_collection)


def _walk(obj: griffe.Object):
    yield obj
    for member in obj.members.values():
        if not member.is_alias:  # an alias's docstring is its target's, converted where it lives
            yield from _walk(member)


def convert(text: str, obj: griffe.Object | None = None, collection=None) -> str:
    """The Markdown for one docstring's reST ``text`` (roles resolved in ``obj``'s scope)."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        starts_paragraph = i == 0 or not lines[i - 1].strip()
        if stripped.startswith(">>>") and starts_paragraph:
            j = i
            while j < len(lines) and lines[j].strip():
                j += 1
            out += _fence(lines[i:j], "pycon")
            i = j
            continue
        if stripped.endswith("::") and not stripped.startswith(".."):
            indent = _indent(line)
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            if j < len(lines) and _indent(lines[j]) > indent:
                k = j
                while k < len(lines) and (not lines[k].strip() or _indent(lines[k]) > indent):
                    k += 1
                block = lines[j:k]
                while block and not block[-1].strip():
                    block.pop()
                head = line.rstrip()[:-2].rstrip()
                if head.strip():
                    out.append(_prose(head + ("" if line.rstrip().endswith(" ::") else ":"), obj, collection))
                    out.append("")
                out += _fence(block, _language(block), indent)
                out.append("")
                i = k
                continue
        out.append(_prose(line, obj, collection))
        i += 1
    return "\n".join(out)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _fence(block: list[str], language: str, indent: int = 0) -> list[str]:
    pad = " " * indent
    body = textwrap.dedent("\n".join(block)).splitlines()
    return [f"{pad}```{language}", *[f"{pad}{b}" if b else "" for b in body], f"{pad}```"]


def _language(block: list[str]) -> str:
    source = textwrap.dedent("\n".join(block))
    if source.lstrip().startswith(">>>"):
        return "pycon"
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return "text"
    # ``key: value`` lines (YAML, a config's sections) parse as annotations; real examples do not use them.
    if any(isinstance(stmt, ast.AnnAssign) for stmt in tree.body):
        return "text"
    return "python"


def _prose(line: str, obj, collection) -> str:
    """One line of running text: roles to (linked) code, ``<`` escaped outside code."""
    parts = []
    pos = 0
    for m in _ROLE.finditer(line):
        parts.append(_escape(line[pos : m.start()]))
        parts.append(_role(m.group(1), m.group(2) == "~", m.group(3).strip(), obj, collection))
        pos = m.end()
    parts.append(_escape(line[pos:]))
    return "".join(parts)


def _escape(text: str) -> str:
    pieces = CODE_SPANS.split(text)
    return "".join(p if k % 2 else p.replace("<", "&lt;") for k, p in enumerate(pieces))


def _role(kind: str, short: bool, target: str, obj, collection) -> str:
    shown = target.rsplit(".", 1)[-1] if short else target
    code = f"<code>{html.escape(shown)}</code>"
    if obj is None or collection is None:
        return code
    path = _resolve(target, obj, collection)
    if path is None or not path.startswith("rlfunc"):
        return code  # torch, tensordict, gymnasium...: not documented on this site
    # "optional": a link where the site documents the object, plain code where it does not
    # (private helpers, the runtime's internals; a name that resolves to nothing, which
    # unresolved_roles reports).
    return f'<autoref identifier="{path}" optional>{code}</autoref>'


def unresolved_roles(text: str, obj: griffe.Object, collection) -> list[str]:
    """The roles in ``text`` (``obj``'s docstring) whose target names nothing."""
    return [m.group(0) for m in _ROLE.finditer(text) if _resolve(m.group(3).strip(), obj, collection) is None]


def _resolve(target: str, obj, collection) -> str | None:
    """The full path ``target`` names in ``obj``'s scope, or None if it names nothing."""
    first, _, rest = target.partition(".")
    base = None
    scope = obj
    while scope is not None and base is None:
        members = _members(scope)
        if first in members:
            member = members[first]
            base = member.target_path if member.is_alias else member.path
        elif scope.is_module and first in scope.imports:
            base = scope.imports[first]
        scope = scope.parent
    if base is None:
        if first == "rlfunc":
            base = "rlfunc"
        elif not rest and hasattr(builtins, first):
            return f"builtins.{first}"
        elif importlib.util.find_spec(first) is not None:
            return target  # an importable module outside rlfunc
        else:
            base = _fallback(first, obj, collection)
            if base is None:
                return None
    path = f"{base}.{rest}" if rest else base
    if not path.startswith("rlfunc"):
        return path
    try:
        found = collection.get_member(path)
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return found.path if not found.is_alias else path


def _members(scope) -> dict:
    """A scope's members, a class's inherited ones too (where griffe can resolve its bases)."""
    if scope.is_class:
        try:
            return scope.all_members
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            pass
    return scope.members


def _fallback(name: str, obj, collection) -> str | None:
    """Where a name that is not in scope resolves, as in Sphinx: a member of a class of the same
    module (a module docstring's ``:meth:`add```), else the one object of that name in rlfunc."""
    module = obj.module
    for member in module.members.values():
        if not member.is_alias and member.is_class and name in member.members:
            return member.members[name].path
    paths = _names(collection).get(name, ())
    return next(iter(paths)) if len(paths) == 1 else None


_NAME_INDEX: dict[int, tuple[object, dict[str, set[str]]]] = {}  # the collection is kept: its id stays its own


def _names(collection) -> dict[str, set[str]]:
    """Every module, class and function of rlfunc by its short name (once per loaded collection)."""
    if id(collection) not in _NAME_INDEX:
        index: dict[str, set[str]] = {}

        def walk(obj):
            for member in obj.members.values():
                if member.is_alias or not (member.is_module or member.is_class or member.is_function):
                    continue
                index.setdefault(member.name, set()).add(member.path)
                walk(member)

        walk(collection.get_member("rlfunc"))
        _NAME_INDEX[id(collection)] = (collection, index)
    return _NAME_INDEX[id(collection)][1]
