"""The Python entry points behind ``rlfunc.load`` and ``rlfunc.evaluate``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from rlfunc.runtime.checkpoint import load_checkpoint
from rlfunc.runtime.config import build_config
from rlfunc.runtime.policy import Policy

__all__ = ["load", "evaluate"]


def load(path: str | Path, device: str = "cpu") -> Policy:
    """The deterministic policy of a run directory or checkpoint.

    ``rlfunc.load("runs/redq-...").act(obs)`` returns an action in the env's
    own action space.
    """
    tensors, meta = load_checkpoint(path)
    config = build_config(meta["config"])
    params = tensors["state", "params"]
    low = meta.get("action_low")
    high = meta.get("action_high")
    policy = Policy(
        config.algo,
        params,
        config.agent,
        None if low is None else np.asarray(low),
        None if high is None else np.asarray(high),
        tuple(meta["obs_shape"]),
        device,
    )
    policy.run_config = config
    return policy


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
