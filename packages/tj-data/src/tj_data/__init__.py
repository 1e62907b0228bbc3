"""tj-data: memory-disciplined graph datasets (standalone: numpy, h5py, torch, psutil and
tj-monitor's core, for the memory limit and process-tree PSS).

Store: `GraphStoreWriter` writes a CSR graph store (npy or HDF5), `GraphStore.open` reads it.
Datasets: `MmapGraphDataset`, `HDF5GraphDataset`, `ChunkedGraphDataset` (map-style),
`StreamingGraphDataset` / `LiveGraphDataset` (iterable), `WindowDataset` (time windows).
Batching: `collate_graphs` -> `GraphBatch`; samplers `DistributedChunkSampler`,
`ChunkShuffleSampler`, `ByteBudgetBatchSampler`. Import: `import_json_chunks`.
Loading within a RAM budget: `plan_loader` -> `LoaderPlan`, `build_loader`, `autotune_loader`,
`DynamicBatchSize`, `default_budget`. Caches: `LRUCache`, `DiskCache`, `TieredCache`. Data
preparation: `compute_statistics`, `Normalizer`, `quantize_store`, `Augmenter`. Synthetic graph
blocks for tests, examples and benchmarks: `tj_data.synthetic`.
"""

# Every public name is imported on first use (SPEC 1 lazy loading, scientific-python's
# lazy_loader): the names and their modules are listed once, in __init__.pyi, which type checkers
# and IDEs read. Why: most modules need torch, and a process that only writes a store (a SUMO
# recording worker, an env process) must not pay torch's ~1 s import and ~380 MiB of PSS for it.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach_stub(__name__, __file__)
