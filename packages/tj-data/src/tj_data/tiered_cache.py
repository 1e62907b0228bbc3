"""`TieredCache`: L1 memory (`LRUCache`) -> L2 disk (`DiskCache`) -> loader (the seeds' L1/L2/L3).

A get tries L1, then L2 (a hit is promoted into L1), then calls the loader and stores its value
in both tiers. A corrupt L2 entry is dropped by the disk cache and counts as a miss, so the value
is refetched from the loader, never returned damaged. `shrink(nbytes)` reclaims L1 memory first,
then drops L2's page cache.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tj_data.disk_cache import DiskCache
from tj_data.lru_cache import CacheStats, LRUCache

__all__ = ["TieredCache", "TieredStats"]


@dataclass(kw_only=True, frozen=True)
class TieredStats:
    l1: CacheStats
    l2: CacheStats | None
    loads: int  # loader calls (misses of every tier)

    def to_dict(self) -> dict[str, Any]:
        return {
            "l1": self.l1.to_dict(),
            "l2": None if self.l2 is None else self.l2.to_dict(),
            "loads": self.loads,
        }


class TieredCache:
    """Memory + disk cache in front of a loader function `loader(key) -> value`.

    Args:
        l1: the memory tier (`LRUCache`).
        l2: the disk tier (`DiskCache`) or None (memory + loader only).
        loader: fetches a value on a miss of every tier (e.g. decode a shard from the store).
    """

    def __init__(
        self, l1: LRUCache[Any, Any], l2: DiskCache | None, loader: Callable[[Any], Any]
    ) -> None:
        self.l1, self.l2, self.loader = l1, l2, loader
        self.loads = 0

    def get(self, key: Any) -> Any:
        sentinel = object()
        value = self.l1.get(key, sentinel)
        if value is not sentinel:
            return value
        if self.l2 is not None:
            value = self.l2.get(key, sentinel)
            if value is not sentinel:
                self.l1.put(key, value)
                return value
        value = self.loader(key)
        self.loads += 1
        if self.l2 is not None:
            self.l2.put(key, value)
        self.l1.put(key, value)
        return value

    __getitem__ = get

    def invalidate(self, key: Any) -> None:
        """Drop `key` from both tiers (the next get reloads it)."""
        self.l1.pop(key)
        if self.l2 is not None:
            self.l2.pop(key)

    def shrink(self, nbytes: int) -> int | None:
        """Free about `nbytes` (tj-monitor's shrinker signature): L1 entries first, then L2's
        page cache; returns the L1 bytes freed (L2's share is not known)."""
        freed = self.l1.shrink(nbytes)
        if freed < nbytes and self.l2 is not None:
            self.l2.shrink(nbytes - freed)
        return freed

    @property
    def max_memory_bytes(self) -> int:
        """Process memory this cache may hold (the L1 bound)."""
        return self.l1.max_bytes

    def stats(self) -> TieredStats:
        return TieredStats(
            l1=self.l1.stats(), l2=None if self.l2 is None else self.l2.stats(), loads=self.loads
        )

    def __repr__(self) -> str:
        return f"TieredCache(l1={self.l1!r}, l2={self.l2!r})"
