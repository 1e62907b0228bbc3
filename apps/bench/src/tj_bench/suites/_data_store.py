"""Synthetic stores for the data and loader suites: ``tj_data.synthetic`` blocks written until the
stored arrays reach a size in GB (1e9 bytes), into one or more backends (same samples in each).

Also runnable as a script (``python _data_store.py PATH SIZE_GB SHARD_SIZE``), so the loader
suite can generate its store in a child process: the measuring process then holds what a
trainer's would, not the generator's leftovers. Imports tj_data only (no torch, no tj_bench).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tj_data import GraphStoreWriter, HDF5Options
from tj_data.synthetic import BLOCK, SCHEMA, make_block

__all__ = ["dir_bytes", "stored_bytes", "warm_page_cache", "write_stores"]

Block = tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]


def stored_bytes(block: Block) -> int:
    """Bytes a block takes in a store (``edge_index`` is stored as int32, generated as int64)."""
    arrays = block[0]
    return sum(v.nbytes for v in arrays.values()) - arrays["edge_index"].nbytes // 2


def write_stores(
    paths: Mapping[str, Path],
    size_gb: float,
    shard_size: int,
    *,
    seed: int = 0,
    progress: Callable[[Iterable[int], str], Iterable[int]] | None = None,
) -> int:
    """Write the same samples into a store per ``{backend: path}`` ("npy", "hdf5"): blocks of
    ``BLOCK`` samples until the stored arrays reach ``size_gb`` (below one block's size: one
    block of about ``size_gb``, as many samples as the mean size gives); returns the samples."""
    if size_gb <= 0:
        raise ValueError(f"size_gb: must be > 0, got {size_gb}")
    target = size_gb * 1e9
    rng = np.random.default_rng(seed)
    first = make_block(rng, BLOCK, 0)
    per_block = stored_bytes(first)
    block, n_blocks = BLOCK, max(1, math.ceil(target / per_block))
    if target < per_block:  # a few MB: one block of the samples needed
        block = max(1, math.ceil(BLOCK * target / per_block))
        rng = np.random.default_rng(seed)
        first = make_block(rng, block, 0)
    writers = {
        b: GraphStoreWriter(
            p,
            SCHEMA,
            shard_size=shard_size,
            backend=b,
            overwrite=True,
            hdf5=HDF5Options() if b == "hdf5" else None,
        )
        for b, p in paths.items()
    }
    steps: Iterable[int] = range(n_blocks)
    if progress is not None:
        steps = progress(steps, f"generate {size_gb} GB x {len(writers)} backend(s)")
    try:
        for b in steps:
            arrays = first if b == 0 else make_block(rng, block, b * block)
            for w in writers.values():
                w.append_block(*arrays)
    finally:
        for w in writers.values():
            w.close()
    return block * n_blocks


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
    write_stores({"npy": Path(path)}, float(size_gb), int(shard_size))


if __name__ == "__main__":
    main()
