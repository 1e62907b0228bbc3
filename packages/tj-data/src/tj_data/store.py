"""`GraphStore`: open, validate and read a graph store directory (npy or HDF5 backend).

A store object is cheap to pickle: it carries the path, the manifest and small numpy offset
arrays; file handles (memmaps, h5py files) are opened lazily in each process and dropped on
pickling, so DataLoader workers started by fork or spawn each open their own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np

from tj_data.backends import HDF5ReadOptions, check_field_rows, check_shard_arrays, open_npy_shard
from tj_data.errors import (
    SampleIndexError,
    StoreCorruptError,
    StoreIncompleteError,
    StoreNotFoundError,
)
from tj_data.gather import gather_samples
from tj_data.manifest import MANIFEST, PARTIAL_MANIFEST, Manifest, ShardInfo
from tj_data.schema import Schema
from tj_data.verify import VerifyReport, verify_store

__all__ = ["GraphStore", "SizeIndex", "store_of"]

log = logging.getLogger(__name__)


@dataclass(kw_only=True, frozen=True)
class SizeIndex:
    """Per-sample sizes (int64 [S] each), computed from the shards' CSR pointers and the schema:
    the basis of byte-budget batching and loader planning, no sample is decoded to get it."""

    nodes: np.ndarray
    edges: np.ndarray
    nbytes: np.ndarray

    def __len__(self) -> int:
        return len(self.nodes)

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name in ("nodes", "edges", "nbytes"):
            a = getattr(self, name)
            out[f"{name}_mean"] = float(a.mean()) if len(a) else 0.0
            out[f"{name}_max"] = float(a.max()) if len(a) else 0.0
            out[f"{name}_p99"] = float(np.percentile(a, 99)) if len(a) else 0.0
        return out


class GraphStore:
    """An opened store. Use `GraphStore.open(path)`.

    `max_open_shards` (None: unbounded) caps the shards whose arrays a process keeps open: the
    least recently used shard's memmaps are dropped when another opens, so the file pages a
    process maps (counted in its PSS and, as page cache, against a cgroup limit) stay bounded
    by the sampler's working set instead of growing to the whole store."""

    max_open_shards: int | None = None

    def __init__(
        self, path: Path, manifest: Manifest, *, hdf5: HDF5ReadOptions | None = None
    ) -> None:
        self.path = Path(path)
        self.manifest = manifest
        self.hdf5 = hdf5 or HDF5ReadOptions()
        counts = np.array([s.num_samples for s in manifest.shards], np.int64)
        self.shard_offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        self.episode_ends = np.asarray(manifest.episode_ends, np.int64)
        self._reset_handles()

    # ----- opening -----------------------------------------------------------------------
    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        verify: bool | Literal["once"] = False,
        allow_incomplete: bool = False,
        hdf5: HDF5ReadOptions | None = None,
    ) -> GraphStore:
        """Open and validate a store (manifest, files present with the recorded sizes).

        verify=True also checks every array's sha256 (reads the whole store); verify="once"
        reads only arrays not yet verified or changed since (`verify(marker=True)`): the cheap
        check of a store that is being reused. Corruption raises StoreCorruptError naming the
        file. allow_incomplete=True opens the committed prefix of an interrupted npy writer."""
        if verify not in (False, True, "once"):
            raise ValueError(f"verify={verify!r}: expected False, True or 'once'")
        path = Path(path)
        if not path.is_dir():
            raise StoreNotFoundError(f"{path}: no such store directory")
        full, partial = path / MANIFEST, path / PARTIAL_MANIFEST
        if full.exists():
            manifest = Manifest.load(full)
            if partial.exists() or any(path.glob(".tmp-*")):
                log.warning(
                    "%s: ignoring leftovers of an interrupted writer (previous state kept)", path
                )
        elif partial.exists():
            m = Manifest.load(partial)
            if not allow_incomplete:
                raise StoreIncompleteError(
                    f"{path}: no {MANIFEST}: a writer was interrupted after committing "
                    f"{len(m.shards)} shards ({m.num_samples} samples, see {PARTIAL_MANIFEST}); "
                    "open with allow_incomplete=True to read them or resume with "
                    "GraphStoreWriter(path, None, mode='a')"
                )
            manifest = m
        else:
            leftovers = sorted(p.name for p in path.iterdir())
            if leftovers:
                raise StoreIncompleteError(
                    f"{path}: no {MANIFEST}: a writer was interrupted before its first commit "
                    f"(found {leftovers[:5]}{'...' if len(leftovers) > 5 else ''})"
                )
            raise StoreNotFoundError(f"{path}: empty directory, no {MANIFEST}")
        store = cls(path, manifest, hdf5=hdf5)
        store._check_files()
        if verify:
            store.verify(marker=verify == "once")
        return store

    def _check_files(self) -> None:
        for info in self.manifest.shards:
            if self.backend == "hdf5":
                f = self.path / str(info.container)
                if not f.is_file():
                    raise StoreCorruptError(f"{f}: missing (holds shard {info.name})")
                continue
            for fname, meta in info.files.items():
                f = self.path / info.name / fname
                try:
                    size = f.stat().st_size
                except FileNotFoundError as exc:
                    raise StoreCorruptError(f"{f}: missing (listed in {MANIFEST})") from exc
                if size != int(meta["nbytes"]):
                    raise StoreCorruptError(
                        f"{f}: {size} bytes on disk, {MANIFEST} says {meta['nbytes']} "
                        "(truncated or overwritten)"
                    )

    # ----- properties --------------------------------------------------------------------
    @property
    def schema(self) -> Schema:
        return self.manifest.schema

    @property
    def backend(self) -> str:
        return self.manifest.backend

    @property
    def num_shards(self) -> int:
        return len(self.manifest.shards)

    def __len__(self) -> int:
        return int(self.shard_offsets[-1])

    @property
    def fingerprint(self) -> str:
        """Short identity of the content: sha256 over each shard's name, sample count and array
        checksums, from the manifest (nothing read). Resumable states carry it."""
        fp = self.__dict__.get("_fingerprint")
        if fp is None:
            rows = [
                [s.name, s.num_samples, sorted((k, v.get("sha256")) for k, v in s.files.items())]
                for s in self.manifest.shards
            ]
            fp = hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]
            self._fingerprint = fp
        return fp

    def __repr__(self) -> str:
        m = self.manifest
        return (
            f"GraphStore({str(self.path)!r}, backend={m.backend!r}, samples={m.num_samples}, "
            f"shards={len(m.shards)}, nodes={m.num_nodes}, edges={m.num_edges}, bytes={m.nbytes})"
        )

    # ----- indexing ----------------------------------------------------------------------
    def check_indices(self, indices: Any) -> np.ndarray:
        """int64 array of non-negative indices; negative ones wrap; out of range raises."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            bad = idx[(idx < -n) | (idx >= n)][0]
            raise SampleIndexError(f"{self.path}: index {bad} out of range for {n} samples")
        return np.where(idx < 0, idx + n, idx)

    def locate(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(shard id, index inside the shard) for already checked global indices."""
        shard = np.searchsorted(self.shard_offsets, indices, side="right") - 1
        return shard, indices - self.shard_offsets[shard]

    # ----- per-process handles -----------------------------------------------------------
    def _reset_handles(self) -> None:
        self._pid = os.getpid()
        self._arrays: OrderedDict[int, Mapping[str, Any]] = OrderedDict()
        self._ptrs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._files: dict[str, h5py.File] = {}

    def _check_pid(self) -> None:
        if self._pid != os.getpid():  # forked: never use the parent's handles
            self._inherited = (self._arrays, self._files)
            self._reset_handles()

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        for key in ("_arrays", "_ptrs", "_files", "_inherited", "_size_index"):
            state.pop(key, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_handles()

    def _h5(self, container: str) -> h5py.File:
        f = self._files.get(container)
        if f is None:
            o = self.hdf5
            f = h5py.File(
                self.path / container,
                "r",
                rdcc_nbytes=o.rdcc_nbytes,
                rdcc_w0=o.rdcc_w0,
                rdcc_nslots=o.rdcc_nslots,
            )
            self._files[container] = f
        return f

    def shard_arrays(self, k: int) -> Mapping[str, Any]:
        """Lazily opened arrays of shard k: np.memmap (npy) or h5py.Dataset (hdf5) by name."""
        self._check_pid()
        arrays = self._arrays.get(k)
        if arrays is None:
            info = self.manifest.shards[k]
            if self.backend == "npy":
                arrays = open_npy_shard(self.path, info)
                where = str(self.path / info.name)
            else:
                arrays = self._open_h5_shard(info)
                where = f"{self.path / str(info.container)}:{info.name}"
            self._check_fields(arrays, info, where)
            self._arrays[k] = arrays
        else:
            self._arrays.move_to_end(k)
        self._trim()
        return arrays

    def _trim(self) -> None:
        cap = self.max_open_shards
        while cap is not None and len(self._arrays) > max(cap, 1):
            k, _ = self._arrays.popitem(last=False)  # unmapped once the last view is gone
            self._ptrs.pop(k, None)  # re-read (a small copy) when the shard reopens

    def set_max_open_shards(self, n: int | None) -> None:
        """Cap the shards this process keeps open (None: unbounded); applies at once."""
        if n is not None and n < 1:
            raise ValueError(f"max_open_shards={n}: expected >= 1 or None")
        self.max_open_shards = n
        if getattr(self, "_pid", None) == os.getpid():
            self._trim()

    def _open_h5_shard(self, info: ShardInfo) -> dict[str, Any]:
        where = f"{self.path / str(info.container)}:{info.name}"
        try:
            group = self._h5(str(info.container))[info.name]
            arrays = {key: group[key] for key in info.files}
        except KeyError as exc:
            raise StoreCorruptError(f"{where}: group or dataset missing ({exc})") from exc
        except OSError as exc:
            raise StoreCorruptError(f"{where}: unreadable HDF5 ({exc})") from exc
        check_shard_arrays(arrays, info, where)
        return arrays

    def _check_fields(self, arrays: Mapping[str, Any], info: ShardInfo, where: str) -> None:
        rows = {"node": info.num_nodes, "edge": info.num_edges, "sample": info.num_samples}
        for spec in self.schema.fields:
            if spec.name not in arrays:
                raise StoreCorruptError(f"{where}: field {spec.name!r} missing")
            check_field_rows(
                arrays[spec.name], rows[spec.level], spec.shape, f"{where}/{spec.name}"
            )

    def shard_ptrs(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(node_ptr, edge_ptr) of shard k as int64 numpy arrays (memmapped for npy)."""
        self._check_pid()
        ptrs = self._ptrs.get(k)
        if ptrs is None:
            a = self.shard_arrays(k)  # read once into RAM: small, and pins no mapping
            ptrs = (np.array(a["node_ptr"][...]), np.array(a["edge_ptr"][...]))
            self._ptrs[k] = ptrs
        return ptrs

    def shard(self, k: int) -> tuple[Mapping[str, Any], np.ndarray, np.ndarray]:
        """(arrays, node_ptr, edge_ptr) of shard k: the `ShardSource` protocol of tj_data.gather."""
        return (self.shard_arrays(k), *self.shard_ptrs(k))

    def read_shard(self, k: int, fields: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Every array of shard k decoded into RAM (the unit of `ChunkedGraphDataset`'s cache)."""
        names = ("node_ptr", "edge_ptr", "edge_index", *self.schema.select(fields).names)
        arrays = self.shard_arrays(k)
        return {n: np.array(arrays[n][...]) for n in names}

    def close(self) -> None:
        """Close this process's open files (they reopen lazily on the next read)."""
        for f in self._files.values():
            f.close()
        self._reset_handles()

    # ----- whole-store operations --------------------------------------------------------
    def size_index(self) -> SizeIndex:
        """Nodes, edges and stored bytes of every sample (cached after the first call)."""
        cached = getattr(self, "_size_index", None)
        if cached is not None:
            return cached
        nodes, edges = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        for k in range(self.num_shards):
            node_ptr, edge_ptr = self.shard_ptrs(k)
            nodes.append(np.diff(node_ptr))
            edges.append(np.diff(edge_ptr))
        n, e = np.concatenate(nodes), np.concatenate(edges)
        s = self.schema
        nbytes = n * s.row_nbytes("node") + e * s.row_nbytes("edge") + s.row_nbytes("sample")
        self._size_index = SizeIndex(nodes=n, edges=e, nbytes=nbytes)
        return self._size_index

    def verify(
        self, *, progress: bool = False, marker: bool = False, hasher: Any = None
    ) -> VerifyReport:
        """Check every array's sha256 against the manifest; raises StoreCorruptError naming the
        file. marker=True hashes only arrays whose file changed since the last verified run
        (size, mtime_ns; `verified.json` in the store, see `tj_data.verify`)."""
        return verify_store(self, marker=marker, progress=progress, hasher=hasher)

    def update_manifest(
        self,
        *,
        statistics: Mapping[str, Any] | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Atomically replace the manifest's `statistics` and/or merge into its `metadata`."""
        if not self.manifest.complete:
            raise StoreIncompleteError(
                f"{self.path}: cannot update the manifest of an incomplete store"
            )
        if statistics is not None:
            self.manifest.statistics = dict(statistics)
        if metadata is not None:
            self.manifest.metadata.update(metadata)
        self.manifest.save(self.path / MANIFEST)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        """One sample (views into the shard arrays); datasets are the fast way to read many."""
        return gather_samples(self, self.check_indices([index]))[0]


def store_of(data: Any) -> GraphStore:
    """The GraphStore behind a dataset (or the store itself, or a path)."""
    if isinstance(data, GraphStore):
        return data
    store = getattr(data, "store", None)
    if isinstance(store, GraphStore):
        return store
    if isinstance(data, str | os.PathLike):
        return GraphStore.open(data)
    raise TypeError(
        f"expected a GraphStore, a tj-data dataset or a path, got {type(data).__name__}"
    )
