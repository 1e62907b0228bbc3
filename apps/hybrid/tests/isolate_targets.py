"""Functions ``test_isolate.py`` runs in a child process (importable by this plain name)."""

from __future__ import annotations

import os
import signal
from pathlib import Path


def _pid_and_sum(values: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(values)


def _raise_value_error(text: str) -> None:
    raise ValueError(text)


class _Unpicklable(Exception):
    def __reduce__(self):  # type: ignore[override]
        raise TypeError("cannot pickle")


def _raise_unpicklable() -> None:
    raise _Unpicklable("deep inside")


def _die(code: int) -> None:
    os._exit(code)


def _wait_for_signal(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    signal.pause()  # SIGINT -> RunInterrupted (the child's stop_on_signals)
