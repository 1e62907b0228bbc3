"""`LRUCache`: an in-memory cache bounded in bytes, with optional TTL, safe across threads.

Built on cachetools (`LRUCache` / `TTLCache` with `getsizeof`): this module adds the lock, the
byte accounting of arbitrary values (numpy arrays, tensors, dicts of them, `GraphBatch`), the
hit/miss/eviction counters and `shrink(nbytes)` (tj-monitor's shrinker signature). A pickled
cache arrives empty (each DataLoader worker fills its own; the lock cannot be pickled).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import cachetools
import numpy as np
import torch

__all__ = ["CacheStats", "LRUCache", "nbytes_of"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def nbytes_of(value: Any) -> int:
    """Bytes held by `value`: array/tensor data, summed over mappings and sequences."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, torch.Tensor):
        return int(value.numel() * value.element_size())
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if isinstance(value, Mapping):
        return sum(nbytes_of(v) for v in value.values()) + 64 * len(value)
    if isinstance(value, list | tuple):
        return sum(nbytes_of(v) for v in value) + 8 * len(value)
    tensors = getattr(value, "tensors", None)  # GraphBatch
    if callable(tensors):
        return sum(nbytes_of(t) for t in tensors().values())
    n = getattr(value, "nbytes", None)
    if isinstance(n, int | np.integer):
        return int(n)
    return sys.getsizeof(value)


@dataclass(kw_only=True, frozen=True)
class CacheStats:
    """Counters of one cache. `nbytes`/`entries` are the current contents; `evictions` counts
    entries dropped for space (including `shrink`), `expired` those dropped by the TTL,
    `rejected` values larger than the whole cache (returned, never stored), `corrupt` disk
    entries that failed their checksum (dropped and counted as misses)."""

    hits: int = 0
    misses: int = 0
    evictions: int = 0
    expired: int = 0
    rejected: int = 0
    corrupt: int = 0
    entries: int = 0
    nbytes: int = 0
    max_bytes: int = 0

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0

    def to_dict(self) -> dict[str, float]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        return {**d, "hit_rate": self.hit_rate}


class _Counting:
    """Mixin counting cachetools' evictions (popitem) and TTL expiries (expire)."""

    evicted = 0
    expired_count = 0

    def popitem(self) -> tuple[Any, Any]:
        kv = super().popitem()  # type: ignore[misc]
        self.evicted += 1
        return kv

    def expire(self, time: float | None = None) -> Any:
        out = super().expire(time)  # type: ignore[misc]
        self.expired_count += len(out)
        return out


class _LRU(_Counting, cachetools.LRUCache):  # type: ignore[misc]
    pass


class _TTL(_Counting, cachetools.TTLCache):  # type: ignore[misc]
    pass


class LRUCache(Generic[K, V]):
    """Least-recently-used cache holding at most `max_bytes` of values.

    Args:
        max_bytes: byte bound (values sized by `getsizeof`, default `nbytes_of`).
        ttl: seconds an entry lives after it was stored (None: no expiry).
        timer: clock for the TTL (injectable for tests).
    A value larger than `max_bytes` is not stored (counted in `rejected`). Every method takes
    one lock, so threads (e.g. DataLoader's pin thread and the main loop) may share a cache.
    """

    def __init__(
        self,
        max_bytes: int,
        *,
        ttl: float | None = None,
        getsizeof: Callable[[Any], int] = nbytes_of,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"LRUCache.max_bytes={max_bytes}: expected >= 1")
        if ttl is not None and not ttl > 0:
            raise ValueError(f"LRUCache.ttl={ttl}: expected > 0 seconds or None")
        self.max_bytes, self.ttl, self.getsizeof, self.timer = int(max_bytes), ttl, getsizeof, timer
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.RLock()
        if self.ttl is None:
            self._c: Any = _LRU(self.max_bytes, getsizeof=self.getsizeof)
        else:
            self._c = _TTL(self.max_bytes, self.ttl, timer=self.timer, getsizeof=self.getsizeof)
        self.hits = self.misses = self.rejected = 0

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("max_bytes", "ttl", "getsizeof", "timer")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    # ----- mapping API ------------------------------------------------------------------
    def get(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            try:
                value = self._c[key]
            except KeyError:
                self.misses += 1
                if self.ttl is not None:
                    self._c.expire()  # drop the expired entry now, not at the next put
                return default
            self.hits += 1
            return value

    def __getitem__(self, key: K) -> V:
        sentinel = object()
        value = self.get(key, sentinel)  # type: ignore[arg-type]
        if value is sentinel:
            raise KeyError(key)
        return value  # type: ignore[return-value]

    def put(self, key: K, value: V) -> bool:
        """Store `value`; False when it is larger than the whole cache (not stored)."""
        with self._lock:
            try:
                self._c[key] = value
            except ValueError:  # larger than max_bytes
                self.rejected += 1
                self._c.pop(key, None)
                return False
            return True

    __setitem__ = put

    def get_or_load(self, key: K, loader: Callable[[K], V]) -> V:
        """Cached value, or `loader(key)` stored and returned on a miss."""
        sentinel = object()
        value = self.get(key, sentinel)  # type: ignore[arg-type]
        if value is sentinel:
            value = loader(key)
            self.put(key, value)  # type: ignore[arg-type]
        return value  # type: ignore[return-value]

    def pop(self, key: K, default: V | None = None) -> V | None:
        with self._lock:
            return self._c.pop(key, default)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._c

    def __len__(self) -> int:
        with self._lock:
            return len(self._c)

    def keys(self) -> list[K]:
        """Keys from least to most recently used."""
        with self._lock:
            return list(self._c.keys())

    def __iter__(self) -> Iterator[K]:
        return iter(self.keys())

    def clear(self) -> None:
        with self._lock:
            self._c.clear()

    def expire(self) -> int:
        """Drop expired entries now (they are otherwise dropped lazily); returns how many."""
        if self.ttl is None:
            return 0
        with self._lock:
            return len(self._c.expire())

    # ----- memory -----------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        with self._lock:
            return int(self._c.currsize)

    def shrink(self, nbytes: int) -> int:
        """Evict least recently used entries until about `nbytes` are freed (memory-pressure
        hook, tj-monitor's shrinker signature); returns the bytes freed."""
        freed = 0
        with self._lock:
            freed += sum(self.getsizeof(v) for _, v in self._expire_pairs())
            while freed < nbytes and len(self._c):
                _, value = self._c.popitem()
                freed += self.getsizeof(value)
        return freed

    def _expire_pairs(self) -> list[tuple[Any, Any]]:
        return list(self._c.expire()) if self.ttl is not None else []

    def stats(self) -> CacheStats:
        with self._lock:
            if self.ttl is not None:
                self._c.expire()
            return CacheStats(
                hits=self.hits,
                misses=self.misses,
                evictions=self._c.evicted,
                expired=self._c.expired_count,
                rejected=self.rejected,
                entries=len(self._c),
                nbytes=int(self._c.currsize),
                max_bytes=self.max_bytes,
            )

    def __repr__(self) -> str:
        s = self.stats()
        return (
            f"LRUCache(entries={s.entries}, nbytes={s.nbytes}, max_bytes={s.max_bytes}, "
            f"ttl={self.ttl}, hit_rate={s.hit_rate:.3f})"
        )
