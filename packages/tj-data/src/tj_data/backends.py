"""Storage backends: how one shard's CSR arrays are written and opened.

npy: one folder per shard, one ``<array>.npy`` per array, written into a temp folder, fsynced and
renamed (atomic). Opened with ``np.load(mmap_mode="r")``: pages are shared by every process.
hdf5: one file per writer session, one group per shard, chunked datasets with optional lzf/gzip.
The file is written under a temp name and renamed on close, so a killed writer never leaves a
half-written HDF5 file that a manifest points to. Both go through tj-monitor's `AtomicPath`
(temp entries ``.tmp-<name>-<pid>-*``, removed by the next writer once their writer is dead).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import h5py
import numpy as np

from tj_data._fs import HashingWriter
from tj_data.errors import StoreCorruptError
from tj_data.manifest import ShardInfo
from tj_monitor import AtomicPath

__all__ = ["HDF5Options", "HDF5ReadOptions", "HDF5ShardWriter", "NpyShardWriter", "open_npy_shard"]

PTRS = ("node_ptr", "edge_ptr")


@dataclass(kw_only=True, frozen=True)
class HDF5Options:
    """HDF5 write options: compression (None | "lzf" | "gzip"), gzip level, shuffle filter and
    target chunk size in bytes (chunks span rows; small chunks keep random reads cheap)."""

    compression: Literal["lzf", "gzip"] | None = None
    compression_opts: int | None = None
    shuffle: bool = False
    chunk_bytes: int = 64 * 1024

    def __post_init__(self) -> None:
        if self.compression not in (None, "lzf", "gzip"):
            raise ValueError(
                f"HDF5Options.compression={self.compression!r}: expected None, 'lzf' or 'gzip'"
            )
        if self.compression_opts is not None and self.compression != "gzip":
            raise ValueError("HDF5Options.compression_opts is only valid with compression='gzip'")
        if self.compression_opts is not None and not 0 <= self.compression_opts <= 9:
            raise ValueError(f"HDF5Options.compression_opts={self.compression_opts}: expected 0..9")
        if self.chunk_bytes < 1024:
            raise ValueError(f"HDF5Options.chunk_bytes={self.chunk_bytes}: expected >= 1024")


@dataclass(kw_only=True, frozen=True)
class HDF5ReadOptions:
    """HDF5 raw-data chunk cache per open file (h5py's rdcc_* arguments)."""

    rdcc_nbytes: int = 4 * 1024 * 1024
    rdcc_w0: float = 0.75
    rdcc_nslots: int = 10007

    def __post_init__(self) -> None:
        if self.rdcc_nbytes < 0 or self.rdcc_nslots < 1 or not 0.0 <= self.rdcc_w0 <= 1.0:
            raise ValueError(
                f"HDF5ReadOptions: need rdcc_nbytes >= 0, rdcc_nslots >= 1, 0 <= rdcc_w0 <= 1; got {self}"
            )


def _array_sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).data).hexdigest()


class NpyShardWriter:
    """Writes shard folders of .npy files atomically (temp folder + fsync + rename)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def write(
        self, name: str, arrays: Mapping[str, np.ndarray], counts: tuple[int, int, int]
    ) -> ShardInfo:
        files: dict[str, dict[str, Any]] = {}
        # a folder already at the final name was left by an interrupted writer and is never
        # referenced by a manifest: publishing replaces it
        with AtomicPath(self.root / name) as tmp:
            tmp.mkdir()
            for key, arr in arrays.items():
                with open(tmp / f"{key}.npy", "wb") as f:
                    hw = HashingWriter(f)
                    np.save(hw, np.ascontiguousarray(arr), allow_pickle=False)
                files[f"{key}.npy"] = {"sha256": hw.hexdigest(), "nbytes": hw.nbytes}
        s, n, e = counts
        return ShardInfo(name=name, num_samples=s, num_nodes=n, num_edges=e, files=files)

    def close(self) -> None:
        """Nothing to finalise: every shard is durable once written."""

    def abort(self) -> None:
        """Nothing to remove: a shard whose write failed removed its temp folder already."""


class HDF5ShardWriter:
    """Writes shards as groups of one HDF5 file, renamed into place on `close()`."""

    def __init__(self, root: Path, container: str, options: HDF5Options) -> None:
        self.root, self.container, self.options = root, container, options
        self._out: AtomicPath | None = None  # the file stays open from the first shard to close()
        self._file: h5py.File | None = None

    def _open(self) -> h5py.File:
        if self._file is None:
            self._out = AtomicPath(self.root / self.container)
            self._file = h5py.File(self._out.tmp, "w", libver="latest")
        return self._file

    def write(
        self, name: str, arrays: Mapping[str, np.ndarray], counts: tuple[int, int, int]
    ) -> ShardInfo:
        g = self._open().create_group(name)
        files: dict[str, dict[str, Any]] = {}
        opt = self.options
        for key, arr in arrays.items():
            arr = np.ascontiguousarray(arr)
            kwargs: dict[str, Any] = {}
            if arr.size and key not in PTRS:
                row_axis = 1 if key == "edge_index" else 0
                row_bytes = max(1, arr.nbytes // max(1, arr.shape[row_axis]))
                rows = int(min(arr.shape[row_axis], max(1, opt.chunk_bytes // row_bytes)))
                chunks = list(arr.shape)
                chunks[row_axis] = rows
                kwargs = {
                    "chunks": tuple(chunks),
                    "compression": opt.compression,
                    "compression_opts": opt.compression_opts,
                    "shuffle": opt.shuffle,
                }
            g.create_dataset(key, data=arr, **kwargs)
            files[key] = {"sha256": _array_sha256(arr), "nbytes": int(arr.nbytes)}
        s, n, e = counts
        return ShardInfo(
            name=name,
            num_samples=s,
            num_nodes=n,
            num_edges=e,
            files=files,
            container=self.container,
        )

    def close(self) -> None:
        """Close, fsync and rename the file into place (before the manifest is written)."""
        if self._file is None or self._out is None:
            return
        self._file.close()
        self._file = None
        self._out.publish()
        self._out = None

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._out is not None:
            self._out.discard()
            self._out = None


def open_npy_shard(root: Path, info: ShardInfo) -> dict[str, np.ndarray]:
    """Memory-map every array of a shard folder, checking shapes against the manifest."""
    out: dict[str, np.ndarray] = {}
    for fname in info.files:
        path = root / info.name / fname
        try:
            # plain ndarray views of the memmap: cheaper slicing, the map stays alive through .base
            out[fname.removesuffix(".npy")] = np.asarray(
                np.load(path, mmap_mode="r", allow_pickle=False)
            )
        except FileNotFoundError as exc:
            raise StoreCorruptError(f"{path}: missing (listed in the manifest)") from exc
        except (ValueError, OSError) as exc:
            raise StoreCorruptError(f"{path}: unreadable or truncated .npy ({exc})") from exc
    check_shard_arrays(out, info, str(root / info.name))
    return out


def check_shard_arrays(arrays: Mapping[str, Any], info: ShardInfo, where: str) -> None:
    """Row counts of every array against the manifest's counts (cheap: shapes and 2 ptr ends)."""
    s, n, e = info.num_samples, info.num_nodes, info.num_edges
    for key in PTRS:
        if key not in arrays:
            raise StoreCorruptError(f"{where}: array {key!r} missing")
        if arrays[key].shape != (s + 1,):
            raise StoreCorruptError(
                f"{where}/{key}: shape {arrays[key].shape}, expected ({s + 1},) for {s} samples"
            )
    node_ptr, edge_ptr = arrays["node_ptr"], arrays["edge_ptr"]
    if (
        int(node_ptr[0]) != 0
        or int(node_ptr[-1]) != n
        or int(edge_ptr[0]) != 0
        or int(edge_ptr[-1]) != e
    ):
        raise StoreCorruptError(
            f"{where}: node_ptr/edge_ptr ends ({int(node_ptr[-1])}, {int(edge_ptr[-1])}) do not "
            f"match the manifest's {n} nodes and {e} edges"
        )
    ei = arrays.get("edge_index")
    if ei is None or tuple(ei.shape) != (2, e):
        raise StoreCorruptError(
            f"{where}/edge_index: shape {None if ei is None else tuple(ei.shape)}, expected (2, {e})"
        )


def check_field_rows(arr: Any, rows: int, trailing: tuple[int, ...], where: str) -> None:
    if tuple(arr.shape) != (rows, *trailing):
        raise StoreCorruptError(
            f"{where}: shape {tuple(arr.shape)}, expected {(rows, *trailing)} from the manifest"
        )
