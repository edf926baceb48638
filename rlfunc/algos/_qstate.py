"""Training state shared by the recurrent Q-learners (:mod:`~rlfunc.algos.drqn`, :mod:`~rlfunc.algos.r2d2`)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam


def q_optimizer(config) -> Adam:
    """Adam from ``config.lr``, ``config.adam_eps`` and ``config.max_grad_norm`` (global-norm clip or None)."""
    return Adam(lr=config.lr, eps=config.adam_eps, max_grad_norm=config.max_grad_norm)


def q_learning_state(config, params: TensorDict, device: torch.device | str = "cpu") -> TensorDict:
    """``{"params", "target" (a copy), "opt" (Adam state), "step": 0}`` on ``device``, ``config`` as a non-tensor entry."""
    state = TensorDict(
        {
            "params": params,
            "target": params.clone(),
            "opt": q_optimizer(config).init(params),
            "step": torch.zeros((), dtype=torch.int64),
        },
        batch_size=[],
    ).to(device)
    state.set_non_tensor("config", config)
    return state
