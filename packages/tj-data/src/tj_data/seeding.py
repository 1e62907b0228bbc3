"""Seeds per (seed, rank, epoch, worker): random streams that differ across DataLoader workers,
ranks and epochs, and repeat exactly for the same seed.

torch seeds each worker from a base seed drawn in the main process, which is the same on every
DDP rank when the ranks seed alike, and persistent workers never see a new epoch. `SeedContext`
fixes both: it carries the rank and an epoch counter in a one-element shared-memory tensor, so
`set_epoch` in the main process reaches workers started by fork or spawn (persistent or not).
`SeedContext.rng()` gives a fresh numpy Generator per call keyed by (seed, rank, epoch, worker,
stream, call count in this process and epoch): deterministic because DataLoader hands batches
to workers in a fixed round-robin order. `WorkerInit` is the `worker_init_fn` that applies them
(the loader's workers and the one `worker_baseline` measures run the same init).
"""

from __future__ import annotations

import gc
import os
import random
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import get_worker_info

__all__ = ["SeedContext", "WorkerInit", "derive_seed", "seed_globals", "worker_id"]


def worker_id() -> int:
    """DataLoader worker id in a worker process, -1 in the main process."""
    info = get_worker_info()
    return -1 if info is None else int(info.id)


def derive_seed(*parts: int) -> int:
    """A 63-bit seed mixed from integers (numpy's SeedSequence: well spread, reproducible)."""
    ss = np.random.SeedSequence([int(p) & 0xFFFFFFFFFFFFFFFF for p in parts])
    return int(ss.generate_state(1, np.uint64)[0]) >> 1


def seed_globals(seed: int) -> None:
    """Seed Python's `random`, numpy's global RNG and torch's CPU RNG."""
    random.seed(seed)
    np.random.seed(seed % (1 << 32))
    torch.manual_seed(seed)


class SeedContext:
    """Seed, rank and a shared epoch; see the module docstring.

    `set_rank` must be called before workers start (build_loader does it); `set_epoch` may be
    called at any time in the main process and is seen by running workers."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = int(seed)
        self.rank = 0
        self._epoch = torch.zeros(1, dtype=torch.int64).share_memory_()
        self._key: tuple[int, int] | None = None
        self._count = 0

    @property
    def epoch(self) -> int:
        return int(self._epoch[0])

    def set_epoch(self, epoch: int) -> None:
        self._epoch[0] = int(epoch)

    def set_rank(self, rank: int) -> None:
        self.rank = int(rank)

    def rng(self, stream: int = 0) -> np.random.Generator:
        """The next generator of this process and epoch (worker-, rank- and epoch-specific)."""
        epoch = self.epoch
        key = (os.getpid(), epoch)
        if key != self._key:  # a new process (worker) or a new epoch restarts the count
            self._key, self._count = key, 0
        parts = [self.seed & 0xFFFFFFFF, self.rank, epoch, worker_id() + 1, stream, self._count]
        self._count += 1
        return np.random.default_rng(parts)

    def worker_seed(self, worker: int) -> int:
        """Seed of the global RNGs of `worker` in the current epoch."""
        return derive_seed(self.seed, self.rank, self.epoch, worker + 1)

    def __getstate__(self) -> dict[str, Any]:
        return {"seed": self.seed, "rank": self.rank, "_epoch": self._epoch}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._key, self._count = None, 0

    def __repr__(self) -> str:
        return f"SeedContext(seed={self.seed}, rank={self.rank}, epoch={self.epoch})"


class WorkerInit:
    """`worker_init_fn`: gc.freeze (a forked worker's garbage collector then never walks, and so
    never copies, the objects inherited from the parent), then seed the global RNGs for (seed,
    rank, epoch, worker), then the user's own init."""

    def __init__(
        self,
        *,
        seed: int,
        rank: int,
        seeds: SeedContext | None,
        user_fn: Callable[[int], None] | None = None,
    ) -> None:
        self.seed, self.rank, self.seeds, self.user_fn = seed, rank, seeds, user_fn

    def __call__(self, wid: int) -> None:
        gc.freeze()
        epoch = self.seeds.epoch if self.seeds is not None else 0
        seed_globals(derive_seed(self.seed, self.rank, epoch, wid + 1))
        if self.user_fn is not None:
            self.user_fn(wid)
