"""Evaluation episodes of a policy."""

from __future__ import annotations

import numpy as np

__all__ = ["run_episodes"]


def run_episodes(policy, env, episodes: int, seed: int, stochastic: bool = False) -> list[float]:
    """Returns of ``episodes`` full episodes of ``policy`` in ``env``.

    Episode ``i`` starts from ``env.reset(seed=seed + i)``, so evaluations are
    reproducible and independent of training. The env must accept the policy's
    normalised actions (an env from :func:`rlfunc.envs.make_env`). Actions are
    the policy's evaluation action (``policy.act_normalized(obs)``); with
    ``stochastic=True`` its own exploration
    (``act_normalized(obs, deterministic=False)``, see
    :class:`rlfunc.runtime.policy.Policy`), its generator seeded with ``seed``
    first so that a stochastic evaluation is reproducible too.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}.")
    if stochastic and hasattr(policy, "seed"):
        policy.seed(int(seed))
    returns = []
    observe_reward = getattr(policy, "observe_reward", None)
    for i in range(episodes):
        obs, _ = env.reset(seed=int(seed) + i)
        policy.reset(1)
        total, done = 0.0, False
        while not done:
            if stochastic:
                action = policy.act_normalized(np.asarray(obs), deterministic=False)
            else:
                action = policy.act_normalized(np.asarray(obs))
            obs, reward, terminated, truncated, _ = env.step(action)
            if observe_reward is not None:  # recurrent agents that take the previous reward (R2D2)
                observe_reward(reward)
            total += float(reward)
            done = bool(terminated or truncated)
        returns.append(total)
    return returns
