"""tj-data: memory-disciplined graph datasets (standalone: numpy, h5py, torch, psutil).

Store: `GraphStoreWriter` writes a CSR graph store (npy or HDF5), `GraphStore.open` reads it.
Datasets: `MmapGraphDataset`, `HDF5GraphDataset`, `ChunkedGraphDataset` (map-style),
`StreamingGraphDataset` / `LiveGraphDataset` (iterable), `WindowDataset` (time windows).
Batching: `collate_graphs` -> `GraphBatch`; samplers `DistributedChunkSampler`,
`ChunkShuffleSampler`, `ByteBudgetBatchSampler`. Import: `import_json_chunks`.
Loading within a RAM budget: `plan_loader` -> `LoaderPlan`, `build_loader`, `autotune_loader`,
`DynamicBatchSize`. Caches: `LRUCache`, `DiskCache`, `TieredCache`. Data preparation:
`compute_statistics`, `Normalizer`, `quantize_store`, `Augmenter`.
"""

from tj_data._version import __version__
from tj_data.augment import PRESETS as AUGMENT_PRESETS
from tj_data.augment import AugmentConfig, Augmenter
from tj_data.autotune import (
    SEED_TABLE,
    AutotuneResult,
    CandidateResult,
    autotune_loader,
    hand_plans,
)
from tj_data.backends import HDF5Options, HDF5ReadOptions
from tj_data.batch import GraphBatch
from tj_data.byte_budget import ByteBudgetBatchSampler
from tj_data.chunked import CacheInfo, ChunkedGraphDataset
from tj_data.collate import BatchTransform, GraphCollator, collate_graphs
from tj_data.disk_cache import DiskCache
from tj_data.dynamic_batch import BatchSizeEvent, DynamicBatchSampler, DynamicBatchSize
from tj_data.errors import (
    BudgetError,
    CacheError,
    JsonImportError,
    QuantizationError,
    SampleIndexError,
    SchemaMismatchError,
    StatisticsError,
    StoreCorruptError,
    StoreError,
    StoreFormatVersionError,
    StoreIncompleteError,
    StoreNotFoundError,
)
from tj_data.json_import import import_json_chunks
from tj_data.live import LiveGraphDataset, LiveQueue, QueueClosed
from tj_data.loader import PlannedLoader, build_loader
from tj_data.lru_cache import CacheStats, LRUCache, nbytes_of
from tj_data.manifest import FORMAT_VERSION, Manifest, ShardInfo
from tj_data.mapped import GraphDataset, HDF5GraphDataset, MmapGraphDataset
from tj_data.moments import RunningMoments
from tj_data.normalize import ColumnNorm, FieldNorm, Normalizer
from tj_data.plan import LoaderPlan, MemoryEstimate, estimate_plan, plan_loader
from tj_data.pss import PeakPssSampler, TreeMemory, tree_memory
from tj_data.pyg import sample_to_pyg
from tj_data.quant import dequantize_array, dequantize_tensor, fit_quant_params, quantize_array
from tj_data.quantize_store import FieldQuantReport, QuantizeReport, quantize_store
from tj_data.samplers import ChunkShuffleSampler, DistributedChunkSampler
from tj_data.schema import FieldSpec, QuantParams, Schema
from tj_data.seeding import SeedContext
from tj_data.shuffle_buffer import ByteShuffleBuffer
from tj_data.statistics import FieldStatistics, compute_statistics, load_statistics
from tj_data.store import GraphStore, SizeIndex
from tj_data.streaming import StreamingGraphDataset
from tj_data.sysmem import cgroup_memory_limit, default_budget, memory_limit
from tj_data.tiered_cache import TieredCache, TieredStats
from tj_data.window import WindowCollator, WindowDataset, match_nodes, match_nodes_batched
from tj_data.writer import GraphStoreWriter

__all__ = [
    "AUGMENT_PRESETS",
    "FORMAT_VERSION",
    "SEED_TABLE",
    "AugmentConfig",
    "Augmenter",
    "AutotuneResult",
    "BatchSizeEvent",
    "BatchTransform",
    "BudgetError",
    "ByteBudgetBatchSampler",
    "ByteShuffleBuffer",
    "CacheError",
    "CacheInfo",
    "CacheStats",
    "CandidateResult",
    "ChunkShuffleSampler",
    "ChunkedGraphDataset",
    "ColumnNorm",
    "DiskCache",
    "DistributedChunkSampler",
    "DynamicBatchSampler",
    "DynamicBatchSize",
    "FieldNorm",
    "FieldQuantReport",
    "FieldSpec",
    "FieldStatistics",
    "GraphBatch",
    "GraphCollator",
    "GraphDataset",
    "GraphStore",
    "GraphStoreWriter",
    "HDF5GraphDataset",
    "HDF5Options",
    "HDF5ReadOptions",
    "JsonImportError",
    "LRUCache",
    "LiveGraphDataset",
    "LiveQueue",
    "LoaderPlan",
    "Manifest",
    "MemoryEstimate",
    "MmapGraphDataset",
    "Normalizer",
    "PeakPssSampler",
    "PlannedLoader",
    "QuantParams",
    "QuantizationError",
    "QuantizeReport",
    "QueueClosed",
    "RunningMoments",
    "SampleIndexError",
    "Schema",
    "SchemaMismatchError",
    "SeedContext",
    "ShardInfo",
    "SizeIndex",
    "StatisticsError",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatVersionError",
    "StoreIncompleteError",
    "StoreNotFoundError",
    "StreamingGraphDataset",
    "TieredCache",
    "TieredStats",
    "TreeMemory",
    "WindowCollator",
    "WindowDataset",
    "__version__",
    "autotune_loader",
    "build_loader",
    "cgroup_memory_limit",
    "collate_graphs",
    "compute_statistics",
    "default_budget",
    "dequantize_array",
    "dequantize_tensor",
    "estimate_plan",
    "fit_quant_params",
    "hand_plans",
    "import_json_chunks",
    "load_statistics",
    "match_nodes",
    "match_nodes_batched",
    "memory_limit",
    "nbytes_of",
    "plan_loader",
    "quantize_array",
    "quantize_store",
    "sample_to_pyg",
    "tree_memory",
]
