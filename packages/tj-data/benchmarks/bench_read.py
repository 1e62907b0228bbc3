"""Random-access read + collate throughput and DataLoader memory of tj-data (issue 3 benchmark).

One command, prints a markdown table and writes JSON (--out):

    uv run python packages/tj-data/benchmarks/bench_read.py --size-gb 2 --out bench_read.json

Compared in the same run, interleaved, median of --repeats runs, warm page cache, batch 32:
MmapGraphDataset, HDF5GraphDataset, ChunkedGraphDataset + ChunkShuffleSampler, the seed-style
JSON chunks (json per chunk, LRU of 3 chunks), the same data in RAM as numpy (ceiling), and PyG
(InMemoryDataset + Batch.from_data_list). Then collate alone vs Batch.from_data_list, and the
peak PSS (and anonymous PSS) of main + 2 DataLoader workers per epoch over 3 epochs.
The stores are generated in --dir (default: a new temp dir) and deleted at the end.
"""

from __future__ import annotations

import argparse
import gc
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).parent))
from _bench_common import (
    InRamDataset,
    JsonChunkReader,
    PssSampler,
    dir_bytes,
    generate,
    machine,
    tree_pss,
    warm_page_cache,
    write_json_chunks,
)

from tj_data import (
    ChunkedGraphDataset,
    ChunkShuffleSampler,
    HDF5GraphDataset,
    MmapGraphDataset,
    collate_graphs,
    import_json_chunks,
)


def pyg_dataset(ram: InRamDataset) -> Any:
    """PyG InMemoryDataset holding the whole store (built directly from the CSR arrays)."""
    from torch_geometric.data import Data, InMemoryDataset

    shards = ram.ram.shards
    cat = {
        k: torch.from_numpy(
            np.concatenate([s[k] for s in shards], axis=1 if k == "edge_index" else 0)
        )
        for k in ("x", "vehicle_id", "edge_attr", "intersection", "sim_time")
    }
    cat["edge_index"] = torch.from_numpy(
        np.concatenate([s["edge_index"] for s in shards], axis=1).astype(np.int64)
    )
    sizes = ram.size_index()
    node_ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes.nodes)]))
    edge_ptr = torch.from_numpy(np.concatenate([[0], np.cumsum(sizes.edges)]))
    graph_ptr = torch.arange(len(sizes) + 1)
    slices = {
        "x": node_ptr,
        "vehicle_id": node_ptr,
        "edge_index": edge_ptr,
        "edge_attr": edge_ptr,
        "intersection": graph_ptr,
        "sim_time": graph_ptr,
    }

    class Store(InMemoryDataset):
        def __init__(self) -> None:
            super().__init__(root=None)
            self._data, self.slices = Data(**cat), slices

    return Store()


def run_readers(
    readers: dict[str, Any], batches: dict[str, list[list[int]]], nbytes: np.ndarray, repeats: int
) -> dict[str, dict[str, float]]:
    times: dict[str, list[float]] = {k: [] for k in readers}
    for _ in range(repeats):
        for name, fn in readers.items():  # interleaved: contention hits every method alike
            t0 = time.perf_counter()
            for b in batches[name]:
                fn(b)
            times[name].append(time.perf_counter() - t0)
    out = {}
    for name, ts in times.items():
        n = sum(len(b) for b in batches[name])
        mb = float(sum(nbytes[b].sum() for b in batches[name])) / 1e6
        med = float(np.median(ts))
        out[name] = {"samples_per_s": n / med, "mb_per_s": mb / med, "runs_s": ts}
    return out


def bench_collate(
    ram: InRamDataset, rng: np.random.Generator, bs: int, n: int, repeats: int
) -> dict[str, float]:
    from torch_geometric.data import Batch

    from tj_data import sample_to_pyg

    lists = [ram.__getitems__(rng.integers(0, len(ram), bs).tolist()) for _ in range(n)]
    datas = [[sample_to_pyg(s, ram.schema) for s in lst] for lst in lists]
    ours, theirs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for lst in lists:
            collate_graphs(lst, schema=ram.schema)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        for d in datas:
            Batch.from_data_list(d)
        theirs.append(time.perf_counter() - t0)
    o, t = float(np.median(ours)) / n * 1e6, float(np.median(theirs)) / n * 1e6
    return {"tj_collate_us_per_batch": o, "pyg_from_data_list_us_per_batch": t, "speedup": t / o}


def bench_pss(name: str, ds: Any, epochs: int, bs: int, workers: int) -> dict[str, Any]:
    idle = tree_pss()
    sampler = ChunkShuffleSampler(ds, seed=0) if name.startswith("chunked") else None
    loader = DataLoader(
        ds,
        batch_size=bs,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=workers,
        persistent_workers=True,
        collate_fn=ds.collate_fn,
        prefetch_factor=2,
    )
    rates = []
    with PssSampler() as pss:
        for epoch in range(epochs):
            if sampler is not None:
                sampler.set_epoch(epoch)
            t0, n = time.perf_counter(), 0
            for batch in loader:
                n += batch.num_graphs
            rates.append(n / (time.perf_counter() - t0))
            pss.mark()
    del loader
    return {
        "idle_pss_mb": idle[0] / 1e6,
        "idle_pss_anon_mb": idle[1] / 1e6,
        "epochs": pss.peaks(),
        "samples_per_s": rates,
    }


def pss_child(a: argparse.Namespace) -> None:
    """Runs in a fresh process so earlier phases (in-RAM copies, PyG) do not pollute the PSS."""
    name, path = a.pss_child
    ds = {
        "mmap": MmapGraphDataset,
        "hdf5": HDF5GraphDataset,
        "chunked": lambda p: ChunkedGraphDataset(p, cache_chunks=3),
    }[name](path)
    print(json.dumps(bench_pss(name, ds, a.pss_epochs, a.batch_size, a.workers)))


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--size-gb", type=float, default=2.0)
    p.add_argument("--dir", type=Path, default=None, help="work dir (default: a new temp dir)")
    p.add_argument("--keep", action="store_true", help="keep the generated stores")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--batches", type=int, default=300, help="random batches per timed run")
    p.add_argument("--json-batches", type=int, default=6)
    p.add_argument("--json-chunks", type=int, default=20)
    p.add_argument("--json-chunk-size", type=int, default=1000)
    p.add_argument("--shard-size", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--pss-epochs", type=int, default=3, help="0 skips the DataLoader memory runs")
    p.add_argument("--pss-datasets", default="mmap,chunked")
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--pss-child", nargs=2, metavar=("NAME", "STORE"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.pss_child:
        return pss_child(a)
    work = a.dir or Path(tempfile.mkdtemp(prefix="tj-data-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    res: dict[str, Any] = {"machine": machine(), "args": {k: str(v) for k, v in vars(a).items()}}
    try:
        t0 = time.perf_counter()
        paths = generate(work, a.size_gb, a.shard_size)
        res["generate_s"] = time.perf_counter() - t0
        mmap = MmapGraphDataset(paths["npy"])
        res["store"] = {
            "samples": len(mmap),
            "npy_bytes": dir_bytes(paths["npy"]),
            "hdf5_bytes": dir_bytes(paths["hdf5"]),
            **mmap.size_index().summary(),
        }
        h5 = HDF5GraphDataset(paths["hdf5"])
        chunked = ChunkedGraphDataset(paths["npy"], cache_chunks=3)
        json_root = write_json_chunks(mmap, work, a.json_chunks, a.json_chunk_size)
        jr = JsonChunkReader(json_root, a.json_chunk_size)
        t0 = time.perf_counter()
        import_json_chunks(json_root, work / "imported", progress=False)
        res["json_import_samples_per_s"] = len(jr) / (time.perf_counter() - t0)
        ram = InRamDataset(paths["npy"])
        pyg = pyg_dataset(ram)
        res["page_cache_warmed_bytes"] = warm_page_cache(paths["npy"], paths["hdf5"])

        rng = np.random.default_rng(0)
        n, bs = len(mmap), a.batch_size
        rand = [rng.integers(0, n, bs).tolist() for _ in range(a.batches)]
        order = ChunkShuffleSampler(chunked, seed=0).order()
        seq = [order[i * bs : (i + 1) * bs].tolist() for i in range(a.batches)]
        jb = [rng.integers(0, len(jr), bs).tolist() for _ in range(a.json_batches)]
        from torch_geometric.data import Batch

        readers = {
            "in-RAM numpy (ceiling)": lambda b: collate_graphs(
                ram.__getitems__(b), schema=ram.schema
            ),
            "MmapGraphDataset": lambda b: mmap.collate_fn(mmap.__getitems__(b)),
            "HDF5GraphDataset": lambda b: h5.collate_fn(h5.__getitems__(b)),
            "ChunkedGraphDataset + ChunkShuffleSampler": lambda b: chunked.collate_fn(
                chunked.__getitems__(b)
            ),
            "PyG InMemoryDataset + Batch.from_data_list": lambda b: Batch.from_data_list(
                [pyg[i] for i in b]
            ),
            "JSON chunks (seed baseline)": lambda b: collate_graphs(
                [jr[i] for i in b], schema=mmap.schema
            ),
        }
        batches = {k: rand for k in readers}
        batches["ChunkedGraphDataset + ChunkShuffleSampler"] = seq
        batches["JSON chunks (seed baseline)"] = jb
        res["read"] = run_readers(readers, batches, mmap.size_index().nbytes, a.repeats)
        res["chunked_cache"] = vars(chunked.cache_info()) | {
            "hit_rate": chunked.cache_info().hit_rate
        }
        res["collate"] = bench_collate(ram, rng, bs, 200, a.repeats)
        readers.clear()
        ram = pyg = None  # free the in-RAM copies before the memory runs
        gc.collect()
        res["pss"] = {}
        if a.pss_epochs:
            for name in a.pss_datasets.split(","):
                store = paths["hdf5"] if name == "hdf5" else paths["npy"]
                cmd = [
                    sys.executable,
                    __file__,
                    "--pss-child",
                    name,
                    str(store),
                    "--pss-epochs",
                    str(a.pss_epochs),
                    "--batch-size",
                    str(bs),
                    "--workers",
                    str(a.workers),
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
                res["pss"][name] = json.loads(out.strip().splitlines()[-1])
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)
    report(res)
    if a.out:
        a.out.write_text(json.dumps(res, indent=1))


def report(res: dict[str, Any]) -> None:
    r = res["read"]
    ceil = r["in-RAM numpy (ceiling)"]["samples_per_s"]
    js = r["JSON chunks (seed baseline)"]["samples_per_s"]
    st = res["store"]
    print(f"\nmachine: {res['machine']}")
    print(
        f"store: {st['samples']} samples, npy {st['npy_bytes'] / 1e9:.2f} GB, hdf5 {st['hdf5_bytes'] / 1e9:.2f} GB, "
        f"nodes/sample mean {st['nodes_mean']:.1f} p99 {st['nodes_p99']:.0f} max {st['nodes_max']:.0f}\n"
    )
    print(
        "| reader (random access, batch 32, read + collate) | samples/s | MB/s | x ceiling | x JSON |"
    )
    print("|---|---:|---:|---:|---:|")
    for name, v in r.items():
        print(
            f"| {name} | {v['samples_per_s']:,.0f} | {v['mb_per_s']:,.1f} | {v['samples_per_s'] / ceil:.2f} | "
            f"{v['samples_per_s'] / js:,.0f} |"
        )
    c = res["collate"]
    print(
        f"\ncollate_graphs {c['tj_collate_us_per_batch']:.0f} us/batch vs Batch.from_data_list "
        f"{c['pyg_from_data_list_us_per_batch']:.0f} us/batch: {c['speedup']:.1f}x"
    )
    print(
        f"JSON import: {res['json_import_samples_per_s']:,.0f} samples/s; "
        f"chunk cache hit rate {res['chunked_cache']['hit_rate']:.3f}"
    )
    if res["pss"]:
        print(
            "\n| DataLoader (2 workers, persistent) | epoch | peak PSS MB | peak anon PSS MB | samples/s |"
        )
        print("|---|---:|---:|---:|---:|")
        for name, v in res["pss"].items():
            print(
                f"| {name} | before the loader (main only) | {v['idle_pss_mb']:,.0f} | {v['idle_pss_anon_mb']:,.0f} | |"
            )
            for e, (pk, rate) in enumerate(zip(v["epochs"], v["samples_per_s"], strict=False)):
                print(
                    f"| {name} | {e + 1} | {pk['pss_mb']:,.0f} | {pk['pss_anon_mb']:,.0f} | {rate:,.0f} |"
                )
    mm = r["MmapGraphDataset"]["samples_per_s"]
    print(
        f"\ntargets: mmap/ceiling {mm / ceil:.2f} (>= 0.5), mmap/JSON {mm / js:,.0f} (>= 50), "
        f"collate/PyG {c['speedup']:.1f} (>= 5)"
    )


if __name__ == "__main__":
    main()
