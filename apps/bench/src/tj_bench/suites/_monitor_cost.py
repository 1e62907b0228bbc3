"""What MemoryMonitor costs: its sampling thread's CPU per second of wall time, and the CPU of
single readings against the usual alternatives.

The thread's CPU is read twice: the monitor's own count (``time.thread_time`` around each sample,
``MonitorStats.cpu_seconds``) and the kernel's (psutil's per-thread user + system time), so a
cost the monitor does not see (its wake-ups, the GIL) still shows.
"""

from __future__ import annotations

import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

__all__ = ["READINGS", "per_sample_costs", "sampling_run"]

THREAD_NAME = "tj-memory-monitor"  # the name MemoryMonitor gives its sampling thread


def _kernel_cpu(tid: int) -> float:
    for t in psutil.Process().threads():
        if t.id == tid:
            return t.user_time + t.system_time
    raise RuntimeError(f"thread {tid} is gone")


def _new_thread(before: set[int]) -> int:
    for t in threading.enumerate():
        if t.name == THREAD_NAME and t.native_id is not None and t.native_id not in before:
            return t.native_id
    raise RuntimeError(f"no new {THREAD_NAME!r} thread after MemoryMonitor.start()")


def sampling_run(interval: float, duration: float, fraction: float) -> dict[str, float]:
    """Run a MemoryMonitor (``interval_s``, ``max_cpu_fraction``) for ``duration`` s; its cost."""
    from tj_monitor import MemoryMonitor, MonitorConfig

    mon = MemoryMonitor(MonitorConfig(interval_s=interval, max_cpu_fraction=fraction))
    before = {t.native_id for t in threading.enumerate() if t.native_id is not None}
    mon.start()
    try:
        tid = _new_thread(before)
        t0 = time.monotonic()
        time.sleep(duration)
        wall = time.monotonic() - t0
        kernel = _kernel_cpu(tid)
    finally:
        mon.stop()
    st = mon.stats
    return {"samples": st.samples, "pss_reads": st.pss_reads, "cpu_pct_core": 100 * st.cpu_seconds / wall,
            "kernel_pct_core": 100 * kernel / wall}  # fmt: skip


def _rss_only_tree() -> int:
    """The usual way: psutil's recursive ``children()`` and ``memory_info().rss``."""
    root = psutil.Process()
    total = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _readings() -> dict[str, Callable[[], Any]]:
    from tj_monitor import MemoryMonitor, MonitorConfig, tree_memory

    every = MemoryMonitor(MonitorConfig(max_cpu_fraction=1.0))
    between = MemoryMonitor(MonitorConfig(max_cpu_fraction=1e-9))
    between.measure()  # its one PSS read; every later call carries PSS forward
    return {"with_pss": every.measure, "between_pss": between.measure, "tree_pss_uss": tree_memory,
            "tree_rss_psutil": _rss_only_tree, "system": psutil.virtual_memory}  # fmt: skip


READINGS = {
    "with_pss": "a sample with a PSS read (PSS/USS + RSS + system + cgroup + shm)",
    "between_pss": "a sample between PSS reads (RSS + system + cgroup + shm)",
    "tree_pss_uss": "tree PSS/USS only (tree_memory)",
    "tree_rss_psutil": "tree RSS, psutil children() + memory_info (the usual way)",
    "system": "system only (psutil.virtual_memory)",
}


def per_sample_costs(samples: int) -> dict[str, float]:
    """CPU ms of one reading of each kind: median of ``samples`` interleaved rounds."""
    readings = _readings()
    costs: dict[str, list[float]] = {k: [] for k in readings}
    for _ in range(samples):  # interleaved, so contention hits every kind alike
        for name, fn in readings.items():
            t0 = time.thread_time()
            fn()
            costs[name].append(time.thread_time() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in costs.items()}
