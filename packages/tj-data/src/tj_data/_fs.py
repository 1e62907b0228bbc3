"""sha256 helpers: a whole file, and bytes hashed on their way to disk.

Atomic writes (temp, fsync, rename) are tj-monitor's (`tj_monitor.atomic`), not repeated here.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import BinaryIO

__all__ = ["HashingWriter", "sha256_file"]

_BLOCK = 1 << 20


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
