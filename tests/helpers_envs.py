"""Tiny deterministic gymnasium envs for runtime tests."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """obs = [episode_id, t]; terminates after ``term_at`` steps or truncates at ``trunc_at``.

    Action space is a Box in [-2, 2] (rescaled by the factory) unless ``discrete``.
    """

    metadata = {"render_modes": []}

    def __init__(self, term_at: int | None = 3, trunc_at: int | None = None, discrete: bool = False, nan_reward_after: int | None = None):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2) if discrete else gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
        self.term_at, self.trunc_at = term_at, trunc_at
        self.nan_reward_after = nan_reward_after
        self.episode = -1
        self.t = 0
        self.total_steps = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.episode += 1
        self.t = 0
        return np.array([self.episode, self.t], np.float32), {}

    def step(self, action):
        self.t += 1
        self.total_steps += 1
        terminated = self.term_at is not None and self.t >= self.term_at
        truncated = (not terminated) and self.trunc_at is not None and self.t >= self.trunc_at
        reward = float(self.t)
        if self.nan_reward_after is not None and self.total_steps > self.nan_reward_after:
            reward = float("nan")
        return np.array([self.episode, self.t], np.float32), reward, terminated, truncated, {}


def register() -> None:
    if "rlfunc_test/Counting-v0" not in gym.registry:
        gym.register("rlfunc_test/Counting-v0", entry_point=CountingEnv)
