"""Shared helpers: a schema with every supported dtype and reproducible random samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tj_data import FieldSpec, GraphStoreWriter, Schema
from tj_data.schema import SUPPORTED_DTYPES


def all_dtypes_schema() -> Schema:
    """x/edge_attr float32 + one field per supported dtype at every level."""
    fields = [
        FieldSpec(name="x", level="node", dtype="float32", shape=(3,), columns=("a", "b", "c")),
        FieldSpec(name="edge_attr", level="edge", dtype="float32", shape=(2,)),
    ]
    for i, dt in enumerate(SUPPORTED_DTYPES):
        level = ("node", "edge", "sample")[i % 3]
        shape = ((), (2,), (2, 3))[i % 3]
        fields.append(FieldSpec(name=f"f_{dt}", level=level, dtype=dt, shape=shape))
    return Schema(fields=tuple(fields))


def random_value(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)
    return rng.standard_normal(shape).astype(dt)


def random_sample(rng: np.random.Generator, schema: Schema, sid: int, max_nodes: int = 6) -> dict:
    """A random graph; node 0 of field `sid` (when present) carries the sample id."""
    n = int(rng.integers(0, max_nodes + 1))
    e = int(rng.integers(0, 2 * n + 1)) if n else 0
    s: dict = {"edge_index": rng.integers(0, max(n, 1), size=(2, e))}
    rows = {"node": (n,), "edge": (e,), "sample": ()}
    for f in schema.fields:
        s[f.name] = random_value(rng, f.dtype, rows[f.level] + f.shape)
    if "sid" in schema:
        s["sid"] = np.int64(sid)
    return s


def id_schema(node_features: int = 3) -> Schema:
    return Schema.graph(
        node_features=node_features, edge_features=2, sample_fields={"sid": "int64"}
    )


def write_store(
    path: Path,
    n: int,
    *,
    shard_size: int = 16,
    backend: str = "npy",
    seed: int = 0,
    schema: Schema | None = None,
    episode_every: int = 0,
) -> list[dict]:
    schema = schema or id_schema()
    rng = np.random.default_rng(seed)
    samples = [random_sample(rng, schema, i) for i in range(n)]
    with GraphStoreWriter(path, schema, shard_size=shard_size, backend=backend) as w:
        for i, s in enumerate(samples):
            w.append(s)
            if episode_every and (i + 1) % episode_every == 0:
                w.end_episode()
    return samples
