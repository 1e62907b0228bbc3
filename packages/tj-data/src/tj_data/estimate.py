"""Measured inputs of loader planning: what one item costs, what a batch costs, what a worker costs.

- `DatasetProfile`: the dataset's kind (mapped npy, HDF5, chunked, streaming, windows), its
  per-item sizes from the store's size index (a window sums its steps), the collated bytes per
  node / edge / graph (int64 edge_index and batch vector, dequantised fields as float32), the
  shards' byte sizes and the Python overhead of one decoded sample (measured on a real one).
- `batch_bytes`: the p99 and max collated bytes of random batches of `batch_size` items (drawn
  from the size index: variable-size graphs make the mean a poor bound).
- `worker_baseline`: what a real DataLoader worker over this dataset adds to the tree's PSS
  (measured on every call, ~0.3 s with fork, seconds with spawn; nothing is cached here: the
  caller keeps the `WorkerCost`, e.g. on the `LoaderPlan` that `plan_loader` returns, and
  passes it back to re-estimate).
"""

from __future__ import annotations

import logging
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Subset

from tj_data.chunked import ChunkedGraphDataset
from tj_data.gather import gather_samples
from tj_data.live import LiveGraphDataset
from tj_data.mapped import GraphDataset
from tj_data.measure import wait_children_gone
from tj_data.schema import Schema
from tj_data.seeding import WorkerInit
from tj_data.store import GraphStore
from tj_data.streaming import StreamingGraphDataset
from tj_data.window import WindowDataset
from tj_monitor import tree_memory

__all__ = [
    "TERMS",
    "DatasetProfile",
    "WorkerCost",
    "batch_bytes",
    "estimate_terms",
    "profile_dataset",
    "worker_baseline",
]

log = logging.getLogger(__name__)
_ALIGN = 64


@dataclass(kw_only=True)
class DatasetProfile:
    kind: str  # "mapped" (npy), "hdf5", "chunked", "streaming", "live"
    windows: bool
    store: GraphStore | None
    item_nodes: np.ndarray
    item_edges: np.ndarray
    item_samples: int  # samples per item (window steps, else 1)
    node_row: int  # collated bytes per node / edge / graph
    edge_row: int
    graph_row: int
    tensors: int  # tensors per collated step
    shard_bytes: np.ndarray  # stored bytes of each shard
    sample_overhead: int  # Python bytes of one decoded sample beyond its array data
    mean_sample_bytes: float

    @property
    def num_items(self) -> int:
        return len(self.item_nodes)

    @property
    def max_shard_bytes(self) -> int:
        return int(self.shard_bytes.max()) if len(self.shard_bytes) else 0


def _collated_rows(schema: Schema, decoded: bool) -> tuple[int, int, int, int]:
    rows = {"node": 8, "edge": 16, "sample": 16}  # batch vector; int64 edge_index; ptr+edge_ptr
    for f in schema.fields:
        item = 4 if (decoded and f.quant is not None) else np.dtype(f.dtype).itemsize
        rows[f.level] += int(np.prod(f.shape, dtype=np.int64)) * item
    return rows["node"], rows["edge"], rows["sample"], len(schema.fields) + 4


def _sample_overhead(store: GraphStore, schema: Schema) -> tuple[int, float]:
    """Bytes of Python objects around one decoded sample (dict + array headers), measured."""
    if len(store) == 0:
        return 0, 0.0
    s = gather_samples(store, np.array([0]), schema, copy=True)[0]
    data = sum(v.nbytes for v in s.values() if isinstance(v, np.ndarray))
    total = sys.getsizeof(s) + sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in s.items())
    sizes = store.size_index()
    return max(total - data, 0), float(sizes.nbytes.mean()) if len(sizes) else 0.0


def profile_dataset(dataset: Any) -> DatasetProfile:
    """Profile a tj-data dataset (map-style, streaming, live or windows)."""
    windows = isinstance(dataset, WindowDataset)
    base = dataset.base if windows else dataset
    if isinstance(base, LiveGraphDataset):
        z = np.zeros(0, np.int64)
        n, e, g, t = _collated_rows(base.schema, True)
        return DatasetProfile(
            kind="live", windows=False, store=None, item_nodes=z, item_edges=z, item_samples=1,
            node_row=n, edge_row=e, graph_row=g, tensors=t, shard_bytes=z, sample_overhead=0,
            mean_sample_bytes=0.0,
        )  # fmt: skip
    if isinstance(base, StreamingGraphDataset):
        kind = "streaming"
    elif isinstance(base, ChunkedGraphDataset):
        kind = "chunked"
    elif isinstance(base, GraphDataset):
        kind = "hdf5" if base.store.backend == "hdf5" else "mapped"
    else:
        raise TypeError(
            f"plan_loader needs a tj-data dataset (Mmap/HDF5/Chunked/Streaming/Window), got "
            f"{type(dataset).__name__}"
        )
    store: GraphStore = base.store
    sizes = dataset.size_index() if windows else store.size_index()
    decoded = getattr(base, "collate_fn", None)
    host = getattr(decoded, "dequantize", "host") == "host"
    n, e, g, t = _collated_rows(base.schema, host)
    overhead, mean_bytes = _sample_overhead(store, base.schema)
    return DatasetProfile(
        kind=kind,
        windows=windows,
        store=store,
        item_nodes=sizes.nodes,
        item_edges=sizes.edges,
        item_samples=dataset.steps if windows else 1,
        node_row=n,
        edge_row=e,
        graph_row=g,
        tensors=t,
        shard_bytes=np.array([s.nbytes for s in store.manifest.shards], np.int64),
        sample_overhead=overhead,
        mean_sample_bytes=mean_bytes,
    )


def batch_bytes(
    profile: DatasetProfile, batch_size: int, *, draws: int = 2000, seed: int = 0
) -> tuple[int, int]:
    """(p99, max) collated bytes of `draws` random batches of `batch_size` items."""
    if profile.num_items == 0:
        return 0, 0
    rng = np.random.default_rng(seed)
    b = max(1, int(batch_size))
    draws = max(16, min(draws, (4 << 20) // b))
    idx = rng.integers(0, profile.num_items, (draws, b))
    nodes = profile.item_nodes[idx].sum(axis=1)
    edges = profile.item_edges[idx].sum(axis=1)
    graphs = b * profile.item_samples
    fixed = profile.item_samples * (profile.tensors * _ALIGN + 8)
    total = nodes * profile.node_row + edges * profile.edge_row + graphs * profile.graph_row + fixed
    # the largest possible batch: the b largest items
    top = np.sort(profile.item_nodes * profile.node_row + profile.item_edges * profile.edge_row)
    biggest = int(top[-b:].sum()) + graphs * profile.graph_row + fixed
    return int(np.percentile(total, 99)), int(max(biggest, total.max()))


@dataclass(kw_only=True, frozen=True)
class WorkerCost:
    """What DataLoader workers add to the tree's PSS: `first` for the first worker (its private
    pages plus the library and interpreter pages it faults in, which later workers share) and
    `each` (its USS) for every further one. Measured, in bytes."""

    first: int
    each: int

    def total(self, workers: int) -> int:
        return 0 if workers <= 0 else self.first + (workers - 1) * self.each


def worker_baseline(
    dataset: Any,
    collate_fn: Any,
    *,
    multiprocessing_context: str | None = None,
    batch_size: int = 32,
    batches: int = 8,
) -> WorkerCost:
    """Measure one real DataLoader worker over this dataset now: the tree PSS it adds and its
    USS. The worker runs tj-data's worker init (`gc.freeze`), as `build_loader`'s workers do.
    Each call measures (the cost depends on the dataset, its collate and the start method);
    keep the result to reuse it (`plan_loader(worker_cost=...)`, `LoaderPlan.worker_cost`)."""
    if isinstance(dataset, torch.utils.data.IterableDataset):  # its buffer is its own term
        dataset = GraphDataset(dataset.store, fields=list(dataset.schema.names))
        collate_fn = dataset.collate_fn
    # realistic batches (allocator and library paths warm up) from the first items only, so the
    # pages it maps stay a small part of one shard (mapped pages are their own term)
    ds = Subset(dataset, list(range(min(len(dataset), batch_size * batches))))
    tree0 = tree_memory()
    before = set(tree0.pids)  # the tree before the worker starts
    loader = DataLoader(
        ds,
        batch_size=batch_size,
        collate_fn=collate_fn,
        num_workers=1,
        worker_init_fn=WorkerInit(seed=0, rank=0, seeds=None),
        multiprocessing_context=multiprocessing_context,
    )
    it = iter(loader)
    uss = first = 0
    try:
        for _ in range(batches):
            try:
                next(it)
            except StopIteration:
                break
        tree = tree_memory(per_process=True)  # one reading: the tree's growth and the new USS
        first = tree.pss - tree0.pss
        uss = sum(p.uss for p in tree.per_process if p.pid not in before)
    finally:
        shutdown = getattr(it, "_shutdown_workers", None)
        if callable(shutdown):
            shutdown()
        del it, loader
        wait_children_gone(before)
    if uss == 0:
        log.warning("could not measure a DataLoader worker's memory; assuming 64 MiB")
        uss = 64 << 20
    return WorkerCost(first=max(first, uss), each=uss)


TERMS = (
    "main_process",
    "worker_baseline",
    "prefetched_batches",
    "pinned_buffers",
    "collate_transient",
    "caches",
    "shuffle_buffer",
    "mapped_pages",
    "sampler_index",
)


def _pow2(n: int) -> int:
    return 1 << max(0, int(n - 1).bit_length())


def estimate_terms(
    prof: DatasetProfile,
    dataset: Any,
    *,
    workers: int,
    prefetch: int | None,
    batch_size: int,
    pin: bool,
    window_shards: int | None,
    max_open_shards: int | None,
    cache_bytes: int | None,
    shuffle_bytes: int | None,
    main: int,
    baseline: WorkerCost | None,
    extra_caches: int,
) -> dict[str, int]:
    """Bytes per term (see `tj_data.plan`) of a loader configuration on a profiled dataset."""
    p99, _ = batch_bytes(prof, batch_size)
    inflight = workers * (prefetch or 0) + 2
    procs = max(workers, 1)
    caches = extra_caches
    base = dataset.base if prof.windows else dataset
    if prof.kind == "chunked":
        caches += procs * (int(cache_bytes or base.cache_bytes) + prof.max_shard_bytes)
    if prof.kind == "hdf5" and prof.store is not None:
        files = len({s.container for s in prof.store.manifest.shards})
        caches += procs * files * prof.store.hdf5.rdcc_nbytes
    shuffle = 0
    if prof.kind == "streaming":
        buf = int(shuffle_bytes if shuffle_bytes is not None else base.shuffle_buffer_bytes)
        per_sample = max(prof.mean_sample_bytes, 1.0)
        overhead = buf / per_sample * prof.sample_overhead
        block = base.read_block * (per_sample + prof.sample_overhead)
        shuffle = int(procs * (buf + overhead + block))
    mapped = 0
    if prof.kind in ("mapped", "streaming") and prof.store is not None:
        # + 1: the shard just evicted stays mapped while views of it are still being collated
        shards = (max_open_shards + 1) if max_open_shards else prof.store.num_shards
        per_proc = min(shards, prof.store.num_shards) * prof.max_shard_bytes
        # map-style: the sampler in the main process feeds every worker from the same window of
        # shards (pages shared, counted once); streaming: each worker streams its own shards
        mapped = per_proc * (procs if prof.kind == "streaming" else 1)
    items = prof.num_items
    index = 24 * items if prof.kind != "streaming" else procs * 8 * items + 24 * items
    return {
        "main_process": main,
        "worker_baseline": baseline.total(workers) if baseline is not None else 0,
        "prefetched_batches": inflight * p99,
        "pinned_buffers": inflight * _pow2(p99) if pin else 0,
        "collate_transient": procs * 2 * p99,
        "caches": caches,
        "shuffle_buffer": shuffle,
        "mapped_pages": mapped,
        "sampler_index": index,
    }
