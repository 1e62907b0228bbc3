"""``run_in_child`` and the parent-death signal, with real processes: results, exceptions and
deaths come back as from a call in this process; an interrupted wait stops the child (with grace,
then SIGKILL); a SIGKILLed parent leaves no orphan."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tj_monitor import ChildFailed, ChildOutcome, describe_exit, run_in_child

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # spawned children import the targets by this plain module name
import _tjmon_children as targets  # noqa: E402

LINUX = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="signals as on Linux")


def _wait_for(path: Path, limit_s: float = 120.0) -> str:
    deadline = time.monotonic() + limit_s
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, f"{path} never written"
        time.sleep(0.02)
    return path.read_text()


class _Interrupted(Exception):
    pass


@contextlib.contextmanager
def _interrupt_when_written(marker: Path) -> Iterator[None]:
    """SIGUSR1 to this process once the child wrote ``marker``: its handler raises
    ``_Interrupted`` in the main thread, wherever the parent waits."""

    def handler(*_: object) -> None:
        raise _Interrupted

    previous = signal.signal(signal.SIGUSR1, handler)

    def fire() -> None:
        _wait_for(marker)
        os.kill(os.getpid(), signal.SIGUSR1)

    thread = threading.Thread(target=fire, daemon=True)
    thread.start()
    try:
        yield
    finally:
        thread.join()
        signal.signal(signal.SIGUSR1, previous)


def test_result_comes_back_from_another_process() -> None:
    pid, total = run_in_child(targets.pid_and_sum, [1, 2, 3])
    assert total == 6 and pid != os.getpid()


def test_env_seeds_the_childs_hash_and_leaves_ours_alone() -> None:
    """``env`` reaches the child before its interpreter starts (``PYTHONHASHSEED`` takes
    effect: the same seed, the same string hashes) and this process's environment is unchanged."""
    before = os.environ.get("PYTHONHASHSEED")
    a = run_in_child(targets.hash_and_seed, "lane-A0", env={"PYTHONHASHSEED": "7"})
    b = run_in_child(targets.hash_and_seed, "lane-A0", env={"PYTHONHASHSEED": "7"})
    c = run_in_child(targets.hash_and_seed, "lane-A0", env={"PYTHONHASHSEED": "8"})
    assert a == b and a[1] == "7" and c[0] != a[0]
    assert os.environ.get("PYTHONHASHSEED") == before


def test_exception_is_reraised_as_itself_with_the_childs_traceback() -> None:
    with pytest.raises(ValueError, match="bad scenario") as info:
        run_in_child(targets.raise_value_error, "bad scenario")
    notes = "\n".join(info.value.__notes__)
    assert "--- in child raise_value_error (pid" in notes
    assert "raise ValueError(text)" in notes  # the child's own frame


def test_unpicklable_exception_is_child_failed_with_the_traceback() -> None:
    with pytest.raises(ChildFailed, match="Unpicklable: deep inside") as info:
        run_in_child(targets.raise_unpicklable)
    assert "raise Unpicklable" in info.value.child_traceback
    assert info.value.exitcode is None


def test_unpicklable_result_is_child_failed_naming_it() -> None:
    with pytest.raises(ChildFailed, match="failed: returned an unpicklable result"):
        run_in_child(targets.return_unpicklable)


def test_child_exiting_without_a_result_names_its_exit_code() -> None:
    with pytest.raises(ChildFailed, match=r"exit_with \(pid \d+\) exited \(exit code 3\)") as info:
        run_in_child(targets.exit_with, 3)
    assert info.value.exitcode == 3


@LINUX
def test_child_killed_by_a_signal_names_the_signal() -> None:
    with pytest.raises(ChildFailed, match="was killed by SIGKILL without a result") as info:
        run_in_child(targets.kill_self, signal.SIGKILL, name="victim")
    assert info.value.exitcode == -signal.SIGKILL
    assert str(info.value).startswith("victim (pid")


def test_unpicklable_target_is_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match="must pickle"):
        run_in_child(lambda: None)


@LINUX
def test_interrupted_parent_stops_the_child_with_grace(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    with pytest.raises(_Interrupted), _interrupt_when_written(marker):
        run_in_child(targets.stop_on_sigterm, str(marker), grace_s=120.0)
    assert (tmp_path / "child.pid.stopped").read_text() == "stopped"  # its handler ran
    assert not psutil.pid_exists(int(marker.read_text()))  # stopped and reaped before the raise


@LINUX
def test_interrupted_parent_sigkills_a_child_that_ignores_sigterm(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    with pytest.raises(_Interrupted), _interrupt_when_written(marker):
        run_in_child(targets.ignore_sigterm, str(marker), grace_s=0.2)
    assert not psutil.pid_exists(int(marker.read_text()))  # SIGKILLed and reaped


@LINUX
def test_timeout_stops_the_child(tmp_path: Path) -> None:
    marker = tmp_path / "child.pid"
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"still running after 0\.5 s"):
        run_in_child(targets.sleep_forever, str(marker), timeout_s=0.5, grace_s=0.2)
    assert time.monotonic() - start < 300  # bounded, not the child's 600 s
    if marker.exists() and marker.read_text():
        assert not psutil.pid_exists(int(marker.read_text()))


@LINUX
def test_sigkilled_parent_leaves_no_child(tmp_path: Path) -> None:
    """The parent's finally never runs: only the parent-death signal stops the child."""
    marker = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", targets.RUN_IN_CHILD_PARENT, str(marker),
                               str(HERE)], start_new_session=True)  # fmt: skip
    child = 0
    try:
        child = int(_wait_for(marker))
        assert psutil.Process(child).ppid() == parent.pid
        parent.kill()
        parent.wait(timeout=60)
        assert targets.gone(child), "the child kept running after its parent was SIGKILLed"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
        if child:
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGKILL)


@LINUX
def test_popen_hook_makes_a_child_die_with_its_parent() -> None:
    """Two sleepers of one parent, only one with ``parent_death_hook``: when the parent is
    SIGKILLed that one dies, the other (the control) runs on."""
    parent = subprocess.Popen([sys.executable, "-c", targets.POPEN_PARENT], stdout=subprocess.PIPE,
                              text=True, start_new_session=True)  # fmt: skip
    try:
        assert parent.stdout is not None
        hooked, plain = map(int, parent.stdout.readline().split())
        parent.kill()
        parent.wait(timeout=60)
        assert targets.gone(hooked), "the hooked child outlived its parent"
        assert psutil.Process(plain).status() != psutil.STATUS_ZOMBIE  # without it: an orphan
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)


def test_outcome_round_trip_through_a_pipe() -> None:
    import multiprocessing as mp

    reader, writer = mp.Pipe(duplex=False)
    ChildOutcome.capture(targets.raise_value_error, "boom").send(writer)
    outcome = ChildOutcome.receive(reader)
    assert outcome is not None and not outcome.ok and outcome.summary == "ValueError: boom"
    assert isinstance(outcome.exception(), ValueError) and outcome.when > 0
    assert ChildOutcome.receive(reader) is None  # the writer closed: EOF


def test_describe_exit() -> None:
    assert describe_exit(-9) == "was killed by SIGKILL"
    assert describe_exit(-200) == "was killed by signal 200"
    assert describe_exit(3) == "exited (exit code 3)"
    assert describe_exit(None) == "is still running"
