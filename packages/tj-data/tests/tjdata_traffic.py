"""A small synthetic store with the traffic snapshot's column names (tests only)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tj_data import FieldSpec, GraphStoreWriter, Schema

NODE = (
    "rel_x",
    "rel_y",
    "speed",
    "accel",
    "heading_sin",
    "heading_cos",
    "dist_to_stop_line",
    "waiting_time",
    "length",
)
EDGE = ("dx", "dy", "closing_speed", "inv_ttc")


def traffic_schema() -> Schema:
    return Schema(
        fields=(
            FieldSpec(name="x", level="node", dtype="float32", shape=(9,), columns=NODE),
            FieldSpec(name="vehicle_id", level="node", dtype="int64"),
            FieldSpec(name="y_next", level="node", dtype="float32", shape=(9,), columns=NODE),
            FieldSpec(name="edge_attr", level="edge", dtype="float32", shape=(4,), columns=EDGE),
            FieldSpec(name="intersection", level="sample", dtype="int64"),
            FieldSpec(name="sim_time", level="sample", dtype="float32"),
        )
    )


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
