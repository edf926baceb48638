"""Training state shared by the recurrent Q-learners (:mod:`~rlfunc.algos.drqn`, :mod:`~rlfunc.algos.r2d2`)."""

from __future__ import annotations

import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam, linear_schedule


def q_optimizer(config) -> Adam:
    """Adam from ``config.lr``, ``config.adam_eps`` and ``config.max_grad_norm`` (global-norm clip or None)."""
    return Adam(lr=config.lr, eps=config.adam_eps, max_grad_norm=config.max_grad_norm)


def q_learning_rate(config, step: torch.Tensor) -> float | torch.Tensor:
    """The learning rate of update number ``step`` (0-based, a tensor).

    ``config.lr`` unless ``config.lr_decay_updates`` is set: then linear from
    ``lr`` to ``lr_end`` over that many updates and ``lr_end`` after it -- an
    option beyond the DRQN and R2D2 papers (both use a constant rate), which
    damps the late oscillation of greedy returns on small tasks. A pure
    function of the step, so a compiled update does not recompile.
    """
    if not config.lr_decay_updates:
        return config.lr
    return linear_schedule(config.lr, config.lr_end, config.lr_decay_updates)(step)


def lr_metric(lr: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``lr`` as a 0-dim metric on ``like``'s device, made on the device (``new_full``), never
    copied from the host, so a CUDA-graph capture of the update stays legal."""
    if isinstance(lr, torch.Tensor):
        return lr.detach().to(like.dtype)
    return like.new_full((), float(lr))


def check_lr_decay(config) -> None:
    """One-sentence errors for ``lr_decay_updates`` / ``lr_end`` (called by the configs' ``__post_init__``)."""
    if config.lr_decay_updates is not None and config.lr_decay_updates < 0:
        raise ValueError(f"lr_decay_updates must be a number of updates >= 0 (or null: constant lr), got {config.lr_decay_updates}.")
    if not 0.0 <= config.lr_end <= config.lr:
        raise ValueError(f"lr_end must be between 0 and lr ({config.lr}), got {config.lr_end}.")


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
