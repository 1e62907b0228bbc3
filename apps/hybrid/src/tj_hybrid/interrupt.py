"""Ctrl-C and SIGTERM stop a run cleanly: the signal becomes an exception in the main thread.

A terminal's Ctrl-C reaches the whole foreground process group; a scheduler's SIGTERM often only
the main process. Either way the main process raises ``RunInterrupted`` where it is, so every
``finally`` runs: the launcher stops the ranks (and their loader workers), recording stops its
SUMO workers, the memory monitor stops. A second signal while stopping is logged, not raised, so
it cannot cut that cleanup short. The run exits with 128 + the signal number (130 for Ctrl-C).
"""

from __future__ import annotations

import contextlib
import logging
import signal
from collections.abc import Iterator
from types import FrameType

__all__ = ["RunInterrupted", "stop_on_signals"]

log = logging.getLogger(__name__)


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

    def handler(signum: int, frame: FrameType | None) -> None:
        if fired:
            log.warning("%s received while stopping; still cleaning up",
                        signal.Signals(signum).name)  # fmt: skip
            return
        fired.append(signum)
        raise RunInterrupted(signum)

    previous = {s: signal.signal(s, handler) for s in signals}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
