"""Functional optimizers over parameter TensorDicts, in the style of optax.

An optimizer is a frozen dataclass with two pure functions::

    opt_state = opt.init(params)
    params, opt_state = opt.step(grads, opt_state, params)

``opt_state`` is a TensorDict (``step``, ``exp_avg``, ``exp_avg_sq``) so it is
checkpointed, stacked and compiled like any other state. Nothing is mutated:
new TensorDicts are returned. The arithmetic is PyTorch's fused Adam kernel
(``torch._fused_adam_``, what ``torch.optim.Adam(fused=True)`` runs) applied to
fresh copies, so results agree with ``torch.optim.Adam`` to float rounding; the
tests check this against ``torch.optim.Adam`` and ``torch.optim.AdamW``.

The learning rate may be a Python float, a 0-dim tensor (``lr=`` override of
:meth:`Adam.step`) or a schedule: a pure function ``step -> lr`` of the
optimizer's own step counter (``opt_state["step"]``, a tensor in the state), as
optax's ``adam(learning_rate=schedule)``. A schedule is tensor arithmetic only
(``torch.clamp``/``torch.where``, no ``.item()``, no Python branch on a tensor
value), so it compiles with ``fullgraph=True``, never syncs with the host, and
the compiled update does not recompile as the step advances.

The rate may also come from the training state (settings as data): a 0-dim
tensor *base rate* (``learning_rate(opt_state, base)``, e.g. a population
member's ``state["hparams", "critic_lr"]``) replaces the configured float
rate, and a :class:`Schedule` then keeps its shape and is rescaled to start
from that rate (:meth:`Schedule.scaled`), so per-member rates and schedules are
one mechanism. This is optax's ``inject_hyperparams`` idea -- hyperparameters
as arrays that ``vmap`` can batch -- with the rate kept next to the other
settings in the state rather than in the optimizer state. Absent, nothing
changes: the float path runs.

Under ``torch.vmap`` (a population's stacked states) :meth:`Adam.step` still
runs the fused kernel, through :func:`fused_adam` -- a functional custom op whose
batching rule gives the kernel every member's slice of the stacked ``[P, ...]``
buffers (one call for all members; one per member where the rate is per member)
-- because the kernel itself has no batching rule (it mutates its inputs), and
the out-of-place arithmetic it would otherwise fall back to streams every
parameter through memory about ten times: on one CPU thread that was a quarter of a
REDQ population's update (``benchmarks/run.py population``). Under other
``torch.func`` transforms, and when compiling, the out-of-place arithmetic runs
(inductor fuses it).

Learning-rate schedules (:class:`Schedule`, built from the config-level
:class:`LRSchedule`): ``constant``, ``linear`` and ``cosine`` decay, each with
an optional linear warm-up, in the forms of optax's ``linear_schedule``,
``cosine_decay_schedule`` and ``warmup_cosine_decay_schedule`` (warm-up from
``warmup_start_factor * lr`` to ``lr``, then the decay from ``lr`` to
``end_factor * lr``). No schedule (the default everywhere) leaves the rate a
Python float, so an unscheduled update runs exactly the arithmetic it ran
before schedules existed.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import numbers
from typing import Any, Callable, Mapping

import torch
from tensordict import TensorDict

__all__ = [
    "Adam",
    "EXACT_STEPS",
    "LRSchedule",
    "SCHEDULE_KINDS",
    "Schedule",
    "check_exact_span",
    "clip_by_global_norm",
    "fused_adam",
    "global_norm",
    "last_lr",
    "linear_schedule",
    "scheduled_lr",
]

SCHEDULE_KINDS = ("constant", "linear", "cosine")
"""The learning-rate schedule kinds of :class:`LRSchedule` and :class:`Schedule`."""


def global_norm(grads: TensorDict) -> torch.Tensor:
    """L2 norm of all leaves of ``grads`` together (0-dim tensor)."""
    leaves = list(grads.values(include_nested=True, leaves_only=True))
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in leaves]))


def clip_by_global_norm(grads: TensorDict, max_norm: float) -> tuple[TensorDict, torch.Tensor]:
    """Scale ``grads`` so their global norm is at most ``max_norm``.

    Same rule as ``torch.nn.utils.clip_grad_norm_`` (coefficient
    ``max_norm / (norm + 1e-6)`` clamped to 1). Returns ``(grads, norm)``.
    """
    norm = global_norm(grads)
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    return grads.apply(lambda g: g * coef), norm


@dataclasses.dataclass(frozen=True)
class Adam:
    """Adam (Kingma & Ba 2015) / AdamW (Loshchilov & Hutter 2019), functional.

    ``weight_decay`` is L2 added to the gradient (``torch.optim.Adam``) unless
    ``decoupled=True`` (``torch.optim.AdamW``: ``p *= 1 - lr * wd``).
    ``max_grad_norm`` clips by global norm before the step.

    ``lr`` is a float or a schedule (a :class:`Schedule`, or any pure callable
    ``step -> lr`` on tensors): the rate of a step is then ``lr(opt_state["step"])``,
    where ``opt_state["step"]`` is the number of steps this optimizer has taken
    before it (0 for the first), i.e. the schedule counts this optimizer's
    gradient steps (:meth:`learning_rate`).
    """

    lr: float | Callable[[torch.Tensor], torch.Tensor] = 3e-4
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    decoupled: bool = False
    max_grad_norm: float | None = None

    def _traced_math(self, p_list, g_list, m_list, v_list, step, lr, fused_scalars: bool = False):
        """``torch.optim.Adam``'s single-tensor arithmetic, out of place.

        ``fused_scalars``: the bias corrections as the fused kernel computes them, in
        float64 then rounded to float32 (``lr / (1 - beta1^t)`` and ``sqrt(1 - beta2^t)``;
        in float32 ``1 - 0.999^t`` loses ~1e-5 of its value to cancellation at small
        ``t``). The element-wise arithmetic is the fused kernel's, in its order, so
        with it a vmapped step equals the eager fused step to a last-bit rounding at most.
        Off: the compiled path's float32 scalars, kept as they were."""
        beta1, beta2 = self.betas
        if self.weight_decay != 0.0:
            if self.decoupled:
                p_list = [p * (1.0 - lr * self.weight_decay) for p in p_list]
            else:
                g_list = [g + self.weight_decay * p for g, p in zip(g_list, p_list)]
        m_new = [torch.lerp(m, g, 1.0 - beta1) for m, g in zip(m_list, g_list)]
        v_new = [v * beta2 + (1.0 - beta2) * g * g for v, g in zip(v_list, g_list)]
        if fused_scalars and step.device.type != "mps":  # MPS has no float64
            t = step.to(torch.float64)
            step_size = (lr / (1.0 - beta1**t)).to(step.dtype)
            bias_correction2_sqrt = torch.sqrt(1.0 - beta2**t).to(step.dtype)
        else:
            step_size = lr / (1.0 - beta1**step)
            bias_correction2_sqrt = torch.sqrt(1.0 - beta2**step)
            if torch.compiler.is_compiling() and step.device.type == "cpu":
                # The same two scalars, stored once. Inductor inlines a cheap 0-dim expression into
                # every consumer, and its C++ backend then evaluates both scalar ``std::pow(beta, step)``
                # inside each parameter's vectorized loop (not hoisted: the loop's stores may alias
                # the step), ~2 pow per 16 floats: 0.15 ms of a 0.2 ms Adam step for DRQN's ~100k
                # parameters on one CPU thread. ``stack`` makes a buffer the loops load from; the
                # values, and so the step's results, are unchanged bit for bit
                # (tests/test_drqn_speed_s36.py). On a GPU the recomputation is free and the extra
                # kernel would not be, so GPU graphs stay as they were.
                step_size, bias_correction2_sqrt = torch.stack([step_size, bias_correction2_sqrt]).unbind()
        p_new = [
            p - step_size * m / (torch.sqrt(v) / bias_correction2_sqrt + self.eps)
            for p, m, v in zip(p_list, m_new, v_new)
        ]
        return p_new, m_new, v_new

    def learning_rate(
        self, opt_state: TensorDict, base: torch.Tensor | None = None
    ) -> float | torch.Tensor:
        """The rate of the next :meth:`step` from ``opt_state``: ``lr`` itself when it is a
        float, else the schedule at ``opt_state["step"]`` (this optimizer's steps so far;
        a float32 counter, exact up to 2**24 steps, as ``torch.optim``'s; :class:`LRSchedule` refuses
        schedules longer than that). Pure, no sync.

        ``base`` (a 0-dim tensor, e.g. ``state["hparams", "critic_lr"]``) is a rate
        held in the state that replaces the configured one: returned as is for a
        constant rate, or the :class:`Schedule` rescaled to start from it
        (:meth:`Schedule.scaled`). ``None`` (the default) is the float path above.
        """
        if base is not None:
            if isinstance(self.lr, Schedule):
                return self.lr.scaled(opt_state["step"], base)
            if callable(self.lr):
                raise ValueError(
                    "a base learning rate from the state needs Adam's lr to be a float or a Schedule, "
                    f"got the callable {self.lr!r}, whose scale is unknown."
                )
            return base
        if callable(self.lr):
            return self.lr(opt_state["step"])
        return self.lr

    def init(self, params: TensorDict) -> TensorDict:
        """Zero moments shaped like ``params`` and a step counter.

        The counter is float32, as ``torch.optim.Adam``'s: exact up to 2**24 steps, after which
        adding 1 no longer changes it. Adam's arithmetic does not notice (both bias corrections are
        exactly 1 from about 37,000 steps on) and schedules must end by then (:func:`check_exact_span`),
        but past 2**24 it is no longer a count of updates (REDQ's critic with 20 updates per env step
        reaches it at env step 838,861): count updates with the algorithm's int64 ``step``."""
        zeros = params.apply(torch.zeros_like)
        return TensorDict(
            {
                "step": torch.zeros((), dtype=torch.float32, device=params.device),
                "exp_avg": zeros,
                "exp_avg_sq": zeros.clone(),
            },
            batch_size=[],
            device=params.device,
        )

    def step(
        self,
        grads: TensorDict,
        opt_state: TensorDict,
        params: TensorDict,
        lr: float | torch.Tensor | None = None,
    ) -> tuple[TensorDict, TensorDict]:
        """One Adam step. Returns ``(new_params, new_opt_state)``.

        ``lr`` overrides the rate of this step; by default it is
        :meth:`learning_rate` of ``opt_state`` (the schedule at this optimizer's step).
        """
        lr = self.learning_rate(opt_state) if lr is None else lr
        beta1, beta2 = self.betas
        if self.max_grad_norm is not None:
            grads, _ = clip_by_global_norm(grads, self.max_grad_norm)
        step = opt_state["step"] + 1
        keys = list(params.keys(include_nested=True, leaves_only=True))
        compiling = torch.compiler.is_compiling()
        if not compiling and _under_vmap_only():
            # A population, eagerly: the fused kernel on every member's slice (fused_adam).
            flat = fused_adam(
                [params[k] for k in keys],
                [grads[k] for k in keys],
                [opt_state["exp_avg"][k] for k in keys],
                [opt_state["exp_avg_sq"][k] for k in keys],
                step,
                lr if isinstance(lr, torch.Tensor) else None,
                0.0 if isinstance(lr, torch.Tensor) else float(lr),
                beta1, beta2, self.eps, self.weight_decay, self.decoupled,
            )
            n = len(keys)
            new_params = params.empty(recurse=True)
            new_m = opt_state["exp_avg"].empty(recurse=True)
            new_v = opt_state["exp_avg_sq"].empty(recurse=True)
            for i, k in enumerate(keys):
                new_params[k], new_m[k], new_v[k] = flat[i], flat[n + i], flat[2 * n + i]
        elif compiling or _under_functorch():
            # Traced: plain out-of-place math, which inductor fuses into one
            # kernel per tensor (the fused aten kernel mutates in place and
            # does not functionalize). Under torch.func transforms (vmap over
            # a population) too, eagerly: the fused kernel has no batching rule;
            # there with the fused kernel's float64 bias corrections.
            p_new, m_new, v_new = self._traced_math(
                [params[k] for k in keys],
                [grads[k] for k in keys],
                [opt_state["exp_avg"][k] for k in keys],
                [opt_state["exp_avg_sq"][k] for k in keys],
                step,
                lr,
                fused_scalars=not compiling,
            )
            new_params = params.empty(recurse=True)
            new_m = opt_state["exp_avg"].empty(recurse=True)
            new_v = opt_state["exp_avg_sq"].empty(recurse=True)
            for k, p_, m_, v_ in zip(keys, p_new, m_new, v_new):
                new_params[k] = p_
                new_m[k] = m_
                new_v[k] = v_
        else:
            # Eager: fresh buffers (the function is pure), then PyTorch's fused
            # Adam kernel, one pass per tensor -- on CPU several times faster
            # than a chain of foreach ops that stream every tensor through
            # memory once per op. The kernel assumes dense row-major tensors
            # (it ignores strides), so every buffer it touches is made
            # contiguous here, once for all callers (e.g. the "bmm"/"vmap"
            # ensemble modes give transposed weight gradients).
            dense = lambda t: t.clone(memory_format=torch.contiguous_format)  # noqa: E731
            new_params = params.apply(dense)
            new_m = opt_state["exp_avg"].apply(dense)
            new_v = opt_state["exp_avg_sq"].apply(dense)
            p_list = [new_params[k] for k in keys]
            g_list = [grads[k].contiguous() for k in keys]
            m_list = [new_m[k] for k in keys]
            v_list = [new_v[k] for k in keys]
            _fused_adam_inplace(p_list, g_list, m_list, v_list, [step] * len(p_list), lr, beta1, beta2, self.eps,
                                self.weight_decay, self.decoupled)
        new_state = TensorDict(
            {"step": step, "exp_avg": new_m, "exp_avg_sq": new_v}, batch_size=[], device=opt_state.device
        )
        return new_params, new_state



def _fused_adam_inplace(p_list, g_list, m_list, v_list, steps, lr, beta1, beta2, eps, weight_decay, decoupled) -> None:
    """PyTorch's fused Adam kernel on dense buffers, in place (the eager single-run step)."""
    if weight_decay != 0.0 and decoupled:
        torch._foreach_mul_(p_list, 1.0 - lr * weight_decay)
    torch._fused_adam_(
        p_list,
        g_list,
        m_list,
        v_list,
        [],
        steps,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=0.0 if decoupled else weight_decay,
        eps=eps,
        amsgrad=False,
        maximize=False,
    )


@torch.library.custom_op("rlfunc::fused_adam", mutates_args=())
def fused_adam(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avg: list[torch.Tensor],
    exp_avg_sq: list[torch.Tensor],
    step: torch.Tensor,
    lr_tensor: torch.Tensor | None,
    lr: float,
    beta1: float,
    beta2: float,
    eps: float,
    weight_decay: float,
    decoupled: bool,
) -> list[torch.Tensor]:
    """One functional Adam step by PyTorch's fused kernel: new parameters, first and second
    moments, as one list ``params' + exp_avg' + exp_avg_sq'``; the inputs are not modified.
    ``step`` is the step count after this step; the rate is ``lr_tensor`` (a 0-dim tensor)
    when given, else ``lr``. Its batching rule (:func:`_fused_adam_vmap`) makes it usable
    under ``torch.vmap``, which the kernel itself is not."""
    dense = lambda t: t.clone(memory_format=torch.contiguous_format)  # noqa: E731
    p_list, m_list, v_list = [dense(t) for t in params], [dense(t) for t in exp_avg], [dense(t) for t in exp_avg_sq]
    _fused_adam_inplace(p_list, [g.contiguous() for g in grads], m_list, v_list, [step] * len(p_list),
                        lr if lr_tensor is None else lr_tensor, beta1, beta2, eps, weight_decay, decoupled)
    return p_list + m_list + v_list


@fused_adam.register_fake
def _(params, grads, exp_avg, exp_avg_sq, step, lr_tensor, lr, beta1, beta2, eps, weight_decay, decoupled):
    return [torch.empty_like(t, memory_format=torch.contiguous_format) for t in (*params, *exp_avg, *exp_avg_sq)]


def _fused_adam_vmap(info, in_dims, params, grads, exp_avg, exp_avg_sq, step, lr_tensor, lr, beta1, beta2, eps,
                     weight_decay, decoupled):
    """Batching rule of :func:`fused_adam`: every buffer laid out ``[P, ...]`` and dense, then the
    fused kernel updates each member's slice in place (a dense row-major view), with that member's
    step count -- one kernel call over all members' tensors, or one per member when the rate is
    per member (the kernel takes one rate per call). Same arithmetic as each member's own step."""
    P = info.batch_size

    def batched(t, d):
        t = t.expand(P, *t.shape) if d is None else t.movedim(d, 0)
        return t.clone(memory_format=torch.contiguous_format)

    p_list = [batched(t, d) for t, d in zip(params, in_dims[0])]
    g_list = [(t.expand(P, *t.shape) if d is None else t.movedim(d, 0)).contiguous() for t, d in zip(grads, in_dims[1])]
    m_list = [batched(t, d) for t, d in zip(exp_avg, in_dims[2])]
    v_list = [batched(t, d) for t, d in zip(exp_avg_sq, in_dims[3])]
    steps = step.expand(P) if in_dims[4] is None else step.movedim(in_dims[4], 0)
    member = lambda ts, k: [t[k] for t in ts]  # noqa: E731
    if lr_tensor is not None and in_dims[5] is not None:  # a rate per member: one call each
        rates = lr_tensor.movedim(in_dims[5], 0)
        for k in range(P):
            _fused_adam_inplace(member(p_list, k), member(g_list, k), member(m_list, k), member(v_list, k),
                                [steps[k]] * len(p_list), rates[k], beta1, beta2, eps, weight_decay, decoupled)
    else:
        rate = lr if lr_tensor is None else lr_tensor
        _fused_adam_inplace(
            [p[k] for k in range(P) for p in p_list], [g[k] for k in range(P) for g in g_list],
            [m[k] for k in range(P) for m in m_list], [v[k] for k in range(P) for v in v_list],
            [steps[k] for k in range(P) for _ in p_list], rate, beta1, beta2, eps, weight_decay, decoupled,
        )
    out = p_list + m_list + v_list
    return out, [0] * len(out)


fused_adam.register_vmap(_fused_adam_vmap)


def _under_vmap_only() -> bool:
    """True inside ``torch.vmap`` (any number of nested vmaps) and no other ``torch.func`` transform."""
    interpreter = torch._C._functorch.peek_interpreter_stack()
    if interpreter is None:
        return False
    vmap = torch._C._functorch.TransformType.Vmap
    return all(level.key() == vmap for level in torch._functorch.pyfunctorch.retrieve_all_functorch_interpreters())


def _under_functorch() -> bool:
    """True inside a ``torch.func`` transform (``vmap``, ``grad``, ...): the interpreter stack is not empty."""
    return torch._C._functorch.peek_interpreter_stack() is not None


def linear_schedule(start: float, end: float, duration: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """``f(step)``: linear from ``start`` to ``end`` over ``duration`` steps, then ``end``.

    A pure function of a (tensor) step, usable inside a compiled update
    (DrQ-v2's ``linear(1.0, 0.1, 100000)`` exploration schedule). ``duration`` 0
    acts as 1 (``start`` at step 0 and before, ``end`` after), not as optax's
    ``linear_schedule`` with ``transition_steps <= 0``, which stays at its start.
    """

    def schedule(step: torch.Tensor) -> torch.Tensor:
        frac = torch.clamp(torch.as_tensor(step, dtype=torch.float32) / max(duration, 1), 0.0, 1.0)
        return start + frac * (end - start)

    return schedule


@dataclasses.dataclass(frozen=True)
class Schedule:
    """A learning rate as a pure function of the step, in absolute values (optax-style).

    ``schedule(step) -> lr``: ``step`` is a tensor (any shape; the
    optimizer passes its own ``opt_state["step"]``, the number of gradient
    steps this optimizer took before the current one), the result a float32
    tensor of the same shape on the same device. With ``s = step``, ``W =
    warmup_steps``, ``D = decay_steps``, ``v = init_value``, ``e = end_value``,
    ``w0 = warmup_init_value`` and ``t = clip((s - W) / D, 0, 1)``:

    * warm-up (``s < W``): ``w0 + (s / W) (v - w0)``, linear from ``w0`` at
      step 0 towards ``v`` at step ``W`` (optax ``linear_schedule(w0, v, W)``);
    * ``constant``: ``v``;
    * ``linear``: ``v + t (e - v)`` (optax ``linear_schedule(v, e, D,
      transition_begin=W)``; without warm-up exactly :func:`linear_schedule`);
    * ``cosine``: ``e + (v - e) (1 + cos(pi t)) / 2`` (optax
      ``cosine_decay_schedule(v, D, alpha=e/v)``; with warm-up optax's
      ``warmup_cosine_decay_schedule(w0, v, W, W + D, e)``).

    Tensor arithmetic only (``clamp``, ``where``; the kind and counts are
    static), so it runs inside a ``fullgraph=True`` compiled update or a CUDA
    graph without a host sync. Frozen and hashable: an :class:`Adam` holding
    it is a static constant to ``torch.compile``.
    """

    kind: str
    init_value: float
    end_value: float = 0.0
    decay_steps: int = 0
    warmup_steps: int = 0
    warmup_init_value: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in SCHEDULE_KINDS:
            raise ValueError(f"Schedule kind must be one of {', '.join(map(repr, SCHEDULE_KINDS))}, got {self.kind!r}.")
        if self.kind != "constant" and (not _is_int(self.decay_steps) or self.decay_steps < 1):
            raise ValueError(f"Schedule decay_steps must be a positive integer for kind {self.kind!r}, got {self.decay_steps!r}.")
        if not _is_int(self.warmup_steps) or self.warmup_steps < 0:
            raise ValueError(f"Schedule warmup_steps must be an integer >= 0, got {self.warmup_steps!r}.")

    def __call__(self, step: torch.Tensor) -> torch.Tensor:
        """The rate at ``step`` (a tensor; the result is float32 of its shape)."""
        return self._at(step, self.init_value, self.end_value, self.warmup_init_value)

    def scaled(self, step: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """This schedule's shape started from the rate ``base`` (a tensor) instead of
        ``init_value``: ``base * self(step) / init_value``, i.e. the same formula with
        ``init_value = 1`` and the end and warm-up values divided by ``init_value``,
        times ``base``. An :meth:`LRSchedule.at` schedule is relative to its rate, so
        this is that :class:`LRSchedule` at ``base``: how a rate held in the state
        (a population member's ``hparams``) and a config's schedule combine."""
        if self.init_value == 0:
            raise ValueError("Schedule.scaled needs a nonzero init_value, the rate that base replaces.")
        v = self.init_value
        return base * self._at(step, 1.0, self.end_value / v, self.warmup_init_value / v)

    def _at(self, step: torch.Tensor, v: float, end_value: float, w0: float) -> torch.Tensor:
        s = torch.as_tensor(step, dtype=torch.float32)
        w = self.warmup_steps
        if self.kind == "constant":
            after: torch.Tensor | float = v if w else torch.full_like(s, v)
        else:
            t = s - w if w else s
            if self.kind == "linear":
                after = linear_schedule(v, end_value, self.decay_steps)(t)
            else:
                frac = torch.clamp(t / self.decay_steps, 0.0, 1.0)
                after = end_value + (v - end_value) * (0.5 * (1.0 + torch.cos(math.pi * frac)))
        if not w:
            return after
        warm = w0 + (s / w) * (v - w0)
        return torch.where(s < w, warm, after)


def _is_int(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


_SCHEDULE_EXAMPLE = "{kind: cosine, warmup_updates: 1000, decay_updates: 100000, end_factor: 0.1}"


@dataclasses.dataclass(frozen=True)
class LRSchedule:
    """A learning-rate schedule as a config sets it, relative to the optimizer's ``lr``.

    ``kind``: ``"constant"``, ``"linear"`` or ``"cosine"``. All counts are
    **gradient steps of the optimizer it is applied to** (its
    ``opt_state["step"]``), not environment steps: REDQ's critic takes
    ``updates_per_step`` of them per env step, its actor and temperature one;
    DrQ-v2's one per ``update_every`` agent steps; DRQN/R2D2's one per update.

    * ``warmup_updates`` (default 0: none): the rate rises linearly from
      ``warmup_start_factor * lr`` (default 0) at the first step to ``lr`` at
      step ``warmup_updates``;
    * ``decay_updates`` (``linear``/``cosine``, required): then the rate falls
      from ``lr`` to ``end_factor * lr`` (default 0) over this many steps, and
      stays there;
    * ``constant`` takes neither ``decay_updates`` nor ``end_factor``; without
      warm-up it *is* the constant rate (:meth:`at` returns the float ``lr``,
      bit-identical to no schedule).

    E.g. ``{kind: cosine, warmup_updates: 1000, decay_updates: 100000,
    end_factor: 0.1}``. :meth:`at` makes the absolute :class:`Schedule`.
    """

    kind: str = "constant"
    warmup_updates: int = 0
    decay_updates: int | None = None
    end_factor: float | None = None
    warmup_start_factor: float = 0.0

    def __post_init__(self) -> None:
        _check_lr_schedule(dataclasses.asdict(self), "LRSchedule")

    @classmethod
    def parse(cls, value: Any, name: str = "lr_schedule") -> "LRSchedule | None":
        """``value`` from a config (``None``, an :class:`LRSchedule` or a mapping of its fields)
        -> ``LRSchedule`` or ``None``; a bad value is one :class:`ValueError` sentence starting with ``name``."""
        if value is None or isinstance(value, LRSchedule):
            return value
        if not isinstance(value, Mapping):
            raise ValueError(
                f"{name} must be a mapping such as {_SCHEDULE_EXAMPLE}, or null for a constant rate; got {value!r}."
            )
        valid = [f.name for f in dataclasses.fields(cls)]
        for key in value:
            if key not in valid:
                match = difflib.get_close_matches(str(key), valid, n=1, cutoff=0.5)
                hint = f"did you mean {match[0]!r}?" if match else f"valid keys are {', '.join(valid)}."
                raise ValueError(f"{name} has no key {key!r}; {hint}")
        values = {f.name: value.get(f.name, f.default) for f in dataclasses.fields(cls)}
        for key in ("warmup_updates", "decay_updates"):  # YAML may give 1000.0
            v = values[key]
            if isinstance(v, float) and v.is_integer():
                values[key] = int(v)
        _check_lr_schedule(values, name)
        return cls(**values)

    def at(self, lr: float) -> "float | Schedule":
        """The schedule of an optimizer whose configured rate is ``lr``: ``lr`` itself (a float)
        for a constant rate without warm-up, else the absolute :class:`Schedule`."""
        if self.kind == "constant" and not self.warmup_updates:
            return lr
        end = lr if self.kind == "constant" else lr * (self.end_factor or 0.0)
        return Schedule(
            kind=self.kind,
            init_value=lr,
            end_value=end,
            decay_steps=self.decay_updates or 0,
            warmup_steps=self.warmup_updates,
            warmup_init_value=lr * self.warmup_start_factor,
        )


EXACT_STEPS = 2**24
"""Optimizer steps that :class:`Adam`'s float32 step counter (as ``torch.optim``'s) counts exactly; a
learning-rate schedule must end within them."""


def check_exact_span(span: int, name: str, what: str = "warmup_updates + decay_updates") -> None:
    """A schedule longer than :data:`EXACT_STEPS` is one sentence: Adam's step counter is float32, as
    ``torch.optim``'s, so past 2**24 adding 1 no longer changes it and the rate would stop moving."""
    if span > EXACT_STEPS:
        raise ValueError(
            f"{name} spans {span:,} gradient steps, beyond the {EXACT_STEPS:,} (2**24) that the optimizer's "
            f"float32 step counter counts exactly; shorten {what}."
        )


def _check_lr_schedule(v: dict, name: str) -> None:
    """One-sentence errors (starting with ``name``) for the fields of an :class:`LRSchedule`."""
    kind = v["kind"]
    if kind not in SCHEDULE_KINDS:
        raise ValueError(f"{name} kind must be one of {', '.join(map(repr, SCHEDULE_KINDS))}, got {kind!r}.")
    if not _is_int(v["warmup_updates"]) or v["warmup_updates"] < 0:
        raise ValueError(f"{name} warmup_updates must be an integer >= 0 (gradient steps), got {v['warmup_updates']!r}.")
    ws = v["warmup_start_factor"]
    if not _is_real(ws) or not 0.0 <= ws < 1.0:
        raise ValueError(f"{name} warmup_start_factor must be a number in [0, 1), got {ws!r}.")
    if ws and not v["warmup_updates"]:
        raise ValueError(f"{name} warmup_start_factor is set but warmup_updates is 0; set warmup_updates or drop it.")
    check_exact_span(v["warmup_updates"] + (v["decay_updates"] if _is_int(v["decay_updates"]) else 0), name)
    if kind == "constant":
        for key in ("decay_updates", "end_factor"):
            if v[key] is not None:
                raise ValueError(f"{name} kind 'constant' takes no {key}; use kind linear or cosine to decay.")
        return
    d = v["decay_updates"]
    if not _is_int(d) or d < 1:
        raise ValueError(
            f"{name} kind {kind!r} needs decay_updates, a positive number of gradient steps over which the rate "
            f"falls to end_factor * lr; got {d!r}."
        )
    e = v["end_factor"]
    if e is not None and (not _is_real(e) or not 0.0 <= e <= 1.0):
        raise ValueError(f"{name} end_factor must be a number in [0, 1] (the final rate over lr), got {e!r}.")


def scheduled_lr(lr: float, *schedules: LRSchedule | None) -> float | Schedule:
    """The rate to give :class:`Adam`: the first schedule in ``schedules`` that is set
    (e.g. ``critic_lr_schedule``, then ``lr_schedule``) at ``lr``, or ``lr`` itself."""
    for schedule in schedules:
        if schedule is not None:
            return schedule.at(lr)
    return lr


def last_lr(
    opt: Adam, opt_state: TensorDict, like: torch.Tensor, base: torch.Tensor | None = None
) -> torch.Tensor:
    """The rate ``opt`` used for its last step (``opt_state`` is the state after it), as a
    metric of ``like``'s shape (0-dim; ``[P]`` for a population's members) and dtype made on
    ``like``'s device: no host copy, no sync, so a
    CUDA-graph capture of the update stays legal. Before any step: the first step's rate.
    ``base``: the rate from the state that replaced ``opt.lr`` (:meth:`Adam.learning_rate`)."""
    if base is not None:
        if isinstance(opt.lr, Schedule):
            base = opt.lr.scaled(torch.clamp(opt_state["step"] - 1, min=0), base)
        return base.detach().to(like.dtype)
    if callable(opt.lr):
        return opt.lr(torch.clamp(opt_state["step"] - 1, min=0)).to(like.dtype)
    return like.new_full(like.shape, float(opt.lr))
