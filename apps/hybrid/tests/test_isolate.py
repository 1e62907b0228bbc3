"""``run_isolated``: a phase's heavy part in a spawned child; results, errors, deaths and signals
come back to the parent as they would from a call in the same process."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import psutil
import pytest

from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
from tj_hybrid.isolate import ChildFailed, run_isolated

# the child imports the target functions by module name: a plain module on the parent's sys.path
# (which spawn hands to the child), not this test module (pytest names it by its package path)
sys.path.insert(0, str(Path(__file__).parent))
from isolate_targets import (
    _die,
    _pid_and_sum,
    _raise_unpicklable,
    _raise_value_error,
    _wait_for_signal,
)


def test_result_comes_back_from_another_process() -> None:
    pid, total = run_isolated(_pid_and_sum, [1, 2, 3])
    assert total == 6 and pid != os.getpid()


def test_exception_is_reraised_as_itself() -> None:
    with pytest.raises(ValueError, match="bad scenario"):
        run_isolated(_raise_value_error, "bad scenario")


def test_unpicklable_exception_becomes_child_failed_with_the_traceback() -> None:
    with pytest.raises(ChildFailed, match="deep inside"):
        run_isolated(_raise_unpicklable)


def test_child_dying_is_child_failed_with_its_exit_code() -> None:
    with pytest.raises(ChildFailed, match="exit code 3"):
        run_isolated(_die, 3)


@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_parent_stopped_by_sigterm_stops_the_child(tmp_path: Path) -> None:
    """SIGTERM reaches only the parent (a scheduler): the child is stopped with SIGINT and the
    parent raises RunInterrupted; no child process is left."""
    marker = tmp_path / "child.pid"

    def send_sigterm_when_child_waits() -> None:
        while not marker.exists() or not marker.read_text():
            threading.Event().wait(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send_sigterm_when_child_waits, daemon=True).start()
    with pytest.raises(RunInterrupted), stop_on_signals():
        run_isolated(_wait_for_signal, str(marker), grace_s=120.0)
    child = int(marker.read_text())
    assert not psutil.pid_exists(child) or psutil.Process(child).status() == psutil.STATUS_ZOMBIE


@pytest.mark.skipif(sys.platform != "linux", reason="signals as on Linux")
def test_child_interrupted_by_ctrl_c_is_run_interrupted(tmp_path: Path) -> None:
    """Ctrl-C reaches the whole process group; here only the child gets it."""
    marker = tmp_path / "child.pid"

    def interrupt_child() -> None:
        while not marker.exists() or not marker.read_text():
            threading.Event().wait(0.05)
        os.kill(int(marker.read_text()), signal.SIGINT)

    threading.Thread(target=interrupt_child, daemon=True).start()
    with pytest.raises(RunInterrupted) as info:
        run_isolated(_wait_for_signal, str(marker))
    assert info.value.signum == signal.SIGINT
