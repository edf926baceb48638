"""Evaluation episodes of a policy."""

from __future__ import annotations

import numpy as np

__all__ = ["run_episodes", "run_episodes_together"]


def run_episodes(policy, env, episodes: int, seed: int, stochastic: bool = False) -> list[float]:
    """Returns of ``episodes`` full episodes of ``policy`` in ``env``.

    Episode ``i`` starts from ``env.reset(seed=seed + i)``, so evaluations are
    reproducible and independent of training. The env must accept the policy's
    normalised actions (an env from :func:`rlfunc.envs.make_env`). Actions are
    the policy's evaluation action (``policy.act_normalized(obs)``); with
    ``stochastic=True`` its own exploration
    (``act_normalized(obs, deterministic=False)``, see
    :class:`rlfunc.runtime.policy.Policy`). The policy's generator is seeded with ``seed``
    first, so a stochastic evaluation, and a DQN-family one with ``agent.eval_epsilon > 0``,
    is reproducible too; afterwards the policy's own generator (and the state :meth:`act
    <rlfunc.runtime.policy.Policy.act>` keeps) is put back as it was, so evaluating the caller's
    policy (:func:`rlfunc.evaluate`) leaves its stream of stochastic actions where it was.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}.")
    # a Policy's generator and act() state: the objects themselves, put back afterwards (seed() and reset()
    # make new ones and never change the old ones, so the caller's stream continues exactly where it was)
    saved = {k: getattr(policy, k) for k in ("_generator", "_carry") if hasattr(policy, k)}
    try:
        return _run_episodes(policy, env, episodes, seed, stochastic)
    finally:
        for key, value in saved.items():
            setattr(policy, key, value)


def _run_episodes(policy, env, episodes: int, seed: int, stochastic: bool) -> list[float]:
    if hasattr(policy, "seed"):  # its stochastic actions (and DQN-family eval_epsilon > 0) draw from this
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


def run_episodes_together(act, envs: list, episodes: int, seeds: list[int]) -> list[list[float]]:
    """Returns of ``episodes`` full episodes in each of ``envs``, all envs stepped in lockstep.

    What :func:`run_episodes` gives for each env and its own policy (deterministic: a policy without
    state between steps, e.g. :meth:`Policy.action_tensor <rlfunc.runtime.policy.Policy.action_tensor>`
    of each env's), with one action call per step for all of them: ``act(obs, running)`` takes the
    current observations ``[M, 1, *obs_shape]`` of the ``M`` envs still running, whose indices into
    ``envs`` are ``running`` (row ``r`` is env ``running[r]``'s, as one observation its policy acts
    on), and returns their actions ``[M, 1, ...]`` in the envs' normalised action space. Env ``i``'s
    episode ``j`` starts from ``reset(seed=seeds[i] + j)``; an env leaves ``running`` once it has run
    its episodes."""
    if episodes < 1:
        raise ValueError(f"episodes must be at least 1, got {episodes}.")
    if len(seeds) != len(envs):
        raise ValueError(f"run_episodes_together needs one seed per env ({len(envs)}), got {len(seeds)}.")
    obs = [np.asarray(env.reset(seed=int(seed))[0]) for env, seed in zip(envs, seeds)]
    returns: list[list[float]] = [[] for _ in envs]
    totals = [0.0] * len(envs)
    running = list(range(len(envs)))
    while running:
        actions = np.asarray(act(np.stack([obs[i] for i in running])[:, None], list(running)))
        for r, i in enumerate(list(running)):
            ob, reward, terminated, truncated, _ = envs[i].step(actions[r, 0])
            totals[i] += float(reward)
            obs[i] = np.asarray(ob)
            if terminated or truncated:
                returns[i].append(totals[i])
                totals[i] = 0.0
                if len(returns[i]) == episodes:
                    running.remove(i)
                else:
                    obs[i] = np.asarray(envs[i].reset(seed=int(seeds[i]) + len(returns[i]))[0])
    return returns
