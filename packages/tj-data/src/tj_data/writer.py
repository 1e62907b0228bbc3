"""`GraphStoreWriter`: appends samples to a graph store, shard by shard, crash-safely.

Order of durable writes: shard (temp + fsync + rename) -> `manifest.partial.json` checkpoint
(npy backend) -> ... -> on `close()`, `manifest.json` (atomic rename, written last). A killed
writer therefore leaves either the previous `manifest.json` (append mode: the previous state) or no
`manifest.json` at all, which `GraphStore.open` reports as `StoreIncompleteError`.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np

from tj_data.backends import HDF5Options, HDF5ShardWriter, NpyShardWriter
from tj_data.errors import SchemaMismatchError, StoreError
from tj_data.manifest import MANIFEST, PARTIAL_MANIFEST, Manifest
from tj_data.schema import EDGE_INDEX, Schema, cast_field

__all__ = ["GraphStoreWriter"]

log = logging.getLogger(__name__)
LOCK = ".writer.lock"


def _check_json(obj: Any, what: str) -> dict[str, Any]:
    try:
        json.dumps(obj)
    except (TypeError, ValueError) as exc:
        raise SchemaMismatchError(f"{what} must be JSON-serialisable: {exc}") from exc
    return dict(obj)


class GraphStoreWriter:
    """Write a graph store at `path` (see the package README for a full example).

    Args:
        path: store directory (created if missing).
        schema: field specs; in mode "a" it may be None (use the store's) or must equal it.
        shard_size: samples per shard (the unit of atomic commit and of chunked caching).
        backend: "npy" (a folder of .npy files per shard) or "hdf5" (a group per shard).
        metadata: free-form JSON metadata stored in the manifest (update `writer.metadata` freely).
        mode: "w" creates a new store; "a" appends to (or resumes) an existing one.
        overwrite: in mode "w", delete an existing store at `path` first.
        hdf5: compression and chunking of the HDF5 backend.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: Schema | None,
        *,
        shard_size: int = 4096,
        backend: Literal["npy", "hdf5"] = "npy",
        metadata: Mapping[str, Any] | None = None,
        mode: Literal["w", "a"] = "w",
        overwrite: bool = False,
        hdf5: HDF5Options | None = None,
    ) -> None:
        if shard_size < 1:
            raise ValueError(f"shard_size={shard_size}: expected >= 1")
        if backend not in ("npy", "hdf5"):
            raise ValueError(f"backend={backend!r}: expected 'npy' or 'hdf5'")
        if mode not in ("w", "a"):
            raise ValueError(f"mode={mode!r}: expected 'w' or 'a'")
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_fd = self._take_lock()
        try:
            base = self._prepare(schema, backend, mode, overwrite)
        except BaseException:
            self._release_lock()
            raise
        self.schema = base.schema
        self.shard_size = shard_size
        self.metadata: dict[str, Any] = {**base.metadata, **_check_json(metadata or {}, "metadata")}
        self._manifest = base
        self._episode_ends = list(base.episode_ends)
        self._committed = base.num_samples
        self._closed = False
        self._reset_buffer()
        if backend == "npy":
            self._shards: NpyShardWriter | HDF5ShardWriter = NpyShardWriter(self.path)
        else:
            containers = {s.container for s in base.shards}
            self._shards = HDF5ShardWriter(
                self.path, f"data-{len(containers):05d}.h5", hdf5 or HDF5Options()
            )

    # ----- setup ----------------------------------------------------------------------
    def _take_lock(self) -> int:
        fd = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as exc:
            os.close(fd)
            raise StoreError(f"{self.path}: another GraphStoreWriter holds {LOCK}") from exc
        return fd

    def _release_lock(self) -> None:
        if self._lock_fd >= 0:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _prepare(self, schema: Schema | None, backend: str, mode: str, overwrite: bool) -> Manifest:
        existing = [p for p in self.path.iterdir() if p.name != LOCK]
        if mode == "w":
            if existing and not overwrite:
                raise StoreError(
                    f"{self.path}: not empty ({len(existing)} entries); use overwrite=True to replace "
                    "it or mode='a' to append"
                )
            for name in (
                MANIFEST,
                PARTIAL_MANIFEST,
            ):  # unpublish first: a crash now is "incomplete"
                (self.path / name).unlink(missing_ok=True)
            for p in existing:
                shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
            if schema is None:
                raise SchemaMismatchError("mode='w' needs a schema")
            return Manifest(backend=backend, schema=schema, complete=False)
        full, partial = self.path / MANIFEST, self.path / PARTIAL_MANIFEST
        if full.exists():
            base = Manifest.load(full)
            partial.unlink(missing_ok=True)  # an interrupted append: restart from the last commit
        elif partial.exists():
            base = Manifest.load(partial)
            log.info("%s: resuming an interrupted write at %d samples", self.path, base.num_samples)
        elif not existing:
            if schema is None:
                raise SchemaMismatchError("mode='a' on an empty directory needs a schema")
            return Manifest(backend=backend, schema=schema, complete=False)
        else:
            raise StoreError(
                f"{self.path}: has files but no manifest (an interrupted writer that left no "
                "checkpoint); cannot append: start over with mode='w', overwrite=True"
            )
        if base.backend != backend:
            raise SchemaMismatchError(
                f"{self.path}: store backend is {base.backend!r}, writer asked {backend!r}"
            )
        if schema is not None:
            base.schema.check_same(schema, f"{self.path}/{MANIFEST}")
        base.complete = False
        return base

    def _reset_buffer(self) -> None:
        self._buf: dict[str, list[np.ndarray]] = {n: [] for n in (*self.schema.names, EDGE_INDEX)}
        self._buf_nodes: list[np.ndarray] = []
        self._buf_edges: list[np.ndarray] = []
        self._buffered = 0

    # ----- public API -------------------------------------------------------------------
    @property
    def num_samples(self) -> int:
        """Samples appended so far, committed or buffered (including the store's previous ones)."""
        return self._committed + self._buffered

    def append(self, sample: Mapping[str, Any]) -> int:
        """Validate and buffer one sample; returns its global index."""
        self._check_open()
        arrays, n, e = self.schema.validate_sample(sample, where=f"sample {self.num_samples}")
        for spec in self.schema.at_level("sample"):
            arrays[spec.name] = arrays[spec.name][None]
        self._add(arrays, np.array([n], np.int64), np.array([e], np.int64))
        return self.num_samples - 1

    def append_many(self, samples: Iterable[Mapping[str, Any]]) -> int:
        """Append every sample of an iterable; returns how many were appended."""
        count = 0
        for sample in samples:
            self.append(sample)
            count += 1
        return count

    def append_block(
        self, arrays: Mapping[str, np.ndarray], num_nodes: np.ndarray, num_edges: np.ndarray
    ) -> int:
        """Append many samples given column-wise (CSR): node fields [sum(num_nodes), ...], edge
        fields and `edge_index` (local ids) [.., sum(num_edges)], sample fields [len, ...]."""
        self._check_open()
        nn = np.asarray(num_nodes, np.int64)
        ne = np.asarray(num_edges, np.int64)
        where = f"block at sample {self.num_samples}"
        if nn.ndim != 1 or nn.shape != ne.shape or (nn.size and min(nn.min(), ne.min()) < 0):
            raise SchemaMismatchError(
                f"{where}: num_nodes/num_edges must be equal-length non-negative 1-D"
            )
        s, n_tot, e_tot = len(nn), int(nn.sum()), int(ne.sum())
        keys = set(arrays)
        expected = set(self.schema.names) | {EDGE_INDEX}
        if keys != expected:
            raise SchemaMismatchError(
                f"{where}: fields {sorted(keys)} do not match the schema {sorted(expected)}"
            )
        out: dict[str, np.ndarray] = {}
        ei = np.asarray(arrays[EDGE_INDEX])
        if ei.shape != (2, e_tot) or (ei.size and ei.dtype.kind not in "iu"):
            raise SchemaMismatchError(
                f"{where}: edge_index shape {ei.shape}, expected integers (2, {e_tot})"
            )
        if e_tot:
            limit = np.repeat(nn, ne)
            if ei.min() < 0 or (ei >= limit).any():
                raise SchemaMismatchError(
                    f"{where}: edge_index has ids outside [0, num_nodes) of their sample"
                )
        out[EDGE_INDEX] = ei.astype(np.int32, copy=False)
        rows = {"node": n_tot, "edge": e_tot, "sample": s}
        for spec in self.schema.fields:
            arr = np.asarray(arrays[spec.name])
            want = (rows[spec.level], *spec.shape)
            if arr.shape != want:
                raise SchemaMismatchError(
                    f"{where}: field {spec.name!r} shape {arr.shape}, expected {want}"
                )
            out[spec.name] = cast_field(arr, spec, where)
        self._add(out, nn, ne)
        return s

    def end_episode(self) -> bool:
        """Mark the samples appended since the last call as one episode.

        Returns False (and records nothing) when no sample was appended since the last end."""
        self._check_open()
        last = self._episode_ends[-1] if self._episode_ends else 0
        if self.num_samples == last:
            return False
        self._episode_ends.append(self.num_samples)
        return True

    def close(self) -> Path:
        """Flush the last shard, end the open episode and publish `manifest.json`."""
        if self._closed:
            return self.path
        try:
            if self._buffered:
                self._flush()
            self.end_episode()
            self._shards.close()
            m = self._manifest
            m.episode_ends = list(self._episode_ends)
            m.metadata = _check_json(self.metadata, "metadata")
            m.complete = True
            m.save(self.path / MANIFEST)
            (self.path / PARTIAL_MANIFEST).unlink(missing_ok=True)
        finally:
            self._closed = True
            self._release_lock()
        log.info("%s: %d samples in %d shards", self.path, m.num_samples, len(m.shards))
        return self.path

    def abort(self) -> None:
        """Drop buffered samples and release the store; nothing after the last commit is published."""
        if self._closed:
            return
        self._shards.abort()
        self._closed = True
        self._release_lock()

    def __enter__(self) -> GraphStoreWriter:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is None:
            self.close()
        else:
            self.abort()

    def __del__(self) -> None:
        if getattr(self, "_lock_fd", -1) >= 0:
            if not self._closed:
                log.warning(
                    "%s: GraphStoreWriter dropped without close(): nothing after the last "
                    "commit is published",
                    self.path,
                )
            self._release_lock()

    # ----- internals -------------------------------------------------------------------
    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"{self.path}: writer is closed")

    def _add(self, arrays: dict[str, np.ndarray], nn: np.ndarray, ne: np.ndarray) -> None:
        node_off = np.concatenate([[0], np.cumsum(nn)])
        edge_off = np.concatenate([[0], np.cumsum(ne)])
        start, total = 0, len(nn)
        while start < total:
            take = min(total - start, self.shard_size - self._buffered)
            stop = start + take
            n0, n1, e0, e1 = node_off[start], node_off[stop], edge_off[start], edge_off[stop]
            for spec in self.schema.fields:
                a, b = {"node": (n0, n1), "edge": (e0, e1), "sample": (start, stop)}[spec.level]
                self._buf[spec.name].append(arrays[spec.name][a:b])
            self._buf[EDGE_INDEX].append(arrays[EDGE_INDEX][:, e0:e1])
            self._buf_nodes.append(nn[start:stop])
            self._buf_edges.append(ne[start:stop])
            self._buffered += take
            start = stop
            if self._buffered >= self.shard_size:
                self._flush()

    def _flush(self) -> None:
        nn = np.concatenate(self._buf_nodes)
        ne = np.concatenate(self._buf_edges)
        arrays: dict[str, np.ndarray] = {
            "node_ptr": np.concatenate([[0], np.cumsum(nn)]).astype(np.int64),
            "edge_ptr": np.concatenate([[0], np.cumsum(ne)]).astype(np.int64),
            EDGE_INDEX: np.concatenate(self._buf[EDGE_INDEX], axis=1),
        }
        for spec in self.schema.fields:
            arrays[spec.name] = np.concatenate(self._buf[spec.name], axis=0)
        m = self._manifest
        info = self._shards.write(
            f"shard-{len(m.shards):05d}", arrays, (len(nn), int(nn.sum()), int(ne.sum()))
        )
        m.shards.append(info)
        self._committed += len(nn)
        self._reset_buffer()
        if isinstance(self._shards, NpyShardWriter):  # checkpoint: resumable, reported incomplete
            m.episode_ends = [v for v in self._episode_ends if v <= self._committed]
            m.metadata = _check_json(self.metadata, "metadata")
            m.save(self.path / PARTIAL_MANIFEST)
