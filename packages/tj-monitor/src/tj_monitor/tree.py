"""Process-tree memory: PSS, USS and RSS summed over a process and all its descendants.

PSS (proportional set size) splits each shared page among the processes that map it, so the sum
over a tree (trainer + DataLoader workers + SUMO + Ray workers) is what the tree really costs;
RSS counts shared pages once per process and overstates forked workers many times over. USS is
what would be freed if the process exited. psutil reads ``/proc/<pid>/smaps_rollup``.

Descendants are found through ``/proc/<pid>/task/<tid>/children`` rather than psutil's
``children(recursive=True)``, which reads ``/proc/*/stat`` of every process on the machine:
measured 0.07 ms against 1.5 ms per sample with 96 processes running (the monitor benchmark's
machine). psutil is the fallback where the kernel lacks that file (CONFIG_PROC_CHILDREN).

PSS is not cheap: the kernel walks every resident page to read it (about 12 ms of CPU per GiB of
4 KiB pages, measured by the monitor suite of apps/bench). ``TreeSampler`` therefore reads RSS (a counter,
microseconds) on every call and PSS/USS only as often as a CPU budget allows, carrying the last
values forward with their age and a conservative estimate (``pss_estimate``) in between.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

__all__ = ["ProcessMemory", "TreeMemory", "TreeSampler", "measure_processes", "tree_memory"]

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
    ``rss`` is always fresh; ``pss``/``uss``/``swap`` were read ``pss_age_s`` seconds ago
    (0 when fresh), when the tree's RSS was ``rss_at_pss``.
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
    pss_age_s: float = 0.0
    rss_at_pss: int | None = None

    @property
    def pss_estimate(self) -> int:
        """``pss`` plus the RSS change since it was read: exact when fresh, and an upper bound
        for growth in between (new private pages count fully in both; new shared ones more in
        RSS), so thresholds never react late because PSS was stale."""
        if self.rss_at_pss is None:
            return self.pss
        return max(self.pss + self.rss - self.rss_at_pss, 0)


def measure_processes(
    root_pid: int, procs: Iterable[psutil.Process], *, per_process: bool = False, full: bool = True
) -> TreeMemory:
    """Sum ``memory_full_info()`` over ``procs``; a process that is gone is skipped and counted.

    ``full=False`` reads only RSS (``memory_info``, cheap); PSS/USS/swap are then 0.
    """
    pss = uss = rss = swap = count = skipped = 0
    details: list[ProcessMemory] = []
    pids: list[int] = []
    for proc in procs:
        try:
            with proc.oneshot():
                info = proc.memory_full_info() if full else proc.memory_info()
                name = proc.name() if per_process else ""
        except _GONE:
            skipped += 1
            continue
        if info.rss == 0:  # exited but not yet reaped (zombie): nothing mapped any more
            skipped += 1
            continue
        p_pss, p_uss, p_swap = (info.pss, info.uss, info.swap) if full else (0, 0, 0)
        pss += p_pss
        uss += p_uss
        rss += info.rss
        swap += p_swap
        count += 1
        pids.append(proc.pid)
        if per_process:
            details.append(
                ProcessMemory(
                    pid=proc.pid,
                    name=name,
                    pss=p_pss,
                    uss=p_uss,
                    rss=info.rss,
                    swap=p_swap,
                )
            )
    details.sort(key=lambda p: (p.pss, p.rss), reverse=True)
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


def _descendants(root: int) -> list[int] | None:
    """Pids below ``root`` from procfs ``children`` files; ``None`` if the kernel lacks them."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return None
    found: list[int] = []
    stack = [root]
    while stack:
        pid = stack.pop()
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:  # exited since its parent listed it
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    kids = [int(c) for c in f.read().split()]
            except OSError:  # the thread exited
                continue
            found.extend(kids)
            stack.extend(kids)
    return found


def _processes(pids: list[int]) -> list[psutil.Process]:
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except _GONE:
            continue
    return procs


def tree_memory(
    pid: int | None = None, *, per_process: bool = False, full: bool = True
) -> TreeMemory:
    """Memory of process ``pid`` (default: this one) and all its descendants.

    ``full=False``: RSS only (no page walk); PSS/USS/swap are 0.

    Raises ``psutil.NoSuchProcess`` only when the root itself does not exist; descendants that
    vanish mid-sample are skipped and counted in ``skipped``.
    """
    root_pid = os.getpid() if pid is None else pid
    root = psutil.Process(root_pid)
    pids = _descendants(root_pid)
    if pids is not None:
        children = _processes(pids)
        vanished = len(pids) - len(children)
    else:
        try:
            children = root.children(recursive=True)
        except _GONE:
            children = []
        vanished = 0
    tree = measure_processes(root_pid, [root, *children], per_process=per_process, full=full)
    if vanished:
        tree = dataclasses.replace(tree, skipped=tree.skipped + vanished)
    return tree


class TreeSampler:
    """Reads a tree's RSS on every call and its PSS/USS within a CPU budget.

    After a full read that cost ``c`` CPU seconds, the next one waits until
    ``c / max_cpu_fraction`` seconds have passed since it started; calls in between return fresh
    RSS with the last PSS/USS carried forward (``pss_age_s`` > 0). ``max_cpu_fraction=1`` reads
    PSS on every call.

    ``clock`` (wall seconds) decides when the next full read is due; ``cpu_clock`` (CPU seconds
    of the calling thread) measures what a full read cost. Both are parameters so tests fix the
    budget's arithmetic instead of depending on how fast the machine reads PSS.
    """

    def __init__(
        self,
        pid: int | None = None,
        *,
        max_cpu_fraction: float = 0.005,
        per_process: bool = False,
        clock: Callable[[], float] = time.monotonic,
        cpu_clock: Callable[[], float] = time.thread_time,
    ) -> None:
        if not 0 < max_cpu_fraction <= 1:
            raise ValueError(f"max_cpu_fraction: must be in (0, 1], got {max_cpu_fraction!r}")
        self.pid = pid
        self.max_cpu_fraction = max_cpu_fraction
        self.per_process = per_process
        self._clock = clock
        self._cpu_clock = cpu_clock
        self._last: TreeMemory | None = None
        self._last_at = 0.0
        self._next_full = -math.inf
        self.full_reads = 0
        self.full_cpu_s = 0.0

    def read(self) -> TreeMemory:
        started = self._clock()
        if self._last is None or started >= self._next_full:
            t0 = self._cpu_clock()
            tree = tree_memory(self.pid, per_process=self.per_process, full=True)
            cost = self._cpu_clock() - t0
            self.full_reads += 1
            self.full_cpu_s += cost
            self._last, self._last_at = tree, started
            self._next_full = started + cost / self.max_cpu_fraction
            return tree
        last = self._last
        tree = tree_memory(self.pid, per_process=False, full=False)
        return dataclasses.replace(
            tree,
            pss=last.pss,
            uss=last.uss,
            swap=last.swap,
            per_process=last.per_process,
            pss_age_s=started - self._last_at,
            rss_at_pss=last.rss,
        )
