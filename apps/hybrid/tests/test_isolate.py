"""``run_isolated``: a phase's heavy part in a spawned child; results, errors, deaths and signals
come back to the parent as they would from a call in the same process. Results, exceptions and
deaths are ``tj_monitor.run_in_child``'s (tested in packages/tj-monitor/tests/test_child.py);
here: the layer passes them through, and the trainer's signals become ``RunInterrupted``."""

from __future__ import annotations

import math
import os
import signal
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from tj_hybrid.interrupt import RunInterrupted, stop_on_signals
from tj_hybrid.isolate import ChildFailed, run_isolated

# the child imports the target functions by module name: a plain module on the parent's sys.path
# (which spawn hands to the child), not this test module (pytest names it by its package path)
sys.path.insert(0, str(Path(__file__).parent))
from isolate_targets import _wait_for_signal


def test_results_and_exceptions_pass_through_the_layer() -> None:
    """What ``tj_monitor.run_in_child`` gives back (its tests: packages/tj-monitor/tests/
    test_child.py) comes through ``run_isolated`` unchanged."""
    assert run_isolated(math.factorial, 5) == 120
    with pytest.raises(ValueError, match="invalid literal"):
        run_isolated(int, "bad scenario")
    with pytest.raises(ChildFailed, match="exit code 3"):
        run_isolated(os._exit, 3)


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


class _SignalInDel:
    """Sends SIGINT from ``__del__`` and lets the handler run there, where Python ignores raises."""

    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)
        for _ in range(100):  # bytecode for the handler to run on, inside __del__
            pass


def test_stop_that_lands_where_python_ignores_exceptions_is_still_raised(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """A Ctrl-C handled inside ``__del__`` (or an at-fork callback, as filelock's in CI) would be
    printed as "Exception ignored" and lost, and the run would go on to its end. It is raised at
    the next ordinary line instead, with no traceback on stderr."""
    reached_end = False
    hook_before = sys.unraisablehook
    with pytest.raises(RunInterrupted) as info, stop_on_signals():
        bomb = _SignalInDel()
        del bomb
        time.sleep(60)  # the stop interrupts this at once; 60 s only if it was lost
        reached_end = True
    assert info.value.signum == signal.SIGINT
    assert not reached_end
    assert "Traceback" not in capfd.readouterr().err
    assert sys.unraisablehook is hook_before
