"""Stopping a set of processes for good: a tree's live members, processes that name a session
folder, a bounded wait, then SIGKILL of what is left (used by ``RaySession``'s shutdown)."""

from __future__ import annotations

import logging
import os

import psutil

__all__ = ["processes_naming", "stop_processes", "with_descendants"]

log = logging.getLogger(__name__)
_KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the kernel to reap


def with_descendants(roots: list[psutil.Process]) -> list[psutil.Process]:
    """``roots`` still running and all their descendants (Ray's workers, their SUMOs)."""
    found: dict[int, psutil.Process] = {}
    for root in roots:
        try:
            if not root.is_running():
                continue
            found[root.pid] = root
            for child in root.children(recursive=True):
                found[child.pid] = child
        except psutil.Error:
            continue
    return list(found.values())


def processes_naming(session_dir: str) -> list[psutil.Process]:
    """Processes of this user whose command line names ``session_dir`` (e.g. Ray's raylet,
    helpers and workers of one session), this process and its ancestors excepted."""
    me = psutil.Process()
    skip = {me.pid, *(p.pid for p in me.parents())}
    uid = os.getuid()
    found = []
    for proc in psutil.process_iter(["cmdline", "uids"]):
        try:
            if proc.pid in skip or proc.info["uids"] is None or proc.info["uids"].real != uid:
                continue
            if any(session_dir in arg for arg in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def stop_processes(
    processes: list[psutil.Process], timeout_s: float
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Wait up to ``timeout_s`` for ``processes`` to exit, SIGKILL the rest; ``(killed, left)``."""
    if not processes:
        return (), ()
    _, alive = psutil.wait_procs(processes, timeout=timeout_s)
    killed = []
    for proc in alive:
        try:
            proc.kill()
            killed.append(proc.pid)
        except psutil.NoSuchProcess:
            continue
        except psutil.Error as err:
            log.warning("cannot kill %s: %s", proc.pid, err)
    if killed:
        log.warning("killed processes that outlived their shutdown: %s", killed)
    _, left = psutil.wait_procs(alive, timeout=_KILL_WAIT_S)
    return tuple(killed), tuple(p.pid for p in left)
