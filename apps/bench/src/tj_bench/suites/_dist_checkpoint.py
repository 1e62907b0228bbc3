"""What tj-dist's crash-safe checkpoints cost against the plain alternatives, one round at a time.

Save: ``save_checkpoint`` (temp file, sha256 while writing, fsync, rename, marker) against a plain
``torch.save`` to the final name (not crash-safe) and a ``torch.save`` + fsync (durable, not
atomic: what a careful script does). Load: ``load_latest`` (size and sha256 check, then
``torch.load(weights_only=True)``) against a plain ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

__all__ = ["SAVES", "checkpoint_round", "make_state"]

SAVES = ("plain", "fsync", "atomic")


def make_state(mib: int) -> dict[str, Any]:
    """About ``mib`` MiB of float32 in 8 tensors (like a model + optimizer state, not one blob)."""
    import torch

    numel = mib * 2**20 // 4
    return {f"t{i}": torch.randn(numel // 8) for i in range(8)} | {"step": 1}


def _save(kind: str, directory: Path, state: dict[str, Any]) -> None:
    import torch

    import tj_dist

    if kind == "plain":
        torch.save(state, directory / "ckpt.pt")
    elif kind == "fsync":
        with open(directory / "ckpt.pt", "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
    else:
        tj_dist.save_checkpoint(directory, state, step=1)


def _load(kind: str, directory: Path) -> None:
    import torch

    import tj_dist

    if kind == "plain":
        torch.load(directory / "ckpt.pt", weights_only=True)
    elif tj_dist.load_latest(directory) is None:
        raise RuntimeError(f"load_latest found no checkpoint in {directory}")


def checkpoint_round(state: dict[str, Any], root: Path, rep: int) -> dict[str, float]:
    """One interleaved round: seconds for ``save/<kind>`` and ``load/plain``, ``load/verified``.

    The order flips on odd rounds, so no variant always writes to a warmer disk; both loads read
    a just-written, page-cached file (``os.sync`` first): the same footing.
    """
    dirs = {kind: root / f"{kind}-{rep}" for kind in SAVES}
    dirs["plain"].mkdir(parents=True)
    dirs["fsync"].mkdir(parents=True)  # save_checkpoint makes its own directory
    order = list(SAVES) if rep % 2 == 0 else list(reversed(SAVES))
    out: dict[str, float] = {}
    try:
        for kind in order:
            t0 = time.perf_counter()
            _save(kind, dirs[kind], state)
            out[f"save/{kind}"] = time.perf_counter() - t0
        os.sync()
        for kind in order:
            if kind == "fsync":
                continue
            t0 = time.perf_counter()
            _load(kind, dirs[kind])
            out["load/plain" if kind == "plain" else "load/verified"] = time.perf_counter() - t0
    finally:
        for directory in dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    return out
