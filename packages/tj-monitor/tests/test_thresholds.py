"""Threshold gates, callbacks and shrinkers, driven by real allocations in a worker process."""

from __future__ import annotations

import dataclasses

import pytest

from tj_monitor import MemoryMonitor, MonitorConfig, ThresholdEvent, ThresholdGate
from tj_monitor.thresholds import resolve_bytes

MiB = 2**20


class Cache:
    """A stand-in for a tj-data cache living in the worker: ``shrink(nbytes)`` drops it."""

    def __init__(self, tree) -> None:
        self.tree = tree
        self.held_mib = 0
        self.calls: list[int] = []

    def fill(self, mib: int) -> None:
        assert self.tree.send(f"alloc cache {mib}") == "ok"
        self.held_mib = mib

    def shrink(self, nbytes: int) -> int | None:
        self.calls.append(nbytes)
        assert self.tree.send("free cache") == "ok"
        freed, self.held_mib = self.held_mib * MiB, 0
        return freed


def test_resolve_fraction_or_bytes() -> None:
    assert resolve_bytes(0.75, 16 * 2**30) == 12 * 2**30
    assert resolve_bytes(0.875, 16 * 2**30) == 14 * 2**30
    assert resolve_bytes(5_000_000, 16 * 2**30) == 5_000_000
    for bad in (0, -1, float("nan"), 1.5, True, "0.5"):
        with pytest.raises(ValueError):
            resolve_bytes(bad, 100)  # type: ignore[arg-type]


def test_gate_fires_once_per_crossing_with_hysteresis() -> None:
    g = ThresholdGate(level="warn", threshold=100, hysteresis=20)
    fired = [g.update(v, now=float(i)) for i, v in enumerate([50, 100, 120, 99, 85, 110, 79, 100])]
    #                                                         -   fire  -   -   -  (no re-arm) rearm fire
    assert fired == [False, True, False, False, False, False, False, True]
    assert g.fired == 2


def test_gate_rate_limit_defers_instead_of_dropping() -> None:
    g = ThresholdGate(level="cleanup", threshold=100, hysteresis=10, min_interval_s=10.0)
    assert g.update(150, now=0.0)
    assert not g.update(10, now=1.0)  # re-armed
    assert not g.update(150, now=2.0)  # crossing inside the window: held back
    assert not g.update(150, now=9.0)
    assert g.update(150, now=10.5)  # window over, still above: fires now
    assert g.fired == 2


def test_gate_rejects_bad_config() -> None:
    with pytest.raises(ValueError, match="hysteresis"):
        ThresholdGate(level="warn", threshold=100, hysteresis=100)
    with pytest.raises(ValueError, match="threshold"):
        ThresholdGate(level="warn", threshold=0, hysteresis=0)


def test_monitor_callbacks_and_shrinker_on_real_allocations(worker_tree) -> None:
    root = worker_tree.root.pid
    fresh = dict(pid=root, measure="tree_pss", nvml=False, max_cpu_fraction=1.0)  # PSS every time
    base = MemoryMonitor(MonitorConfig(**fresh)).measure().tree.pss
    cfg = MonitorConfig(
        **fresh,
        warn=base + 60 * MiB,
        cleanup=base + 200 * MiB,
        hysteresis=40 * MiB,
        min_callback_interval_s=0,
    )
    warns: list[ThresholdEvent] = []
    cleanups: list[ThresholdEvent] = []
    mon = MemoryMonitor(cfg, on_warn=warns.append)
    mon.on_cleanup(cleanups.append)
    cache = Cache(worker_tree)
    assert mon.register_shrinker(cache.shrink) == cache.shrink
    later: list[int] = []
    mon.register_shrinker(later.append)  # runs too, asked for what is still needed

    def at(cmd: str) -> None:
        assert worker_tree.send(cmd) == "ok"
        mon.sample()

    mon.sample()
    assert not warns
    at("alloc a 100")  # +100: warn
    assert len(warns) == 1 and warns[0].value >= warns[0].threshold
    at("alloc a 70")  # +70: below the line, not below the re-arm line (+20)
    at("alloc a 100")  # +100 again: still the same crossing
    assert len(warns) == 1
    cache.fill(150)
    mon.sample()  # +250: cleanup, whose shrinker frees the cache
    assert len(cleanups) == 1 and len(warns) == 1
    assert len(cache.calls) == 1
    assert 60 * MiB <= cache.calls[0] <= 120 * MiB  # value - (cleanup - hysteresis)
    report = mon.last_cleanup
    assert report is not None and report.shrinkers_called == 2
    assert report.freed_reported == 150 * MiB and later == [0]  # the cache covered it
    mon.sample()  # back to +100: cleanup re-armed, warn not yet
    at("free a")  # +0: warn re-armed
    at("alloc a 100")  # a new crossing
    assert len(warns) == 2 and len(cleanups) == 1
    st = mon.stats
    assert (st.warn_fired, st.cleanup_fired, st.errors) == (2, 1, 0)
    assert [e.level for e in mon.events] == ["warn", "cleanup", "warn"]


def test_failing_callbacks_and_shrinkers_never_reach_the_host() -> None:
    mon = MemoryMonitor(
        MonitorConfig(measure="tree_pss", warn=1.0, cleanup=1.0, hysteresis=0.01, nvml=False)
    )
    calls: list[str] = []

    def bad_cb(event: ThresholdEvent) -> None:
        raise RuntimeError("callback bug")

    def bad_shrinker(nbytes: int) -> int:
        calls.append("bad")
        raise MemoryError("shrinker bug")

    def good_shrinker(nbytes: int) -> None:
        calls.append("good")

    mon.on_warn(bad_cb)
    mon.register_shrinker(bad_shrinker)
    mon.register_shrinker(good_shrinker)
    sample = mon.measure()
    # feed a recorded sample whose value is far above the (tiny) limit-relative lines
    big = dataclasses.replace(sample, tree=dataclasses.replace(sample.tree, pss=2 * mon.limit))
    fired = mon.observe(big)
    assert [e.level for e in fired] == ["warn", "cleanup"]
    assert calls == ["bad", "good"]
    assert mon.stats.errors == 2
    assert mon.last_cleanup is not None and mon.last_cleanup.errors == 1
    mon.unregister_shrinker(bad_shrinker)
    assert mon.run_cleanup(10).shrinkers_called == 1


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="interval_s"):
        MonitorConfig(interval_s=0)
    with pytest.raises(ValueError, match="measure"):
        MonitorConfig(measure="rss")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="warn"):
        MonitorConfig(warn=-0.5)
    with pytest.raises(ValueError, match="must not be above cleanup"):
        MemoryMonitor(MonitorConfig(warn=0.9, cleanup=0.5, nvml=False))
    with pytest.raises(TypeError):
        MemoryMonitor(MonitorConfig(nvml=False)).register_shrinker(42)  # type: ignore[arg-type]
