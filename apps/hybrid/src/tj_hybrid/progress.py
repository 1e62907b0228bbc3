"""A progress bar with ETA for long training loops (tj-monitor's columns), shown on one process
only.

Falls back to periodic log lines when the output is not a terminal (CI logs, files), so a
long run always shows that it is alive without flooding the log.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any

from tj_monitor import progress_bar

__all__ = ["StepProgress"]

log = logging.getLogger(__name__)


class StepProgress:
    """``update(step, **fields)`` moves the bar to ``step``; ``close()`` ends it."""

    def __init__(self, description: str, *, total: int, start: int = 0, enabled: bool = True,
                 log_every_s: float = 15.0) -> None:  # fmt: skip
        self.description, self.total, self.enabled = description, total, enabled
        self._interactive = enabled and sys.stderr.isatty()
        self._last_log = time.monotonic()
        self._t0, self._start = time.monotonic(), start
        self.log_every_s = log_every_s
        self._progress: Any = None
        if self._interactive:
            self._progress = progress_bar()
            self._task = self._progress.add_task(description, total=total, completed=start, info="")
            self._progress.start()

    def update(self, step: int, **fields: float) -> None:
        if not self.enabled:
            return
        info = " ".join(f"{k} {v:.4g}" for k, v in fields.items())
        if self._progress is not None:
            self._progress.update(self._task, completed=step, info=info)
            return
        now = time.monotonic()
        if now - self._last_log >= self.log_every_s or step >= self.total:
            self._last_log = now
            rate = (step - self._start) / max(now - self._t0, 1e-9)
            eta = (self.total - step) / rate if rate > 0 else float("nan")
            log.info("%s: %d/%d %s (eta %.0f s)", self.description, step, self.total, info, eta)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
