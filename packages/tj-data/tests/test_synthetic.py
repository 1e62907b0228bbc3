"""tj_data.synthetic: block shapes match the schema and the counts, a store written from blocks
has the CSR pointers the counts imply, and the same seed gives the same blocks."""

from __future__ import annotations

from pathlib import Path

import numpy as np

import tj_data
from tj_data import GraphStore, GraphStoreWriter
from tj_data.synthetic import MAX_NODES, SCHEMA, heavy_tailed_nodes, make_block


def test_shapes_follow_the_counts() -> None:
    arrays, nn, ne = make_block(np.random.default_rng(1), 500, start=1000)
    n_tot, e_tot = int(nn.sum()), int(ne.sum())
    assert nn.shape == ne.shape == (500,) and nn.dtype == ne.dtype == np.int64
    assert set(arrays) == set(SCHEMA.names) | {"edge_index"}
    assert arrays["x"].shape == (n_tot, 9) and arrays["x"].dtype == np.float32
    assert arrays["vehicle_id"].shape == (n_tot,)
    assert arrays["edge_index"].shape == (2, e_tot)
    assert arrays["edge_attr"].shape == (e_tot, 4)
    assert arrays["sim_time"].tolist() == list(range(1000, 1500))
    assert arrays["intersection"].tolist() == [i % 16 for i in range(1000, 1500)]
    # local ids: every edge of sample i points at one of its nn[i] nodes
    limit = np.repeat(nn, ne)
    assert (arrays["edge_index"] >= 0).all() and (arrays["edge_index"] < limit).all()
    assert (ne <= 4 * nn).all() and (ne[nn <= 1] == 0).all()


def test_sizes_are_heavy_tailed() -> None:
    nn = heavy_tailed_nodes(np.random.default_rng(0), 100_000)
    assert 12 < nn.mean() < 18 and nn.max() <= MAX_NODES and (nn == 0).any()
    assert np.percentile(nn, 99) > 4 * np.median(nn)


def test_store_pointers_match_the_counts(tmp_path: Path) -> None:
    rng = np.random.default_rng(2)
    blocks = [make_block(rng, 300, start=300 * b) for b in range(2)]
    with GraphStoreWriter(tmp_path / "s", SCHEMA, shard_size=256) as w:
        for block in blocks:
            w.append_block(*block)
    store = GraphStore.open(tmp_path / "s")
    nn = np.concatenate([b[1] for b in blocks])
    ne = np.concatenate([b[2] for b in blocks])
    sizes = store.size_index()
    assert len(store) == 600
    assert np.array_equal(sizes.nodes, nn) and np.array_equal(sizes.edges, ne)
    node_ptr, edge_ptr = store.shard_ptrs(1)  # samples 256..511
    assert np.array_equal(np.diff(node_ptr), nn[256:512])
    assert np.array_equal(np.diff(edge_ptr), ne[256:512])
    sample = store[400]
    assert sample["x"].shape == (nn[400], 9) and sample["edge_index"].shape == (2, ne[400])
    assert float(sample["sim_time"]) == 400.0


def test_same_seed_same_block() -> None:
    a, nn_a, ne_a = make_block(np.random.default_rng(7), 200)
    b, nn_b, ne_b = make_block(np.random.default_rng(7), 200)
    c, _, _ = make_block(np.random.default_rng(8), 200)
    assert np.array_equal(nn_a, nn_b) and np.array_equal(ne_a, ne_b)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"][:10], c["x"][:10])


def test_exported_from_the_top_level() -> None:
    assert tj_data.synthetic.make_block is make_block
