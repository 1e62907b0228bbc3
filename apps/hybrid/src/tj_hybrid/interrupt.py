"""Ctrl-C and SIGTERM stop a run cleanly: the signal becomes an exception in the main thread.

A terminal's Ctrl-C reaches the whole foreground process group; a scheduler's SIGTERM often only
the main process. Either way the main process raises ``RunInterrupted`` where it is, so every
``finally`` runs: the launcher stops the ranks (and their loader workers), recording stops its
SUMO workers, the memory monitor stops. A second signal while stopping is logged, not raised, so
it cannot cut that cleanup short. The run exits with 128 + the signal number (130 for Ctrl-C).

A signal can land where Python swallows exceptions: an at-fork callback (filelock registers one),
a ``__del__``, a weakref or gc callback. Python hands those to ``sys.unraisablehook``; within the
block a hook catches a swallowed ``RunInterrupted`` and sends the signal again, so the stop is
raised at the next ordinary line instead of being lost (and the run going on to its end).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

__all__ = ["RunInterrupted", "stop_on_signals"]

log = logging.getLogger(__name__)

_RESEND_AFTER_S = 0.05


class RunInterrupted(BaseException):
    """The run was asked to stop (a BaseException, like KeyboardInterrupt: no ``except
    Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


@contextlib.contextmanager
def stop_on_signals(
    signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM),
) -> Iterator[None]:
    """Within the block, the first of ``signals`` raises ``RunInterrupted`` (main thread only)."""
    fired: list[int] = []
    swallowed: list[int] = []
    in_hook = threading.Event()

    def resend(signum: int) -> None:
        # From a timer thread, so that the handler runs once the hook has returned, not inside it
        # (a signal sent from the hook itself is handled before the hook returns).
        timer = threading.Timer(_RESEND_AFTER_S, os.kill, args=(os.getpid(), signum))
        timer.daemon = True
        timer.start()

    def handler(signum: int, frame: FrameType | None) -> None:
        if swallowed:  # the re-sent signal of a stop Python swallowed: raise it now
            if in_hook.is_set():  # still inside the hook: a raise here would be lost again
                resend(signum)
                return
            swallowed.clear()
            raise RunInterrupted(signum)
        if fired:
            log.warning("%s received while stopping; still cleaning up",
                        signal.Signals(signum).name)  # fmt: skip
            return
        fired.append(signum)
        raise RunInterrupted(signum)

    def unraisable(info: sys.UnraisableHookArgs) -> None:
        if not isinstance(info.exc_value, RunInterrupted):
            previous_hook(info)
            return
        in_hook.set()
        log.debug(
            "stop landed in %r, where Python ignores exceptions; sending it again", info.object
        )
        swallowed.append(info.exc_value.signum)
        resend(info.exc_value.signum)
        in_hook.clear()

    previous = {s: signal.signal(s, handler) for s in signals}
    previous_hook = sys.unraisablehook
    sys.unraisablehook = unraisable
    try:
        yield
    finally:
        sys.unraisablehook = previous_hook
        for s, old in previous.items():
            signal.signal(s, old)
