"""Synthetic graph blocks for tests, examples and benchmarks: random samples with heavy-tailed
graph sizes, given column-wise (CSR) as `GraphStoreWriter.append_block` takes them.

Graph sizes are what makes loading hard (a few samples are 40x the mean, some are empty), so
the node counts are lognormal rather than constant. Everything comes from the caller's numpy
`Generator`: the same seed gives the same blocks. Numpy only (no torch).
"""

from __future__ import annotations

import numpy as np

from tj_data.schema import Schema

__all__ = ["BLOCK", "MAX_NODES", "SCHEMA", "heavy_tailed_nodes", "make_block"]

#: 9 float32 node features + an int64 id per node, 4 float32 edge features, two per-sample fields.
SCHEMA = Schema.graph(
    node_features=9,
    edge_features=4,
    node_fields={"vehicle_id": "int64"},
    sample_fields={"intersection": "int64", "sim_time": "float32"},
)
BLOCK = 20_000  # samples per block in the benchmarks (a few MB of arrays)
MAX_NODES = 400


def heavy_tailed_nodes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` lognormal node counts (mean ~15, long right tail, some empty graphs), capped at
    ``MAX_NODES``; int64."""
    return np.minimum(np.round(rng.lognormal(np.log(10.0), 0.9, n)), MAX_NODES).astype(np.int64)


def make_block(
    rng: np.random.Generator, n: int, start: int = 0
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """``n`` samples of ``SCHEMA`` as ``(arrays, num_nodes, num_edges)``: ~4 edges per node
    (fewer in graphs too small for that), ``edge_index`` with per-sample (local) node ids,
    ``sim_time`` = the global sample index from ``start``, ``intersection`` = it modulo 16."""
    nn = heavy_tailed_nodes(rng, n)
    ne = np.minimum(4 * nn, nn * np.maximum(nn - 1, 0))
    n_tot, e_tot = int(nn.sum()), int(ne.sum())
    limit = np.repeat(nn, ne)
    ei = (rng.random((2, e_tot)) * limit).astype(np.int64)
    arrays = {
        "x": rng.standard_normal((n_tot, 9), dtype=np.float32),
        "vehicle_id": rng.integers(0, 1 << 40, n_tot),
        "edge_index": ei,
        "edge_attr": rng.standard_normal((e_tot, 4), dtype=np.float32),
        "intersection": (np.arange(start, start + n) % 16).astype(np.int64),
        "sim_time": np.arange(start, start + n, dtype=np.float32),
    }
    return arrays, nn, ne
