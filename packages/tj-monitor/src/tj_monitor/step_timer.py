"""StepTimer: splits each training step into data-wait time and compute time.

The data-wait fraction (time blocked on the next batch / step time) is the number that says the
GPU starves: near 0 the loader keeps up; 0.3 means a third of the run is spent waiting. Wrap the
loader with ``iterate()``; or mark phases by hand with ``waiting()``/``computing()`` and
``end_step()`` in loops that have no iterator (RL rollouts).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

import numpy as np

__all__ = ["StepStats", "StepTimer"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class StepStats:
    """Totals in seconds; percentiles over the last ``window`` steps; throughput in items/s."""

    steps: int
    data_wait_s: float
    compute_s: float
    data_wait_fraction: float
    step_mean_s: float
    step_p50_s: float
    step_p95_s: float
    items: int
    throughput: float | None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def as_metrics(self, prefix: str = "time/") -> dict[str, float]:
        """Names for MetricsLogger; ``tj-monitor analyze`` recognises these."""
        out = {
            f"{prefix}data_wait_fraction": self.data_wait_fraction,
            f"{prefix}step_s": self.step_mean_s,
            f"{prefix}data_wait_s": self.data_wait_s / self.steps if self.steps else 0.0,
        }
        if self.throughput is not None:
            out[f"{prefix}throughput"] = self.throughput
        return out


class StepTimer:
    """Accumulates per-step data-wait and compute time.

    ``cuda_sync=True`` synchronises CUDA at the end of each step's compute phase, so queued GPU
    work is charged to compute rather than to the next data wait (exact, costs a pipeline stall).

    >>> st = StepTimer()
    >>> for batch in st.iterate(range(3)):
    ...     pass
    >>> st.stats().steps
    3
    """

    def __init__(self, *, cuda_sync: bool = False, window: int = 10_000) -> None:
        if window < 1:
            raise ValueError(f"window: must be >= 1, got {window}")
        self.cuda_sync = cuda_sync
        self._window = np.zeros(window, dtype=np.float64)
        self._sync: Callable[[], None] | None = None
        if cuda_sync:
            import torch

            if torch.cuda.is_available():
                self._sync = torch.cuda.synchronize
        self.reset()

    def reset(self) -> None:
        """Start a new reporting window (e.g. after logging every N steps)."""
        self._steps = 0
        self._wait = 0.0
        self._compute = 0.0
        self._items = 0
        self._cur_wait = 0.0
        self._cur_compute = 0.0

    # ---- manual phases -------------------------------------------------------------------
    @contextmanager
    def waiting(self) -> Iterator[None]:
        """Time spent blocked on data in the current step."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self._cur_wait += time.perf_counter() - t0

    @contextmanager
    def computing(self) -> Iterator[None]:
        """Time spent computing in the current step."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._sync is not None:
                self._sync()
            self._cur_compute += time.perf_counter() - t0

    def end_step(self, items: int | None = None) -> None:
        """Close the current step; ``items`` (samples in the batch) feeds the throughput."""
        self.record(self._cur_wait, self._cur_compute, items)
        self._cur_wait = self._cur_compute = 0.0

    def record(self, data_wait_s: float, compute_s: float, items: int | None = None) -> None:
        """Add one step measured elsewhere."""
        self._window[self._steps % len(self._window)] = data_wait_s + compute_s
        self._steps += 1
        self._wait += data_wait_s
        self._compute += compute_s
        if items:
            self._items += int(items)

    # ---- loader wrapper ------------------------------------------------------------------
    def iterate(
        self, iterable: Iterable[T], *, size: Callable[[T], int] | None = None
    ) -> Iterator[T]:
        """Yield from ``iterable``: time in ``next()`` is data wait, the loop body is compute.

        ``size(batch)`` gives the items per batch for throughput. A ``break`` out of the loop
        still records the step that was running.
        """
        it = iter(iterable)
        while True:
            t0 = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            t1 = time.perf_counter()
            n = size(item) if size is not None else None
            try:
                yield item
            finally:
                if self._sync is not None:
                    self._sync()
                self.record(t1 - t0, time.perf_counter() - t1, n)

    # ---- results -------------------------------------------------------------------------
    def stats(self) -> StepStats:
        n = self._steps
        recent = self._window[: min(n, len(self._window))]
        p50, p95 = np.percentile(recent, [50, 95]).tolist() if n else (0.0, 0.0)
        total = self._wait + self._compute
        return StepStats(
            steps=n,
            data_wait_s=self._wait,
            compute_s=self._compute,
            data_wait_fraction=self._wait / total if total > 0 else 0.0,
            step_mean_s=total / n if n else 0.0,
            step_p50_s=float(p50),
            step_p95_s=float(p95),
            items=self._items,
            throughput=self._items / total if self._items and total > 0 else None,
        )
