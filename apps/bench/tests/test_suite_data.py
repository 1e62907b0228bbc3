"""The data suite: its quick run records every reader, the collate comparison and the DataLoader
memory runs consistently; its helpers (the seeds' JSON chunks read back, the in-RAM ceiling) give
the same samples as the store (tj_data.synthetic's store size is tested there)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tj_bench.suites._data_baselines import JsonChunkReader, in_ram, write_json_chunks
from tj_bench.suites._data_read import batch_reader
from tj_data.synthetic import write_synthetic

READERS = ("ram", "mmap", "hdf5", "chunked", "streaming", "pyg", "json")


def test_every_reader_and_the_ratios(quick, values) -> None:
    r = quick.suite("data")
    readers = [n for n in READERS if n != "pyg" or "pyg" not in r.unavailable]
    rates = {n: values(r, f"read/{n}/samples_per_s") for n in readers}
    assert all(v > 0 for vals in rates.values() for v in vals)
    for n in readers:
        if n != "ram":
            assert values(r, f"read/{n}/x_ram") == pytest.approx(
                [a / b for a, b in zip(rates[n], rates["ram"], strict=True)]
            )
        if n != "json":
            assert values(r, f"read/{n}/x_json") == pytest.approx(
                [a / b for a, b in zip(rates[n], rates["json"], strict=True)]
            )
        if n != "streaming":  # a stream picks its own samples: no byte count
            assert all(v > 0 for v in values(r, f"read/{n}/MB_per_s"))
    assert 0 <= values(r, "read/chunked/cache_hit_rate")[0] <= 1
    assert values(r, "json_import/samples_per_s")[0] > 0


def test_collate_against_pyg(quick, values) -> None:
    r = quick.suite("data")
    tj = values(r, "collate/tj_us_per_batch")
    if "pyg" in r.unavailable:
        return
    pyg = values(r, "collate/pyg_us_per_batch")
    assert values(r, "collate/x_pyg") == pytest.approx(
        [p / t for p, t in zip(pyg, tj, strict=True)]
    )


def test_store_facts_and_dataloader_memory(quick, values) -> None:
    r = quick.suite("data")
    size = r.params["size_gb"]
    assert 0.8 * size < values(r, "store/npy_size")[0] < size * 1.5  # a few MB, as asked
    assert values(r, "store/hdf5_size")[0] > 0 and values(r, "store/samples")[0] > 100
    assert 0 < values(r, "store/nodes_mean")[0] <= values(r, "store/nodes_max")[0] <= 400
    for name in r.params["pss_datasets"].split(","):
        idle = values(r, f"dataloader/{name}/idle_pss")[0]
        peak = values(r, f"dataloader/{name}/epoch1/peak_pss")[0]
        assert 50 < idle <= peak < 8192  # MiB: a torch process, plus 2 workers
        assert values(r, f"dataloader/{name}/epoch1/samples_per_s")[0] > 0


def test_json_chunks_and_ram_give_the_store_samples(tmp_path: Path) -> None:
    from tj_data import MmapGraphDataset

    write_synthetic({"npy": tmp_path / "npy"}, size_gb=0.001, shard_size=128)
    ds = MmapGraphDataset(tmp_path / "npy")
    jr = JsonChunkReader(write_json_chunks(ds, tmp_path, 3, 50), 50)
    ram = in_ram(tmp_path / "npy")
    assert len(jr) == 150
    for i in (0, 49, 50, 149):
        want = ds[i]
        for got in (jr[i], ram[i]):
            assert set(got) == set(want)
            for k in want:
                assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), (i, k)
    held = ram.cache_info()  # every shard decoded once, up front, and kept
    assert held.misses == ram.store.num_shards > 1 and held.uncached == 0
    reader = batch_reader(lambda b: None, [[0, 1], [2]], ds.size_index().nbytes)
    assert reader.prepare()() == 3
    assert reader.mb == pytest.approx(ds.size_index().nbytes[:3].sum() / 1e6)
