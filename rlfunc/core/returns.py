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
:func:`sequence_td_loss`). R2D2 (Kapturowski et al. 2019) adds n-step returns
and the value rescaling ``h`` / ``h^-1`` beside them
(:func:`n_step_bootstrapped_returns`, :func:`signed_hyperbolic`,
:func:`signed_parabolic`, :func:`transformed_n_step_q_learning`,
:func:`sequence_priorities`). A TD error is always ``target - q_tm1[a_tm1]``
with the target computed without gradient, and the loss is always a masked
reduction of a per-step error.

References: rlax ``_src/value_learning.py`` (``q_learning``,
``double_q_learning``, ``transformed_n_step_q_learning``), ``_src/multistep.py``
(``n_step_bootstrapped_returns``), ``_src/transforms.py``, ``_src/clipping.py``
(``huber_loss``).
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

    The one-step bootstrap target of DQN/DRQN; R2D2's n-step targets with value
    rescaling are :func:`transformed_n_step_targets` (same ``[T, B]`` shapes).
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


# --------------------------------------------------------------------------
# R2D2 (Kapturowski et al., ICLR 2019): n-step returns over a sequence, the
# signed-hyperbolic value rescaling h and its inverse, the transformed n-step
# double-Q target, and sequence priorities. References: rlax
# ``_src/multistep.py`` (``n_step_bootstrapped_returns``), ``_src/transforms.py``
# (``signed_hyperbolic``, ``signed_parabolic``), ``_src/value_learning.py``
# (``transformed_n_step_q_learning``); Acme ``agents/jax/r2d2/learning.py``.
# --------------------------------------------------------------------------

__all__ += [
    "signed_hyperbolic",
    "signed_parabolic",
    "h",
    "h_inv",
    "n_step_bootstrapped_returns",
    "transformed_n_step_targets",
    "transformed_n_step_q_learning",
    "sequence_priorities",
]


def signed_hyperbolic(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Value rescaling ``h(x) = sign(x) (sqrt(|x| + 1) - 1) + eps x`` (Pohlen et al. 2018).

    R2D2 uses ``eps = 1e-3``. Written as ``x / (sqrt(|x| + 1) + 1) + eps x``,
    which is the same function without the cancellation of ``sqrt(|x|+1) - 1``
    near 0. rlax ``signed_hyperbolic``.
    """
    return x / (torch.sqrt(x.abs() + 1.0) + 1.0) + eps * x


def signed_parabolic(x: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """Exact inverse of :func:`signed_hyperbolic`: ``h^-1``.

    ``h^-1(y) = sign(y) (z^2 - 1)`` with ``z = (sqrt(1 + 4 eps (|y| + 1 + eps)) - 1) / (2 eps)``
    (rlax ``signed_parabolic``; the limit ``eps -> 0`` is ``sign(y) ((|y|+1)^2 - 1)``).
    Evaluated in a rearranged but algebraically equal form, ``h^-1(y) = y k (|y| k + 2)``
    with ``s = sqrt(1 + 4 eps (|y| + 1 + eps))`` and
    ``k = 2 (1 - 2 eps / (1 + 2 eps + s)) / (s + 1)``, which has no
    subtraction of nearly equal numbers: in float32 ``h(h^-1(y))`` returns
    ``y`` to a few ulps, where the textbook form loses about three digits
    (relative error ~2e-4) to ``sqrt(1 + 4 eps ...) - 1``.
    """
    abs_x = x.abs()
    s = torch.sqrt(1.0 + 4.0 * eps * (abs_x + 1.0 + eps))
    k = 2.0 * (1.0 - 2.0 * eps / (1.0 + 2.0 * eps + s)) / (s + 1.0)
    return x * k * (abs_x * k + 2.0)


h = signed_hyperbolic
h_inv = signed_parabolic


def _check_time_major(where: str, **tensors: torch.Tensor) -> None:
    for name, t in tensors.items():
        if t.dim() < 1:
            raise ValueError(f"{where}: {name} must be time-major [T, ...], got a 0-dim tensor.")
    _check_same_shape(where, **tensors)


def n_step_bootstrapped_returns(
    r_t: torch.Tensor,
    discount_t: torch.Tensor,
    v_t: torch.Tensor,
    n: int,
    mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """Strided n-step bootstrapped returns over a time-major sequence ``[T, ...]``.

    ``G_t = r_t + d_t r_{t+1} + ... + d_t...d_{t+n-2} r_{t+n-1} + d_t...d_{t+n-1} v_{t+n-1}``

    where ``r_t``, ``discount_t = d_t`` belong to the transition taken at step
    ``t`` and ``v_t`` is the bootstrap value *after* it (the value of the next
    observation). Near the end of the sequence the sum is cut short and
    bootstraps from the last value ``v_{T-1}`` (rlax ``n_step_bootstrapped_returns``
    with ``lambda_t = 1``: rewards padded with 0, discounts with 1, values with
    ``v_{T-1}``).

    Episode ends: termination is ``discount_t = 0``, which stops the sum and
    the bootstrap there; a time-limit truncation keeps ``discount_t = gamma``
    and bootstraps from the value of the true final observation. ``mask [T, ...]``
    (optional, bool) marks valid steps; it must be a prefix in time (valid
    steps, then padding), as the sequence replay writes it. Padded steps act
    like the end of the sequence: reward 0, discount 1 and the value of the
    last valid step, so a valid step's return never reads padding -- after a
    truncated last step it bootstraps from that step's ``v``. Values on
    padded steps are meaningless (mask them out of the loss).

    Costs ``min(n, T)`` vectorised passes (``n`` is static), no loop over ``T``: with
    ``n >= T`` every return is cut short at the sequence's end, so ``n = T`` gives the
    same numbers.
    """
    _check_time_major("n_step_bootstrapped_returns", r_t=r_t, discount_t=discount_t, v_t=v_t)
    if int(n) != n or n < 1:
        raise ValueError(f"n_step_bootstrapped_returns: n must be a positive integer, got {n}.")
    steps = r_t.shape[0]
    n = min(int(n), max(steps, 1))  # beyond T only zero rewards and unit discounts would be added
    if mask is not None:
        _check_same_shape("n_step_bootstrapped_returns", r_t=r_t, mask=mask)
        m = mask.bool()
        time = torch.arange(steps, device=r_t.device).view(steps, *([1] * (r_t.dim() - 1))).expand(m.shape)
        last_valid = torch.where(m, time, torch.full_like(time, -1)).cummax(dim=0).values.clamp(min=0)
        v_t = torch.gather(v_t, 0, last_valid)
        r_t = torch.where(m, r_t, torch.zeros((), dtype=r_t.dtype, device=r_t.device))
        discount_t = torch.where(m, discount_t, torch.ones((), dtype=discount_t.dtype, device=discount_t.device))
    pad = n - 1
    if pad == 0:
        return r_t + discount_t * v_t
    tail = (pad, *r_t.shape[1:])
    r_pad = torch.cat([r_t, r_t.new_zeros(tail)], dim=0)
    d_pad = torch.cat([discount_t, discount_t.new_ones(tail)], dim=0)
    last = v_t[-1:].expand(min(pad, steps), *v_t.shape[1:])
    targets = torch.cat([v_t[pad:], last], dim=0)  # v_{min(t+n-1, T-1)}
    for i in reversed(range(n)):
        targets = r_pad[i : i + steps] + d_pad[i : i + steps] * targets
    return targets


def transformed_n_step_targets(
    r_t: torch.Tensor,
    discount_t: torch.Tensor,
    q_t_value: torch.Tensor,
    q_t_selector: torch.Tensor,
    n: int,
    *,
    mask: torch.Tensor | None = None,
    rescale_eps: float | None = 1e-3,
) -> torch.Tensor:
    """R2D2's target: ``h(n-step return of r with bootstrap h^-1(q_t_value[argmax q_t_selector]))``.

    Double Q (van Hasselt et al. 2016): the online network's ``q_t_selector``
    picks the bootstrap action, the target network's ``q_t_value`` values it.
    With value rescaling (``rescale_eps`` a float, R2D2's ``1e-3``) the
    bootstrap is mapped back with ``h^-1``, the return summed in the raw reward
    scale, and the result squashed again with ``h`` (Pohlen et al. 2018); with
    ``rescale_eps=None`` it is the plain n-step double-Q target. Shapes:
    ``r_t, discount_t, mask [T, B]``, ``q_t_* [T, B, A]``, where ``q_t_*[t]``
    are the Q-values after the transition at ``t``. No gradient.
    """
    _check_time_major("transformed_n_step_targets", r_t=r_t, discount_t=discount_t)
    lead = tuple(r_t.shape)
    _check_q("transformed_n_step_targets", "q_t_value", q_t_value, lead)
    _check_q("transformed_n_step_targets", "q_t_selector", q_t_selector, lead)
    v_t = double_q_values(q_t_value, q_t_selector)
    if rescale_eps is None:
        return n_step_bootstrapped_returns(r_t, discount_t, v_t, n, mask).detach()
    g = n_step_bootstrapped_returns(r_t, discount_t, signed_parabolic(v_t, rescale_eps), n, mask)
    return signed_hyperbolic(g, rescale_eps).detach()


def transformed_n_step_q_learning(
    q_tm1: torch.Tensor,
    a_tm1: torch.Tensor,
    q_t_value: torch.Tensor,
    q_t_selector: torch.Tensor,
    r_t: torch.Tensor,
    discount_t: torch.Tensor,
    n: int,
    *,
    mask: torch.Tensor | None = None,
    rescale_eps: float | None = 1e-3,
) -> torch.Tensor:
    """TD error ``transformed_n_step_targets(...) - q_tm1[a_tm1]`` over a sequence ``[T, B]``.

    rlax ``transformed_n_step_q_learning`` with ``SIGNED_HYPERBOLIC_PAIR``
    (what Acme's R2D2 learner vmaps over the batch), with double-Q action
    selection from ``q_t_selector`` and a padding ``mask``. Gradients flow
    into ``q_tm1`` only. TD errors on padded steps are meaningless; mask them.
    """
    _check_time_major("transformed_n_step_q_learning", r_t=r_t, discount_t=discount_t, a_tm1=a_tm1)
    _check_q("transformed_n_step_q_learning", "q_tm1", q_tm1, tuple(r_t.shape))
    target = transformed_n_step_targets(
        r_t, discount_t, q_t_value, q_t_selector, n, mask=mask, rescale_eps=rescale_eps
    )
    return target - select_action_values(q_tm1, a_tm1)


def sequence_priorities(
    td_error: torch.Tensor, mask: torch.Tensor | None = None, *, eta: float = 0.9
) -> torch.Tensor:
    """R2D2 sequence priority ``eta * max_t |td_t| + (1 - eta) * mean_t |td_t|`` -> ``[...]``.

    Reduces over time (dim 0) of ``td_error [T, ...]``, over valid steps only
    when ``mask`` is given (padding, and burn-in steps, which carry no TD
    error). A sequence with no valid step gets priority 0. ``eta = 0.9`` in
    the paper and Acme (``max_priority_weight``). No gradient.
    """
    if td_error.dim() < 1:
        raise ValueError(f"sequence_priorities: td_error must be time-major [T, ...], got shape {tuple(td_error.shape)}.")
    abs_td = td_error.detach().abs()
    zero = torch.zeros((), dtype=abs_td.dtype, device=abs_td.device)
    if mask is None:
        return eta * abs_td.amax(dim=0) + (1.0 - eta) * abs_td.mean(dim=0)
    _check_same_shape("sequence_priorities", td_error=td_error, mask=mask)
    m = mask.bool()
    abs_td = torch.where(m, abs_td, zero)
    count = m.sum(dim=0).clamp(min=1).to(abs_td.dtype)
    return eta * abs_td.amax(dim=0) + (1.0 - eta) * abs_td.sum(dim=0) / count
