"""The synthetic store of the data and loader suites (``tj_data.synthetic.write_synthetic``) and
what the data suite measures around it: bytes on disk and a warm page cache.

Also runnable as a script (``python _data_store.py PATH SIZE_GB SHARD_SIZE``), so the loader
suite can generate its store in a child process: the measuring process then holds what a
trainer's would, not the generator's leftovers. Imports tj_data only (no torch, no tj_bench).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tj_data.synthetic import write_synthetic

__all__ = ["dir_bytes", "warm_page_cache"]


def dir_bytes(d: Path) -> int:
    """Bytes of the files under ``d``."""
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


def warm_page_cache(*dirs: Path) -> int:
    """Read every file under ``dirs`` once (the read benchmarks assume a warm page cache)."""
    total = 0
    for d in dirs:
        for p in d.rglob("*"):
            if p.is_file():
                with open(p, "rb") as f:
                    while chunk := f.read(16 << 20):
                        total += len(chunk)
    return total


def main(argv: list[str] | Any = None) -> None:
    path, size_gb, shard_size = (argv if argv is not None else sys.argv[1:])[:3]
    write_synthetic({"npy": Path(path)}, size_gb=float(size_gb), shard_size=int(shard_size))


if __name__ == "__main__":
    main()
