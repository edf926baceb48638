"""Exploration rates shared by the Q-learners (:mod:`rlfunc.algos.drqn`, :mod:`rlfunc.algos.r2d2`)."""

from __future__ import annotations

import torch

__all__ = ["actor_epsilons"]


def actor_epsilons(num_actors: int, base: float = 0.4, alpha: float = 7.0) -> torch.Tensor:
    """Per-actor exploration ``eps_i = base^(1 + alpha i / (N - 1))``, ``i = 0..N-1`` (Ape-X, R2D2).

    ``[N]`` float32, from ``base`` (0.4) down to ``base^(1 + alpha)``
    (``0.4^8 = 6.6e-4``); one actor gets ``base``. Acme draws its actors'
    epsilons from the same grid (``np.logspace(1, 8, N, base=0.4)``).
    """
    if num_actors < 1:
        raise ValueError(f"num_actors must be at least 1, got {num_actors}.")
    if num_actors == 1:
        return torch.tensor([base], dtype=torch.float32)
    i = torch.arange(num_actors, dtype=torch.float64)
    return (base ** (1.0 + alpha * i / (num_actors - 1))).to(torch.float32)
