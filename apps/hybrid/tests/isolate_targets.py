"""Functions ``test_isolate.py`` runs in a child process (importable by this plain name)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _wait_for_signal(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    signal.pause()  # SIGINT -> RunInterrupted (the child's stop_on_signals)
