"""Policy distributions that sample from *given* noise (pure, reproducible)."""

from __future__ import annotations

import math

import torch

__all__ = ["tanh_gaussian", "tanh_gaussian_mode", "clipped_normal_sample"]

_LOG_2PI = math.log(2.0 * math.pi)
_LOG_2 = math.log(2.0)


def tanh_gaussian(
    mean: torch.Tensor,
    log_std: torch.Tensor,
    noise: torch.Tensor,
    *,
    log_std_min: float = -20.0,
    log_std_max: float = 2.0,
    epsilon: float | None = 1e-6,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Reparameterised tanh-Gaussian sample and its log-probability.

    ``u = mean + exp(clamp(log_std)) * noise``, ``a = tanh(u)``,
    ``log pi(a) = sum_i [log N(u_i; mean_i, std_i) - log(1 - a_i^2 + epsilon)]``.
    This is the official REDQ ``TanhGaussianPolicy`` (log-std clamped to
    [-20, 2], ``ACTION_BOUND_EPSILON = 1e-6``). ``epsilon=None`` uses the exact
    log-determinant ``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))``
    instead (TensorFlow Probability's ``Tanh`` bijector, used by the official
    RLPD code), which stays finite and exact for saturated actions. Shapes:
    ``mean``, ``log_std``, ``noise`` ``[..., A]``; returns ``action [..., A]``
    and ``log_prob [...]``.
    """
    if mean.shape != log_std.shape or mean.shape != noise.shape:
        raise ValueError(
            f"mean, log_std and noise must share a shape, got {tuple(mean.shape)}, "
            f"{tuple(log_std.shape)}, {tuple(noise.shape)}."
        )
    log_std = torch.clamp(log_std, log_std_min, log_std_max)
    std = torch.exp(log_std)
    pre_tanh = mean + std * noise
    action = torch.tanh(pre_tanh)
    normal_log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * _LOG_2PI
    if epsilon is None:
        log_det = 2.0 * (_LOG_2 - pre_tanh - torch.nn.functional.softplus(-2.0 * pre_tanh))
    else:
        log_det = torch.log(1.0 - action.pow(2) + epsilon)
    log_prob = (normal_log_prob - log_det).sum(-1)
    return action, log_prob


def tanh_gaussian_mode(mean: torch.Tensor) -> torch.Tensor:
    """Deterministic (evaluation) action of a tanh-Gaussian policy: ``tanh(mean)``."""
    return torch.tanh(mean)


def clipped_normal_sample(
    mean: torch.Tensor,
    std: torch.Tensor | float,
    noise: torch.Tensor,
    *,
    clip: float | None = None,
    low: float = -1.0,
    high: float = 1.0,
    eps: float = 1e-6,
) -> torch.Tensor:
    """DrQ-v2's ``TruncatedNormal.sample``: ``mean + clip(std * noise)`` clamped to
    ``[low + eps, high - eps]`` with a straight-through gradient to ``mean``.

    facebookresearch/drqv2 ``utils.TruncatedNormal``: the clamp is applied as
    ``x - x.detach() + clamped.detach()`` so the gradient flows as if unclamped.
    ``clip=None`` leaves the noise unclipped (acting); 0.3 for the target action.
    """
    eps_noise = noise * std
    if clip is not None:
        eps_noise = torch.clamp(eps_noise, -clip, clip)
    x = mean + eps_noise
    clamped = torch.clamp(x, low + eps, high - eps)
    return x - x.detach() + clamped.detach()
