"""tj-data: memory-disciplined graph datasets (standalone: numpy, h5py, torch, psutil).

Store: `GraphStoreWriter` writes a CSR graph store (npy or HDF5), `GraphStore.open` reads it.
"""

from tj_data._version import __version__
from tj_data.backends import HDF5Options, HDF5ReadOptions
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
from tj_data.manifest import FORMAT_VERSION, Manifest, ShardInfo
from tj_data.schema import FieldSpec, QuantParams, Schema
from tj_data.store import GraphStore, SizeIndex
from tj_data.writer import GraphStoreWriter

__all__ = [
    "FORMAT_VERSION",
    "FieldSpec",
    "GraphStore",
    "GraphStoreWriter",
    "HDF5Options",
    "HDF5ReadOptions",
    "JsonImportError",
    "Manifest",
    "QuantParams",
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
    "__version__",
]
