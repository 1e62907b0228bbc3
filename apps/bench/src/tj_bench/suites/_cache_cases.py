"""The cache suite's cases behind one ``put`` / ``get`` interface, and the truncated-entry probe.

``DiskcacheLRU`` puts the ``diskcache`` library behind tj-data's cache interface (LRU eviction,
the same byte bound); ``Slowed`` makes any case sleep inside every operation (the deliberately
slower run a test of ``--compare`` needs); ``truncated_outcome`` cuts a stored entry's file in
half, as a crash mid-write after a power cut would, and says what ``get`` then returns.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

__all__ = ["CacheLike", "DiskcacheLRU", "Outcome", "Slowed", "close", "truncated_outcome"]

# diskcache's own SQLite files (index, WAL): never the value file the probe looks for
_SQLITE_PREFIX = "cache.db"
_PROBE = np.arange(100_000, dtype=np.float64)  # 800 KB: a file of its own in either cache


class CacheLike(Protocol):
    def put(self, key: Any, value: Any) -> Any: ...
    def get(self, key: Any) -> Any: ...


class DiskcacheLRU:
    """``diskcache.Cache`` with LRU eviction (which writes its SQLite index on every read)."""

    def __init__(self, directory: Path, max_bytes: int) -> None:
        import diskcache

        self.cache = diskcache.Cache(
            str(directory), size_limit=max_bytes, eviction_policy="least-recently-used"
        )

    def put(self, key: Any, value: Any) -> None:
        self.cache.set(key, value)

    def get(self, key: Any) -> Any:
        return self.cache.get(key)

    def close(self) -> None:
        self.cache.close()


class Slowed:
    """``inner`` with a ``seconds`` sleep inside every ``put`` and ``get``."""

    def __init__(self, inner: CacheLike, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"Slowed: seconds must be >= 0, got {seconds}")
        self.inner, self.seconds = inner, seconds

    def put(self, key: Any, value: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.put(key, value)

    def get(self, key: Any) -> Any:
        time.sleep(self.seconds)
        return self.inner.get(key)

    def close(self) -> None:
        close(self.inner)


def close(cache: object) -> None:
    """Close a case that holds open files (diskcache's SQLite connection); others: nothing."""
    fn = getattr(cache, "close", None)
    if callable(fn):
        fn()


@dataclass(frozen=True)
class Outcome:
    """What ``get`` did with a truncated entry; ``safe``: no exception, no wrong value."""

    text: str
    safe: bool | None


def _files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_size for p in root.rglob("*") if p.is_file()}


def truncated_outcome(cache: CacheLike, directory: Path) -> Outcome:
    """Store one value in an empty cache at ``directory``, truncate the file it went to, get it.

    ``safe`` is True when ``get`` misses or returns the right value, False when it raises or
    returns a damaged value, None when the value went into no file of its own.
    """
    before = _files(directory)
    cache.put("k", _PROBE)
    new = {p: s for p, s in _files(directory).items()
           if p not in before and not p.name.startswith(_SQLITE_PREFIX)}  # fmt: skip
    if not new:
        return Outcome("value stored inside SQLite (not a file)", None)
    path = max(new, key=new.__getitem__)  # the value's file (the largest new one)
    os.truncate(path, new[path] // 2)
    try:
        got = cache.get("k")
    except Exception as exc:
        return Outcome(f"raises {type(exc).__name__}", False)
    if got is None:
        return Outcome("miss (entry dropped, refetched by the caller)", True)
    if isinstance(got, np.ndarray) and np.array_equal(got, _PROBE):
        return Outcome("the right value", True)
    return Outcome(f"a damaged value ({type(got).__name__})", False)
