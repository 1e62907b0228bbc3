"""Overhead of MemoryMonitor: CPU time of its sampling thread per second of wall time.

Setup: this process (torch imported and ``--main-mib`` MiB of heap, as in training) plus
``--children`` worker processes holding ``--child-mib`` MiB each, like DataLoader workers.
Each run starts a monitor at ``--interval`` for ``--duration`` seconds and reads the thread's CPU
time twice: the monitor's own count (``time.thread_time`` around each sample) and the kernel's
(``/proc/self/task/<tid>/stat``). Runs alternate between the default configuration (PSS re-read
within a CPU budget) and PSS on every sample. Then the CPU cost of single readings, interleaved:
a sample with and without a PSS read, PSS alone, psutil's usual RSS-only tree walk, and a
``free``-style system reading.

    uv run python packages/tj-monitor/benchmarks/bench_overhead.py --out overhead.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tj_monitor import MemoryMonitor, MonitorConfig, tree_memory

# bytes * n: malloc'd and written, in 4 KiB pages like a trainer's heap (numpy would madvise
# huge pages, which smaps_rollup walks 512x faster and would flatter the monitor)
CHILD = "import sys; a = b'x' * ({n} * 2**20); print('ok', flush=True); sys.stdin.read()"


def _thread_cpu_kernel(tid: int) -> float:
    fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def _one_run(interval: float, duration: float, fraction: float) -> dict[str, float]:
    mon = MemoryMonitor(MonitorConfig(interval_s=interval, max_cpu_fraction=fraction))
    mon.start()
    assert mon._thread is not None
    tid = mon._thread.native_id
    assert tid is not None
    t0 = time.monotonic()
    time.sleep(duration)
    wall = time.monotonic() - t0
    kernel = _thread_cpu_kernel(tid)
    mon.stop()
    st = mon.stats
    return {
        "samples": st.samples,
        "pss_reads": st.pss_reads,
        "wall_s": wall,
        "cpu_s": st.cpu_seconds,
        "kernel_cpu_s": kernel,
        "pct_core": 100 * st.cpu_seconds / wall,
        "kernel_pct_core": 100 * kernel / wall,
    }


def _rss_only_tree() -> int:
    root = psutil.Process()
    total = 0
    for p in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += p.memory_info().rss
    return total


def _per_sample_costs(repeats: int) -> dict[str, float]:
    every = MemoryMonitor(MonitorConfig(max_cpu_fraction=1.0))
    between = MemoryMonitor(MonitorConfig(max_cpu_fraction=1e-9))
    between.measure()  # its one PSS read; every later call carries PSS forward
    variants = {
        "sample with a PSS read (PSS/USS + RSS + system + cgroup + shm)": every.measure,
        "sample between PSS reads (RSS + system + cgroup + shm)": between.measure,
        "tree PSS/USS only (tree_memory)": tree_memory,
        "tree RSS, psutil children() + memory_info (the usual way)": _rss_only_tree,
        "system only (psutil.virtual_memory)": psutil.virtual_memory,
    }
    costs: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(repeats):  # interleaved, so contention hits every variant alike
        for name, fn in variants.items():
            t0 = time.thread_time()
            fn()
            costs[name].append(time.thread_time() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in costs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--duration", type=float, default=20.0, help="seconds per run")
    ap.add_argument("--interval", type=float, default=1.0)
    ap.add_argument(
        "--max-cpu-fraction",
        type=float,
        default=MonitorConfig().max_cpu_fraction,
        help="PSS budget of the default configuration (compared with PSS on every sample)",
    )
    ap.add_argument("--children", type=int, default=4)
    ap.add_argument("--child-mib", type=int, default=256)
    ap.add_argument("--main-mib", type=int, default=1024)
    ap.add_argument(
        "--no-torch", action="store_true", help="do not import torch in the main process"
    )
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args()
    if args.runs < 3:
        ap.error("--runs must be >= 3 (the median of at least three runs is reported)")
    if not args.no_torch:
        import torch  # noqa: F401  (realistic host: torch's mappings make smaps_rollup slower)
    heap = b"x" * (args.main_mib * 2**20)

    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD.format(n=args.child_mib)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(args.children)
    ]
    try:
        for c in children:
            assert c.stdout is not None and c.stdout.readline().strip() == "ok"
        tree = tree_memory()
        budget, every = [], []
        for _ in range(args.runs):  # interleaved: default budget vs PSS on every sample
            budget.append(_one_run(args.interval, args.duration, args.max_cpu_fraction))
            every.append(_one_run(args.interval, args.duration, 1.0))
        costs = _per_sample_costs(repeats=30)
    finally:
        for c in children:
            c.kill()
            c.wait()

    del heap
    med = {k: statistics.median(r[k] for r in budget) for k in budget[0]}
    med_every = {k: statistics.median(r[k] for r in every) for k in every[0]}
    result = {
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "machine": {
            "cpus": os.cpu_count(),
            "load_avg_1m": os.getloadavg()[0],
            "python": platform.python_version(),
            "kernel": platform.release(),
        },
        "tree": {
            "processes": tree.processes,
            "pss_mib": tree.pss / 2**20,
            "rss_mib": tree.rss / 2**20,
        },
        "interval_s": args.interval,
        "max_cpu_fraction": args.max_cpu_fraction,
        "runs_default": budget,
        "runs_pss_every_sample": every,
        "median_default": med,
        "median_pss_every_sample": med_every,
        "per_sample_cpu_ms": costs,
        "target_pct_core": 1.0,
        "met": med["pct_core"] < 1.0,
    }
    print(
        f"## MemoryMonitor overhead: {tree.processes} processes, tree PSS "
        f"{tree.pss / 2**20:.0f} MiB, interval {args.interval} s, {args.runs} runs x "
        f"{args.duration:.0f} s per configuration, {os.cpu_count()} CPUs, "
        f"load {os.getloadavg()[0]:.1f}\n"
    )
    print(
        "| configuration | run | samples | PSS reads | thread CPU s | % of one core | kernel-accounted % |"
    )
    print("|---|---|---|---|---|---|---|")
    for label, runs, m in (
        (f"default (PSS budget {args.max_cpu_fraction})", budget, med),
        ("PSS on every sample", every, med_every),
    ):
        for i, r in enumerate(runs, 1):
            print(
                f"| {label} | {i} | {r['samples']:.0f} | {r['pss_reads']:.0f} | {r['cpu_s']:.4f} | "
                f"{r['pct_core']:.3f} | {r['kernel_pct_core']:.3f} |"
            )
        print(
            f"| {label} | **median** | {m['samples']:.0f} | {m['pss_reads']:.0f} | "
            f"{m['cpu_s']:.4f} | **{m['pct_core']:.3f}** | {m['kernel_pct_core']:.3f} |"
        )
    print(
        f"\ntarget < 1% of one core (default configuration): {'met' if result['met'] else 'NOT met'}\n"
    )
    print("| per-sample CPU (median of 30, interleaved) | ms |")
    print("|---|---|")
    for k, v in costs.items():
        print(f"| {k} | {v:.3f} |")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
