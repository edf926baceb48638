"""Callbacks: code of yours that the training loop calls, and the stopping rules built on them.

``rlfunc.train(config, callbacks=[...])`` takes objects with any of these
methods (all optional; :class:`Callback` is a base class with no-op ones)::

    on_start(run)                       # before the first env step (also on resume)
    on_step(run) -> reason | None       # after every env step; a reason (str) stops the run
    on_log(run, row)                    # a metrics.csv row was written (a dict)
    on_eval(run, step, returns) -> reason | bool | None   # after each evaluation
    on_checkpoint(run, path)            # a checkpoint was written
    on_end(run, reason)                 # the run ended, however it ended; reason is why (see below)

``run`` is the :class:`~rlfunc.runtime.trainer.Trainer`: read ``run.run_dir``,
``run.config``, ``run.env_step``, ``run.gradient_steps``, ``run.learner_calls``,
``run.evals`` (``[(step, mean_return), ...]``) and ``run.wall_s``; do not change
them. A truthy return of ``on_step``/``on_eval`` stops the run after a final
checkpoint; a string is recorded as the reason (``True`` records the
callback's class name). The reason is written to ``eval.csv``'s and
``metrics.csv``'s ``stop_reason`` column, returned in ``TrainResult.stop_reason``
and printed by the command line. A run that trained to ``train.total_steps``
ends with reason ``total_steps``.

``on_end`` is called once for every run whose ``on_start`` was called (a resume
too), however the run ends, after its final checkpoint: with ``total_steps`` or
the stop reason; and when it ends with an error, after the state was saved on the
way out (nothing is saved after a non-finite loss), with ``interrupted``
(Ctrl-C), ``terminated (SIGTERM)``, ``non-finite loss: <message>`` or ``error:
<ExceptionType>: <message>`` (an exception of a callback's hook, or of anything
else), before that error propagates. An exception raised by ``on_end`` then does
not replace the run's error: it is a warning line on stderr and a note on the
error raised. (Outside an error, an exception of ``on_end`` propagates.)

A callback may also have ``reached(run) -> reason | None``, asked once when a
run resumes, before its first step: the config's rules answer there whether
they already stopped the run (a spent ``max_updates`` or ``max_wall_s``, a
reached ``stop_at_return``, an exhausted ``patience_evals``), so resuming a
stopped run stops again at once, at the step it stopped, instead of training
one more step (or one more evaluation interval) each time.

The config's stopping rules are these callbacks (:func:`from_config`):
``train.stop_at_return``, ``train.patience_evals``, ``train.max_updates``
(gradient steps) and ``train.max_wall_s``.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Callback",
    "StopAtReturn",
    "Patience",
    "MaxUpdates",
    "MaxWallTime",
    "from_config",
    "check",
    "HOOKS",
]

HOOKS = ("on_start", "on_step", "on_log", "on_eval", "on_checkpoint", "on_end")

_ARGS = {"on_start": "run", "on_step": "run", "on_log": "run, row", "on_eval": "run, step, returns",
         "on_checkpoint": "run, path", "on_end": "run, reason", "reached": "run"}
"""The arguments the loop calls each hook with (after ``self``)."""


class Callback:
    """Base class with every hook a no-op; override the ones you need."""

    def on_start(self, run) -> None:
        pass

    def on_step(self, run) -> str | None:
        return None

    def on_log(self, run, row: dict[str, Any]) -> None:
        pass

    def on_eval(self, run, step: int, returns: list[float]) -> str | bool | None:
        return None

    def on_checkpoint(self, run, path) -> None:
        pass

    def on_end(self, run, reason: str) -> None:
        """Called once as the run ends, however it ends (after its last checkpoint): ``reason`` is
        ``total_steps``, a stop reason, ``interrupted``, ``terminated (SIGTERM)``, ``non-finite loss: ...``
        or ``error: ExceptionType: message`` (the error is raised after this)."""
        pass

    def reached(self, run) -> str | None:
        """Asked when a run resumes, before its first step: a reason if this rule already stopped it."""
        return None


class StopAtReturn(Callback):
    """Stop when an evaluation's mean return reaches ``threshold`` (``train.stop_at_return``)."""

    def __init__(self, threshold: float) -> None:
        self.threshold = float(threshold)

    def on_eval(self, run, step: int, returns: list[float]) -> str | None:
        return self._check(step, sum(returns) / len(returns))

    def reached(self, run) -> str | None:
        return self._check(*run.evals[-1]) if run.evals else None

    def _check(self, step: int, mean: float) -> str | None:
        if mean >= self.threshold:
            return f"stop_at_return: mean return {mean:.2f} >= {self.threshold:g} at step {step}"
        return None


class Patience(Callback):
    """Stop after ``evals`` evaluations in a row without a new best mean return (``train.patience_evals``)."""

    def __init__(self, evals: int) -> None:
        self.evals = int(evals)
        self.best = -math.inf
        self.since = 0

    def on_start(self, run) -> None:
        # On resume, replay the recorded evaluations so the count continues where it was.
        self.best, self.since = -math.inf, 0
        for _, mean in run.evals:
            self._see(mean)

    def _see(self, mean: float) -> None:
        if mean > self.best:
            self.best, self.since = mean, 0
        else:
            self.since += 1

    def on_eval(self, run, step: int, returns: list[float]) -> str | None:
        self._see(sum(returns) / len(returns))
        return self.reached(run)

    def reached(self, run) -> str | None:
        if self.since >= self.evals:
            return f"patience_evals: no new best in {self.evals} evaluations (best {self.best:.2f})"
        return None


class MaxUpdates(Callback):
    """Stop once ``limit`` gradient steps are done (``train.max_updates``).

    The trainer learns in calls of ``agent.updates_per_step`` gradient steps
    (REDQ/RLPD: G critic steps per env step), so the run stops at the first
    call that reaches the limit.
    """

    def __init__(self, limit: int) -> None:
        self.limit = int(limit)

    def on_step(self, run) -> str | None:
        return self.reached(run)

    def reached(self, run) -> str | None:
        if run.gradient_steps >= self.limit:
            return f"max_updates: {run.gradient_steps} gradient steps >= {self.limit}"
        return None


class MaxWallTime(Callback):
    """Stop once the run's training wall time reaches ``seconds`` (``train.max_wall_s``; resumed parts count)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = float(seconds)

    def on_step(self, run) -> str | None:
        return self.reached(run)

    def on_eval(self, run, step, returns) -> str | None:
        """Also right after an evaluation (evaluations can be long: DMC's, Atari's): the run stops at the
        step it was evaluated, instead of training one more step and evaluating again as it ends. Not at
        the end of a complete run, whose reason stays ``total_steps``."""
        if run.env_step >= run.config.train.total_steps:
            return None
        return self.reached(run)

    def reached(self, run) -> str | None:
        wall = run.wall_s
        if wall >= self.seconds:
            return f"max_wall_s: {_at_least(wall, self.seconds)} s of training >= {_shown(self.seconds)}"
        return None


def _shown(limit: float) -> str:
    """A limit as the config gives it (``1.5``, ``3600``): every digit it has, and no exponent."""
    if limit.is_integer() and abs(limit) < 1e16:
        return str(int(limit))
    text = f"{limit:g}"
    return text if float(text) == limit and "e" not in text else repr(limit)


def _at_least(value: float, limit: float) -> str:
    """``value`` (>= ``limit``) with 3 significant digits (no exponent: all the digits before the point),
    more where fewer would show it below ``limit``, so that a reason is true as printed: 1.502 s against
    1.5 is ``1.50``, 0.4013 against 0.4 ``0.401``, 1.5004 against 1.50031 ``1.5004``, 3601.2 ``3601``."""
    decimals = max(0, 2 - math.floor(math.log10(value))) if value > 0 else 0
    while decimals <= 17:
        text = f"{value:.{decimals}f}"
        if float(text) >= limit:
            return text
        decimals += 1
    return repr(value)


def from_config(train) -> list[Callback]:
    """The stopping rules a ``train`` section asks for."""
    rules: list[Callback] = []
    if train.stop_at_return is not None:
        rules.append(StopAtReturn(train.stop_at_return))
    if train.patience_evals:
        rules.append(Patience(train.patience_evals))
    if train.max_updates:
        rules.append(MaxUpdates(train.max_updates))
    if train.max_wall_s:
        rules.append(MaxWallTime(train.max_wall_s))
    return rules


def check(callbacks: Any) -> list[Any]:
    """The callbacks as a list (one callback object alone is taken as ``[cb]``); a class instead of an
    instance, or an object with none of the hooks, is one ``TypeError`` sentence naming it (before any
    env is built)."""
    if callbacks is None:
        return []
    if isinstance(callbacks, (str, bytes, Mapping)):
        raise TypeError(f"callbacks must be a list of callback objects, got {callbacks!r}; pass callbacks=[cb].")
    if not isinstance(callbacks, type) and any(callable(getattr(callbacks, hook, None)) for hook in HOOKS):
        callbacks = [callbacks]  # one callback, not in a list
    try:
        callbacks = list(callbacks)
    except TypeError:
        raise TypeError(f"callbacks must be a list of callback objects, got {callbacks!r}; pass callbacks=[cb].") from None
    for cb in callbacks:
        if isinstance(cb, type):
            raise TypeError(
                f"callback {cb.__name__} is a class, not a callback object; pass an instance, callbacks=[{cb.__name__}()]."
            )
        if not any(callable(getattr(cb, hook, None)) for hook in HOOKS):
            raise TypeError(
                f"callback {cb!r} has none of the hooks {', '.join(HOOKS)}; subclass rlfunc.Callback or add one."
            )
        _check_signatures(cb)
    return list(callbacks)


def _check_signatures(cb: Any) -> None:
    """A hook the loop could not call with its arguments (``def on_step(self)``) is one ``TypeError`` sentence
    now, before any env is built or file written, not a traceback at the first step of a started run."""
    for hook, args in _ARGS.items():
        fn = getattr(cb, hook, None)
        if not callable(fn):
            continue
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):  # a builtin or C callable: nothing to tell
            continue
        try:
            sig.bind(*args.split(", "))
        except TypeError:
            raise TypeError(
                f"callback {type(cb).__name__}.{hook} cannot be called as {hook}({args}) (it takes {sig}); "
                f"define it as def {hook}(self, {args})."
            ) from None
