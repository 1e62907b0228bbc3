"""Suite ``data``: how fast tj-data's stores are read and collated, and what a DataLoader over
them holds in memory.

One synthetic store (``tj_data.synthetic``: heavy-tailed graph sizes) written as npy and HDF5.
Batches of random samples are read + collated from ``MmapGraphDataset``, ``HDF5GraphDataset``,
``ChunkedGraphDataset`` (in its ``ChunkShuffleSampler`` order) and ``StreamingGraphDataset`` (in
its own order), against the same samples in RAM (the ceiling), PyG's ``InMemoryDataset`` +
``Batch.from_data_list`` and the seeds' JSON chunks; all interleaved in each repetition, warm
page cache. Then ``collate_graphs`` alone against ``Batch.from_data_list``, the JSON import
rate, and peak process-tree PSS per epoch of a DataLoader with persistent workers, measured in
a fresh process (``tj_monitor.run_in_child``), so what the suite held before (in-RAM copies, PyG)
does not count.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tj_bench.measure import MIB, timed
from tj_bench.suite import SizedOptions, Suite, SuiteContext, parse_list, sized_help
from tj_bench.suites._data_baselines import JsonChunkReader, in_ram, write_json_chunks
from tj_bench.suites._data_read import Reader, batch_reader, collate_cases, streaming_reader
from tj_monitor import run_in_child

__all__ = ["DATASETS", "SUITE", "pss_run", "run"]

DATASETS = ("mmap", "hdf5", "chunked", "streaming")  # what the DataLoader memory runs read

OPTIONS: SizedOptions = {
    "size_gb": (2.0, 0.005, "size of the generated store (GB of stored arrays, per backend)"),
    "shard_size": (8192, 1024, "samples per shard"), "batch_size": (32, 32, "samples per batch"),
    "batches": (300, 20, "random batches per reader and repetition"),
    "json_chunks": (20, 2, "JSON chunks written for the seed baseline"),
    "json_chunk_size": (1000, 100, "samples per JSON chunk"),
    "json_batches": (6, 2, "batches read from the JSON chunks per repetition (slow)"),
    "collate_batches": (200, 20, "batches collated per repetition (collate vs PyG)"),
    "workers": (2, 2, "DataLoader workers in the memory runs"), "pss_epochs": (3, 1, "epochs per DataLoader memory run (0: no memory runs)"),
    "pss_datasets": ("mmap,chunked", "mmap,chunked", f"memory runs, from {','.join(DATASETS)}"),
}  # fmt: skip

PYG_MISSING = "torch-geometric is not installed (tj-bench's `compare` extra)"


def dir_bytes(d: Path) -> int:
    """Bytes of the files under ``d``."""
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def warm_page_cache(*dirs: Path) -> None:
    """Read every file under ``dirs`` once (the read benchmarks assume a warm page cache)."""
    for p in (p for d in dirs for p in d.rglob("*") if p.is_file()):
        with open(p, "rb") as f:
            while f.read(16 << 20):
                pass


def _store_facts(ctx: SuiteContext, mmap: Any, paths: dict[str, Any], gen_s: float) -> None:
    summary = mmap.size_index().summary()
    ctx.record("store/samples", len(mmap), unit="samples")
    ctx.record("store/npy_size", dir_bytes(paths["npy"]) / 1e9, unit="GB")
    ctx.record("store/hdf5_size", dir_bytes(paths["hdf5"]) / 1e9, unit="GB")
    for stat in ("mean", "p99", "max"):
        ctx.record(f"store/nodes_{stat}", summary[f"nodes_{stat}"], unit="nodes")
    ctx.record("store/generate_s", gen_s, unit="s")


@dataclass
class _Cases:
    """What one repetition times: the readers (by figure name) and the collate cases; they hold
    the in-RAM copies, freed with this object."""

    readers: dict[str, Reader]
    collate: dict[str, Callable[[], None]]
    chunked: Any  # the ChunkedGraphDataset read, for its cache statistics


def _cases(ctx: SuiteContext, o: dict[str, Any], paths: dict[str, Any]) -> _Cases:
    """Build the compared cases; records the JSON import rate on the way."""
    from tj_data import (
        ChunkedGraphDataset,
        ChunkShuffleSampler,
        HDF5GraphDataset,
        MmapGraphDataset,
        StreamingGraphDataset,
        collate_graphs,
        import_json_chunks,
        store_to_pyg,
    )

    mmap = MmapGraphDataset(paths["npy"])
    if o["json_chunks"] * o["json_chunk_size"] > len(mmap):
        raise ValueError(f"json_chunks x json_chunk_size > the store's {len(mmap)} samples: "
                         "raise data.size_gb or lower them")  # fmt: skip
    h5 = HDF5GraphDataset(paths["hdf5"])
    chunked = ChunkedGraphDataset(paths["npy"], cache_chunks=3)
    stream = StreamingGraphDataset(paths["npy"], batch_size=o["batch_size"], seed=0)
    json_root = write_json_chunks(
        mmap, ctx.workdir, o["json_chunks"], o["json_chunk_size"], ctx.progress
    )
    jr = JsonChunkReader(json_root, o["json_chunk_size"])
    _, import_s = timed(
        lambda: import_json_chunks(json_root, ctx.workdir / "imported", progress=False)
    )
    ctx.record("json_import/samples_per_s", len(jr) / import_s, unit="samples/s", better="higher")
    ram = in_ram(paths["npy"], ctx.progress)
    warm_page_cache(paths["npy"], paths["hdf5"])

    rng = np.random.default_rng(0)
    n, bs, nbytes = len(mmap), o["batch_size"], mmap.size_index().nbytes
    rand = [rng.integers(0, n, bs).tolist() for _ in range(o["batches"])]
    order = ChunkShuffleSampler(chunked, seed=0).order()
    seq = [order[i * bs : (i + 1) * bs].tolist() for i in range(o["batches"])]
    seq = [b for b in seq if b]
    jb = [rng.integers(0, len(jr), bs).tolist() for _ in range(o["json_batches"])]
    readers = {
        "ram": batch_reader(lambda b: collate_graphs(ram.__getitems__(b), schema=ram.schema),
                            rand, nbytes),
        "mmap": batch_reader(lambda b: mmap.collate_fn(mmap.__getitems__(b)), rand, nbytes),
        "hdf5": batch_reader(lambda b: h5.collate_fn(h5.__getitems__(b)), rand, nbytes),
        "chunked": batch_reader(lambda b: chunked.collate_fn(chunked.__getitems__(b)), seq, nbytes),
        "streaming": streaming_reader(stream, o["batches"]),
    }  # fmt: skip
    try:
        pyg = store_to_pyg(ram.store)
    except ImportError:
        ctx.unavailable("pyg", PYG_MISSING)
    else:
        from torch_geometric.data import Batch

        readers["pyg"] = batch_reader(lambda b: Batch.from_data_list([pyg[i] for i in b]), rand,
                                      nbytes)  # fmt: skip
    readers["json"] = batch_reader(
        lambda b: collate_graphs([jr[i] for i in b], schema=mmap.schema), jb, nbytes
    )
    lists = [ram.__getitems__(rng.integers(0, n, bs).tolist()) for _ in range(o["collate_batches"])]
    return _Cases(readers=readers, collate=collate_cases(lists, ram.schema, "pyg" in readers),
                  chunked=chunked)  # fmt: skip


def _read(ctx: SuiteContext, cases: _Cases, n: int) -> None:
    for _ in ctx.repetitions("read + collate"):
        rate = {}
        for name, reader in cases.readers.items():
            samples, s = timed(reader.prepare())
            rate[name] = samples / s
            ctx.record(f"read/{name}/samples_per_s", rate[name], unit="samples/s", better="higher")
            if not np.isnan(reader.mb):
                ctx.record(f"read/{name}/MB_per_s", reader.mb / s, unit="MB/s", better="higher")
        for name, r in rate.items():
            if name != "ram":
                ctx.record(f"read/{name}/x_ram", r / rate["ram"], unit="x", better="higher")
            if name != "json":
                ctx.record(f"read/{name}/x_json", r / rate["json"], unit="x", better="higher")
        us = {case: timed(fn)[1] / n * 1e6 for case, fn in cases.collate.items()}
        ctx.record("collate/tj_us_per_batch", us["tj"], unit="us/batch", better="lower")
        if "pyg" in us:
            ctx.record("collate/pyg_us_per_batch", us["pyg"], unit="us/batch", better="lower")
            ctx.record("collate/x_pyg", us["pyg"] / us["tj"], unit="x", better="higher")


def pss_run(
    name: str, store: Path, *, epochs: int, batch_size: int, workers: int, interval: float = 0.5
) -> dict[str, Any]:
    """``{"idle_pss": bytes before the loader, "epochs": [{"peak_pss", "samples_per_s"}, ...]}``
    for dataset ``name`` (one of ``DATASETS``) over ``store``, measured in a child process."""
    if name not in DATASETS:
        raise ValueError(f"pss dataset {name!r}: expected one of {DATASETS}")
    return run_in_child(_pss_child, name, str(store), epochs, batch_size, workers, interval,
                        name=f"the DataLoader PSS run ({name})")  # fmt: skip


def _pss_child(
    name: str, store: str, epochs: int, batch_size: int, workers: int, interval: float
) -> dict[str, Any]:
    from torch.utils.data import DataLoader

    from tj_data import (
        ChunkedGraphDataset,
        ChunkShuffleSampler,
        HDF5GraphDataset,
        MmapGraphDataset,
        StreamingGraphDataset,
        measure_epoch,
    )
    from tj_monitor import tree_memory

    kw: dict[str, Any] = {"num_workers": workers, "persistent_workers": workers > 0,
                          "prefetch_factor": 2 if workers > 0 else None}  # fmt: skip
    sampler = None
    if name == "streaming":  # batches collated in the dataset (its workers stream their part)
        ds: Any = StreamingGraphDataset(store, batch_size=batch_size, seed=0)
        idle = tree_memory().pss
        loader = DataLoader(ds, batch_size=None, **kw)
    else:
        if name == "chunked":
            ds = ChunkedGraphDataset(store, cache_chunks=3)
            sampler = ChunkShuffleSampler(ds, seed=0)
        else:
            ds = (HDF5GraphDataset if name == "hdf5" else MmapGraphDataset)(store)
        idle = tree_memory().pss
        loader = DataLoader(ds, batch_size=batch_size, shuffle=sampler is None, sampler=sampler,
                            collate_fn=ds.collate_fn, **kw)  # fmt: skip
    out = []
    for epoch in range(epochs):
        if sampler is not None:
            sampler.set_epoch(epoch)
        m = measure_epoch(loader, pss_interval=interval)
        out.append({"peak_pss": m.peak_pss, "samples_per_s": m.samples_per_s})
    del loader
    return {"idle_pss": idle, "epochs": out}


def _pss(ctx: SuiteContext, o: dict[str, Any], paths: dict[str, Any]) -> None:
    names = parse_list(o["pss_datasets"], DATASETS, "--set data.pss_datasets")
    for _ in ctx.repetitions("DataLoader memory"):
        for name in names:  # interleaved, each in a fresh process
            store = paths["hdf5"] if name == "hdf5" else paths["npy"]
            res = pss_run(name, store, epochs=o["pss_epochs"], batch_size=o["batch_size"],
                          workers=o["workers"])  # fmt: skip
            base = f"dataloader/{name}"
            ctx.record(f"{base}/idle_pss", res["idle_pss"] / MIB, unit="MiB")
            peaks = [e["peak_pss"] / MIB for e in res["epochs"]]
            for e, ep in enumerate(res["epochs"], 1):
                ctx.record(f"{base}/epoch{e}/peak_pss", peaks[e - 1], unit="MiB", better="lower")
                ctx.record(f"{base}/epoch{e}/samples_per_s", ep["samples_per_s"],
                           unit="samples/s", better="higher")  # fmt: skip
            if len(peaks) > 1:
                ctx.record(f"{base}/growth_pss", peaks[-1] - peaks[0], unit="MiB", better="lower")


def run(ctx: SuiteContext) -> None:
    o = ctx.sized_options(OPTIONS)
    paths = {"npy": ctx.workdir / "store-npy", "hdf5": ctx.workdir / "store-hdf5"}
    from tj_data import MmapGraphDataset
    from tj_data.synthetic import write_synthetic

    _, gen_s = timed(lambda: write_synthetic(paths, size_gb=o["size_gb"],
                                             shard_size=o["shard_size"], progress=ctx.progress))  # fmt: skip

    _store_facts(ctx, MmapGraphDataset(paths["npy"]), paths, gen_s)
    cases = _cases(ctx, o, paths)
    _read(ctx, cases, o["collate_batches"])
    ctx.record("read/chunked/cache_hit_rate", cases.chunked.cache_info().hit_rate, unit="fraction")
    del cases
    gc.collect()  # free the in-RAM copies (and PyG's) before the memory runs
    ctx.note(
        f"read: batch {o['batch_size']}, {o['batches']} random batches per reader (chunked: its "
        f"ChunkShuffleSampler order; streaming: its own order after one untimed batch; JSON: "
        f"{o['json_batches']} batches from the first {o['json_chunks']} chunks, LRU of 3), "
        "warm page cache, readers interleaved in each repetition; x_ram / x_json: ratio to the "
        "in-RAM ceiling / the JSON seed baseline in the same repetition."
    )
    if o["pss_epochs"] > 0:
        _pss(ctx, o, paths)
        ctx.note(
            f"dataloader: DataLoader(batch_size={o['batch_size']}, num_workers={o['workers']}, "
            "persistent_workers=True) in a fresh process; peak PSS of main + workers per epoch "
            "(includes the store's mapped page cache, shared with the OS); idle = main only, "
            "before the loader."
        )


SUITE = Suite(
    name="data", run=run, options=sized_help(OPTIONS),
    summary="tj-data read + collate throughput (mmap / HDF5 / chunked / streaming vs in-RAM, "
            "PyG, seed JSON) and DataLoader PSS per epoch",
)  # fmt: skip
