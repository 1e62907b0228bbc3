"""One loader setting measured the loader suite's way: a fresh loader, a few untimed warm-up
batches, then ``seconds`` of batches (with an optional training-step stand-in after each),
samples/s, batches/s and the peak PSS of the whole process tree (tj-monitor's sampler).
Workers are shut down and waited for before the next setting starts.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from tj_monitor import PeakPssSampler

__all__ = ["Measurement", "busy", "measure"]


@dataclass(frozen=True, kw_only=True)
class Measurement:
    samples_per_s: float
    batches_per_s: float
    peak_pss: int  # bytes


def busy(ms: float) -> Callable[[Any], None] | None:
    """A stand-in for the training step: ``ms`` of CPU work in the main process per batch
    (None for 0: no step)."""
    if ms <= 0:
        return None

    def step(_batch: Any) -> None:
        end = time.perf_counter() + ms / 1000
        while time.perf_counter() < end:
            pass

    return step


def _children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _wait_children(before: set[int], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.05)


def measure(
    make: Callable[[], Any],
    seconds: float,
    *,
    warmup: int = 3,
    interval: float = 0.25,
    step: Callable[[Any], None] | None = None,
) -> Measurement:
    """Run the loader ``make()`` returns for ``seconds`` after ``warmup`` batches (restarting
    its iterator at an epoch's end); memory counts from the loader's start, time after warm-up."""
    before = _children()
    gc.collect()
    loader = make()
    n = batches = 0
    with PeakPssSampler(interval=interval) as peak:
        it = iter(loader)
        for _ in range(warmup):
            try:
                next(it)
            except StopIteration:
                it = iter(loader)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            try:
                b = next(it)
            except StopIteration:
                it = iter(loader)
                continue
            if step is not None:
                step(b)
            n += b.num_graphs
            batches += 1
        dt = time.perf_counter() - t0
        del it
    del loader
    gc.collect()
    _wait_children(before)
    return Measurement(samples_per_s=n / dt, batches_per_s=batches / dt, peak_pss=peak.peak_pss)
