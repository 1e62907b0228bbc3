"""A function in a fresh child process, as if called here: ``run_in_child(fn, *args)``.

What a call in this process gives, the child gives back: the return value, or the exception
raised as itself (the child's traceback text added as a note), else ``ChildFailed`` naming how
the child died (signal name or exit code) or carrying the traceback of an exception that could
not come back. What it loads (torch, Ray, a learner) is given back to the OS when it ends.

The child is spawned (no inherited threads, locks or CUDA state), asks for a parent-death
signal first thing (``die_with_parent``: a SIGKILLed parent leaves no orphan), and is stopped
as a tree (``stop_tree``: ``stop_signal``, ``grace_s``, SIGKILL, reaped) when the parent is
interrupted while waiting (Ctrl-C, SIGTERM turned into an exception, ``timeout_s``). It is
always reaped: no zombie is left behind.

``ChildOutcome`` is the pipe protocol, for launchers that supervise several children at once
(``tj_dist.launch_local``): captured in the child, sent as one message, received or EOF.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import pickle
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from tj_monitor.parent_death import die_with_parent
from tj_monitor.processes import stop_tree

__all__ = ["ChildFailed", "ChildOutcome", "describe_exit", "run_in_child"]

log = logging.getLogger(__name__)


def describe_exit(exitcode: int | None) -> str:
    """``"was killed by SIGKILL"``, ``"exited (exit code 3)"``: a process's end, for messages
    (``exitcode`` as ``multiprocessing`` gives it: minus the signal number when killed)."""
    if exitcode is None:
        return "is still running"
    if exitcode < 0:
        try:
            return f"was killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"was killed by signal {-exitcode}"
    return f"exited (exit code {exitcode})"


class ChildFailed(RuntimeError):
    """The child died without a result (``exitcode``), or failed in a way that cannot come back
    as itself: an exception or a result that does not pickle (its text in ``child_traceback``)."""

    def __init__(self, message: str, *, exitcode: int | None = None,
                 child_traceback: str = "") -> None:  # fmt: skip
        super().__init__(message)
        self.exitcode = exitcode
        self.child_traceback = child_traceback

    def __reduce__(self) -> tuple[Any, ...]:  # picklable with its fields (nested children)
        return (_rebuild_failed, (str(self), self.exitcode, self.child_traceback))


def _rebuild_failed(message: str, exitcode: int | None, child_traceback: str) -> ChildFailed:
    return ChildFailed(message, exitcode=exitcode, child_traceback=child_traceback)


@dataclass(frozen=True, kw_only=True)
class ChildOutcome:
    """How a call in a child ended: ``value`` when ``ok``, else the exception's ``summary``
    (``"ValueError: boom"``), its ``traceback`` text, the pickled exception (``exception()``)
    and ``when`` (``time.time()`` of the failure)."""

    ok: bool
    value: Any = None
    summary: str = ""
    traceback: str = ""
    error: bytes | None = None
    when: float = 0.0

    @classmethod
    def capture(cls, fn: Callable[..., Any], *args: Any) -> ChildOutcome:
        """Call ``fn(*args)``; every exception (KeyboardInterrupt and SystemExit too) is kept."""
        try:
            return cls(ok=True, value=fn(*args))
        except BaseException as exc:  # everything goes back to the parent
            try:
                error: bytes | None = pickle.dumps(exc)
            except Exception:
                error = None
            return cls._failed(exc, f"{type(exc).__name__}: {exc}", error)

    @classmethod
    def _failed(cls, exc: BaseException, summary: str, error: bytes | None) -> ChildOutcome:
        return cls(ok=False, summary=summary, traceback="".join(traceback.format_exception(exc)),
                   error=error, when=time.time())  # fmt: skip

    def send(self, conn: Connection) -> None:
        """One message on ``conn``, then close it; an unpicklable value is sent as a failure."""
        try:
            data = pickle.dumps(self)
        except Exception as exc:
            text = f"returned an unpicklable result: {type(exc).__name__}: {exc}"
            data = pickle.dumps(self._failed(exc, text, None))
        try:
            conn.send_bytes(data)
        finally:
            conn.close()

    @staticmethod
    def receive(conn: Connection) -> ChildOutcome | None:
        """The child's outcome, or None when it closed the pipe without one (it died)."""
        try:
            return pickle.loads(conn.recv_bytes())
        except EOFError:
            return None

    def exception(self) -> BaseException | None:
        """The child's exception as itself, when it pickled and unpickles here."""
        try:
            exc = pickle.loads(self.error) if self.error is not None else None
        except Exception:
            return None
        return exc if isinstance(exc, BaseException) else None


def _child_main(conn: Connection, parent: int, death_signal: int,
                fn: Callable[..., Any], args: tuple[Any, ...]) -> None:  # fmt: skip
    die_with_parent(parent, death_signal)
    ChildOutcome.capture(fn, *args).send(conn)


def _await(proc: Any, conn: Connection, timeout_s: float | None) -> ChildOutcome | None:
    """The outcome, or None when the child ended without one; TimeoutError after ``timeout_s``."""
    ready = wait([conn, proc.sentinel], timeout=timeout_s)
    if not ready:
        raise TimeoutError(f"{proc.name} (pid {proc.pid}) still running after {timeout_s} s")
    # a child that exited has sent everything it will: read it (a grandchild holding the pipe
    # open must not leave us waiting for an EOF)
    if conn in ready or conn.poll():
        return ChildOutcome.receive(conn)
    return None


@contextlib.contextmanager
def _environment(extra: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` while a child is spawned (it copies the environment at
    start), then as it was."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update({k: str(v) for k, v in extra.items()})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_in_child(
    fn: Callable[..., Any],
    *args: Any,
    name: str | None = None,
    timeout_s: float | None = None,
    grace_s: float = 10.0,
    stop_signal: int = signal.SIGTERM,
    death_signal: int = signal.SIGTERM,
    exit_grace_s: float = 30.0,
    env: Mapping[str, str] | None = None,
) -> Any:
    """``fn(*args)`` in a spawned child: its return value, or its exception re-raised here.

    ``fn`` and ``args`` must pickle (a module-level function). ``name`` names the child in
    messages (default ``fn.__name__``). ``timeout_s`` bounds the call (``TimeoutError``). When
    the wait here is interrupted (an exception: Ctrl-C, a signal handler's, the timeout) the
    child's tree gets ``stop_signal`` and ``grace_s`` to exit, then SIGKILL. ``death_signal``:
    what the child gets when this process dies. A child still running ``exit_grace_s`` after
    sending its outcome (a stuck thread, a hung teardown) is stopped the same way. ``env``:
    variables the child starts with on top of this process's (e.g. ``PYTHONHASHSEED``, which
    must be set before an interpreter starts: a seeded run repeats its set and dict orders);
    this process's own environment is left as it was.
    """
    label = name or getattr(fn, "__name__", "child")
    ctx = mp.get_context("spawn")
    reader, writer = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child_main, name=label,
                       args=(writer, os.getpid(), death_signal, fn, args))  # fmt: skip
    try:
        with _environment(env or {}):
            proc.start()
    except (pickle.PicklingError, AttributeError, TypeError) as exc:
        reader.close()
        raise TypeError(f"run_in_child: {label} and its arguments must pickle (a module-level "
                        f"function; the child is spawned, not forked): {exc}") from exc  # fmt: skip
    finally:
        writer.close()
    try:
        outcome = _await(proc, reader, timeout_s)
        proc.join(exit_grace_s)
        if proc.is_alive():
            log.warning("%s (pid %s) did not exit %.0f s after its outcome: stopping it",
                        label, proc.pid, exit_grace_s)  # fmt: skip
            stop_tree([proc], grace_s, sig=stop_signal)
    except BaseException:  # interrupted here: the child must not run on
        log.info("stopping %s (pid %s)", label, proc.pid)
        stop_tree([proc], grace_s, sig=stop_signal)
        raise
    finally:
        reader.close()
    if outcome is None:
        raise ChildFailed(f"{label} (pid {proc.pid}) {describe_exit(proc.exitcode)} without a "
                          f"result", exitcode=proc.exitcode)  # fmt: skip
    if outcome.ok:
        return outcome.value
    exc = outcome.exception()
    if exc is None:
        raise ChildFailed(f"{label} (pid {proc.pid}) failed: {outcome.summary}\n{outcome.traceback}",
                          child_traceback=outcome.traceback)  # fmt: skip
    exc.add_note(f"--- in child {label} (pid {proc.pid}) ---\n{outcome.traceback.rstrip()}")
    raise exc
