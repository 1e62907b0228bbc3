"""What the data suite compares tj-data's stores against: the seeds' JSON chunks (written from the
store, read the seeds' way) and the same samples held in RAM as numpy (the ceiling: tj-data's
``ChunkedGraphDataset`` with every shard cached). PyG's ``InMemoryDataset`` is tj-data's
``store_to_pyg``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from tj_data import ChunkedGraphDataset, GraphDataset, GraphStore

__all__ = ["JsonChunkReader", "in_ram", "write_json_chunks"]

Progress = Callable[[Iterable[int], str], Iterable[int]]


def _plain(items: Iterable[int], _description: str) -> Iterable[int]:
    return items


def write_json_chunks(
    store_ds: GraphDataset, root: Path, n_chunks: int, chunk: int, progress: Progress = _plain
) -> Path:
    """The seed layout (``phase1/chunks/chunk_NNN.json`` + ``metadata.json``) holding the first
    ``n_chunks * chunk`` samples of ``store_ds``; returns the layout's root."""
    out = root / "json" / "phase1" / "chunks"
    out.mkdir(parents=True, exist_ok=True)
    for c in progress(range(n_chunks), "write JSON chunks"):
        recs = []
        for s in store_ds.__getitems__(list(range(c * chunk, (c + 1) * chunk))):
            recs.append(
                {
                    "nodes": [
                        {"features": f, "id": int(v)}
                        for f, v in zip(s["x"].tolist(), s["vehicle_id"].tolist(), strict=True)
                    ],
                    "edges": s["edge_index"].T.tolist(),
                    "edge_features": s["edge_attr"].tolist(),
                    "intersection": int(s["intersection"]),
                    "sim_time": float(s["sim_time"]),
                }
            )
        (out / f"chunk_{c:03d}.json").write_text(json.dumps(recs))
    (root / "json" / "metadata.json").write_text("{}")
    return root / "json"


class JsonChunkReader:
    """The seed-style loader: ``json.loads`` per chunk, an LRU of ``keep`` parsed chunks, lists
    turned into numpy arrays per sample."""

    def __init__(self, root: Path, chunk: int, keep: int = 3) -> None:
        self.files = sorted((root / "phase1" / "chunks").glob("chunk_*.json"))
        self.chunk = chunk
        self.records = functools.lru_cache(maxsize=keep)(self._parse)

    def _parse(self, c: int) -> list[dict[str, Any]]:
        return json.loads(self.files[c].read_bytes())

    def __len__(self) -> int:
        return len(self.files) * self.chunk

    def __getitem__(self, i: int) -> dict[str, Any]:
        c, j = divmod(i, self.chunk)
        r = self.records(c)[j]
        nodes = r["nodes"]
        e = np.asarray(r["edges"], np.int32).reshape(-1, 2).T
        return {
            "x": np.asarray([n["features"] for n in nodes], np.float32).reshape(-1, 9),
            "vehicle_id": np.asarray([n["id"] for n in nodes], np.int64),
            "edge_index": np.ascontiguousarray(e),
            "edge_attr": np.asarray(r["edge_features"], np.float32).reshape(-1, 4),
            "intersection": np.int64(r["intersection"]),
            "sim_time": np.float32(r["sim_time"]),
        }


def in_ram(store: Path, progress: Progress = _plain) -> ChunkedGraphDataset:
    """The store with every shard decoded into RAM up front (``ChunkedGraphDataset`` with room
    for all of them): tj-data's gather path with no file underneath."""
    ds = ChunkedGraphDataset(store, cache_chunks=max(1, GraphStore.open(store).num_shards))
    starts = np.cumsum([0] + [s.num_samples for s in ds.store.manifest.shards])
    for k in progress(range(ds.store.num_shards), "load into RAM"):
        ds.__getitems__([int(starts[k])])  # decodes shard k into the cache
    return ds
