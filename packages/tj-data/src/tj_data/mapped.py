"""Map-style datasets over a graph store: `MmapGraphDataset` (npy) and `HDF5GraphDataset`.

Both share `GraphDataset`: it holds the store (path, manifest, offsets: numpy arrays, no
per-sample Python objects), opens files lazily in each process, and implements torch's batched
fetch `__getitems__` with sorted, coalesced reads (`tj_data.gather`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, ClassVar, Literal

import numpy as np
from torch.utils.data import Dataset

from tj_data.backends import HDF5ReadOptions
from tj_data.collate import DEQUANTIZE, BatchTransform, GraphCollator
from tj_data.errors import SchemaMismatchError
from tj_data.gather import ShardSource, gather_samples
from tj_data.schema import Schema
from tj_data.store import GraphStore, SizeIndex

__all__ = ["GraphDataset", "HDF5GraphDataset", "MmapGraphDataset", "as_store"]

Sample = dict[str, Any]


def as_store(
    store: GraphStore | str | os.PathLike[str],
    *,
    verify: bool | Literal["once"] = False,
    hdf5: HDF5ReadOptions | None = None,
) -> GraphStore:
    return (
        store if isinstance(store, GraphStore) else GraphStore.open(store, verify=verify, hdf5=hdf5)
    )


class GraphDataset(Dataset[Sample]):
    """Random-access samples of a store; each sample is a dict of numpy arrays.

    Args:
        store: a `GraphStore` or a path to open.
        fields: keep only these fields (None: all); `edge_index` is always kept.
        verify: check sha256 of every array when opening a path ("once": only arrays not yet
            verified or changed since, see `GraphStore.open`).
        transforms: batch transforms for `collate_fn` (normalisation, augmentation).
        dequantize: quantised fields are decoded in `collate_fn` ("host", default) or left
            stored for `batch.to(device).dequantize()` ("device": int8 crosses the bus).
        max_open_shards: keep at most this many shards memory-mapped per process (None: all);
            bounds the mapped pages a worker holds (see `GraphStore.max_open_shards`).
    """

    required_backend: ClassVar[str | None] = None

    def __init__(
        self,
        store: GraphStore | str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        verify: bool | Literal["once"] = False,
        transforms: Sequence[BatchTransform] = (),
        hdf5: HDF5ReadOptions | None = None,
        dequantize: str = "host",
        max_open_shards: int | None = None,
    ) -> None:
        if dequantize not in DEQUANTIZE:
            raise ValueError(f"dequantize={dequantize!r}: expected one of {DEQUANTIZE}")
        self.store = as_store(store, verify=verify, hdf5=hdf5)
        if max_open_shards is not None:
            self.store.set_max_open_shards(max_open_shards)
        if self.required_backend and self.store.backend != self.required_backend:
            raise SchemaMismatchError(
                f"{type(self).__name__} reads '{self.required_backend}' stores; {self.store.path} is "
                f"'{self.store.backend}' (use {'HDF5GraphDataset' if self.store.backend == 'hdf5' else 'MmapGraphDataset'} "
                "or ChunkedGraphDataset)"
            )
        self.schema: Schema = self.store.schema.select(fields)
        self.transforms = tuple(transforms)
        self.dequantize = dequantize

    def __len__(self) -> int:
        return len(self.store)

    def _source(self) -> ShardSource:
        return self.store

    def __getitem__(self, index: int) -> Sample:
        if not isinstance(index, int | np.integer):
            raise TypeError(
                f"{type(self).__name__} index must be an int, got {type(index).__name__}"
            )
        return self.__getitems__([int(index)])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[Sample]:
        """Samples at `indices` in the caller's order, read in physical order with one slice per
        field per run of consecutive samples."""
        return gather_samples(self._source(), self.store.check_indices(indices), self.schema)

    @property
    def collate_fn(self) -> GraphCollator:
        """Picklable collate function for DataLoader(collate_fn=...)."""
        return GraphCollator(self.schema, self.transforms, dequantize=self.dequantize)

    def size_index(self) -> SizeIndex:
        return self.store.size_index()

    @property
    def fingerprint(self) -> str:
        """The store's (indices address the same samples whatever the fields kept)."""
        return self.store.fingerprint

    @property
    def episode_ends(self) -> np.ndarray:
        return self.store.episode_ends

    @property
    def shard_offsets(self) -> np.ndarray:
        return self.store.shard_offsets

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r}, fields={list(self.schema.names)})"


class MmapGraphDataset(GraphDataset):
    """npy store read through `np.load(mmap_mode="r")`: pages live in the OS page cache, shared by
    every worker (no copy-on-read growth), and each worker maps files on first use."""

    required_backend = "npy"


class HDF5GraphDataset(GraphDataset):
    """HDF5 store; each worker opens the file on first use with the given chunk cache
    (`HDF5ReadOptions(rdcc_nbytes=..., rdcc_w0=..., rdcc_nslots=...)`)."""

    required_backend = "hdf5"
