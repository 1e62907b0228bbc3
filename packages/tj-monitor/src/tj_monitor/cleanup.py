"""Cleanup actions run at the cleanup threshold, and the shrinker registry.

Order: ``gc.collect()`` (cycles held by dead objects), ``malloc_trim(0)`` (glibc keeps freed
heap in the process, so PSS would not drop without it), ``torch.cuda.empty_cache()`` when the
host initialised CUDA, then every shrinker in registration order, each asked for the bytes still
needed after what the earlier ones reported freeing (0 once they covered the request).
A shrinker is any ``fn(nbytes) -> int | None`` (every tj-data cache's ``shrink``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["Cleaner", "CleanupReport", "Shrinker"]

logger = logging.getLogger(__name__)

Shrinker = Callable[[int], int | None]
"""Frees about ``nbytes`` from a cache; returns the bytes freed when it knows them."""


@dataclass(frozen=True, kw_only=True)
class CleanupReport:
    """What one cleanup did. ``freed_reported`` sums the shrinkers' own answers."""

    requested: int
    gc_collected: int
    malloc_trimmed: bool
    cuda_emptied: bool
    shrinkers_called: int
    freed_reported: int
    errors: int


class Cleaner:
    """Holds shrinkers (strong references) and runs the cleanup sequence.

    ``on_error(what)`` is called inside the ``except`` block of any failing step; the error is
    never re-raised.
    """

    def __init__(self, on_error: Callable[[str], None]) -> None:
        self._on_error = on_error
        self._lock = threading.Lock()
        self._shrinkers: list[Shrinker] = []
        self._malloc_trim: Any = None

    def register(self, fn: Shrinker) -> Shrinker:
        if not callable(fn):
            raise TypeError(f"shrinker must be callable, got {fn!r}")
        with self._lock:
            self._shrinkers.append(fn)
        return fn

    def unregister(self, fn: Shrinker) -> None:
        with self._lock:
            self._shrinkers = [s for s in self._shrinkers if s != fn]

    def run(self, nbytes: int) -> CleanupReport:
        """gc, malloc_trim, CUDA cache, then every shrinker, each asked for the bytes still
        needed after the earlier ones' reports (0 once they covered ``nbytes``)."""
        collected = gc.collect()
        trimmed = self._trim()
        emptied = False
        torch = sys.modules.get("torch")
        if torch is not None:
            try:
                if torch.cuda.is_initialized():
                    torch.cuda.empty_cache()
                    emptied = True
            except Exception:
                self._on_error("torch.cuda.empty_cache() failed")
        remaining, freed, called, errors = nbytes, 0, 0, 0
        with self._lock:
            shrinkers = list(self._shrinkers)
        for fn in shrinkers:  # every one runs; each is asked for what is still needed
            called += 1
            try:
                got = fn(max(remaining, 0))
            except Exception:
                errors += 1
                self._on_error(f"shrinker {fn!r} failed")
                continue
            if isinstance(got, int) and not isinstance(got, bool) and got > 0:
                freed += got
                remaining -= got
        report = CleanupReport(
            requested=nbytes,
            gc_collected=collected,
            malloc_trimmed=trimmed,
            cuda_emptied=emptied,
            shrinkers_called=called,
            freed_reported=freed,
            errors=errors,
        )
        logger.info("memory cleanup: %s", report)
        return report

    def _trim(self) -> bool:
        """Return freed heap to the OS (glibc only)."""
        if self._malloc_trim is None:
            self._malloc_trim = False
            name = ctypes.util.find_library("c")
            if sys.platform.startswith("linux") and name:
                try:
                    self._malloc_trim = ctypes.CDLL(name).malloc_trim
                except (OSError, AttributeError):
                    self._malloc_trim = False
        if not self._malloc_trim:
            return False
        return bool(self._malloc_trim(0))
