"""Suite ``monitor``: what tj-monitor's MemoryMonitor costs in a realistic process tree.

The tree: this process (torch imported, ``main_mib`` MiB of heap, as in training) plus
``children`` worker processes holding ``child_mib`` MiB each, like DataLoader workers. Each
repetition runs a monitor for ``duration`` s in the default configuration (PSS re-read within a
CPU budget), then one reading PSS on every sample, then times single readings interleaved.
Target (tj-monitor's README): the default configuration under 1% of one core at a 1 s interval.

The sampling thread's CPU is read twice: the monitor's own count (``time.thread_time`` around
each sample, ``MonitorStats.cpu_seconds``) and the kernel's (psutil's per-thread user + system
time), so a cost the monitor does not see (its wake-ups, the GIL) still shows. The children hold
their MiB written with ``bytes * n`` (malloc'd 4 KiB pages like a trainer's heap: numpy would
madvise huge pages, which smaps_rollup walks 512x faster and would flatter the monitor) and wait
on stdin, like idle DataLoader workers.
"""

from __future__ import annotations

import contextlib
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil

from tj_bench.measure import interleaved, timed
from tj_bench.suite import SizedOptions, Suite, SuiteContext, sized_help
from tj_monitor import MemoryMonitor, MonitorConfig, stop_processes, tree_memory

__all__ = ["CHILD", "READINGS", "SUITE", "TARGET_PCT_CORE", "held_heap", "per_sample_costs",
           "sampling_run", "worker_children"]  # fmt: skip

TARGET_PCT_CORE = 1.0
SIZED: SizedOptions = {
    "duration": (20.0, 2.0, "seconds per monitor run"), "interval": (1.0, 0.5, "monitor interval_s"),
    "children": (4, 1, "worker-like child processes"), "child_mib": (256, 32, "MiB each child holds"),
    "main_mib": (1024, 64, "MiB of heap this process holds"),
    "samples": (30, 5, "interleaved rounds per single-reading cost"),
}  # fmt: skip
OPTIONS = {
    **sized_help(SIZED),
    "max_cpu_fraction": "PSS budget of the default configuration (default: MonitorConfig's)",
    "torch": "import torch in this process, as a trainer does (default true)",
}
CONFIGS = ("default", "pss_every_sample")


def _kernel_cpu(tid: int | None) -> float:
    for t in psutil.Process().threads():
        if t.id == tid:
            return t.user_time + t.system_time
    raise RuntimeError(f"thread {tid} is gone")


def sampling_run(interval: float, duration: float, fraction: float) -> dict[str, float]:
    """Run a MemoryMonitor (``interval_s``, ``max_cpu_fraction``) for ``duration`` s; its cost."""
    mon = MemoryMonitor(MonitorConfig(interval_s=interval, max_cpu_fraction=fraction))
    mon.start()
    try:
        tid = mon.thread_id
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
    """CPU ms of one reading of each kind: median of ``samples`` interleaved rounds (contention
    hits every kind alike)."""
    cases = {k: lambda fn=fn: timed(fn, time.thread_time)[1] for k, fn in _readings().items()}
    return {k: statistics.median(v) * 1e3 for k, v in interleaved(cases, range(samples)).items()}


CHILD = "import sys; a = b'x' * ({n} * 2**20); print('ok', flush=True); sys.stdin.read()"


def held_heap(mib: int) -> bytes:
    """``mib`` MiB of written heap in 4 KiB pages (keep the reference while measuring)."""
    return b"x" * (mib * 2**20)


@contextmanager
def worker_children(count: int, mib: int) -> Iterator[list[subprocess.Popen[str]]]:
    """Start ``count`` children holding ``mib`` MiB each; yield once all of them hold it."""
    procs: list[subprocess.Popen[str]] = []
    try:
        for _ in range(count):
            procs.append(subprocess.Popen([sys.executable, "-c", CHILD.format(n=mib)],
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))  # fmt: skip
        for proc in procs:
            assert proc.stdout is not None
            line = proc.stdout.readline().strip()
            if line != "ok":
                raise RuntimeError(f"monitor worker child {proc.pid} did not start ({line!r})")
        yield procs
    finally:
        stop_processes(procs, 5.0, sig=signal.SIGKILL)  # killed and reaped
        for pipe in (p for proc in procs for p in (proc.stdin, proc.stdout) if p is not None):
            pipe.close()


def _repetition(ctx: SuiteContext, o: dict[str, Any], fraction: float) -> None:
    """Both monitor configurations, then the single readings, interleaved in one repetition."""
    for config, frac in zip(CONFIGS, (fraction, 1.0), strict=True):
        r = sampling_run(o["interval"], o["duration"], frac)
        base = f"sampling/{config}"
        for what in ("cpu_pct_core", "kernel_pct_core"):
            ctx.record(f"{base}/{what}", r[what], unit="% of a core", better="lower")
        ctx.record(f"{base}/samples", r["samples"], unit="samples")
        ctx.record(f"{base}/pss_reads", r["pss_reads"], unit="reads")
    for name, ms in per_sample_costs(o["samples"]).items():
        ctx.record(f"per_sample/{name}", ms, unit="ms CPU", better="lower")


def run(ctx: SuiteContext) -> None:
    o = ctx.sized_options(SIZED)
    fraction = ctx.option("max_cpu_fraction", MonitorConfig().max_cpu_fraction)
    ctx.param("max_cpu_fraction", fraction)
    if ctx.option("torch", True):
        import torch  # noqa: F401 - a realistic host: torch's mappings make smaps_rollup slower
    heap = held_heap(o["main_mib"])
    with worker_children(o["children"], o["child_mib"]):
        tree = tree_memory()
        ctx.record("tree/processes", tree.processes, unit="processes")
        ctx.record("tree/pss", tree.pss / 2**20, unit="MiB")
        for _ in ctx.repetitions("monitor runs"):
            _repetition(ctx, o, fraction)
    del heap
    pct = ctx.result.figure("sampling/default/cpu_pct_core").median
    ctx.note(f"Target: the default configuration under {TARGET_PCT_CORE:g}% of one core: "
             f"{'met' if pct < TARGET_PCT_CORE else 'NOT met'} ({pct:.3f}%, median; meaningful at "
             f"the default interval and duration only).")  # fmt: skip
    ctx.note("per_sample: CPU ms of one reading, median of the interleaved rounds: "
             + "; ".join(f"{k} = {v}" for k, v in READINGS.items()) + ".")  # fmt: skip


SUITE = Suite(
    name="monitor", run=run, options=OPTIONS,
    summary="tj-monitor: MemoryMonitor's sampling-thread CPU (default PSS budget vs PSS on every "
            "sample) and the CPU of single readings, in a tree of worker-like processes",
)  # fmt: skip
