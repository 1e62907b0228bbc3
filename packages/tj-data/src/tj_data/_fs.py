"""Atomic file writes (temp file in the target directory, fsync, rename) and sha256 helpers."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO

__all__ = ["HashingWriter", "atomic_write_json", "fsync_dir", "sha256_file"]

_BLOCK = 1 << 20


def fsync_dir(path: Path) -> None:
    """Make a rename or create inside `path` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_json(path: Path, obj: Any) -> None:
    """Write JSON to `path` atomically: readers see the old file or the new one, never half."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = json.dumps(obj, indent=1, sort_keys=False).encode()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            h.update(block)
    return h.hexdigest()


class HashingWriter:
    """File-like wrapper that hashes what is written (so np.save needs no read-back)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
        self._h = hashlib.sha256()
        self.nbytes = 0

    def write(self, data: bytes | memoryview) -> int:
        self._h.update(data)
        self.nbytes += len(data)
        return self._f.write(data)

    def hexdigest(self) -> str:
        return self._h.hexdigest()
