"""Value targets and masked TD losses over time-major sequences, rlax style.

Every function is pure, batched over arbitrary leading dimensions (time-major
``[T, B]`` for sequences) and checks shapes first, with one clear message.
Names follow rlax: ``q_tm1`` are Q-values at the time the action ``a_tm1`` was
taken, ``r_t`` and ``discount_t`` the reward and discount received on the
transition, ``q_t`` the Q-values at the next time step. ``discount_t`` already
folds termination in: ``discount_t = gamma * (1 - terminated_t)`` -- time-limit
truncation keeps ``discount_t = gamma`` (bootstrap), termination sets it to 0.

DRQN (Hausknecht & Stone 2015) uses one-step Q-learning targets on every valid
step of a window, with a validity ``mask`` for the padded tail
(:func:`q_learning`, :func:`double_q_learning`, :func:`masked_mean`,
:func:`sequence_td_loss`). The module is laid out so R2D2 (Kapturowski et al.
2019) can add n-step returns and the value rescaling ``h`` / ``h^-1`` next to
:func:`one_step_targets`: a TD error is always ``target - q_tm1[a_tm1]`` with
the target computed without gradient, and the loss is always a masked
reduction of a per-step error.

References: rlax ``_src/value_learning.py`` (``q_learning``,
``double_q_learning``), ``_src/clipping.py`` (``huber_loss``).
"""

from __future__ import annotations

import torch

__all__ = [
    "select_action_values",
    "greedy_values",
    "double_q_values",
    "one_step_targets",
    "q_learning",
    "double_q_learning",
    "huber",
    "masked_mean",
    "sequence_td_loss",
]


def _check_same_shape(where: str, **tensors: torch.Tensor) -> None:
    items = list(tensors.items())
    name0, t0 = items[0]
    for name, t in items[1:]:
        if tuple(t.shape) != tuple(t0.shape):
            raise ValueError(
                f"{where}: {name} must have the shape of {name0} {tuple(t0.shape)}, got {tuple(t.shape)}."
            )


def _check_q(where: str, name: str, q: torch.Tensor, lead: tuple) -> None:
    if q.dim() < 1 or tuple(q.shape[:-1]) != tuple(lead):
        raise ValueError(
            f"{where}: {name} must have shape [*{list(lead)}, num_actions], got {tuple(q.shape)}."
        )


def select_action_values(q: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
    """``q[..., a]``: the value of action ``a [...]`` (integer) in ``q [..., A]``."""
    _check_q("select_action_values", "q", q, tuple(a.shape))
    return torch.gather(q, -1, a.long().unsqueeze(-1)).squeeze(-1)


def greedy_values(q_t: torch.Tensor) -> torch.Tensor:
    """``max_a q_t[..., a]`` -- the Q-learning bootstrap value (Watkins 1989; DQN)."""
    return q_t.max(dim=-1).values


def double_q_values(q_t_value: torch.Tensor, q_t_selector: torch.Tensor) -> torch.Tensor:
    """``q_t_value[..., argmax_a q_t_selector[..., a]]`` (van Hasselt et al. 2016).

    The online network selects, the target network evaluates. Ties resolve to
    the first maximal action (``torch.argmax``; rlax's ``jnp.argmax`` does the same).
    """
    _check_same_shape("double_q_values", q_t_value=q_t_value, q_t_selector=q_t_selector)
    a_star = torch.argmax(q_t_selector, dim=-1)
    return torch.gather(q_t_value, -1, a_star.unsqueeze(-1)).squeeze(-1)


def one_step_targets(r_t: torch.Tensor, discount_t: torch.Tensor, v_t: torch.Tensor) -> torch.Tensor:
    """``r_t + discount_t * v_t``, element-wise; the result carries no gradient.

    The one-step bootstrap target of DQN/DRQN. R2D2's n-step targets and value
    rescaling belong beside this function (same ``[T, B]`` shapes).
    """
    _check_same_shape("one_step_targets", r_t=r_t, discount_t=discount_t, v_t=v_t)
    return (r_t + discount_t * v_t).detach()


def q_learning(
    q_tm1: torch.Tensor,
    a_tm1: torch.Tensor,
    r_t: torch.Tensor,
    discount_t: torch.Tensor,
    q_t: torch.Tensor,
) -> torch.Tensor:
    """Q-learning TD error ``r_t + discount_t * max_a q_t[a] - q_tm1[a_tm1]``.

    Shapes: ``q_tm1, q_t [..., A]``; ``a_tm1, r_t, discount_t [...]`` (for a
    DRQN window ``[...] = [T, B]``). Gradients flow into ``q_tm1`` only; the
    target is detached (rlax ``q_learning`` with ``stop_target_gradients``).
    """
    _check_same_shape("q_learning", r_t=r_t, discount_t=discount_t, a_tm1=a_tm1)
    lead = tuple(r_t.shape)
    _check_q("q_learning", "q_tm1", q_tm1, lead)
    _check_q("q_learning", "q_t", q_t, lead)
    target = one_step_targets(r_t, discount_t, greedy_values(q_t))
    return target - select_action_values(q_tm1, a_tm1)


def double_q_learning(
    q_tm1: torch.Tensor,
    a_tm1: torch.Tensor,
    r_t: torch.Tensor,
    discount_t: torch.Tensor,
    q_t_value: torch.Tensor,
    q_t_selector: torch.Tensor,
) -> torch.Tensor:
    """Double Q-learning TD error (van Hasselt et al. 2016).

    ``r_t + discount_t * q_t_value[argmax q_t_selector] - q_tm1[a_tm1]``, with
    ``q_t_value`` from the target network and ``q_t_selector`` from the online
    network. Shapes as :func:`q_learning`; the target is detached.
    """
    _check_same_shape("double_q_learning", r_t=r_t, discount_t=discount_t, a_tm1=a_tm1)
    lead = tuple(r_t.shape)
    _check_q("double_q_learning", "q_tm1", q_tm1, lead)
    _check_q("double_q_learning", "q_t_value", q_t_value, lead)
    _check_q("double_q_learning", "q_t_selector", q_t_selector, lead)
    target = one_step_targets(r_t, discount_t, double_q_values(q_t_value, q_t_selector))
    return target - select_action_values(q_tm1, a_tm1)


def huber(x: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Huber loss of an error ``x``: ``0.5 x^2`` for ``|x| <= delta``, else linear.

    With ``delta = 1`` its gradient is the TD error clipped to ``[-1, 1]``,
    DQN's "error clipping" (Mnih et al. 2015); rlax ``huber_loss``.
    """
    abs_x = x.abs()
    quadratic = torch.clamp(abs_x, max=delta)
    linear = abs_x - quadratic
    return 0.5 * quadratic.pow(2) + delta * linear


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the entries where ``mask`` is True (0 if none).

    Masked-out entries contribute neither value nor gradient: they are
    selected away with ``torch.where`` rather than multiplied by zero, so a
    NaN or inf there cannot leak into the result. The count is
    clamped to 1, so an all-padded batch gives 0 rather than NaN, with no
    host sync.
    """
    _check_same_shape("masked_mean", x=x, mask=mask)
    m = mask.bool()
    total = torch.where(m, x, torch.zeros((), dtype=x.dtype, device=x.device)).sum()
    count = m.sum().clamp(min=1).to(x.dtype)
    return total / count


def sequence_td_loss(
    td_error: torch.Tensor, mask: torch.Tensor, *, huber_delta: float | None = 1.0
) -> torch.Tensor:
    """Masked loss of a time-major TD error ``[T, B]``: mean over valid steps.

    ``mask [T, B]`` is True on real steps and False on the padding after an
    episode's end. ``huber_delta=None`` gives ``0.5 * td^2`` (plain squared
    error); a float gives :func:`huber` with that threshold. Every valid step
    of every window weighs the same (DRQN's "loss on every step of the
    window"), so a batch's loss does not depend on how its padding is laid out.
    """
    if td_error.dim() < 1:
        raise ValueError(f"sequence_td_loss: td_error must have at least one dim, got shape {tuple(td_error.shape)}.")
    _check_same_shape("sequence_td_loss", td_error=td_error, mask=mask)
    safe = torch.where(mask.bool(), td_error, torch.zeros((), dtype=td_error.dtype, device=td_error.device))
    per_step = 0.5 * safe.pow(2) if huber_delta is None else huber(safe, huber_delta)
    return masked_mean(per_step, mask)
