"""A trained agent's deterministic policy, usable without the training state."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from tensordict import TensorDict

__all__ = ["Policy"]


class Policy:
    """``policy.act(obs)`` -> action in the env's own action space.

    Made by :func:`rlfunc.load` from a checkpoint or by a learner. Accepts one
    observation (``[O]``) or a batch (``[n, O]``). Recurrent policies carry
    their state between calls; call :meth:`reset` at every episode start.
    """

    def __init__(
        self,
        algo_name: str,
        params: TensorDict,
        config: Any,
        action_low: np.ndarray | None,
        action_high: np.ndarray | None,
        obs_shape: tuple[int, ...],
        device: str = "cpu",
    ) -> None:
        from rlfunc.runtime.registry import get_algo

        self.algo_name = algo_name
        self.entry = get_algo(algo_name)
        self.params = params.to(device)
        self.config = config
        self.device = torch.device(device)
        self.action_low = None if action_low is None else np.asarray(action_low, dtype=np.float32)
        self.action_high = None if action_high is None else np.asarray(action_high, dtype=np.float32)
        self.obs_shape = tuple(obs_shape)
        self._carry = None

    def reset(self, num_envs: int = 1) -> None:
        """Forget recurrent state (no-op for feed-forward policies)."""
        init_carry = getattr(self.entry.algo, "initial_carry", None)
        self._carry = None if init_carry is None else init_carry(self.config, num_envs, device=self.device)

    def observe_reward(self, reward) -> None:
        """Give a recurrent policy the reward its last action earned (one per env).

        Agents whose network takes the previous reward as an input (R2D2's
        ``reward_input``; algorithm modules with ``prepare_carry``) write it into
        their carry, so evaluation feeds the network what training fed it.
        :func:`rlfunc.runtime.evaluate.run_episodes` calls this after every
        step; a caller that never does leaves the previous reward at 0. A no-op
        for every other policy.
        """
        prepare = getattr(self.entry.algo, "prepare_carry", None)
        if prepare is None or self._carry is None:
            return
        r = torch.as_tensor(np.asarray(reward, dtype=np.float32), device=self.device).reshape(-1)
        self._carry = prepare(self._carry, prev_reward=r)

    def act_normalized(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic action in the training env's (rescaled) action space."""
        obs = np.asarray(obs)
        single = obs.ndim == len(self.obs_shape)
        batch = obs[None] if single else obs
        obs_t = torch.as_tensor(batch, dtype=torch.float32, device=self.device)
        algo = self.entry.algo
        if hasattr(algo, "greedy_action"):
            if self._carry is None:
                self.reset(batch.shape[0])
            action, self._carry = algo.greedy_action(self.params, obs_t, self._carry, config=self.config)
        else:
            action = algo.act(self.params, obs_t, deterministic=True, config=self.config)
        out = action.cpu().numpy()
        return out[0] if single else out

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Deterministic action in the env's native action space (bounds restored)."""
        a = self.act_normalized(obs)
        if self.action_low is not None and np.issubdtype(a.dtype, np.floating):
            a = self.action_low + (a + 1.0) * 0.5 * (self.action_high - self.action_low)
        return a
