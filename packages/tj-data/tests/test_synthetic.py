"""tj_data.synthetic: block shapes match the schema and the counts, a store written from blocks
has the CSR pointers the counts imply, the same seed gives the same blocks, traffic blocks look
like traffic, and `write_synthetic` writes the size or count asked for, alike in every backend."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tj_data
from tj_data import GraphStore, GraphStoreWriter, HDF5GraphDataset, MmapGraphDataset
from tj_data.synthetic import (
    MAX_NODES,
    NODE_COLUMNS,
    SCHEMA,
    TRAFFIC_SCHEMA,
    heavy_tailed_nodes,
    make_block,
    traffic_features,
    write_synthetic,
)


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


def test_traffic_blocks_follow_the_traffic_schema() -> None:
    x = traffic_features(np.random.default_rng(0), 500)
    assert x.shape == (500, 9) and x.dtype == np.float32 and np.isfinite(x).all()
    assert np.allclose(x[:, 4] ** 2 + x[:, 5] ** 2, 1.0, atol=1e-5)  # heading sin/cos
    assert x[:, 2].min() >= 0 and x[:, 2].max() <= 30  # speed, m/s
    assert set(np.unique(x[:, NODE_COLUMNS.index("length")])) <= {4.5, 5.0, 12.0}
    arrays, nn, ne = make_block(np.random.default_rng(1), 300, traffic=True)
    assert set(arrays) == set(TRAFFIC_SCHEMA.names) | {"edge_index"}
    assert TRAFFIC_SCHEMA["y_next"].columns == NODE_COLUMNS
    assert arrays["y_next"].shape == arrays["x"].shape == (int(nn.sum()), 9)
    assert arrays["edge_attr"].shape == (int(ne.sum()), 4)
    assert (arrays["edge_attr"][:, 3] >= 0).all()  # inverse TTC


def _dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def test_write_synthetic_reaches_the_size_with_the_same_samples(tmp_path: Path) -> None:
    paths = {"npy": tmp_path / "npy", "hdf5": tmp_path / "h5"}
    n = write_synthetic(paths, size_gb=0.002, shard_size=256)
    a, b = MmapGraphDataset(paths["npy"]), HDF5GraphDataset(paths["hdf5"])
    assert len(a) == len(b) == n
    assert 0.8 * 0.002e9 < a.store.manifest.nbytes <= _dir_bytes(paths["npy"]) < 1.5 * 0.002e9
    for sa, sb in zip(a.__getitems__([0, n // 2, n - 1]), b.__getitems__([0, n // 2, n - 1]),
                      strict=True):  # fmt: skip
        assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    for bad in ({"size_gb": 0}, {"samples": 0}, {}, {"size_gb": 1.0, "samples": 10}):
        with pytest.raises(ValueError, match="size_gb"):
            write_synthetic(paths, **bad)


def test_write_synthetic_counts_samples_and_blocks(tmp_path: Path) -> None:
    seen: list[int] = []

    def progress(starts, _description):
        seen.extend(starts)
        return seen

    assert write_synthetic({"npy": tmp_path / "s"}, samples=25_000, traffic=True,
                           progress=progress) == 25_000  # fmt: skip
    store = GraphStore.open(tmp_path / "s")
    assert len(store) == 25_000 and seen == [0, 20_000]  # a full block and the rest
    assert store.schema["x"].columns == NODE_COLUMNS
    n_nodes = sum(s.num_nodes for s in store.manifest.shards)
    x_bytes = sum(int(s.files["x.npy"]["nbytes"]) for s in store.manifest.shards)
    assert 4 * 9 * n_nodes <= x_bytes <= 4 * 9 * n_nodes + 1024  # float32, plus .npy headers
    assert float(store[24_999]["sim_time"]) == 24_999.0  # blocks continue the sample index
