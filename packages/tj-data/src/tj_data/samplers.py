"""Rank-aware, resumable samplers that keep reads inside a few shards.

`DistributedChunkSampler` replaces torch's DistributedSampler for sharded stores: the global
order is `chunk_shuffle_order` (random shard order, samples shuffled within a window of shards),
each rank takes a contiguous, equal-length part (padded or dropped), so every rank reads its own
few shards at a time. `ChunkShuffleSampler` is the single-process case. Resumable state:
`tj_data.state` ("consumed" counts indices); the next `__iter__` after a load resumes exactly
where the state was taken. Under a DataLoader, save `PlannedLoader.state_dict()` instead: the
sampler runs ahead of the training step by the prefetched batches, the loader does not.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from tj_data.order import chunk_shuffle_order, dist_rank_world, split_even
from tj_data.state import SamplerPosition
from tj_data.store import store_of

__all__ = [
    "ChunkShuffleSampler",
    "DistributedChunkSampler",
    "chunk_layout",
    "data_fingerprint",
    "order_identity",
]

_BLOCK = 4096


def chunk_layout(data: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """(item permutation or None, chunk offsets): items grouped by chunk. A store's samples are
    already grouped by shard; a `WindowDataset` groups windows by their first sample's shard."""
    fn = getattr(data, "chunk_layout", None)
    if callable(fn):
        perm, offsets = fn()
        return np.asarray(perm, np.int64), np.asarray(offsets, np.int64)
    return None, store_of(data).shard_offsets.copy()


def order_identity(s: Any) -> dict[str, Any]:
    """The settings a chunk-ordered sampler's position depends on (its state's identity)."""
    return {
        "dataset": s.fingerprint,
        "num_samples": int(s.shard_offsets[-1]),
        "seed": s.seed,
        "rank": s.rank,
        "world_size": s.num_replicas,
        "shuffle": s.shuffle,
        "window_shards": s.window_shards,
        "drop_last": s.drop_last,
    }


def data_fingerprint(data: Any) -> str:
    """Identity of what a sampler indexes (a store's shard checksums; a `WindowDataset` adds its
    window settings): a saved position is refused on other data with the same length."""
    fp = getattr(data, "fingerprint", None)
    return str(fp) if fp is not None else store_of(data).fingerprint


class DistributedChunkSampler(SamplerPosition, Sampler[int]):
    """Indices for one rank; every rank gets `len(self)` of them.

    Args:
        data: a tj-data dataset (a `WindowDataset` too: windows grouped by their first
            sample's shard), a GraphStore or a path.
        num_replicas, rank: default to torch.distributed's when initialised, else 1 and 0.
        shuffle: False gives the store order (still split across ranks).
        window_shards: samples are shuffled within groups of this many shards.
        drop_last: drop the tail instead of padding with repeats so ranks are equal.
    """

    def __init__(
        self,
        data: Any,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        window_shards: int = 2,
        drop_last: bool = False,
    ) -> None:
        self._perm, self.shard_offsets = chunk_layout(data)
        self.rank, self.num_replicas = dist_rank_world(rank, num_replicas)
        if window_shards < 1:
            raise ValueError(f"window_shards={window_shards}: expected >= 1")
        self.shuffle, self.seed, self.window_shards, self.drop_last = (
            shuffle,
            seed,
            window_shards,
            drop_last,
        )
        self.fingerprint = data_fingerprint(data)
        self._init_position()  # "consumed": indices handed out in the epoch

    def order(self, epoch: int | None = None) -> np.ndarray:
        """This rank's indices for `epoch` (default: the current one), int64."""
        full = chunk_shuffle_order(
            self.shard_offsets,
            seed=self.seed,
            epoch=self.epoch if epoch is None else epoch,
            window_shards=self.window_shards,
            shuffle=self.shuffle,
        )
        if self._perm is not None and self.shuffle:
            full = self._perm[full]
        return split_even(full, self.rank, self.num_replicas, drop_last=self.drop_last)

    def __len__(self) -> int:
        n = int(self.shard_offsets[-1])
        return n // self.num_replicas if self.drop_last else -(-n // self.num_replicas)

    def __iter__(self) -> Iterator[int]:
        order = self.order()[self._start_pass() :]
        for lo in range(0, len(order), _BLOCK):  # a list of the whole epoch would cost ~36 B
            for i in order[lo : lo + _BLOCK].tolist():  # per index (boxed ints) in the main
                self._consumed += 1
                yield i

    # ----- state protocol (tj_data.state.Resumable) -----------------------------------------
    def _state_identity(self) -> dict[str, Any]:
        """What a saved position is only valid for: a state from another setup is refused."""
        return order_identity(self)

    def _consumed_limit(self, state: dict[str, Any]) -> tuple[int, str]:
        return len(self), "indices of an epoch"


class ChunkShuffleSampler(DistributedChunkSampler):
    """Single-process chunk-local shuffle (for `ChunkedGraphDataset`): shard order random,
    samples shuffled within `window_shards` shards, so a cache of a few shards hits."""

    def __init__(
        self, data: Any, *, shuffle: bool = True, seed: int = 0, window_shards: int = 1
    ) -> None:
        super().__init__(
            data, num_replicas=1, rank=0, shuffle=shuffle, seed=seed, window_shards=window_shards
        )
