"""The Python entry points behind ``rlfunc.load`` and ``rlfunc.evaluate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from tensordict import TensorDict

from rlfunc.runtime.checkpoint import CheckpointError, check_structure, load_checkpoint, resolve_checkpoint
from rlfunc.runtime.config import ConfigError, build_config
from rlfunc.runtime.policy import Policy

__all__ = ["load", "evaluate"]


def load(path: str | Path, device: str = "cpu") -> Policy:
    """The deterministic policy of a run directory or checkpoint.

    ``rlfunc.load("runs/redq-...").act(obs)`` returns an action in the env's
    own action space. The checkpoint is verified (see
    :mod:`rlfunc.runtime.checkpoint`: nothing in it is ever executed) and its
    parameters must be exactly those its config builds; anything else is a
    :class:`~rlfunc.runtime.checkpoint.CheckpointError` naming the file.
    """
    tensors, meta = load_checkpoint(path)
    ckpt = resolve_checkpoint(path)
    config = _stored_config(ckpt, meta)
    obs_shape, low, high, num_actions = _stored_spaces(ckpt, meta)
    state = tensors.get("state") if "state" in tensors.keys() else None
    params = state.get("params") if isinstance(state, TensorDict) and "params" in state.keys() else None
    if not isinstance(params, TensorDict):
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} has no parameter tensors (state/params); use a checkpoint `rlfunc train` wrote.")
    expected = _expected_params(config, obs_shape, low, high, num_actions)
    check_structure(ckpt, TensorDict({"params": params}, []), expected, "params")
    policy = Policy(config.algo, params, config.agent, low, high, obs_shape, device)
    policy.run_config = config
    return policy


def _stored_config(ckpt: Path, meta: dict[str, Any]):
    raw = meta.get("config")
    if not isinstance(raw, dict):
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} holds no run config; it was not written by `rlfunc train`.")
    try:
        return build_config(raw)
    except ConfigError as exc:
        raise CheckpointError(f"Checkpoint {str(ckpt)!r} holds a config this rlfunc rejects: {exc}") from None


def _stored_spaces(ckpt: Path, meta: dict[str, Any]):
    """``(obs_shape, action_low, action_high, num_actions)`` from meta.json, checked."""

    def bad(what: str) -> CheckpointError:
        return CheckpointError(f"Checkpoint {str(ckpt)!r} has an invalid {what} in meta.json; use a checkpoint `rlfunc train` wrote.")

    obs_shape = meta.get("obs_shape")
    if not (isinstance(obs_shape, list) and obs_shape and all(isinstance(d, int) and d > 0 for d in obs_shape)):
        raise bad("obs_shape")
    low, high = meta.get("action_low"), meta.get("action_high")
    if (low is None) != (high is None):
        raise bad("action bounds")
    if low is not None:
        try:
            low, high = np.asarray(low, dtype=np.float32), np.asarray(high, dtype=np.float32)
        except (TypeError, ValueError):
            raise bad("action bounds") from None
        if low.ndim != 1 or low.shape != high.shape or low.size == 0 or not np.all(low < high):
            raise bad("action bounds")
    num_actions = meta.get("num_actions")
    if num_actions is not None and not (isinstance(num_actions, int) and num_actions > 0):
        raise bad("num_actions")
    if low is None and num_actions is None:
        raise bad("action space (neither action bounds nor num_actions)")
    return tuple(obs_shape), low, high, num_actions


def _expected_params(config, obs_shape, low, high, num_actions) -> TensorDict:
    """The parameter structure ``config``'s algorithm builds for these spaces, as ``{"params": ...}``."""
    import gymnasium as gym

    from rlfunc.runtime.registry import get_algo

    obs_space = gym.spaces.Box(-np.inf, np.inf, shape=obs_shape, dtype=np.float32)
    if low is not None:
        act_space = gym.spaces.Box(-1.0, 1.0, shape=low.shape, dtype=np.float32)
    else:
        act_space = gym.spaces.Discrete(num_actions)
    state = get_algo(config.algo).algo.init(config.agent, obs_space, act_space, seed=0, device="cpu")
    return TensorDict({"params": state["params"]}, batch_size=[])


def evaluate(
    path_or_policy: str | Path | Policy,
    episodes: int = 10,
    seed: int = 10_000,
    env_id: str | None = None,
) -> dict[str, Any]:
    """Run ``episodes`` deterministic episodes; returns ``{"mean", "std", "returns"}``.

    The env defaults to the one the agent was trained on (same kwargs and
    wrappers).
    """
    from rlfunc.envs import build_wrappers, make_env
    from rlfunc.runtime.evaluate import run_episodes

    policy = path_or_policy if isinstance(path_or_policy, Policy) else load(path_or_policy)
    run_config = getattr(policy, "run_config", None)
    if env_id is None and run_config is None:
        raise ValueError("This policy does not know its env; pass env_id=...")
    env_cfg = run_config.env if run_config is not None else None
    env = make_env(
        env_id or env_cfg.id,
        kwargs=env_cfg.kwargs if env_cfg and (env_id is None or env_id == env_cfg.id) else None,
        wrappers=build_wrappers(env_cfg.wrappers) if env_cfg else None,
    )
    returns = run_episodes(policy, env, episodes, seed)
    env.close()
    return {"mean": float(np.mean(returns)), "std": float(np.std(returns)), "returns": returns}
