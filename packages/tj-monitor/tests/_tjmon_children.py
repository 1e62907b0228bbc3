"""Functions the process-toolkit tests run in spawned children (importable by this plain name),
and scripts for the tests that SIGKILL a parent."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import psutil

# a parent that runs ``run_in_child(sleep_forever, marker)`` until it is killed
RUN_IN_CHILD_PARENT = """
import sys
sys.path.insert(0, sys.argv[2])
from tj_monitor import run_in_child
from _tjmon_children import sleep_forever
run_in_child(sleep_forever, sys.argv[1])
"""
# a parent that starts two sleepers, one asking for the parent-death signal, and waits
POPEN_PARENT = """
import subprocess, sys, time
from tj_monitor import parent_death_hook
hooked = subprocess.Popen(["sleep", "600"], preexec_fn=parent_death_hook())
plain = subprocess.Popen(["sleep", "600"])
print(hooked.pid, plain.pid, flush=True)
time.sleep(600)
"""
# ignores SIGTERM, says so, then sleeps; with an argument it first starts one more like itself
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if len(sys.argv) > 1:
    child = subprocess.Popen([sys.executable, "-c", sys.argv[1]], stdout=subprocess.PIPE, text=True)
    print(child.stdout.readline().strip(), flush=True)
print("ready", flush=True)
time.sleep(600)
"""


def gone(pid: int, limit_s: float = 60.0) -> bool:
    """``pid`` gone or someone else's zombie (init reaps orphans), polled until ``limit_s``: a
    slow machine only waits longer, the outcome does not depend on its speed."""
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def pid_and_sum(values: list[int]) -> tuple[int, int]:
    return os.getpid(), sum(values)


def hash_and_seed(text: str) -> tuple[int, str | None]:
    """This interpreter's hash of ``text`` and its ``PYTHONHASHSEED``."""
    return hash(text), os.environ.get("PYTHONHASHSEED")


def raise_value_error(text: str) -> None:
    raise ValueError(text)


class Unpicklable(Exception):
    def __reduce__(self):  # type: ignore[override]
        raise TypeError("cannot pickle")


def raise_unpicklable() -> None:
    raise Unpicklable("deep inside")


def return_unpicklable() -> object:
    return lambda: None


def exit_with(code: int) -> None:
    os._exit(code)


def kill_self(sig: int) -> None:
    os.kill(os.getpid(), sig)
    time.sleep(600)


def sleep_forever(marker: str) -> None:
    Path(marker).write_text(str(os.getpid()))
    time.sleep(600)


def stop_on_sigterm(marker: str) -> None:
    """Writes its pid; on SIGTERM, writes ``stopped`` beside it and exits (a clean stop)."""

    def stop(*_: object) -> None:
        Path(marker + ".stopped").write_text("stopped")
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    sleep_forever(marker)


def ignore_sigterm(marker: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sleep_forever(marker)
