"""The quant suite's input: a traffic-like float32 graph store, generated with a fixed seed.

Snapshot column names (DESIGN 4.3), heavy-tailed graph sizes and realistic ranges with outliers
(hard braking, long waits, far vehicles), so that min/max and percentile fits differ the way
they do on recorded traffic. The same seed and size give the same store, hence the same bytes and
errors, on every machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from tj_data import FieldSpec, GraphStore, GraphStoreWriter, Schema

__all__ = ["COLUMN_UNITS", "RANGES", "SCHEMA", "field_bytes", "generate", "node_features"]

NODE = ("rel_x", "rel_y", "speed", "accel", "heading_sin", "heading_cos", "dist_to_stop_line",
        "waiting_time", "length")  # fmt: skip
EDGE = ("dx", "dy", "closing_speed", "inv_ttc")
COLUMN_UNITS = {
    "rel_x": "m", "rel_y": "m", "speed": "m/s", "accel": "m/s^2", "heading_sin": "1",
    "heading_cos": "1", "dist_to_stop_line": "m", "waiting_time": "s", "length": "m",
    "dx": "m", "dy": "m", "closing_speed": "m/s", "inv_ttc": "1/s",
}  # fmt: skip
SCHEMA = Schema(
    fields=(
        FieldSpec(name="x", level="node", dtype="float32", shape=(9,), columns=NODE),
        FieldSpec(name="vehicle_id", level="node", dtype="int64"),
        FieldSpec(name="y_next", level="node", dtype="float32", shape=(9,), columns=NODE),
        FieldSpec(name="edge_attr", level="edge", dtype="float32", shape=(4,), columns=EDGE),
        FieldSpec(name="intersection", level="sample", dtype="int64"),
        FieldSpec(name="sim_time", level="sample", dtype="float32"),
    )
)
# `length` is nearly constant (3 vehicle types): a fixed range instead of its min/max.
RANGES = {"x": {"length": (0.0, 20.0)}, "y_next": {"length": (0.0, 20.0)}}
_BLOCK = 10_000  # samples generated and appended at a time


def node_features(rng: np.random.Generator, n: int) -> np.ndarray:
    """``[n, 9]`` float32 vehicle features in the NODE column order."""
    ang = rng.uniform(0, 2 * np.pi, n)
    speed = np.clip(rng.gamma(2.0, 3.0, n), 0, 30)
    return np.column_stack([
        rng.normal(0, 60, n), rng.normal(0, 60, n), speed,
        rng.normal(0, 1.2, n) - 4.5 * (rng.random(n) < 0.01),
        np.sin(ang), np.cos(ang), rng.uniform(-10, 150, n),
        np.where(speed < 0.5, rng.exponential(20, n), 0.0),
        rng.choice([4.5, 5.0, 12.0], n, p=[0.6, 0.3, 0.1]),
    ]).astype(np.float32)  # fmt: skip


def generate(
    path: Path,
    samples: int,
    seed: int = 0,
    progress: Callable[[Iterable[int], str], Iterable[int]] | None = None,
) -> None:
    """Write a float32 store of ``samples`` graphs (8,192-sample shards) to ``path``."""
    rng = np.random.default_rng(seed)
    starts: Iterable[int] = range(0, samples, _BLOCK)
    if progress is not None:
        starts = progress(starts, "generate float32 store")
    with GraphStoreWriter(path, SCHEMA, shard_size=8192) as w:
        for start in starts:
            b = min(_BLOCK, samples - start)
            nn = np.minimum(np.round(rng.lognormal(np.log(10.0), 0.8, b)), 200).astype(np.int64)
            ne = np.minimum(4 * nn, nn * np.maximum(nn - 1, 0))
            n_tot, e_tot = int(nn.sum()), int(ne.sum())
            x = node_features(rng, n_tot)
            ea = np.column_stack([rng.normal(0, 15, (e_tot, 2)), rng.normal(0, 3, e_tot),
                                  np.clip(rng.exponential(0.05, e_tot), 0, 5)]).astype(np.float32)  # fmt: skip
            w.append_block(
                {"x": x, "vehicle_id": rng.integers(0, 1 << 30, n_tot),
                 "y_next": x + rng.normal(0, 0.3, x.shape).astype(np.float32),
                 "edge_index": (rng.random((2, e_tot)) * np.repeat(nn, ne)).astype(np.int64),
                 "edge_attr": ea, "intersection": np.arange(start, start + b) % 16,
                 "sim_time": np.arange(start, start + b, dtype=np.float32)},
                nn, ne,
            )  # fmt: skip


def field_bytes(store: GraphStore, name: str) -> int:
    """Bytes of field ``name`` on disk, summed over the store's shards (from the manifest)."""
    return sum(int(s.files[f"{name}.npy"]["nbytes"]) for s in store.manifest.shards)
