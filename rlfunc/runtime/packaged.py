"""The configs shipped with rlfunc, found by name (``rlfunc train redq/hopper``).

The repository's top-level ``configs/<algo>/<name>.yaml`` files are the only
copy. ``pyproject.toml`` maps them into the wheel as the data package
``rlfunc.configs`` (``package-dir``), so an installed rlfunc has them at
``site-packages/rlfunc/configs/``; a source checkout (or an editable install)
reads them from ``configs/`` beside the ``rlfunc`` package. :func:`configs_dir`
tries the two in that order.

A config's name is its path below that directory without ``.yaml``
(``redq/hopper``); :func:`resolve_config` turns a name, ``redq/hopper.yaml`` or
``configs/redq/hopper.yaml`` into the packaged file, and leaves any path that
exists alone.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from pathlib import Path

__all__ = ["PackagedConfig", "configs_dir", "list_configs", "resolve_config", "summary"]

_SUMMARY_WIDTH = 96


@dataclasses.dataclass(frozen=True)
class PackagedConfig:
    name: str  # "redq/hopper"
    path: Path
    summary: str  # one line: the first sentence of the file's leading comment, else "algo on env"


def configs_dir() -> Path | None:
    """The directory holding the shipped configs: ``rlfunc/configs`` inside an
    installed wheel, else ``configs/`` of the source tree rlfunc is imported from
    (``None`` if neither exists)."""
    import rlfunc

    package = Path(rlfunc.__file__).resolve().parent
    installed = package / "configs"
    if installed.is_dir():
        return installed
    source = package.parent / "configs"
    if source.is_dir() and (package.parent / "pyproject.toml").is_file():
        return source
    return None


def summary(path: Path) -> str:
    """One line describing the config at ``path``: the first sentence of its leading
    comment block (parenthesised asides dropped), else ``"<algo> on <env id>"``."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):
        return "(unreadable)"
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped.startswith("#"):
            break
        lines.append(stripped.lstrip("#").strip())
    comment = " ".join(part for part in lines if part)
    while True:  # drop (nested) parenthesised asides
        shorter = re.sub(r"\s*\([^()]*\)", "", comment)
        if shorter == comment:
            break
        comment = shorter
    first = re.split(r"(?<=[^.])[.:;](?:\s|$)", comment, maxsplit=1)[0].strip()
    if not first:
        import yaml

        try:
            raw = yaml.safe_load(text)
        except yaml.YAMLError:
            return "(not valid YAML)"
        raw = raw if isinstance(raw, dict) else {}
        env = raw.get("env") if isinstance(raw.get("env"), dict) else {}
        first = f"{raw.get('algo', '?')} on {env.get('id', '?')}"
    if len(first) > _SUMMARY_WIDTH:
        first = first[: _SUMMARY_WIDTH - 3].rstrip() + "..."
    return first


def list_configs() -> list[PackagedConfig]:
    """Every shipped config, sorted by name."""
    root = configs_dir()
    if root is None:
        return []
    found = []
    for path in sorted(root.rglob("*.yaml")):
        name = path.relative_to(root).with_suffix("").as_posix()
        found.append(PackagedConfig(name, path, summary(path)))
    return found


def _packaged_name(text: str) -> str:
    name = text.replace("\\", "/")
    name = name[len("configs/") :] if name.startswith("configs/") else name
    for suffix in (".yaml", ".yml"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def resolve_config(name_or_path: str | Path) -> Path:
    """The YAML file ``rlfunc train`` should read for ``name_or_path``.

    A path that exists is returned as it is. Otherwise a packaged name
    (``redq/hopper``, ``redq/hopper.yaml`` or ``configs/redq/hopper.yaml``,
    the README's form, which works from any directory) gives the shipped file.
    Anything else is a :class:`~rlfunc.runtime.config.ConfigError` naming the
    closest packaged config.
    """
    from rlfunc.runtime.config import ConfigError

    path = Path(name_or_path)
    if path.exists():
        return path
    configs = {c.name: c.path for c in list_configs()}
    name = _packaged_name(str(name_or_path))
    if name in configs:
        return configs[name]
    close = difflib.get_close_matches(name, list(configs), n=1, cutoff=0.5)
    hint = f" (closest: {close[0]})" if close else ""
    raise ConfigError(
        f"No config file {str(name_or_path)!r} and no packaged config of that name{hint}; "
        "pass a YAML path or a name that `rlfunc configs` lists."
    )
