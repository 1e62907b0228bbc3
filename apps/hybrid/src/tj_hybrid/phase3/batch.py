"""An iteration's collected batch (static for its K epochs) and the frozen GNN's embedding cache.

``IterationBatch`` keeps samples in RAM up to a byte bound; past it, everything is written to a
tj-data graph store under the phase directory (npy shards) and read back memory-mapped, so a large
batch costs page cache, not heap. ``EmbeddingCache`` holds the GNN's per-sample output (node
embeddings and risk logits) in a byte-bounded ``tj_data.LRUCache`` keyed by the sample's index in
the batch: the GNN is frozen, so epoch 1 computes them and epochs 2..K reuse them.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tj_data import GraphStoreWriter, LRUCache, MmapGraphDataset
from tj_data.live import sample_nbytes
from tj_models import GNNOutput, GraphInput, RiskGNN

__all__ = ["EmbeddingCache", "IterationBatch"]


class IterationBatch:
    """Samples of one iteration: ``add`` while collecting, ``seal``, then ``take(indices)``."""

    def __init__(self, schema: Any, *, ram_bytes: int, spill_dir: Path) -> None:
        self.schema, self.ram_bytes, self.spill_dir = schema, int(ram_bytes), Path(spill_dir)
        self._ram: list[Mapping[str, Any]] = []
        self._writer: GraphStoreWriter | None = None
        self._dataset: MmapGraphDataset | None = None
        self._sealed = False
        self.count, self.nbytes = 0, 0

    @property
    def spilled(self) -> bool:
        return self._writer is not None or self._dataset is not None

    def __len__(self) -> int:
        return self.count

    def add(self, sample: Mapping[str, Any]) -> None:
        if self._sealed:
            raise RuntimeError("IterationBatch.add after seal()")
        self.count += 1
        self.nbytes += sample_nbytes(sample)
        if self._writer is not None:
            self._writer.append(sample)
            return
        self._ram.append(sample)
        if self.nbytes > self.ram_bytes:  # spill everything so far, then stream to disk
            self._writer = GraphStoreWriter(self.spill_dir, self.schema, overwrite=True)
            self._writer.append_many(self._ram)
            self._ram = []

    def seal(self) -> None:
        """No more samples: a spilled batch is committed and opened memory-mapped."""
        self._sealed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            self._dataset = MmapGraphDataset(self.spill_dir)

    def take(self, indices: Sequence[int]) -> list[Mapping[str, Any]]:
        if self._writer is not None:  # still being written: nothing to read yet
            raise RuntimeError("IterationBatch.take before seal() of a spilled batch")
        if self._dataset is not None:
            return self._dataset.__getitems__([int(i) for i in indices])
        return [self._ram[int(i)] for i in indices]

    def column(self, name: str) -> np.ndarray:
        """One per-sample field over the whole batch, in sample order."""
        return np.stack([s[name] for s in self.take(range(self.count))])

    def close(self) -> None:
        """Drop the samples and any spilled store."""
        if self._writer is not None:
            self._writer.abort()
            self._writer = None
        self._dataset, self._ram = None, []
        shutil.rmtree(self.spill_dir, ignore_errors=True)


class EmbeddingCache:
    """The frozen GNN's output per sample (``node`` [n, D], ``risk_logit`` [n]) for one batch.

    ``encode(gnn, graph, keys)``: the GNN output for the micro-batch whose samples are ``keys``,
    from the cache when every key is there, else computed (without gradients) and stored.
    ``enabled=False`` always computes (the benchmark's comparison). ``shrink`` is the memory
    monitor's shrinker."""

    def __init__(self, max_bytes: int, *, enabled: bool = True) -> None:
        self.enabled = enabled
        self.cache: LRUCache[int, tuple[Tensor, Tensor]] = LRUCache(max_bytes=int(max_bytes))
        self.hits = self.misses = 0

    def clear(self) -> None:
        self.cache.clear()

    def shrink(self, nbytes: int) -> int:
        return self.cache.shrink(nbytes)

    def encode(self, gnn: RiskGNN, graph: GraphInput, keys: Sequence[int]) -> GNNOutput:
        if self.enabled:
            parts = [self.cache.get(int(k)) for k in keys]
            if all(p is not None for p in parts):
                self.hits += len(keys)
                node = torch.cat([p[0] for p in parts])  # type: ignore[index]
                risk = torch.cat([p[1] for p in parts])  # type: ignore[index]
                return GNNOutput(node=node, risk_logit=risk, graph=graph)
        self.misses += len(keys)
        with torch.no_grad():
            out = gnn(graph)
        if self.enabled:
            ptr = graph.ptr.tolist()
            for j, k in enumerate(keys):
                a, b = ptr[j], ptr[j + 1]
                self.cache.put(int(k), (out.node[a:b].clone(), out.risk_logit[a:b].clone()))
        return GNNOutput(node=out.node, risk_logit=out.risk_logit, graph=out.graph)

    def stats(self) -> dict[str, float]:
        total = self.hits + self.misses
        return {"hit_rate": self.hits / total if total else 0.0, "bytes": float(self.cache.nbytes)}
