"""`measure_loader`: one loader setting, measured the way `autotune_loader` ranks its candidates.

A fresh loader from a factory, `warmup` untimed batches (workers start, caches warm), then
`seconds` of batches with an optional training step after each: samples/s, batches/s and the
peak PSS of the whole process tree (tj-monitor's `PeakPssSampler`, polled in a thread; memory
counts from the loader's start, time after the warm-up). With a budget it stops as soon as the
peak goes over. The loader is dropped and its workers waited for before it returns, so the next
measurement starts clean. The clock is injectable: a test counts batches, not machine speed.

`measure_epoch` is the same measurement over one pass of a loader that lives on (persistent
workers, across epochs): what a budget check or an epoch's memory needs. `busy_step(ms)` is a
training-step stand-in for `step_fn` when there is no model to train.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import psutil

from tj_monitor import PeakPssSampler

__all__ = [
    "LoaderMeasurement",
    "busy_step",
    "child_pids",
    "measure_epoch",
    "measure_loader",
    "wait_children_gone",
]


@dataclass(kw_only=True, frozen=True)
class LoaderMeasurement:
    """What one measured run of a loader gave (counts of the timed part, after the warm-up)."""

    samples: int
    batches: int
    seconds: float  # timed wall time
    peak_pss: int  # bytes: the process tree's peak, from the loader's start
    over_budget: bool = False  # the peak went over the budget (the run stopped there)

    def __post_init__(self) -> None:
        if min(self.samples, self.batches, self.peak_pss) < 0 or not self.seconds >= 0:
            raise ValueError(f"LoaderMeasurement: negative counts or time in {self!r}")

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.seconds if self.seconds > 0 else 0.0

    @property
    def batches_per_s(self) -> float:
        return self.batches / self.seconds if self.seconds > 0 else 0.0


def child_pids() -> set[int]:
    """Pids of this process's descendants now."""
    try:
        return {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


def wait_children_gone(before: set[int], timeout: float = 10.0) -> None:
    """Wait until the descendants started since `before` have exited (a worker still exiting
    shares pages with the main process and skews the next PSS reading)."""
    deadline = time.monotonic() + timeout
    while child_pids() - before and time.monotonic() < deadline:
        time.sleep(0.02)


def _count(batch: Any) -> int:
    """Samples in a batch: a `GraphBatch`'s graphs, a window's (a list of step batches), else
    its length."""
    n = getattr(batch, "num_graphs", None)
    if n is None and isinstance(batch, list | tuple) and batch:
        n = getattr(batch[0], "num_graphs", None)
    return int(n) if n is not None else len(batch)


def measure_loader(
    make: Callable[[], Iterable[Any]],
    *,
    seconds: float,
    warmup: int = 3,
    budget_bytes: int | None = None,
    step_fn: Callable[[Any], Any] | None = None,
    pss_interval: float = 0.25,
    clock: Callable[[], float] = time.perf_counter,
) -> LoaderMeasurement:
    """Measure the loader `make()` returns (see the module docstring); an epoch's end restarts
    its iterator. `step_fn(batch)` runs after each timed batch (a training step or a stand-in).
    """
    if not seconds > 0 or warmup < 0:
        raise ValueError(f"measure_loader: seconds={seconds} must be > 0, warmup={warmup} >= 0")
    before = child_pids()
    gc.collect()
    loader = make()
    peak = PeakPssSampler(interval=pss_interval)

    def over_budget() -> bool:
        return budget_bytes is not None and peak.peak_pss > budget_bytes

    try:
        with peak:
            samples, batches, elapsed = _run(loader, seconds, warmup, step_fn, clock, over_budget)
    finally:
        del loader  # with _run's iterator gone, the workers exit
        gc.collect()
        wait_children_gone(before)
    return LoaderMeasurement(
        samples=samples, batches=batches, seconds=elapsed, peak_pss=peak.peak_pss,
        over_budget=over_budget(),
    )  # fmt: skip


def _run(
    loader: Iterable[Any],
    seconds: float,
    warmup: int,
    step_fn: Callable[[Any], Any] | None,
    clock: Callable[[], float],
    stop: Callable[[], bool],
) -> tuple[int, int, float]:
    """(samples, batches, timed seconds) of one run of `loader`; `stop()` ends it early."""
    it = iter(loader)
    for _ in range(warmup):  # memory counts, time does not
        try:
            next(it)
        except StopIteration:
            it = iter(loader)
    samples = batches = 0
    elapsed, t0 = 0.0, clock()
    while elapsed < seconds:
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            elapsed = clock() - t0
            continue
        if step_fn is not None:
            step_fn(batch)
        samples += _count(batch)
        batches += 1
        elapsed = clock() - t0
        if stop():
            break
    return samples, batches, elapsed


def measure_epoch(
    loader: Iterable[Any],
    *,
    max_batches: int = 0,
    pss_interval: float = 0.25,
    clock: Callable[[], float] = time.perf_counter,
) -> LoaderMeasurement:
    """One pass over `loader` (its first `max_batches` batches when > 0), timed from the first
    batch's request, and the process tree's peak PSS meanwhile. The loader is kept (its
    persistent workers too): call it once per epoch."""
    if max_batches < 0:
        raise ValueError(f"measure_epoch: max_batches={max_batches} must be >= 0")
    samples = batches = 0
    with PeakPssSampler(interval=pss_interval) as peak:
        t0 = clock()
        for batch in loader:
            samples += _count(batch)
            batches += 1
            if batches == max_batches:
                break
        elapsed = clock() - t0
    return LoaderMeasurement(samples=samples, batches=batches, seconds=elapsed,
                             peak_pss=peak.peak_pss)  # fmt: skip


def busy_step(ms: float) -> Callable[[Any], None] | None:
    """A stand-in for the training step, for `step_fn`: `ms` of CPU work in the calling process
    per batch (None for 0: no step). Workers pay off when the main process is busy."""
    if ms <= 0:
        return None

    def step(_batch: Any) -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass

    return step
