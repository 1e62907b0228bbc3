"""Measurement helpers every suite shares: interleaved repetitions, wall time and ratios.

Compared cases run interleaved (A B C, A B C, ...) rather than one after the other, so that a
machine that slows down during a run (another job, thermal limits) biases every case alike.
Memory is process-tree PSS, read with tj-monitor (``PeakPssSampler``, ``tree_memory``), never RSS.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

__all__ = ["MIB", "interleaved", "ratio", "timed"]

T = TypeVar("T")
MIB = 2**20


def timed(fn: Callable[[], T], clock: Callable[[], float] = time.perf_counter) -> tuple[T, float]:
    """``(fn(), seconds)``."""
    t0 = clock()
    out = fn()
    return out, clock() - t0


def ratio(num: float, den: float) -> float:
    """``num / den``; NaN when the denominator is not positive (a delta of zero, nothing timed)."""
    return num / den if den > 0 else math.nan


def interleaved(
    cases: Mapping[str, Callable[[], T]], repetitions: Iterable[int]
) -> dict[str, list[T]]:
    """Run every case once per repetition, in order, round-robin: ``{case: [result per rep]}``."""
    out: dict[str, list[T]] = {name: [] for name in cases}
    for _ in repetitions:
        for name, fn in cases.items():
            out[name].append(fn())
    return out

