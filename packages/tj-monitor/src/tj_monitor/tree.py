"""Process-tree memory: PSS, USS and RSS summed over a process and all its descendants.

PSS (proportional set size) splits each shared page among the processes that map it, so the sum
over a tree (trainer + DataLoader workers + SUMO + Ray workers) is what the tree really costs;
RSS counts shared pages once per process and overstates forked workers many times over. USS is
what would be freed if the process exited. psutil reads ``/proc/<pid>/smaps_rollup``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

import psutil

__all__ = ["ProcessMemory", "TreeMemory", "measure_processes", "tree_memory"]

# A process can exit, turn zombie or deny access between listing and reading it.
_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, FileNotFoundError)


@dataclass(frozen=True, kw_only=True)
class ProcessMemory:
    """Memory of one process in bytes."""

    pid: int
    name: str
    pss: int
    uss: int
    rss: int
    swap: int


@dataclass(frozen=True, kw_only=True)
class TreeMemory:
    """Memory of a process tree in bytes, summed over the processes that could be read.

    ``processes`` counts those read (their ids in ``pids``); ``skipped`` those that exited or
    denied access during the sample (not in the sums). ``per_process`` is filled on request.
    """

    root_pid: int
    pss: int
    uss: int
    rss: int
    swap: int
    processes: int
    skipped: int
    pids: tuple[int, ...] = ()
    per_process: tuple[ProcessMemory, ...] = ()


def measure_processes(
    root_pid: int, procs: Iterable[psutil.Process], *, per_process: bool = False
) -> TreeMemory:
    """Sum ``memory_full_info()`` over ``procs``; a process that is gone is skipped and counted."""
    pss = uss = rss = swap = count = skipped = 0
    details: list[ProcessMemory] = []
    pids: list[int] = []
    for proc in procs:
        try:
            with proc.oneshot():
                info = proc.memory_full_info()
                name = proc.name() if per_process else ""
        except _GONE:
            skipped += 1
            continue
        if info.rss == 0:  # exited but not yet reaped (zombie): nothing mapped any more
            skipped += 1
            continue
        pss += info.pss
        uss += info.uss
        rss += info.rss
        swap += info.swap
        count += 1
        pids.append(proc.pid)
        if per_process:
            details.append(
                ProcessMemory(
                    pid=proc.pid,
                    name=name,
                    pss=info.pss,
                    uss=info.uss,
                    rss=info.rss,
                    swap=info.swap,
                )
            )
    details.sort(key=lambda p: p.pss, reverse=True)
    return TreeMemory(
        root_pid=root_pid,
        pss=pss,
        uss=uss,
        rss=rss,
        swap=swap,
        processes=count,
        skipped=skipped,
        pids=tuple(pids),
        per_process=tuple(details),
    )


def tree_memory(pid: int | None = None, *, per_process: bool = False) -> TreeMemory:
    """Memory of process ``pid`` (default: this one) and all its descendants.

    Raises ``psutil.NoSuchProcess`` only when the root itself does not exist; descendants that
    vanish mid-sample are skipped and counted in ``skipped``.
    """
    root_pid = os.getpid() if pid is None else pid
    root = psutil.Process(root_pid)
    try:
        children = root.children(recursive=True)
    except _GONE:
        children = []
    return measure_processes(root_pid, [root, *children], per_process=per_process)
