"""tj-data: memory-disciplined graph datasets (standalone: numpy, h5py, torch, psutil).

Store: `GraphStoreWriter` writes a CSR graph store (npy or HDF5), `GraphStore.open` reads it.
Datasets: `MmapGraphDataset`, `HDF5GraphDataset`, `ChunkedGraphDataset` (map-style),
`StreamingGraphDataset` / `LiveGraphDataset` (iterable), `WindowDataset` (time windows).
Batching: `collate_graphs` -> `GraphBatch`; samplers `DistributedChunkSampler`,
`ChunkShuffleSampler`, `ByteBudgetBatchSampler`. Import: `import_json_chunks`.
"""

from tj_data._version import __version__
from tj_data.backends import HDF5Options, HDF5ReadOptions
from tj_data.batch import GraphBatch
from tj_data.byte_budget import ByteBudgetBatchSampler
from tj_data.chunked import CacheInfo, ChunkedGraphDataset
from tj_data.collate import BatchTransform, GraphCollator, collate_graphs
from tj_data.errors import (
    JsonImportError,
    SampleIndexError,
    SchemaMismatchError,
    StoreCorruptError,
    StoreError,
    StoreFormatVersionError,
    StoreIncompleteError,
    StoreNotFoundError,
)
from tj_data.json_import import import_json_chunks
from tj_data.live import LiveGraphDataset, LiveQueue, QueueClosed
from tj_data.manifest import FORMAT_VERSION, Manifest, ShardInfo
from tj_data.mapped import GraphDataset, HDF5GraphDataset, MmapGraphDataset
from tj_data.pyg import sample_to_pyg
from tj_data.samplers import ChunkShuffleSampler, DistributedChunkSampler
from tj_data.schema import FieldSpec, QuantParams, Schema
from tj_data.shuffle_buffer import ByteShuffleBuffer
from tj_data.store import GraphStore, SizeIndex
from tj_data.streaming import StreamingGraphDataset
from tj_data.window import WindowCollator, WindowDataset, match_nodes, match_nodes_batched
from tj_data.writer import GraphStoreWriter

__all__ = [
    "FORMAT_VERSION",
    "BatchTransform",
    "ByteBudgetBatchSampler",
    "ByteShuffleBuffer",
    "CacheInfo",
    "ChunkShuffleSampler",
    "ChunkedGraphDataset",
    "DistributedChunkSampler",
    "FieldSpec",
    "GraphBatch",
    "GraphCollator",
    "GraphDataset",
    "GraphStore",
    "GraphStoreWriter",
    "HDF5GraphDataset",
    "HDF5Options",
    "HDF5ReadOptions",
    "JsonImportError",
    "LiveGraphDataset",
    "LiveQueue",
    "Manifest",
    "MmapGraphDataset",
    "QuantParams",
    "QueueClosed",
    "SampleIndexError",
    "Schema",
    "SchemaMismatchError",
    "ShardInfo",
    "SizeIndex",
    "StoreCorruptError",
    "StoreError",
    "StoreFormatVersionError",
    "StoreIncompleteError",
    "StoreNotFoundError",
    "StreamingGraphDataset",
    "WindowCollator",
    "WindowDataset",
    "__version__",
    "collate_graphs",
    "import_json_chunks",
    "match_nodes",
    "match_nodes_batched",
    "sample_to_pyg",
]
