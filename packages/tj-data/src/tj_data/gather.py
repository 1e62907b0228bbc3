"""Vectorised batched reads: sort requested indices by physical position, coalesce contiguous
runs into one slice per field, split into per-sample views and restore the caller's order.

A *source* is anything with `locate(idx)` and `shard(k)` -> (arrays by name, node_ptr, edge_ptr)
(`GraphStore`, or the chunk cache of `ChunkedGraphDataset`), so every dataset shares this path.
"""

from __future__ import annotations

from typing import Any, Protocol

import numpy as np

from tj_data.schema import EDGE_INDEX, Schema

__all__ = ["ShardSource", "gather_samples", "runs_of"]


class ShardSource(Protocol):
    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...
    def shard(self, k: int) -> tuple[Any, np.ndarray, np.ndarray]: ...


def runs_of(shard: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Start/stop positions of maximal runs of consecutive samples within one shard
    (inputs sorted by (shard, local) and unique)."""
    if len(shard) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    brk = np.flatnonzero((np.diff(shard) != 0) | (np.diff(local) != 1)) + 1
    return np.concatenate([[0], brk]), np.concatenate([brk, [len(shard)]])


def gather_samples(
    source: ShardSource, indices: np.ndarray, schema: Schema | None = None, *, copy: bool = False
) -> list[dict[str, Any]]:
    """Samples at checked global `indices` (any order, duplicates allowed), caller's order kept.

    Each sample is a dict of numpy views (copies when `copy`) keyed by field name plus
    `edge_index`; `num_nodes` is added when the schema has no node-level field."""
    schema = schema if schema is not None else source.schema  # type: ignore[attr-defined]
    uniq, inverse = np.unique(indices, return_inverse=True)
    shard, local = source.locate(uniq)
    starts, stops = runs_of(shard, local)
    node_f = [f.name for f in schema.at_level("node")]
    edge_f = [f.name for f in schema.at_level("edge")]
    samp_f = [f.name for f in schema.at_level("sample")]
    add_n = not node_f
    out: list[dict[str, Any]] = [None] * len(uniq)  # type: ignore[list-item]
    for a, b in zip(starts.tolist(), stops.tolist(), strict=True):
        k = int(shard[a])
        lo, hi = int(local[a]), int(local[b - 1]) + 1
        arrays, node_ptr, edge_ptr = source.shard(k)
        nptr = np.asarray(node_ptr[lo : hi + 1])
        eptr = np.asarray(edge_ptr[lo : hi + 1])
        n0, n1, e0, e1 = int(nptr[0]), int(nptr[-1]), int(eptr[0]), int(eptr[-1])
        nrel = (nptr - n0).tolist()
        erel = (eptr - e0).tolist()
        blocks = [(name, np.asarray(arrays[name][n0:n1]), nrel) for name in node_f]
        blocks += [(name, np.asarray(arrays[name][e0:e1]), erel) for name in edge_f]
        sblocks = [(name, np.asarray(arrays[name][lo:hi])) for name in samp_f]
        ei = np.asarray(arrays[EDGE_INDEX][:, e0:e1])
        for j in range(hi - lo):
            s: dict[str, Any] = {EDGE_INDEX: ei[:, erel[j] : erel[j + 1]]}
            for name, blk, rel in blocks:
                s[name] = blk[rel[j] : rel[j + 1]]
            for name, blk in sblocks:
                s[name] = blk[j]
            if add_n:
                s["num_nodes"] = nrel[j + 1] - nrel[j]
            if copy:
                s = {key: np.array(v) if isinstance(v, np.ndarray) else v for key, v in s.items()}
            out[a + j] = s
    if len(uniq) == len(indices) and np.array_equal(uniq, indices):
        return out
    return [out[i] for i in inverse.tolist()]
