"""Which packaged configs this install can build: an Atari config names its env by module
(``ale_py:ALE/Pong-v5``), and without the ``atari`` extra ``build_config`` refuses it in one sentence
(the README's set-up installs only ``.[test,plots]``; ``.ci/run`` installs every extra)."""

from __future__ import annotations

import importlib.util


def missing_env_module(raw: dict) -> str | None:
    """The module a config's ``env.id`` names (``module:Env-v0``) when it is not installed, else ``None``."""
    env_id = str((raw.get("env") or {}).get("id", ""))
    module = env_id.split(":", 1)[0] if ":" in env_id else None
    return module if module and importlib.util.find_spec(module.split(".")[0]) is None else None
