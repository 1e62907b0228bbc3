"""A small synthetic store with the traffic snapshot's column names (tests only): episodes of
vehicles that persist across steps, in ``tj_data.synthetic.TRAFFIC_SCHEMA``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tj_data import GraphStoreWriter, Schema
from tj_data.synthetic import NODE_COLUMNS as NODE
from tj_data.synthetic import TRAFFIC_SCHEMA

__all__ = ["NODE", "traffic_schema", "write_traffic"]


def traffic_schema() -> Schema:
    """tj_data.synthetic's traffic schema: the snapshot's columns and a ``y_next`` target."""
    return TRAFFIC_SCHEMA


def write_traffic(
    path: Path,
    *,
    episodes: int = 3,
    steps: int = 40,
    intersections: int = 2,
    shard_size: int = 64,
    max_nodes: int = 12,
    seed: int = 0,
) -> Path:
    """Episodes of `steps` decision steps x `intersections` lights (interleaved, like the
    recorder); vehicle ids persist across steps within an episode."""
    rng = np.random.default_rng(seed)
    with GraphStoreWriter(path, traffic_schema(), shard_size=shard_size) as w:
        for ep in range(episodes):
            for t in range(steps):
                for inter in range(intersections):
                    n = int(rng.integers(1, max_nodes + 1))
                    e = int(rng.integers(0, 2 * n + 1))
                    ang = rng.uniform(0, 2 * np.pi, n)
                    x = np.column_stack(
                        [
                            rng.normal(0, 40, n),
                            rng.normal(0, 40, n),
                            rng.uniform(0, 14, n),
                            rng.normal(0, 1.5, n),
                            np.sin(ang),
                            np.cos(ang),
                            rng.uniform(-5, 120, n),
                            rng.exponential(8, n),
                            rng.choice([4.5, 5.0, 12.0], n),
                        ]
                    ).astype(np.float32)
                    w.append(
                        {
                            "x": x,
                            "vehicle_id": ep * 1000 + inter * 100 + rng.permutation(60)[:n],
                            "y_next": x + rng.normal(0, 0.5, x.shape).astype(np.float32),
                            "edge_index": rng.integers(0, n, (2, e)),
                            "edge_attr": rng.normal(0, 8, (e, 4)).astype(np.float32),
                            "intersection": inter,
                            "sim_time": float(t),
                        }
                    )
            w.end_episode()
    return path
