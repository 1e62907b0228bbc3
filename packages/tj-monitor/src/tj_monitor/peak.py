"""PeakPssSampler: the peak process-tree PSS of a block of code, polled on a daemon thread.

For measurements that need one number, "how high did this tree go" (a loader candidate in
tj-data's autotune, a benchmark, a test), without ``MemoryMonitor``'s system and GPU reads,
history and thresholds. Each poll is a ``TreeSampler`` read: by default PSS is read on every
poll (the interval bounds the cost); a ``max_cpu_fraction`` below 1 reads it within that CPU
budget and keeps the peak of ``pss_estimate`` (an upper bound) in between.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from types import TracebackType

import psutil

from tj_monitor.tree import TreeMemory, TreeSampler

__all__ = ["PeakPssSampler"]


class PeakPssSampler:
    """Polls process ``pid``'s tree (default: this process) every ``interval`` seconds and keeps
    the peak PSS, USS and process count; ``with PeakPssSampler() as s: ...`` then ``s.peak_pss``.

    ``sample()`` takes one reading now (the thread calls it; exit takes a final one, so a block
    shorter than ``interval`` still has a peak). ``peak_pss`` may be read while it runs.
    """

    def __init__(
        self,
        interval: float = 0.2,
        pid: int | None = None,
        *,
        max_cpu_fraction: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval: must be > 0, got {interval!r}")
        self.interval, self.pid = interval, pid
        self._tree = TreeSampler(pid, max_cpu_fraction=max_cpu_fraction, clock=clock)
        self._clock = clock
        self._lock = threading.Lock()
        self.peak_pss = 0
        self.peak_uss = 0  # the tree's private memory: what a measured block itself allocated
        self.peak_processes = 0
        self.samples = 0
        self.last: TreeMemory | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def sample(self) -> TreeMemory:
        """One reading, folded into the peaks; raises ``psutil.NoSuchProcess`` if the root is gone."""
        tree = self._tree.read()
        with self._lock:
            self.peak_pss = max(self.peak_pss, tree.pss_estimate)
            self.peak_uss = max(self.peak_uss, tree.uss)
            self.peak_processes = max(self.peak_processes, tree.processes)
            self.samples += 1
            self.last = tree
        return tree

    def _run(self) -> None:
        while not self._stop.is_set():
            t0 = self._clock()
            try:
                self.sample()
            except psutil.NoSuchProcess:  # the watched root exited: nothing left to poll
                return
            self._stop.wait(max(0.0, self.interval - (self._clock() - t0)))

    def start(self) -> PeakPssSampler:
        if self._thread is not None:
            raise RuntimeError("PeakPssSampler already started")
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="tj-peak-pss", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop the thread and take a final reading (none if the watched root has exited)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        with contextlib.suppress(psutil.NoSuchProcess):
            self.sample()

    def __enter__(self) -> PeakPssSampler:
        return self.start()

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
