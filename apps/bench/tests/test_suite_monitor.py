"""The monitor suite: its quick run measures both configurations in a real tree; helpers."""

from __future__ import annotations

import math

import psutil

from tj_bench.suites.monitor import READINGS, sampling_run, worker_children


def test_quick_run_measures_both_configurations(quick) -> None:
    r = quick.suite("monitor")
    children, child_mib, main_mib = (
        r.params["children"],
        r.params["child_mib"],
        r.params["main_mib"],
    )
    assert r.figure("tree/processes").median >= 1 + children
    assert r.figure("tree/pss").median >= main_mib + children * child_mib
    for config in ("default", "pss_every_sample"):
        samples = r.figure(f"sampling/{config}/samples").median
        reads = r.figure(f"sampling/{config}/pss_reads").median
        assert samples >= 1 and 1 <= reads <= samples
        for what in ("cpu_pct_core", "kernel_pct_core"):
            pct = r.figure(f"sampling/{config}/{what}").median
            assert math.isfinite(pct) and 0 <= pct <= 100
    # max_cpu_fraction=1 reads PSS on every sample
    assert (
        r.figure("sampling/pss_every_sample/pss_reads").median
        == r.figure("sampling/pss_every_sample/samples").median
    )
    for name in READINGS:
        f = r.figure(f"per_sample/{name}")
        assert f.unit == "ms CPU" and math.isfinite(f.median) and f.median >= 0
    assert any("1% of one core" in n for n in r.notes)


def test_sampling_run_finds_the_monitor_thread() -> None:
    r = sampling_run(0.05, 0.3, 1.0)
    assert r["samples"] >= 1 and r["pss_reads"] == r["samples"]
    assert 0 <= r["kernel_pct_core"] <= 100


def test_worker_children_hold_memory_and_are_reaped() -> None:
    with worker_children(2, 8) as procs:
        pids = [p.pid for p in procs]
        for pid in pids:
            assert psutil.Process(pid).memory_info().rss >= 8 * 2**20
    assert all(p.returncode is not None for p in procs)
    assert not any(
        psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        for pid in pids
    )
