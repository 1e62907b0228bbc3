"""Map-style datasets: batched reads, DataLoader with fork and spawn workers, chunk cache."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch
from tjdata_testutil import write_store
from torch.utils.data import ConcatDataset, DataLoader

from tj_data import (
    ChunkedGraphDataset,
    ChunkShuffleSampler,
    GraphStore,
    HDF5GraphDataset,
    MmapGraphDataset,
    SampleIndexError,
    SchemaMismatchError,
    collate_graphs,
)

N = 120


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    root = tmp_path_factory.mktemp("stores")
    out = {}
    for backend in ("npy", "hdf5"):
        samples = write_store(root / backend, N, shard_size=16, backend=backend, seed=3)
        out[backend] = (root / backend, samples)
    return out


def make(kind: str, stores):
    if kind == "mmap":
        return MmapGraphDataset(stores["npy"][0])
    if kind == "hdf5":
        return HDF5GraphDataset(stores["hdf5"][0])
    return ChunkedGraphDataset(stores["hdf5"][0], cache_chunks=2)


KINDS = ["mmap", "hdf5", "chunked"]


def _same(a: dict, b: dict) -> None:
    assert set(a) == set(b)
    for k in a:
        np.testing.assert_array_equal(
            np.asarray(a[k]), np.asarray(b[k]).astype(np.asarray(a[k]).dtype)
        )


@pytest.mark.parametrize("kind", KINDS)
def test_getitems_any_order_with_duplicates(stores, kind) -> None:
    ds = make(kind, stores)
    samples = stores["npy"][1]
    rng = np.random.default_rng(0)
    idx = [*rng.permutation(N)[:40].tolist(), 5, 5, 6, 7, 8, -1]  # runs, duplicates, negative
    got = ds.__getitems__(idx)
    assert [int(s["sid"]) for s in got] == [i % N for i in idx]
    for i, s in zip(idx, got, strict=True):
        _same(s, samples[i % N])
    _same(ds[17], samples[17])
    with pytest.raises(SampleIndexError, match=f"index {N} out of range"):
        ds.__getitems__([0, N])


def test_backend_mismatch_named(stores) -> None:
    with pytest.raises(SchemaMismatchError, match="MmapGraphDataset reads 'npy' stores"):
        MmapGraphDataset(stores["hdf5"][0])
    with pytest.raises(SchemaMismatchError, match="HDF5GraphDataset reads 'hdf5'"):
        HDF5GraphDataset(stores["npy"][0])


@pytest.mark.parametrize("kind", KINDS)
def test_dataloader_two_fork_workers(stores, kind) -> None:
    _check_loader(stores, make(kind, stores), "fork")


def test_dataloader_two_spawn_workers(stores) -> None:
    """Spawned workers unpickle the datasets and open their own files (both backends)."""
    both = ConcatDataset([make("mmap", stores), make("hdf5", stores)])
    _check_loader(stores, both, "spawn", collate=make("mmap", stores).collate_fn, n=2 * N)


def _check_loader(stores, ds, ctx, collate=None, n=N) -> None:
    schema = make("mmap", stores).schema
    ds[0]  # open handles in the parent first: workers must not inherit or pickle them
    state = pickle.dumps(ds)
    assert len(state) < 20_000, "a pickled dataset must carry no data"
    loader = DataLoader(
        ds,
        batch_size=8,
        shuffle=True,
        num_workers=2,
        multiprocessing_context=ctx,
        collate_fn=collate or ds.collate_fn,
        generator=torch.Generator().manual_seed(0),
    )
    seen = []
    samples = stores["npy"][1]
    for batch in loader:
        ids = batch.sid.tolist()
        seen += ids
        expect = collate_graphs(
            [samples[i] | {"edge_index": samples[i]["edge_index"].astype(np.int32)} for i in ids],
            schema=schema,
        )
        for name, t in expect.tensors().items():
            assert torch.equal(batch.tensors()[name], t), name
    assert sorted(seen) == sorted(list(range(N)) * (n // N))


def test_chunked_cache_bounded_and_hits(stores) -> None:
    ds = ChunkedGraphDataset(stores["npy"][0], cache_chunks=2)
    sampler = ChunkShuffleSampler(ds, seed=1)
    order = list(sampler)
    assert sorted(order) == list(range(N))
    for i in range(0, N, 8):
        ds.__getitems__(order[i : i + 8])
        info = ds.cache_info()
        assert info.currsize <= info.maxsize
    info = ds.cache_info()
    assert info.misses == GraphStore.open(stores["npy"][0]).num_shards  # each shard decoded once
    assert info.hit_rate > 0.4
    freed = ds.shrink(1)
    assert freed > 0 and ds.cache_info().currsize < info.currsize
    tiny = ChunkedGraphDataset(stores["npy"][0], cache_bytes=10)  # shards larger than the cache
    _same(tiny[3], stores["npy"][1][3])
    assert tiny.cache_info().uncached == 1 and tiny.cache_info().currsize == 0


class _CountingSource:
    """Wraps a store and counts slice reads on its arrays."""

    def __init__(self, store: GraphStore) -> None:
        self.store, self.reads = store, 0
        self.schema = store.schema

    def locate(self, idx):
        return self.store.locate(idx)

    def shard(self, k):
        arrays, node_ptr, edge_ptr = self.store.shard(k)
        return {name: _Counted(a, self) for name, a in arrays.items()}, node_ptr, edge_ptr


class _Counted:
    def __init__(self, a, owner) -> None:
        self.a, self.owner = a, owner

    def __getitem__(self, key):
        self.owner.reads += 1
        return self.a[key]


def test_getitems_coalesces_runs(stores) -> None:
    from tj_data.gather import gather_samples

    src = _CountingSource(GraphStore.open(stores["npy"][0]))
    idx = np.array([43, 10, 41, 40, 11, 42])  # shard 2: 40..43, shard 0: 10..11 (16 per shard)
    got = gather_samples(src, idx)
    assert [int(s["sid"]) for s in got] == idx.tolist()  # caller's order restored
    assert src.reads == 2 * 4  # one slice per field (x, edge_attr, sid, edge_index) per run
