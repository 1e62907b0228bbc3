"""Suite ``monitor``: what tj-monitor's MemoryMonitor costs in a realistic process tree.

The tree: this process (torch imported, ``main_mib`` MiB of heap, as in training) plus
``children`` worker processes holding ``child_mib`` MiB each, like DataLoader workers. Each
repetition runs a monitor for ``duration`` s in the default configuration (PSS re-read within a
CPU budget), then one reading PSS on every sample, then times single readings interleaved.
Target (tj-monitor's README): the default configuration under 1% of one core at a 1 s interval.
"""

from __future__ import annotations

from typing import Any

from tj_bench.suite import SizedOptions, Suite, SuiteContext, sized_help
from tj_bench.suites._monitor_cost import READINGS, per_sample_costs, sampling_run
from tj_bench.suites._monitor_tree import held_heap, worker_children

__all__ = ["SUITE", "TARGET_PCT_CORE"]

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
    from tj_monitor import MonitorConfig, tree_memory

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
