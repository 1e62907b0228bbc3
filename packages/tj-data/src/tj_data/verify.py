"""Check a store's arrays against the sha256 in its manifest, each one once.

`verify_store(store)` hashes every array. With `marker=True` the result is remembered in
`verified.json` inside the store: per array its file, size, mtime_ns and sha256 when hashed. A
later verify re-hashes only arrays whose file changed size or mtime (or whose manifest checksum
changed), so a reused store costs one `stat` per file instead of a full read. An entry is trusted
only when its file's mtime is older than the hash by `RACY_NS` (git's "racily clean" rule: a file
changed within the same timestamp tick as the hash keeps its mtime); younger entries are hashed
again next time. A truncated or unreadable marker is ignored and rewritten. HDF5: the arrays of
a container share its size and mtime, and are hashed as array bytes (as the writer recorded them).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tj_data.errors import StoreCorruptError
from tj_data.manifest import MANIFEST
from tj_data.progress import progress_iter
from tj_monitor import atomic_write_json

if TYPE_CHECKING:
    from tj_data.store import GraphStore

__all__ = ["MARKER", "RACY_NS", "VerifyReport", "verify_store"]

log = logging.getLogger(__name__)

MARKER = "verified.json"
RACY_NS = 2_000_000_000  # coarser than any filesystem's mtime tick (FAT: 2 s)
_FORMAT = "tj-data-verified"
_BLOCK = 1 << 20

Hasher = Callable[[], Any]  # a hashlib-style object factory: .update(bytes), .hexdigest()


@dataclass(kw_only=True, frozen=True)
class VerifyReport:
    """What a verify did: arrays hashed (and their bytes), arrays trusted from the marker."""

    hashed: int
    reused: int
    bytes_hashed: int


def verify_store(
    store: GraphStore, *, marker: bool = False, progress: bool = False, hasher: Hasher | None = None
) -> VerifyReport:
    """Raise `StoreCorruptError` naming the first array whose sha256 differs from the manifest.

    marker: trust and update `verified.json` (see the module docstring); False hashes all and
    leaves the marker alone. hasher: hash object factory (default hashlib.sha256)."""
    new_hash = hasher or hashlib.sha256
    known = _read_marker(store.path) if marker else {}
    entries: dict[str, dict[str, Any]] = {}
    hashed = reused = nbytes = 0
    for k, info in enumerate(progress_iter(store.manifest.shards, "verify", enabled=progress)):
        for fname, meta in info.files.items():
            if store.backend == "npy":
                key, file = f"{info.name}/{fname}", store.path / info.name / fname
            else:
                key = f"{info.container}:{info.name}/{fname}"
                file = store.path / str(info.container)
            st = file.stat()
            old = known.get(key)
            if old is not None and _trusted(old, st, meta["sha256"]):
                entries[key] = old
                reused += 1
                continue
            hashed_ns = time.time_ns()
            if store.backend == "npy":
                got, n = _hash_file(file, new_hash())
            else:
                arr = np.ascontiguousarray(store.shard_arrays(k)[fname][...])
                h = new_hash()
                h.update(arr.data)
                got, n = h.hexdigest(), arr.nbytes
            hashed, nbytes = hashed + 1, nbytes + n
            if got != meta["sha256"]:
                where = file if store.backend == "npy" else f"{file}:{info.name}/{fname}"
                raise StoreCorruptError(
                    f"{where}: sha256 {got[:16]}..., {MANIFEST} says {meta['sha256'][:16]}... "
                    "(the file changed or is corrupt: record the data again)"
                )
            entries[key] = {
                "size": st.st_size,
                "mtime_ns": st.st_mtime_ns,
                "sha256": got,
                "hashed_ns": hashed_ns,
            }
    if marker and (hashed or set(entries) != set(known)):
        _write_marker(store.path, entries)
    return VerifyReport(hashed=hashed, reused=reused, bytes_hashed=nbytes)


def _trusted(entry: dict[str, Any], st: os.stat_result, expected: str) -> bool:
    try:
        return (
            entry["size"] == st.st_size
            and entry["mtime_ns"] == st.st_mtime_ns
            and entry["sha256"] == expected
            and entry["mtime_ns"] < entry["hashed_ns"] - RACY_NS
        )
    except (KeyError, TypeError):
        return False


def _hash_file(path: Path, h: Any) -> tuple[str, int]:
    n = 0
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
            n += len(block)
    return h.hexdigest(), n


def _read_marker(root: Path) -> dict[str, dict[str, Any]]:
    """The marker's entries; {} when it is missing, truncated or not ours (then rewritten)."""
    try:
        data = json.loads((root / MARKER).read_text())
        if data.get("format") == _FORMAT and isinstance(data.get("files"), dict):
            return {k: v for k, v in data["files"].items() if isinstance(v, dict)}
        log.warning("%s: not a tj-data verify marker; hashing every array", root / MARKER)
    except FileNotFoundError:
        pass
    except (OSError, ValueError, AttributeError) as exc:
        log.warning("%s: unreadable (%s); hashing every array", root / MARKER, exc)
    return {}


def _write_marker(root: Path, entries: dict[str, dict[str, Any]]) -> None:
    try:
        atomic_write_json(root / MARKER, {"format": _FORMAT, "version": 1, "files": entries})
    except OSError as exc:  # a read-only dataset still verifies, just not once
        log.warning(
            "%s: cannot write the verify marker (%s); the next verify hashes again", root, exc
        )
