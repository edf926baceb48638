"""Training state shared by the recurrent Q-learners (:mod:`~rlfunc.algos.drqn`, :mod:`~rlfunc.algos.r2d2`)."""

from __future__ import annotations

import dataclasses

import torch
from tensordict import TensorDict

from rlfunc.core.optim import Adam, LRSchedule, Schedule, check_exact_span, linear_schedule, scheduled_lr


@dataclasses.dataclass(frozen=True)
class DecayToRate(Schedule):
    """``lr_decay_updates``/``lr_end``'s decay: linear from the rate to the absolute rate
    ``end_value`` over ``decay_steps`` updates, then ``end_value``.

    Called, it is ``Schedule("linear", lr, lr_end, N)`` (the same expression, bit for bit).
    Restarted from another rate (:meth:`scaled`: a population member whose ``lr`` is held in
    ``state["hparams"]``) its end stays ``lr_end``, as that member's single run decays -- not
    ``lr_end * base / lr``, which the relative rescaling of :meth:`Schedule.scaled` would give.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.kind != "linear" or self.warmup_steps:
            raise ValueError("DecayToRate is a linear decay without warm-up (lr_decay_updates/lr_end).")

    def scaled(self, step: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Linear from ``base`` (a tensor) to ``end_value`` over ``decay_steps``: the decay of a
        config whose ``lr`` is ``base`` and whose ``lr_end`` is this one's."""
        return linear_schedule(base, self.end_value, self.decay_steps)(step)


def q_lr(config) -> float | Schedule:
    """The rate of the one optimizer: ``config.lr`` (a float: the papers' constant rate) unless
    a schedule is set.

    ``config.lr_schedule`` (:class:`~rlfunc.core.optim.LRSchedule`, counted in
    updates: one Adam step each) is the schedule option, beyond the DRQN and
    R2D2 papers (both use a constant rate). ``lr_decay_updates: N`` with
    ``lr_end`` is its older spelling, kept so configs and commands written
    before it still run: linear from ``lr`` to ``lr_end`` over ``N`` updates,
    then ``lr_end`` -- :class:`DecayToRate` ``("linear", lr, lr_end, N)``, which evaluates
    exactly the expression the old decay did (:func:`rlfunc.core.optim.linear_schedule`),
    so runs made with it reproduce bit for bit. Its end rate is absolute: a population
    member whose ``lr`` is data decays from its rate to the same ``lr_end``, as its single run.
    """
    if config.lr_decay_updates:
        return DecayToRate("linear", config.lr, config.lr_end, config.lr_decay_updates)
    return scheduled_lr(config.lr, config.lr_schedule)


def q_optimizer(config) -> Adam:
    """Adam at :func:`q_lr` with ``config.adam_eps`` and ``config.max_grad_norm`` (global-norm clip or None)."""
    return Adam(lr=q_lr(config), eps=config.adam_eps, max_grad_norm=config.max_grad_norm)


def q_learning_rate(config, step: torch.Tensor) -> float | torch.Tensor:
    """The learning rate of update number ``step`` (0-based, a tensor): :func:`q_lr` at ``step``.

    A float for a constant rate, else a 0-dim tensor; a pure function of the
    step, so a compiled update does not recompile. (:func:`update` takes it
    from the optimizer's own step counter, ``state["opt", "step"]``, which
    counts the same updates.)
    """
    lr = q_lr(config)
    return lr(step) if callable(lr) else lr


def lr_metric(lr: float | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``lr`` as a 0-dim metric on ``like``'s device, made on the device (``new_full``), never
    copied from the host, so a CUDA-graph capture of the update stays legal."""
    if isinstance(lr, torch.Tensor):
        return lr.detach().to(like.dtype)
    return like.new_full((), float(lr))


def check_lr_decay(config) -> None:
    """One-sentence errors for ``lr_schedule`` and its old spelling ``lr_decay_updates`` / ``lr_end``
    (called by the configs' ``__post_init__``; turns a ``lr_schedule`` mapping into an
    :class:`~rlfunc.core.optim.LRSchedule`)."""
    object.__setattr__(config, "lr_schedule", LRSchedule.parse(config.lr_schedule, "lr_schedule"))
    decay = config.lr_decay_updates
    if decay is not None and (not isinstance(decay, int) or isinstance(decay, bool) or decay < 0):
        raise ValueError(f"lr_decay_updates must be a number of updates >= 0 (or null: constant lr), got {config.lr_decay_updates}.")
    if decay:
        check_exact_span(decay, "lr_decay_updates", "lr_decay_updates")
    if not isinstance(config.lr_end, (int, float)) or isinstance(config.lr_end, bool) or not 0.0 <= config.lr_end <= config.lr:
        raise ValueError(f"lr_end must be between 0 and lr ({config.lr}), got {config.lr_end}.")
    schedule = config.lr_schedule
    if config.lr_decay_updates and schedule is not None:
        same = (
            schedule.kind == "linear"
            and not schedule.warmup_updates
            and schedule.decay_updates == config.lr_decay_updates
            and config.lr * (schedule.end_factor or 0.0) == config.lr_end
        )
        if not same:
            raise ValueError(
                "lr_schedule and lr_decay_updates (its old spelling, with lr_end) are both set and differ; set one "
                "of them: lr_schedule null keeps the lr_decay_updates/lr_end decay, lr_decay_updates null keeps lr_schedule."
            )


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
