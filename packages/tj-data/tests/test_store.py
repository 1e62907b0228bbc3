"""Store round trips, append/resume and manifest contents (both backends)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tjdata_testutil import all_dtypes_schema, random_sample, write_store

from tj_data import (
    GraphStore,
    GraphStoreWriter,
    HDF5Options,
    QuantParams,
    Schema,
    SchemaMismatchError,
    StoreError,
    StoreIncompleteError,
)
from tj_data.schema import FieldSpec


def _assert_same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        x, y = np.asarray(a[k]), np.asarray(b[k])
        assert x.shape == y.shape, k
        np.testing.assert_array_equal(x, y.astype(x.dtype), err_msg=k)


@pytest.mark.parametrize(
    ("backend", "hdf5"),
    [
        ("npy", None),
        ("hdf5", None),
        ("hdf5", HDF5Options(compression="gzip", compression_opts=4, shuffle=True)),
        ("hdf5", HDF5Options(compression="lzf", chunk_bytes=2048)),
    ],
    ids=["npy", "hdf5", "hdf5-gzip", "hdf5-lzf"],
)
def test_round_trip_every_dtype(tmp_path, backend, hdf5) -> None:
    schema = all_dtypes_schema()
    rng = np.random.default_rng(1)
    samples = [random_sample(rng, schema, i) for i in range(37)]
    samples[3] = random_sample(np.random.default_rng(5), schema, 3, max_nodes=0)  # empty graph
    with GraphStoreWriter(
        tmp_path / "s",
        schema,
        shard_size=8,
        backend=backend,
        hdf5=hdf5,
        metadata={"source": "test"},
    ) as w:
        w.append_many(samples[:20])
        w.end_episode()
        w.append_many(samples[20:])
    store = GraphStore.open(tmp_path / "s", verify=True)
    assert len(store) == 37 and store.num_shards == 5
    assert store.schema == schema
    assert store.episode_ends.tolist() == [20, 37]  # the open episode is ended on close
    assert store.manifest.metadata == {"source": "test"}
    for i, s in enumerate(samples):
        got = store[i]
        for f in schema.fields:
            assert np.asarray(got[f.name]).dtype == np.dtype(f.dtype)
        _assert_same(got, {**s, "edge_index": s["edge_index"].astype(np.int32)})
    sizes = store.size_index()
    assert sizes.nodes.tolist() == [len(s["x"]) for s in samples]
    assert sizes.edges.tolist() == [s["edge_index"].shape[1] for s in samples]
    assert (sizes.nbytes > 0).all() and len(sizes) == 37


def test_append_block_equals_append(tmp_path) -> None:
    schema = all_dtypes_schema()
    rng = np.random.default_rng(2)
    samples = [random_sample(rng, schema, i) for i in range(25)]
    write = GraphStoreWriter(tmp_path / "a", schema, shard_size=7)
    write.append_many(samples)
    write.close()
    nn = np.array([len(s["x"]) for s in samples])
    ne = np.array([s["edge_index"].shape[1] for s in samples])
    block = {"edge_index": np.concatenate([s["edge_index"] for s in samples], axis=1)}
    for f in schema.fields:
        block[f.name] = (np.stack if f.level == "sample" else np.concatenate)(
            [s[f.name] for s in samples]
        )
    with GraphStoreWriter(tmp_path / "b", schema, shard_size=7) as w:
        w.append_block(block, nn, ne)
    a, b = GraphStore.open(tmp_path / "a"), GraphStore.open(tmp_path / "b")
    ma, mb = a.manifest.to_json(), b.manifest.to_json()
    assert [s["files"] for s in ma["shards"]] == [s["files"] for s in mb["shards"]]  # same sha256


def test_append_mode_and_schema_mismatch(tmp_path) -> None:
    path = tmp_path / "s"
    write_store(path, 10, shard_size=4)
    other = Schema.graph(node_features=4, edge_features=2, sample_fields={"sid": "int64"})
    with pytest.raises(SchemaMismatchError, match=r"field 'x' differs"):
        GraphStoreWriter(path, other, mode="a")
    with pytest.raises(StoreError, match="not empty"):
        GraphStoreWriter(path, other)
    rng = np.random.default_rng(9)
    with GraphStoreWriter(path, None, mode="a", metadata={"more": True}) as w:
        schema = w.schema
        w.append(random_sample(rng, schema, 10))
    store = GraphStore.open(path, verify=True)
    assert len(store) == 11 and store.episode_ends.tolist() == [10, 11]
    assert store.manifest.metadata == {"more": True}


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.pop("x"), r"missing \['x'\]"),
        (lambda s: s.update(extra=np.zeros(1)), r"unexpected \['extra'\]"),
        (lambda s: s.update(x=np.zeros((2, 4))), r"field 'x' has 2 rows|field 'x' has shape"),
        (lambda s: s.update(sid=np.float32(1.5)), r"field 'sid' has dtype float32, expected int64"),
        (lambda s: s.update(edge_index=np.array([[0], [99]])), r"edge_index.*\[0, 3\)"),
        (
            lambda s: s.update(edge_attr=np.zeros((1, 3), np.float32)),
            r"field 'edge_attr' has shape",
        ),
    ],
)
def test_bad_sample_rejected(tmp_path, change, match) -> None:
    schema = Schema.graph(node_features=3, edge_features=2, sample_fields={"sid": "int64"})
    good = {
        "x": np.zeros((3, 3)),
        "edge_index": np.array([[0], [1]]),
        "edge_attr": np.zeros((1, 2)),
        "sid": np.int64(0),
    }
    with GraphStoreWriter(tmp_path / "s", schema) as w:
        w.append(good)
        bad = dict(good)
        change(bad)
        with pytest.raises(SchemaMismatchError, match=match) as info:
            w.append(bad)
        assert "sample 1" in str(info.value)
        assert w.num_samples == 1


def test_schema_validation_and_quant_round_trip(tmp_path) -> None:
    with pytest.raises(SchemaMismatchError, match="not in"):
        FieldSpec(name="x", level="graph", dtype="float32")  # type: ignore[arg-type]
    with pytest.raises(SchemaMismatchError, match="dtype"):
        FieldSpec(name="x", level="node", dtype="complex64")
    with pytest.raises(SchemaMismatchError, match="identifier"):
        FieldSpec(name="batch", level="node")
    with pytest.raises(SchemaMismatchError, match="column names"):
        FieldSpec(name="x", level="node", shape=(3,), columns=("a", "b"))
    with pytest.raises(SchemaMismatchError, match="scale"):
        QuantParams(kind="affine", scale=(0.0,), zero_point=(0.0,))
    q = QuantParams(kind="affine", scale=(0.1, 0.2), zero_point=(0.0, 3.0))
    schema = Schema(fields=(FieldSpec(name="x", level="node", dtype="int8", shape=(2,), quant=q),))
    with GraphStoreWriter(tmp_path / "q", schema) as w:
        w.append({"x": np.zeros((2, 2), np.int8), "edge_index": np.zeros((2, 0), int)})
    store = GraphStore.open(tmp_path / "q")
    assert store.schema["x"].quant == q
    store.update_manifest(statistics={"x": {"mean": [0.0, 0.0]}})
    raw = json.loads((tmp_path / "q" / "manifest.json").read_text())
    assert raw["statistics"] == {"x": {"mean": [0.0, 0.0]}} and raw["complete"] is True


def test_partial_checkpoint_resume(tmp_path) -> None:
    """An npy writer that never closes leaves a checkpoint: incomplete, but resumable."""
    path = tmp_path / "s"
    schema = Schema.graph(node_features=3, edge_features=2, sample_fields={"sid": "int64"})
    rng = np.random.default_rng(0)
    w = GraphStoreWriter(path, schema, shard_size=4)
    for i in range(10):
        w.append(random_sample(rng, schema, i))
    w.abort()  # like a crash: 2 shards committed, 2 samples buffered and lost
    with pytest.raises(StoreIncompleteError, match="2 shards \\(8 samples"):
        GraphStore.open(path)
    assert len(GraphStore.open(path, allow_incomplete=True, verify=True)) == 8
    with GraphStoreWriter(path, None, mode="a") as w:
        assert w.num_samples == 8
        for i in range(8, 12):
            w.append(random_sample(rng, schema, i))
    store = GraphStore.open(path, verify=True)
    assert [int(store[i]["sid"]) for i in range(12)] == list(range(12))
