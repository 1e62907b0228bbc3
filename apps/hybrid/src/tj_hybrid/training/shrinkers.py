"""Memory-pressure hooks for caches in the processes that own them (shared by the phases).

A cache with ``shrink(nbytes)`` lives in one process: phase 1's ``ChunkedGraphDataset`` (decoded
shards) in the rank or in each DataLoader worker, phase 3's embedding cache in the rank.
``CacheShrinker`` starts a small ``tj_monitor.MemoryMonitor`` in that process with the cache's
``shrink`` registered, so crossing the cleanup line (measured against the whole machine or
container) evicts entries there. Used as ``worker_init_fn`` it hooks every worker's own copy of
the dataset.
"""

from __future__ import annotations

import logging
from typing import Any

from tj_monitor import MemoryMonitor, MonitorConfig

__all__ = ["CacheShrinker"]

log = logging.getLogger(__name__)


class CacheShrinker:
    """Picklable: ``attach(dataset)`` in this process, or call it as a ``worker_init_fn``."""

    def __init__(self, config: MonitorConfig) -> None:
        self.config = config
        self.monitor: MemoryMonitor | None = None

    def attach(self, dataset: Any) -> MemoryMonitor:
        """Register ``dataset.shrink`` (the cache of this process) with a new monitor thread."""
        self.monitor = MemoryMonitor(self.config)
        self.monitor.register_shrinker(dataset.shrink)
        self.monitor.start()
        return self.monitor

    def __call__(self, worker_id: int) -> None:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        base = getattr(info.dataset, "base", info.dataset) if info is not None else None
        if base is not None and hasattr(base, "shrink"):
            self.attach(base)
            log.debug("worker %d: cache shrinker attached", worker_id)

    def __getstate__(self) -> dict[str, Any]:
        return {"config": self.config, "monitor": None}  # threads do not travel
