"""Process-tree memory: PSS / USS summed over a process and all its descendants (psutil).

PSS splits each shared page among the processes mapping it, so its sum over a tree (trainer +
DataLoader workers) is what the tree costs; RSS counts shared pages once per process and
overstates forked workers. USS is what a process would free on exit: the cost of one more worker.
Reading PSS makes the kernel walk every resident page (~12 ms of CPU per GiB), so samplers here
poll at a bounded interval. (tj-monitor has the full monitor; tj-data imports no tj package.)
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from types import TracebackType

import psutil

__all__ = ["PeakPssSampler", "TreeMemory", "tree_memory"]

_GONE = (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied, FileNotFoundError)


@dataclass(kw_only=True, frozen=True)
class TreeMemory:
    """PSS, USS and RSS in bytes summed over `processes` processes of one tree."""

    pss: int
    uss: int
    rss: int
    processes: int


def tree_memory(pid: int | None = None) -> TreeMemory:
    """Memory of process `pid` (default: this one) and its descendants; processes that exit
    while being read are skipped."""
    root = psutil.Process(os.getpid() if pid is None else pid)
    try:
        procs = [root, *root.children(recursive=True)]
    except _GONE:
        procs = [root]
    pss = uss = rss = n = 0
    for p in procs:
        try:
            info = p.memory_full_info()
        except _GONE:
            continue
        if info.rss == 0:  # zombie: nothing mapped any more
            continue
        pss, uss, rss, n = pss + info.pss, uss + info.uss, rss + info.rss, n + 1
    return TreeMemory(pss=pss, uss=uss, rss=rss, processes=n)


class PeakPssSampler:
    """Polls `tree_memory()` in a daemon thread every `interval` seconds and keeps the peak PSS
    (and the peak process count). Use as a context manager; `peak_pss` after exit (or while
    running) includes a final read taken at exit."""

    def __init__(self, interval: float = 0.2, pid: int | None = None) -> None:
        if interval <= 0:
            raise ValueError(f"interval={interval}: expected > 0")
        self.interval, self.pid = interval, pid
        self.peak_pss = 0
        self.peak_processes = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> TreeMemory:
        m = tree_memory(self.pid)
        self.peak_pss = max(self.peak_pss, m.pss)
        self.peak_processes = max(self.peak_processes, m.processes)
        self.samples += 1
        return m

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = time.monotonic()
            self.sample()
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - t0)))

    def __enter__(self) -> PeakPssSampler:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tj-data-pss", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()
