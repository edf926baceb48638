"""Environments: gymnasium factory and wrappers."""

from rlfunc.envs.factory import (
    WRAPPERS,
    build_wrappers,
    check_env_id,
    env_fns,
    env_spaces,
    make_env,
    make_vector_env,
    split_env_id,
    suggest_env_ids,
)

__all__ = [
    "make_env",
    "make_vector_env",
    "env_fns",
    "check_env_id",
    "split_env_id",
    "suggest_env_ids",
    "env_spaces",
    "build_wrappers",
    "WRAPPERS",
]

from rlfunc.envs import memory as _memory  # noqa: F401,E402  (registers rlfunc/CueMemory-v0)
from rlfunc.envs import dmc as _dmc  # noqa: F401,E402  (registers dmc/<domain>_<task>-v0; imports dm_control lazily)
from rlfunc.envs import minatar as _minatar  # noqa: F401,E402  (registers MinAtar/<Game>-v0; imports minatar lazily)
