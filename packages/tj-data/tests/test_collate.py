"""collate_graphs equals PyG's Batch.from_data_list field for field (hypothesis), and GraphBatch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch_geometric.data import Batch

from tj_data import GraphBatch, Schema, collate_graphs, sample_to_pyg
from tj_data.collate import GraphCollator
from tj_data.errors import SchemaMismatchError
from tj_data.schema import FieldSpec, QuantParams

SCHEMA = Schema.graph(
    node_features=3,
    edge_features=2,
    node_fields={"vid": "int64", "mask": "bool", "y": ("float16", (2,))},
    edge_fields={"kind": "int8"},
    sample_fields={"phase": "int64", "t": "float32", "target": ("float32", (4,))},
)


@st.composite
def graph(draw) -> dict:
    n = draw(st.integers(0, 7))
    e = draw(st.integers(0, 12)) if n else 0
    seed = draw(st.integers(0, 2**31))
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, 3)).astype(np.float32),
        "edge_index": rng.integers(0, max(n, 1), size=(2, e)).astype(np.int32),
        "edge_attr": rng.standard_normal((e, 2)).astype(np.float32),
        "vid": rng.integers(0, 1000, n),
        "mask": rng.random(n) < 0.5,
        "y": rng.standard_normal((n, 2)).astype(np.float16),
        "kind": rng.integers(-5, 5, e).astype(np.int8),
        "phase": np.int64(rng.integers(0, 4)),
        "t": np.float32(rng.random()),
        "target": rng.random(4).astype(np.float32),
    }


@settings(max_examples=60, deadline=None)
@given(st.lists(graph(), min_size=1, max_size=9))
def test_collate_equals_pyg(samples) -> None:
    ours = collate_graphs(samples, schema=SCHEMA)
    theirs = Batch.from_data_list([sample_to_pyg(s, SCHEMA) for s in samples])
    assert set(theirs.keys()) == {*SCHEMA.names, "edge_index", "batch", "ptr"}
    for key in theirs.keys():  # noqa: SIM118 (PyG Data.keys() is a method)
        a, b = getattr(ours, key), theirs[key]
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), key
    assert ours.num_graphs == theirs.num_graphs == len(samples)
    # to_pyg shares tensors and round-trips through PyG's own separate()
    back = ours.to_pyg().to_data_list()
    for got, s in zip(back, samples, strict=True):
        ref = sample_to_pyg(s, SCHEMA)
        for key in ref.keys():  # noqa: SIM118
            assert torch.equal(got[key], ref[key]), key


def test_collate_without_node_fields_and_errors() -> None:
    schema = Schema(fields=(FieldSpec(name="w", level="edge", dtype="float32"),))
    samples = [
        {"num_nodes": 3, "edge_index": np.array([[0, 2], [1, 0]]), "w": np.ones(2, np.float32)},
        {"num_nodes": 2, "edge_index": np.array([[1], [0]]), "w": np.zeros(1, np.float32)},
    ]
    b = collate_graphs(samples, schema=schema)
    assert b.ptr.tolist() == [0, 3, 5] and b.edge_index.tolist() == [[0, 2, 4], [1, 0, 3]]
    assert b.batch.tolist() == [0, 0, 0, 1, 1] and b.edge_ptr.tolist() == [0, 2, 3]
    with pytest.raises(ValueError, match="empty"):
        collate_graphs([])
    with pytest.raises(SchemaMismatchError, match=r"pass schema= .*\['w'\]"):
        collate_graphs(
            [{"x": np.zeros((1, 1)), "edge_index": np.zeros((2, 0), int), "w": np.zeros(0)}]
        )
    with pytest.raises(AttributeError, match="no field 'nope'"):
        b.nope  # noqa: B018
    assert b.x is None


def test_graphbatch_to_pin_and_transforms() -> None:
    q = QuantParams(kind="float16")
    schema = Schema(
        fields=(FieldSpec(name="x", level="node", dtype="float16", shape=(2,), quant=q),)
    )
    seen = []

    def to_float(batch: GraphBatch) -> GraphBatch:  # the hook a dequantiser plugs into
        seen.append(batch.meta["quant"]["x"])
        batch.fields["x"] = batch.x.float()
        return batch

    sample = {"x": np.ones((2, 2), np.float16), "edge_index": np.zeros((2, 0), np.int32)}
    # dequantize="device": the params travel in meta for a transform or batch.dequantize()
    collate = GraphCollator(schema, transforms=[to_float], dequantize="device")
    b = collate([sample])
    assert b.x.dtype == torch.float32 and seen == [q]
    host = GraphCollator(schema)([sample])  # default: decoded while collating
    assert host.x.dtype == torch.float32 and "quant" not in host.meta
    moved = b.to("cpu", non_blocking=True)
    assert torch.equal(moved.x, b.x) and moved.levels == b.levels
    pinned = b.pin_memory()
    if torch.cuda.is_available():
        assert pinned.is_pinned()
        cuda = pinned.to("cuda", non_blocking=True)
        assert cuda.x.is_cuda and torch.equal(cuda.x.cpu(), b.x)
    else:
        assert pinned is b


def test_one_storage_per_batch_and_apply_storage() -> None:
    """Every tensor of a collated batch views one buffer (one shm segment through a DataLoader);
    apply_storage rebuilds all views over a transformed buffer (the pin / to(device) path)."""
    rng = np.random.default_rng(0)
    schema = SCHEMA
    samples = []
    for n in (3, 0, 5):
        e = 4 if n else 0
        samples.append(
            {
                "x": rng.standard_normal((n, 3)).astype(np.float32),
                "edge_index": rng.integers(0, max(n, 1), (2, e)).astype(np.int32),
                "edge_attr": rng.standard_normal((e, 2)).astype(np.float32),
                "vid": np.arange(n),
                "mask": np.ones(n, bool),
                "y": np.zeros((n, 2), np.float16),
                "kind": np.zeros(e, np.int8),
                "phase": np.int64(1),
                "t": np.float32(2.0),
                "target": np.ones(4, np.float32),
            }
        )
    b = collate_graphs(samples, schema=schema)
    ptrs = {t.untyped_storage().data_ptr() for t in b.tensors().values()}
    assert len(ptrs) == 1
    c = b.apply_storage(lambda buf: buf.clone())
    assert c._shared_storage() is not None
    assert c.x.untyped_storage().data_ptr() != b.x.untyped_storage().data_ptr()
    for name, t in b.tensors().items():
        assert torch.equal(c.tensors()[name], t), name
    b.fields["x"] = b.x * 2  # no longer one storage: per-tensor fallback
    assert b._shared_storage() is None
    d = b.apply_storage(lambda t: t.clone())
    assert torch.equal(d.x, b.x)


def test_store_to_pyg_holds_every_sample_as_sample_to_pyg_builds_it(tmp_path) -> None:
    from tj_data import GraphStore, store_to_pyg
    from tj_data.synthetic import write_synthetic

    write_synthetic({"npy": tmp_path / "s"}, samples=300, shard_size=128)  # 3 shards
    store = GraphStore.open(tmp_path / "s")
    ds = store_to_pyg(store)
    assert len(ds) == 300
    for i in (0, 127, 128, 299):
        ref = sample_to_pyg(store[i], store.schema)
        assert set(ds[i].keys()) == set(ref.keys())
        for key in ref.keys():  # noqa: SIM118
            assert torch.equal(ds[i][key], ref[key]), (i, key)
