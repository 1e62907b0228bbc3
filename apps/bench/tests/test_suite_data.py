"""The data suite: its quick run records every reader, the collate comparison and the DataLoader
memory runs consistently; its helpers (store size, the seeds' JSON chunks read back, the in-RAM
ceiling) give the same samples as the store."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tj_bench.suites._data_baselines import InRamDataset, JsonChunkReader, write_json_chunks
from tj_bench.suites._data_read import batch_reader
from tj_bench.suites._data_store import dir_bytes, write_stores

READERS = ("ram", "mmap", "hdf5", "chunked", "streaming", "pyg", "json")


def _values(r, name: str) -> list[float]:
    f = r.figure(name)
    assert f.measured and all(math.isfinite(v) for v in f.measured), (name, f.values)
    return f.values


def test_every_reader_and_the_ratios(quick) -> None:
    r = quick.suite("data")
    readers = [n for n in READERS if n != "pyg" or "pyg" not in r.unavailable]
    rates = {n: _values(r, f"read/{n}/samples_per_s") for n in readers}
    assert all(v > 0 for vals in rates.values() for v in vals)
    for n in readers:
        if n != "ram":
            assert _values(r, f"read/{n}/x_ram") == pytest.approx(
                [a / b for a, b in zip(rates[n], rates["ram"], strict=True)]
            )
        if n != "json":
            assert _values(r, f"read/{n}/x_json") == pytest.approx(
                [a / b for a, b in zip(rates[n], rates["json"], strict=True)]
            )
        if n != "streaming":  # a stream picks its own samples: no byte count
            assert all(v > 0 for v in _values(r, f"read/{n}/MB_per_s"))
    assert 0 <= _values(r, "read/chunked/cache_hit_rate")[0] <= 1
    assert _values(r, "json_import/samples_per_s")[0] > 0


def test_collate_against_pyg(quick) -> None:
    r = quick.suite("data")
    tj = _values(r, "collate/tj_us_per_batch")
    if "pyg" in r.unavailable:
        return
    pyg = _values(r, "collate/pyg_us_per_batch")
    assert _values(r, "collate/x_pyg") == pytest.approx(
        [p / t for p, t in zip(pyg, tj, strict=True)]
    )


def test_store_facts_and_dataloader_memory(quick) -> None:
    r = quick.suite("data")
    size = r.params["size_gb"]
    assert 0.8 * size < _values(r, "store/npy_size")[0] < size * 1.5  # a few MB, as asked
    assert _values(r, "store/hdf5_size")[0] > 0 and _values(r, "store/samples")[0] > 100
    assert 0 < _values(r, "store/nodes_mean")[0] <= _values(r, "store/nodes_max")[0] <= 400
    for name in r.params["pss_datasets"].split(","):
        idle = _values(r, f"dataloader/{name}/idle_pss")[0]
        peak = _values(r, f"dataloader/{name}/epoch1/peak_pss")[0]
        assert 50 < idle <= peak < 8192  # MiB: a torch process, plus 2 workers
        assert _values(r, f"dataloader/{name}/epoch1/samples_per_s")[0] > 0


def test_write_stores_reaches_the_size_with_the_same_samples(tmp_path: Path) -> None:
    paths = {"npy": tmp_path / "npy", "hdf5": tmp_path / "h5"}
    n = write_stores(paths, 0.002, 256)
    from tj_data import HDF5GraphDataset, MmapGraphDataset

    a, b = MmapGraphDataset(paths["npy"]), HDF5GraphDataset(paths["hdf5"])
    assert len(a) == len(b) == n
    assert 0.8 * 0.002e9 < a.store.manifest.nbytes <= dir_bytes(paths["npy"]) < 1.5 * 0.002e9
    for sa, sb in zip(a.__getitems__([0, n // 2, n - 1]), b.__getitems__([0, n // 2, n - 1]),
                      strict=True):  # fmt: skip
        assert all(np.array_equal(sa[k], sb[k]) for k in sa)
    with pytest.raises(ValueError, match="size_gb"):
        write_stores(paths, 0, 256)


def test_json_chunks_and_ram_give_the_store_samples(tmp_path: Path) -> None:
    from tj_data import MmapGraphDataset

    write_stores({"npy": tmp_path / "npy"}, 0.001, 128)
    ds = MmapGraphDataset(tmp_path / "npy")
    jr = JsonChunkReader(write_json_chunks(ds, tmp_path, 3, 50), 50)
    ram = InRamDataset(tmp_path / "npy")
    assert len(jr) == 150
    for i in (0, 49, 50, 149):
        want = ds[i]
        for got in (jr[i], ram[i]):
            assert set(got) == set(want)
            for k in want:
                assert np.array_equal(np.asarray(got[k]), np.asarray(want[k])), (i, k)
    reader = batch_reader(lambda b: None, [[0, 1], [2]], ds.size_index().nbytes)
    assert reader.prepare()() == 3
    assert reader.mb == pytest.approx(ds.size_index().nbytes[:3].sum() / 1e6)
