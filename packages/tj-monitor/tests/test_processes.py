"""Stopping processes for good, with real process trees: SIGTERM, a bounded grace, SIGKILL for
what ignores it, every process reaped through its owner's handle, nothing waited on forever."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tj_monitor import Stopped, processes_naming, stop_processes, stop_tree, with_descendants

sys.path.insert(0, str(Path(__file__).parent))  # spawned children import the targets by name
import _tjmon_children as targets

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux signals")
SLEEPER = "import time; time.sleep(600)"
# starts a stubborn grandchild, says its pid, then sleeps with the default SIGTERM action
PARENT_OF_STUBBORN = f"""
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", {targets.STUBBORN!r}], stdout=subprocess.PIPE,
                         text=True)
print(child.pid, child.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def _python(code: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


def test_stubborn_root_and_grandchild_are_sigkilled_and_reaped() -> None:
    root = _python(targets.STUBBORN, targets.STUBBORN)  # both ignore SIGTERM
    assert root.stdout is not None
    assert [root.stdout.readline().strip() for _ in range(2)] == ["ready", "ready"]
    grandchild = psutil.Process(root.pid).children()[0].pid
    stopped = stop_tree([root], grace_s=0.3)
    assert set(stopped.killed) == {root.pid, grandchild} and stopped.left == ()
    assert root.returncode == -9  # reaped through its Popen
    assert targets.gone(grandchild)


def test_descendants_left_by_a_root_that_obeys_are_sigkilled_after_the_grace() -> None:
    root = _python(PARENT_OF_STUBBORN)
    assert root.stdout is not None
    pid, ready = root.stdout.readline().split()
    assert ready == "ready"
    stopped = stop_tree([root], grace_s=0.3)
    assert root.returncode == -15  # the root obeyed SIGTERM
    assert stopped.killed == (int(pid),)  # its child was never signalled before the SIGKILL
    assert targets.gone(int(pid))


def test_a_multiprocessing_child_is_reaped_by_multiprocessing(tmp_path: Path) -> None:
    proc = mp.get_context("spawn").Process(target=targets.sleep_forever,
                                           args=(str(tmp_path / "pid"),))  # fmt: skip
    proc.start()
    assert stop_tree([proc], grace_s=60.0) == Stopped((), ())
    assert proc.exitcode == -15 and proc not in mp.active_children()
    assert not psutil.pid_exists(proc.pid)


def test_exited_and_unstarted_roots_are_only_reaped() -> None:
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    while psutil.Process(done.pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.01)
    unstarted = mp.get_context("spawn").Process(target=targets.pid_and_sum, args=([],))
    assert stop_tree([done, unstarted], grace_s=0.0) == Stopped((), ())
    assert done.returncode == 0 and not psutil.pid_exists(done.pid)


def test_stop_processes_without_a_signal_waits_then_kills() -> None:
    """``sig=None``: they were already asked (Ray's shutdown); only the SIGKILL comes from here.
    A psutil handle of our own child is reaped by psutil; an int pid works too."""
    by_psutil, by_pid = _python(SLEEPER), _python(SLEEPER)
    stopped = stop_processes([psutil.Process(by_psutil.pid), by_pid.pid], 0.2, sig=None)
    assert sorted(stopped.killed) == sorted([by_psutil.pid, by_pid.pid]) and not stopped.left
    assert not psutil.pid_exists(by_psutil.pid) and not psutil.pid_exists(by_pid.pid)
    assert stop_processes([], 1.0) == Stopped((), ())


def test_a_child_that_dies_between_two_looks_is_reaped_not_left_a_zombie() -> None:
    """The race a loaded machine hits: the first ``wait(timeout=0)`` finds our child still running,
    then it dies, and the status read sees a zombie. It is ours, so it is reaped there (a zombie
    of another parent is left to it). The first look is made to miss by a handle whose first wait
    times out, as it does when the SIGKILL lands a moment late."""
    import signal

    from tj_monitor.processes import _Handle

    class _LateFirstWait(psutil.Process):
        missed = False

        def wait(self, timeout=None):
            if not self.missed:
                self.missed = True
                raise psutil.TimeoutExpired(timeout or 0, self.pid)
            return super().wait(timeout)

    child = _python(SLEEPER)
    os.kill(child.pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while psutil.Process(child.pid).status() != psutil.STATUS_ZOMBIE:  # dead, not reaped yet
        assert time.monotonic() < deadline, "the killed child never became a zombie"
        time.sleep(0.01)
    handle = _Handle(_LateFirstWait(child.pid))
    assert handle.alive() is False
    assert not psutil.pid_exists(child.pid)


def test_processes_naming_and_with_descendants(tmp_path: Path) -> None:
    root = _python(PARENT_OF_STUBBORN, str(tmp_path))  # its command line names the folder
    try:
        assert root.stdout is not None
        child = int(root.stdout.readline().split()[0])
        assert [p.pid for p in processes_naming(str(tmp_path))] == [root.pid]
        assert {p.pid for p in with_descendants([psutil.Process(root.pid)])} == {root.pid, child}
    finally:
        stop_tree([root], grace_s=0.0)
    assert processes_naming(str(tmp_path)) == [] and with_descendants([]) == []
