"""`ChunkedGraphDataset`: whole shards decoded into RAM, kept in a byte-bounded LRU per process.

This is the seeds' "keep 2-3 chunks in memory", made safe: the bound is in bytes (cachetools'
`LRUCache` with `getsizeof`), and the cache is per worker and never pickled. Pair it with
`ChunkShuffleSampler` (or `DistributedChunkSampler`) so that consecutive indices stay inside a
few shards: the hit rate stays high while the order is still shuffled.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from cachetools import LRUCache

from tj_data.backends import HDF5ReadOptions
from tj_data.collate import BatchTransform
from tj_data.gather import ShardSource
from tj_data.mapped import GraphDataset
from tj_data.schema import Schema
from tj_data.store import GraphStore

__all__ = ["CacheInfo", "ChunkedGraphDataset"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True, frozen=True)
class CacheInfo:
    hits: int
    misses: int
    uncached: int  # shards larger than the whole cache: decoded per read, never stored
    currsize: int
    maxsize: int

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class _ChunkCache:
    """ShardSource whose shard arrays are decoded copies held in an LRU bounded by bytes."""

    def __init__(self, store: GraphStore, schema: Schema, max_bytes: int) -> None:
        self.store, self.schema = store, schema
        self.lru: LRUCache[int, dict[str, np.ndarray]] = LRUCache(
            maxsize=max_bytes, getsizeof=lambda d: sum(a.nbytes for a in d.values())
        )
        self.hits = self.misses = self.uncached = 0

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.store.locate(indices)

    def shard_arrays(self, k: int) -> dict[str, np.ndarray]:
        arrays = self.lru.get(k)
        if arrays is not None:
            self.hits += 1
            return arrays
        self.misses += 1
        arrays = self.store.read_shard(k, self.schema.names)
        try:
            self.lru[k] = arrays
        except ValueError:  # larger than the whole cache
            self.uncached += 1
            log.debug(
                "shard %d (%d bytes) exceeds the chunk cache",
                k,
                sum(a.nbytes for a in arrays.values()),
            )
        return arrays

    def shard(self, k: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        arrays = self.shard_arrays(k)
        return arrays, arrays["node_ptr"], arrays["edge_ptr"]


class ChunkedGraphDataset(GraphDataset):
    """Map-style dataset that reads whole shards and caches the decoded arrays.

    Args:
        cache_chunks: how many shards the cache holds (bound: cache_chunks x the largest shard's
            bytes); ignored when cache_bytes is given.
        cache_bytes: explicit byte bound of the cache (per process: each worker has its own).
    Works with both backends; with HDF5 + compression it is the fast way to read.
    """

    def __init__(
        self,
        store: GraphStore | str | os.PathLike[str],
        *,
        cache_chunks: int = 3,
        cache_bytes: int | None = None,
        fields: Sequence[str] | None = None,
        verify: bool | Literal["once"] = False,
        transforms: Sequence[BatchTransform] = (),
        hdf5: HDF5ReadOptions | None = None,
        dequantize: str = "host",
    ) -> None:
        super().__init__(
            store,
            fields=fields,
            verify=verify,
            transforms=transforms,
            hdf5=hdf5,
            dequantize=dequantize,
        )
        if cache_bytes is None:
            if cache_chunks < 1:
                raise ValueError(f"cache_chunks={cache_chunks}: expected >= 1")
            largest = max((s.nbytes for s in self.store.manifest.shards), default=0)
            cache_bytes = cache_chunks * max(largest, 1)
        if cache_bytes < 1:
            raise ValueError(f"cache_bytes={cache_bytes}: expected >= 1")
        self.cache_bytes = int(cache_bytes)
        self._cache: _ChunkCache | None = None
        self._pid = -1

    def _source(self) -> ShardSource:
        if self._cache is None or self._pid != os.getpid():  # one cache per process
            self._cache = _ChunkCache(self.store, self.schema, self.cache_bytes)
            self._pid = os.getpid()
        return self._cache

    def cache_info(self) -> CacheInfo:
        c = self._cache if self._pid == os.getpid() else None
        if c is None:
            return CacheInfo(hits=0, misses=0, uncached=0, currsize=0, maxsize=self.cache_bytes)
        return CacheInfo(
            hits=c.hits,
            misses=c.misses,
            uncached=c.uncached,
            currsize=int(c.lru.currsize),
            maxsize=self.cache_bytes,
        )

    def clear_cache(self) -> None:
        self._cache = None

    def shrink(self, nbytes: int) -> int:
        """Evict least recently used shards until about `nbytes` are freed (memory-pressure hook
        with tj-monitor's shrinker signature); returns the bytes freed in this process."""
        c = self._cache if self._pid == os.getpid() else None
        freed = 0
        while c is not None and freed < nbytes and len(c.lru):
            _, arrays = c.lru.popitem()
            freed += sum(a.nbytes for a in arrays.values())
        return freed

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"], state["_pid"] = None, -1
        return state
