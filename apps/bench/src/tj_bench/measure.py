"""Measurement helpers every suite shares: interleaved repetitions, wall time, tree memory.

Compared cases run interleaved (A B C, A B C, ...) rather than one after the other, so that a
machine that slows down during a run (another job, thermal limits) biases every case alike.
Memory is process-tree PSS through tj-monitor (``PeakPssSampler``, ``tree_memory``), never RSS.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from tj_monitor import PeakPssSampler, tree_memory

__all__ = ["MIB", "interleaved", "peak_pss", "timed", "tree_pss"]

T = TypeVar("T")
MIB = 2**20


def timed(fn: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[T, float]:
    """``(fn(), seconds)``."""
    t0 = clock()
    out = fn()
    return out, clock() - t0


def interleaved(
    cases: Mapping[str, Callable[[], T]], repetitions: Iterable[int]
) -> dict[str, list[T]]:
    """Run every case once per repetition, in order, round-robin: ``{case: [result per rep]}``."""
    out: dict[str, list[T]] = {name: [] for name in cases}
    for _ in repetitions:
        for name, fn in cases.items():
            out[name].append(fn())
    return out


def peak_pss(fn: Callable[[], T], interval: float = 0.1) -> tuple[T, int]:
    """``(fn(), peak PSS of this process tree in bytes while it ran)``."""
    with PeakPssSampler(interval) as sampler:
        out = fn()
    return out, sampler.peak_pss


def tree_pss(pid: int | None = None) -> int:
    """PSS of a process tree now (default: this process and its children), in bytes."""
    return tree_memory(pid).pss
