"""Stopping processes for good: the project's one set of reap rules.

- A process is named by whatever handle its owner holds: a ``multiprocessing`` process, a
  ``subprocess.Popen``, a ``psutil.Process`` or a pid. Each is waited on through its own handle,
  so it is reaped by its owner's API (psutil reaping a ``multiprocessing`` child behind its back
  leaves it "alive" there forever).
- ``stop_tree``: the roots get ``sig``; their descendants, found before (the roots' deaths
  reparent them) and again at the deadline, get the same grace to go away through the roots' own
  cleanup (an env closing its SUMO, a driver shutting Ray down).
- Whatever is still alive after the grace is SIGKILLed and waited on for a bounded time; a
  zombie whose parent is not us counts as gone (its parent reaps it). Nothing waits forever.
- ``processes_naming`` finds processes by a folder on their command line (a Ray session's
  temp dir): the processes a tree walk misses because they were reparented.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from multiprocessing.process import BaseProcess
from typing import NamedTuple

import psutil

__all__ = [
    "ProcessHandle",
    "Stopped",
    "processes_naming",
    "stop_processes",
    "stop_tree",
    "with_descendants",
]

log = logging.getLogger(__name__)

ProcessHandle = BaseProcess | subprocess.Popen | psutil.Process | int  # type: ignore[type-arg]
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the kernel to take them down
_POLL_MAX_S = 0.05  # the longest pause between two looks while waiting


class Stopped(NamedTuple):
    """What a stop did: pids SIGKILLed after the grace, pids alive even after that."""

    killed: tuple[int, ...]
    left: tuple[int, ...]


class _Handle:
    """One process behind its owner's handle: signal, poll (reaping our own children)."""

    def __init__(self, handle: ProcessHandle) -> None:
        if isinstance(handle, int):
            handle = psutil.Process(handle)
        self.handle = handle
        self.pid: int = handle.pid  # type: ignore[assignment]

    def alive(self) -> bool:
        h = self.handle
        if isinstance(h, BaseProcess):
            return h.is_alive()  # waitpid(WNOHANG) through multiprocessing
        if isinstance(h, subprocess.Popen):
            return h.poll() is None
        try:
            if not h.is_running():  # gone, or its pid reused
                return False
            h.wait(timeout=0)  # reaps our own exited child; a non-child: exists -> timeout
            return False
        except psutil.TimeoutExpired:
            pass
        except (psutil.NoSuchProcess, ChildProcessError):
            return False
        try:
            if h.status() != psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            return False
        # a zombie: someone else's (its parent reaps), or our child that died between the wait
        # above and the status read (SIGKILL lands a moment late on a loaded machine): reap it
        with contextlib.suppress(psutil.Error, ChildProcessError):
            h.wait(timeout=0)
        return False

    def send(self, sig: int) -> bool:
        """``sig`` to the process if it still runs; False when it could not be sent."""
        h = self.handle
        try:
            if isinstance(h, BaseProcess):
                if not h.is_alive():
                    return False
                os.kill(self.pid, sig)
            else:
                h.send_signal(sig)  # Popen and psutil both check that the pid is still theirs
            return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            return False
        except (PermissionError, psutil.AccessDenied) as err:
            log.warning("cannot signal %s: %s", self.pid, err)
            return False

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []


def _handles(processes: Iterable[ProcessHandle]) -> list[_Handle]:
    found: dict[int, _Handle] = {}
    for proc in processes:
        if getattr(proc, "pid", 0) is None:  # a multiprocessing process never started
            continue
        try:
            handle = _Handle(proc)
        except psutil.NoSuchProcess:
            continue
        found.setdefault(handle.pid, handle)
    return list(found.values())


def _wait(handles: Sequence[_Handle], deadline: float) -> list[_Handle]:
    """Poll until every handle is gone or ``deadline``; the ones still alive."""
    pause = 0.001
    alive = [h for h in handles if h.alive()]
    while alive and (left := deadline - time.monotonic()) > 0:
        time.sleep(min(pause, left))
        pause = min(pause * 2, _POLL_MAX_S)
        alive = [h for h in alive if h.alive()]
    return alive


def _stop(
    signalled: list[_Handle], waited: list[_Handle], grace_s: float, sig: int | None, tree: bool
) -> Stopped:
    if sig is not None:
        for handle in signalled:
            handle.send(sig)
    deadline = time.monotonic() + grace_s
    everyone = {h.pid: h for h in (*signalled, *waited)}
    alive = _wait(list(everyone.values()), deadline)
    if not alive:
        return Stopped((), ())
    # with a tree, children the surviving roots started during the grace die with them
    for handle in [h for h in alive if tree and h in signalled]:
        for extra in _handles(handle.descendants()):
            if extra.pid not in everyone:
                everyone[extra.pid] = extra
                alive.append(extra)
    killed = tuple(h.pid for h in alive if h.send(signal.SIGKILL))
    if killed:
        log.warning("killed processes that outlived their %.1f s grace: %s", grace_s, killed)
    left = _wait(alive, time.monotonic() + KILL_WAIT_S)
    return Stopped(killed, tuple(h.pid for h in left))


def stop_processes(
    processes: Iterable[ProcessHandle], grace_s: float, *, sig: int | None = signal.SIGTERM
) -> Stopped:
    """Send ``sig`` to each of ``processes`` (``None``: they were already asked, e.g. by
    ``ray.shutdown``), wait up to ``grace_s`` for them to exit, SIGKILL the rest and reap them
    (at most ``KILL_WAIT_S`` more). Their descendants are not looked at: see ``stop_tree``."""
    return _stop(_handles(processes), [], grace_s, sig, tree=False)


def stop_tree(
    roots: Iterable[ProcessHandle], grace_s: float = 3.0, *, sig: int | None = signal.SIGTERM
) -> Stopped:
    """Stop ``roots`` and all their descendants: ``sig`` to the roots, up to ``grace_s`` for the
    whole tree to exit (a root's cleanup stops its own children), then SIGKILL for what is left,
    reaped. Roots that already exited are only reaped."""
    handles = _handles(roots)
    pids = {h.pid for h in handles}
    below = _handles(p for h in handles if h.alive() for p in h.descendants() if p.pid not in pids)
    return _stop(handles, below, grace_s, sig, tree=True)


def with_descendants(roots: list[psutil.Process]) -> list[psutil.Process]:
    """``roots`` still running and all their descendants (Ray's workers, their SUMOs)."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        with contextlib.suppress(psutil.Error):
            if not root.is_running():
                continue
            found[root.pid] = root
            for child in root.children(recursive=True):
                found[child.pid] = child
    return list(found.values())


def processes_naming(text: str) -> list[psutil.Process]:
    """Processes of this user whose command line names ``text`` (e.g. Ray's raylet, helpers and
    workers of one session folder), this process and its ancestors excepted."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            if proc.pid in skip or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if any(text in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found
