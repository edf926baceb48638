"""Ctrl-C and SIGTERM while training: raised where the run can be saved consistently.

An interrupt raises in the training loop, and the run saves its state on the way out
(:meth:`rlfunc.runtime.trainer.Trainer._save_on_the_way_out`). One that lands inside an update
would leave the counters ahead of the state: the env step counted, the update's new state not yet
assigned, so the resumed run made one update fewer than the uninterrupted one (found by the
session-31 review of the resume changes). Inside a :meth:`InterruptGuard.deferring` block (an env
step's count and its updates) the first Ctrl-C or SIGTERM is held, with one line on stderr, until
the loop's next :meth:`InterruptGuard.check` (the next env step's count); a second one raises at
once, as before. Elsewhere (acting, evaluating, saving) both raise at once, as before: those parts
were already safe to interrupt.

SIGTERM raises ``SystemExit(143)`` (the shell's status for a TERM-killed process), Ctrl-C
``KeyboardInterrupt``. Ctrl-C is taken over only where Python's own handler is installed (not
where SIGINT is ignored, as in a background job, or where the caller has a handler of its own),
and nothing is installed off the main thread, where Python cannot install handlers.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

__all__ = ["InterruptGuard"]


class InterruptGuard:
    """Holds a Ctrl-C or SIGTERM that arrives inside :meth:`deferring` until :meth:`check`."""

    def __init__(self) -> None:
        self._depth = 0
        self._held: int | None = None

    def install(self) -> Callable[[], None]:
        """Install the handlers; returns what restores the previous ones."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {signal.SIGTERM: signal.signal(signal.SIGTERM, self._on_signal)}
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            previous[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_signal)

        def restore() -> None:
            for signum, handler in previous.items():
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)

        return restore

    @contextmanager
    def deferring(self) -> Iterator[None]:
        """A block that an interrupt must not cut short: the first one waits for :meth:`check`."""
        self._depth += 1
        try:
            yield
        finally:
            self._depth -= 1

    def check(self) -> None:
        """Raise the interrupt held since the last check, if any (call it where the run can stop)."""
        if self._held is not None and not self._depth:
            signum, self._held = self._held, None
            _raise(signum)

    def _on_signal(self, signum: int, frame) -> None:
        if self._depth and self._held is None:
            self._held = signum
            name = "Ctrl-C" if signum == signal.SIGINT else "SIGTERM"
            print(f"rlfunc: {name}: stopping after this env step's updates (again to stop at once).", file=sys.stderr)
            return
        self._held = None
        _raise(signum)


def _raise(signum: int) -> None:
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise SystemExit(128 + signum)
