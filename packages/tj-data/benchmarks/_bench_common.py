"""Helpers of bench_read.py: synthetic store generation, baselines and PSS measurement."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from tj_data import GraphStoreWriter, HDF5Options, Schema
from tj_data.gather import ShardSource
from tj_data.mapped import GraphDataset
from tj_data.progress import progress_iter

SCHEMA = Schema.graph(
    node_features=9,
    edge_features=4,
    node_fields={"vehicle_id": "int64"},
    sample_fields={"intersection": "int64", "sim_time": "float32"},
)
BLOCK = 20_000  # samples generated per append_block


def heavy_tailed_nodes(rng: np.random.Generator, n: int) -> np.ndarray:
    """Lognormal node counts (mean ~15, long right tail, some empty graphs), capped at 400."""
    return np.minimum(np.round(rng.lognormal(np.log(10.0), 0.9, n)), 400).astype(np.int64)


def make_block(
    rng: np.random.Generator, n: int, start: int
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    nn = heavy_tailed_nodes(rng, n)
    ne = np.minimum(4 * nn, nn * np.maximum(nn - 1, 0))
    n_tot, e_tot = int(nn.sum()), int(ne.sum())
    limit = np.repeat(nn, ne)
    ei = (rng.random((2, e_tot)) * limit).astype(np.int64)
    arrays = {
        "x": rng.standard_normal((n_tot, 9), dtype=np.float32),
        "vehicle_id": rng.integers(0, 1 << 40, n_tot),
        "edge_index": ei,
        "edge_attr": rng.standard_normal((e_tot, 4), dtype=np.float32),
        "intersection": (np.arange(start, start + n) % 16).astype(np.int64),
        "sim_time": np.arange(start, start + n, dtype=np.float32),
    }
    return arrays, nn, ne


def generate(root: Path, size_gb: float, shard_size: int, seed: int = 0) -> dict[str, Path]:
    """npy and HDF5 stores of the same samples, each >= size_gb of stored arrays."""
    rng = np.random.default_rng(seed)
    paths = {"npy": root / "store-npy", "hdf5": root / "store-hdf5"}
    writers = {
        b: GraphStoreWriter(
            p, SCHEMA, shard_size=shard_size, backend=b, overwrite=True, hdf5=HDF5Options()
        )
        for b, p in paths.items()
    }
    first = make_block(rng, BLOCK, 0)
    per_block = sum(v.nbytes for v in first[0].values()) - first[0]["edge_index"].nbytes // 2
    n_blocks = max(1, int(np.ceil(size_gb * 1e9 / per_block)))
    for b in progress_iter(range(n_blocks), f"generate {size_gb} GB x 2 backends"):
        arrays, nn, ne = first if b == 0 else make_block(rng, BLOCK, b * BLOCK)
        for w in writers.values():
            w.append_block(arrays, nn, ne)
    for w in writers.values():
        w.close()
    return paths


def write_json_chunks(store_ds: GraphDataset, root: Path, n_chunks: int, chunk: int) -> Path:
    """The seed layout (phase1/chunks/chunk_NNN.json) for the first n_chunks * chunk samples."""
    out = root / "json" / "phase1" / "chunks"
    out.mkdir(parents=True, exist_ok=True)
    for c in progress_iter(range(n_chunks), "write JSON chunks"):
        recs = []
        for s in store_ds.__getitems__(list(range(c * chunk, (c + 1) * chunk))):
            recs.append(
                {
                    "nodes": [
                        {"features": f, "id": int(v)}
                        for f, v in zip(s["x"].tolist(), s["vehicle_id"].tolist(), strict=True)
                    ],
                    "edges": s["edge_index"].T.tolist(),
                    "edge_features": s["edge_attr"].tolist(),
                    "intersection": int(s["intersection"]),
                    "sim_time": float(s["sim_time"]),
                }
            )
        (out / f"chunk_{c:03d}.json").write_text(json.dumps(recs))
    (root / "json" / "metadata.json").write_text("{}")
    return root / "json"


class JsonChunkReader:
    """The seed-style loader: json.load per chunk, an LRU of 3 parsed chunks, lists -> numpy."""

    def __init__(self, root: Path, chunk: int, keep: int = 3) -> None:
        self.files = sorted((root / "phase1" / "chunks").glob("chunk_*.json"))
        self.chunk, self.keep = chunk, keep
        self.cache: OrderedDict[int, list[dict[str, Any]]] = OrderedDict()

    def __len__(self) -> int:
        return len(self.files) * self.chunk

    def __getitem__(self, i: int) -> dict[str, Any]:
        c, j = divmod(i, self.chunk)
        recs = self.cache.get(c)
        if recs is None:
            recs = json.loads(self.files[c].read_bytes())
            self.cache[c] = recs
            if len(self.cache) > self.keep:
                self.cache.popitem(last=False)
        else:
            self.cache.move_to_end(c)
        r = recs[j]
        nodes = r["nodes"]
        e = np.asarray(r["edges"], np.int32).reshape(-1, 2).T
        return {
            "x": np.asarray([n["features"] for n in nodes], np.float32).reshape(-1, 9),
            "vehicle_id": np.asarray([n["id"] for n in nodes], np.int64),
            "edge_index": np.ascontiguousarray(e),
            "edge_attr": np.asarray(r["edge_features"], np.float32).reshape(-1, 4),
            "intersection": np.int64(r["intersection"]),
            "sim_time": np.float32(r["sim_time"]),
        }


class RamSource:
    """Every shard loaded into RAM as plain numpy arrays: the in-RAM ceiling."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.shards = [
            store.read_shard(k) for k in progress_iter(range(store.num_shards), "load into RAM")
        ]

    def locate(self, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.store.locate(idx)

    def shard(self, k: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        a = self.shards[k]
        return a, a["node_ptr"], a["edge_ptr"]


class InRamDataset(GraphDataset):
    def __init__(self, store: Any) -> None:
        super().__init__(store)
        self.ram = RamSource(self.store)

    def _source(self) -> ShardSource:
        return self.ram


def tree_pss() -> tuple[int, int]:
    """(PSS, anonymous PSS) in bytes summed over this process and its children."""
    procs = [psutil.Process()]
    procs += procs[0].children(recursive=True)
    pss = anon = 0
    for p in procs:
        try:
            pss += p.memory_full_info().pss
            with open(f"/proc/{p.pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss_Anon:"):
                        anon += int(line.split()[1]) * 1024
        except (psutil.NoSuchProcess, FileNotFoundError, ProcessLookupError):
            continue
    return pss, anon


class PssSampler:
    """Polls tree_pss() in a thread; `mark()` starts a new segment (e.g. an epoch)."""

    def __init__(self, interval: float = 0.5) -> None:
        self.interval = interval
        self.segments: list[list[tuple[int, int]]] = [[]]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.segments[-1].append(tree_pss())
            time.sleep(self.interval)

    def __enter__(self) -> PssSampler:
        self._t.start()
        return self

    def mark(self) -> None:
        self.segments.append([])

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._t.join()

    def peaks(self) -> list[dict[str, float]]:
        return [
            {"pss_mb": max(s[0] for s in seg) / 1e6, "pss_anon_mb": max(s[1] for s in seg) / 1e6}
            for seg in self.segments
            if seg
        ]


def warm_page_cache(*dirs: Path) -> int:
    total = 0
    for d in dirs:
        for p in d.rglob("*"):
            if p.is_file():
                with open(p, "rb") as f:
                    while chunk := f.read(16 << 20):
                        total += len(chunk)
    return total


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def machine() -> str:
    import platform

    return (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM, {platform.system()} {platform.release()}"
    )
