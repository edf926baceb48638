"""Target-network updates as pure functions of parameter TensorDicts."""

from __future__ import annotations

import torch
from tensordict import TensorDict

__all__ = ["polyak", "periodic_copy"]


def polyak(target: TensorDict, online: TensorDict, tau: float | torch.Tensor) -> TensorDict:
    """Soft update ``target <- (1 - tau) * target + tau * online`` (Lillicrap et al. 2016).

    REDQ and RLPD use ``tau = 0.005`` after every critic step, DrQ-v2 ``0.01``.
    One ``_foreach_lerp`` over all leaves; returns a new TensorDict. ``tau`` may
    be a 0-dim tensor (a setting held in the state). Under a ``torch.func``
    transform (``torch.vmap`` over a population) it is one ``torch.lerp`` per
    leaf instead, the same arithmetic: the foreach kernel has no batching rule.
    """
    keys = list(target.keys(include_nested=True, leaves_only=True))
    if torch._C._functorch.peek_interpreter_stack() is not None:
        new = [torch.lerp(target[k], online[k], tau) for k in keys]
    else:
        new = torch._foreach_lerp([target[k] for k in keys], [online[k] for k in keys], tau)
    out = target.empty(recurse=True)
    for k, v in zip(keys, new):
        out[k] = v
    return out


def periodic_copy(
    target: TensorDict, online: TensorDict, step: torch.Tensor, period: int
) -> TensorDict:
    """Hard update: ``online`` where ``step % period == 0`` else ``target``.

    Written with ``torch.where`` on a tensor step so it needs no host sync and
    compiles without a graph break (DQN / DRQN / R2D2 target copies).
    """
    copy = (step % period) == 0
    return target.apply(lambda t, o: torch.where(copy, o, t), online)
