"""Synthetic graph blocks for tests, examples and benchmarks: random samples with heavy-tailed
graph sizes, given column-wise (CSR) as `GraphStoreWriter.append_block` takes them, and
`write_synthetic`, which writes them into stores of a given size.

Graph sizes are what makes loading hard (a few samples are 40x the mean, some are empty), so
the node counts are lognormal rather than constant. ``traffic=True`` blocks have the traffic
snapshot's columns with recorded traffic's ranges and outliers (what quantisation fits and
errors depend on) and a ``y_next`` target. Everything comes from the caller's numpy
`Generator` or seed: the same seed gives the same blocks. Numpy only (no torch).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping

import numpy as np

from tj_data.schema import FieldSpec, Schema

__all__ = [
    "BLOCK",
    "EDGE_COLUMNS",
    "MAX_NODES",
    "NODE_COLUMNS",
    "SCHEMA",
    "TRAFFIC_SCHEMA",
    "heavy_tailed_nodes",
    "make_block",
    "traffic_features",
    "write_synthetic",
]

Block = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]

#: 9 float32 node features + an int64 id per node, 4 float32 edge features, two per-sample fields.
SCHEMA = Schema.graph(
    node_features=9,
    edge_features=4,
    node_fields={"vehicle_id": "int64"},
    sample_fields={"intersection": "int64", "sim_time": "float32"},
)
#: The traffic snapshot's feature columns (tj-rl defines them; the traffic blocks follow them).
NODE_COLUMNS = ("rel_x", "rel_y", "speed", "accel", "heading_sin", "heading_cos",
                "dist_to_stop_line", "waiting_time", "length")  # fmt: skip
EDGE_COLUMNS = ("dx", "dy", "closing_speed", "inv_ttc")
#: ``SCHEMA`` with named columns and a ``y_next`` node target (the next step's features).
TRAFFIC_SCHEMA = Schema(
    fields=(
        *Schema.graph(node_features=NODE_COLUMNS, edge_features=EDGE_COLUMNS).fields,
        FieldSpec(name="y_next", level="node", dtype="float32", shape=(9,), columns=NODE_COLUMNS),
        *SCHEMA.fields[2:],
    )
)
BLOCK = 20_000  # samples per block in the benchmarks (a few MB of arrays)
MAX_NODES = 400


def heavy_tailed_nodes(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` lognormal node counts (mean ~15, long right tail, some empty graphs), capped at
    ``MAX_NODES``; int64."""
    return np.minimum(np.round(rng.lognormal(np.log(10.0), 0.9, n)), MAX_NODES).astype(np.int64)


def traffic_features(rng: np.random.Generator, n: int) -> np.ndarray:
    """``[n, 9]`` float32 vehicles in ``NODE_COLUMNS`` order: positions around the light, speeds
    up to 30 m/s, 1% braking hard, unit headings, waits only when stopped, three lengths."""
    ang = rng.uniform(0, 2 * np.pi, n)
    speed = np.clip(rng.gamma(2.0, 3.0, n), 0, 30)
    return np.column_stack([
        rng.normal(0, 60, n), rng.normal(0, 60, n), speed,
        rng.normal(0, 1.2, n) - 4.5 * (rng.random(n) < 0.01),
        np.sin(ang), np.cos(ang), rng.uniform(-10, 150, n),
        np.where(speed < 0.5, rng.exponential(20, n), 0.0),
        rng.choice([4.5, 5.0, 12.0], n, p=[0.6, 0.3, 0.1]),
    ]).astype(np.float32)  # fmt: skip


def _traffic_edges(rng: np.random.Generator, e: int) -> np.ndarray:
    """``[e, 4]`` float32 in ``EDGE_COLUMNS`` order; inverse TTC mostly near 0, up to 5 1/s."""
    return np.column_stack([rng.normal(0, 15, (e, 2)), rng.normal(0, 3, e),
                            np.clip(rng.exponential(0.05, e), 0, 5)]).astype(np.float32)  # fmt: skip


def make_block(rng: np.random.Generator, n: int, start: int = 0, *, traffic: bool = False) -> Block:
    """``n`` samples of ``SCHEMA`` (``TRAFFIC_SCHEMA`` with ``traffic``) as ``(arrays,
    num_nodes, num_edges)``: ~4 edges per node (fewer in graphs too small for that),
    ``edge_index`` with per-sample (local) node ids, ``sim_time`` = the global sample index from
    ``start``, ``intersection`` = it modulo 16."""
    nn = heavy_tailed_nodes(rng, n)
    ne = np.minimum(4 * nn, nn * np.maximum(nn - 1, 0))
    n_tot, e_tot = int(nn.sum()), int(ne.sum())
    limit = np.repeat(nn, ne)
    ei = (rng.random((2, e_tot)) * limit).astype(np.int64)
    x = traffic_features(rng, n_tot) if traffic else rng.standard_normal((n_tot, 9), np.float32)
    vid = rng.integers(0, 1 << 40, n_tot)
    ea = _traffic_edges(rng, e_tot) if traffic else rng.standard_normal((e_tot, 4), np.float32)
    arrays = {
        "x": x,
        "vehicle_id": vid,
        "edge_index": ei,
        "edge_attr": ea,
        "intersection": (np.arange(start, start + n) % 16).astype(np.int64),
        "sim_time": np.arange(start, start + n, dtype=np.float32),
    }
    if traffic:
        arrays["y_next"] = x + rng.normal(0, 0.3, x.shape).astype(np.float32)
    return arrays, nn, ne


def _stored_bytes(block: Block) -> int:
    """Bytes a block takes in a store (``edge_index`` is stored as int32, generated as int64)."""
    return sum(v.nbytes for v in block[0].values()) - block[0]["edge_index"].nbytes // 2


def write_synthetic(
    paths: Mapping[str, str | os.PathLike[str]],
    *,
    size_gb: float | None = None,
    samples: int | None = None,
    shard_size: int = 8192,
    traffic: bool = False,
    seed: int = 0,
    progress: Callable[[Iterable[int], str], Iterable[int]] | None = None,
) -> int:
    """Write the same samples into one store per ``{backend: path}`` ("npy", "hdf5"), replacing
    what is there: ``samples`` of them, or blocks of ``BLOCK`` until the stored arrays reach
    ``size_gb`` GB (1e9 bytes; below one block's size, one block of about that size). The blocks
    are ``make_block``'s from ``seed``; ``progress(blocks, description)`` may wrap the loop.
    Returns the number of samples."""
    from tj_data.backends import HDF5Options
    from tj_data.writer import GraphStoreWriter

    if (size_gb is None) == (samples is None):
        raise ValueError("write_synthetic: give size_gb or samples, not both")
    if (size_gb is not None and not size_gb > 0) or (samples is not None and samples < 1):
        raise ValueError(f"write_synthetic: size_gb > 0 or samples >= 1, got {size_gb}, {samples}")
    if samples is None:  # the samples that size_gb asks for, from the first block's bytes
        per_block = _stored_bytes(make_block(np.random.default_rng(seed), BLOCK, traffic=traffic))
        target = size_gb * 1e9  # type: ignore[operator]
        samples = (BLOCK * math.ceil(target / per_block) if target >= per_block
                   else math.ceil(BLOCK * target / per_block))  # fmt: skip
    rng = np.random.default_rng(seed)
    schema = TRAFFIC_SCHEMA if traffic else SCHEMA
    writers = [GraphStoreWriter(p, schema, shard_size=shard_size, backend=b, overwrite=True,  # type: ignore[arg-type]
                                hdf5=HDF5Options() if b == "hdf5" else None)
               for b, p in paths.items()]  # fmt: skip
    starts: Iterable[int] = range(0, samples, BLOCK)
    if progress is not None:
        starts = progress(starts, f"generate {samples} samples x {len(writers)} store(s)")
    try:
        for start in starts:
            block = make_block(rng, min(BLOCK, samples - start), start, traffic=traffic)
            for w in writers:
                w.append_block(*block)
    finally:
        for w in writers:
            w.close()
    return samples
