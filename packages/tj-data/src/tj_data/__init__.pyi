"""Names exported by tj_data, loaded lazily on first use (see __init__.py)."""

from . import synthetic
from ._version import __version__
from .augment import AUGMENT_PRESETS, AugmentConfig, Augmenter
from .autotune import (
    SEED_TABLE,
    AutotuneResult,
    CandidateResult,
    autotune_loader,
    hand_plans,
)
from .backends import HDF5Options, HDF5ReadOptions
from .batch import GraphBatch
from .budget import default_budget
from .byte_budget import ByteBudgetBatchSampler
from .chunked import CacheInfo, ChunkedGraphDataset
from .collate import BatchTransform, GraphCollator, collate_graphs
from .disk_cache import DiskCache
from .dynamic_batch import BatchSizeEvent, DynamicBatchSampler, DynamicBatchSize
from .errors import (
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
from .estimate import WorkerCost, worker_baseline
from .json_import import import_json_chunks
from .live import LiveGraphDataset, LiveQueue, QueueClosed
from .loader import PlannedLoader, build_loader
from .lru_cache import CacheStats, LRUCache, nbytes_of
from .manifest import FORMAT_VERSION, Manifest, ShardInfo
from .mapped import GraphDataset, HDF5GraphDataset, MmapGraphDataset
from .measure import LoaderMeasurement, busy_step, measure_epoch, measure_loader
from .moments import RunningMoments
from .normalize import ColumnNorm, FieldNorm, Normalizer
from .plan import LoaderPlan, MemoryEstimate, estimate_plan, plan_loader
from .pyg import sample_to_pyg, store_to_pyg
from .quant import QuantParams, dequantize_array, fit_quant_params, quantize_array
from .quant_torch import dequantize_tensor
from .quantize_store import FieldQuantReport, QuantizeReport, quantize_store
from .samplers import ChunkShuffleSampler, DistributedChunkSampler
from .schema import FieldSpec, Schema
from .seeding import SeedContext
from .shuffle_buffer import ByteShuffleBuffer
from .state import StateMismatchError
from .statistics import FieldStatistics, compute_statistics, load_statistics
from .store import GraphStore, SizeIndex
from .streaming import StreamingGraphDataset
from .tiered_cache import TieredCache, TieredStats
from .verify import VerifyReport
from .window import WindowCollator, WindowDataset, match_nodes, match_nodes_batched
from .writer import GraphStoreWriter

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
    "LoaderMeasurement",
    "LoaderPlan",
    "Manifest",
    "MemoryEstimate",
    "MmapGraphDataset",
    "Normalizer",
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
    "StateMismatchError",
    "StatisticsError",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatVersionError",
    "StoreIncompleteError",
    "StoreNotFoundError",
    "StreamingGraphDataset",
    "TieredCache",
    "TieredStats",
    "VerifyReport",
    "WindowCollator",
    "WindowDataset",
    "WorkerCost",
    "__version__",
    "autotune_loader",
    "build_loader",
    "busy_step",
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
    "measure_epoch",
    "measure_loader",
    "nbytes_of",
    "plan_loader",
    "quantize_array",
    "quantize_store",
    "sample_to_pyg",
    "store_to_pyg",
    "synthetic",
    "worker_baseline",
]
