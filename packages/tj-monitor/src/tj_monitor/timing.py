"""Timer: wall-clock (or CUDA-event) durations of a block or function, with percentiles.

count/total/mean/max are exact over every measurement; p50/p95 come from the last ``window``
durations (a ring buffer, O(window) memory), which is what a long run wants to see anyway.
CUDA kernels run asynchronously, so a host clock around GPU work measures launch time: pass
``cuda="sync"`` (synchronise at both ends, exact but stalls the pipeline) or ``cuda="events"``
(CUDA events, resolved lazily when stats are read; no stall).
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal, TypeVar

import numpy as np

__all__ = ["CudaMode", "Timer", "TimerStats"]

logger = logging.getLogger(__name__)

CudaMode = Literal["off", "sync", "events"]
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, kw_only=True)
class TimerStats:
    """Seconds. p50/p95 over the most recent ``window`` measurements."""

    name: str
    count: int
    total: float
    mean: float
    p50: float
    p95: float
    max: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _cuda_available() -> Any:
    """torch when CUDA can be used, else None (imports torch: only called when CUDA was asked)."""
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


class Timer:
    """Times ``with`` blocks or decorated calls; reentrant and usable from several threads.

    >>> t = Timer("step")
    >>> with t:
    ...     pass
    >>> t.stats().count
    1
    """

    def __init__(self, name: str = "timer", *, cuda: CudaMode = "off", window: int = 10_000):
        if cuda not in ("off", "sync", "events"):
            raise ValueError(f"cuda: expected 'off', 'sync' or 'events', got {cuda!r}")
        if window < 1:
            raise ValueError(f"window: must be >= 1, got {window}")
        self.name = name
        self._torch = _cuda_available() if cuda != "off" else None
        if cuda != "off" and self._torch is None:
            logger.info("Timer %r: CUDA not available, timing with the host clock", name)
        self.cuda: CudaMode = cuda if self._torch is not None else "off"
        self._window = np.zeros(window, dtype=np.float64)
        self._n = 0
        self._total = 0.0
        self._max = 0.0
        self._pending: list[tuple[Any, Any]] = []
        self._lock = threading.Lock()
        self._local = threading.local()

    # ---- measuring ----------------------------------------------------------------------
    def __enter__(self) -> Timer:
        stack = self._local.__dict__.setdefault("stack", [])
        if self.cuda == "events":
            ev = self._torch.cuda.Event(enable_timing=True)
            ev.record()
            stack.append(ev)
        else:
            if self.cuda == "sync":
                self._torch.cuda.synchronize()
            stack.append(time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        start = self._local.stack.pop()
        if self.cuda == "events":
            end = self._torch.cuda.Event(enable_timing=True)
            end.record()
            with self._lock:
                self._pending.append((start, end))
                if len(self._pending) >= 1024:
                    self._resolve(block=False)
            return
        if self.cuda == "sync":
            self._torch.cuda.synchronize()
        self.add(time.perf_counter() - start)

    def __call__(self, fn: F) -> F:
        """Decorator: time every call of ``fn``."""

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with self:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def add(self, seconds: float) -> None:
        """Record one duration measured elsewhere."""
        with self._lock:
            self._add(seconds)

    def _add(self, seconds: float) -> None:
        self._window[self._n % len(self._window)] = seconds
        self._n += 1
        self._total += seconds
        self._max = max(self._max, seconds)

    def _resolve(self, *, block: bool) -> None:
        keep = []
        for start, end in self._pending:
            if block:
                end.synchronize()
            elif not end.query():
                keep.append((start, end))
                continue
            self._add(start.elapsed_time(end) / 1000.0)
        self._pending = keep

    # ---- results ------------------------------------------------------------------------
    def stats(self) -> TimerStats:
        """Statistics so far (waits for outstanding CUDA events)."""
        with self._lock:
            if self._pending:
                self._resolve(block=True)
            n = self._n
            recent = self._window[: min(n, len(self._window))]
            p50, p95 = np.percentile(recent, [50, 95]).tolist() if n else (0.0, 0.0)
            return TimerStats(
                name=self.name,
                count=n,
                total=self._total,
                mean=self._total / n if n else 0.0,
                p50=float(p50),
                p95=float(p95),
                max=self._max,
            )

    def reset(self) -> None:
        with self._lock:
            self._n, self._total, self._max = 0, 0.0, 0.0
            self._pending = []

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"Timer({s.name!r}: n={s.count} mean={s.mean * 1e3:.3f} ms "
            f"p50={s.p50 * 1e3:.3f} ms p95={s.p95 * 1e3:.3f} ms max={s.max * 1e3:.3f} ms)"
        )
