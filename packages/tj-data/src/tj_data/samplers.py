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

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from tj_data.order import chunk_shuffle_order, dist_rank_world, split_even
from tj_data.state import StateMismatchError, check_state, make_state
from tj_data.store import GraphStore

__all__ = [
    "ChunkShuffleSampler",
    "DistributedChunkSampler",
    "chunk_layout",
    "data_fingerprint",
    "store_of",
]

_BLOCK = 4096


def store_of(data: Any) -> GraphStore:
    """The GraphStore behind a dataset (or the store itself, or a path)."""
    if isinstance(data, GraphStore):
        return data
    store = getattr(data, "store", None)
    if isinstance(store, GraphStore):
        return store
    if isinstance(data, str | os.PathLike):
        return GraphStore.open(data)
    raise TypeError(
        f"expected a GraphStore, a tj-data dataset or a path, got {type(data).__name__}"
    )


def chunk_layout(data: Any) -> tuple[np.ndarray | None, np.ndarray]:
    """(item permutation or None, chunk offsets): items grouped by chunk. A store's samples are
    already grouped by shard; a `WindowDataset` groups windows by their first sample's shard."""
    fn = getattr(data, "chunk_layout", None)
    if callable(fn):
        perm, offsets = fn()
        return np.asarray(perm, np.int64), np.asarray(offsets, np.int64)
    return None, store_of(data).shard_offsets.copy()


def data_fingerprint(data: Any) -> str:
    """Identity of what a sampler indexes (a store's shard checksums; a `WindowDataset` adds its
    window settings): a saved position is refused on other data with the same length."""
    fp = getattr(data, "fingerprint", None)
    return str(fp) if fp is not None else store_of(data).fingerprint


class DistributedChunkSampler(Sampler[int]):
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
        self.epoch = 0
        self._consumed = 0  # indices handed out in this epoch
        self._resume = False  # the next __iter__ continues at _consumed (after load_state_dict)

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
        start = self._consumed if self._resume else 0
        self._consumed, self._resume = start, False
        order = self.order()[start:]
        for lo in range(0, len(order), _BLOCK):  # a list of the whole epoch would cost ~36 B
            for i in order[lo : lo + _BLOCK].tolist():  # per index (boxed ints) in the main
                self._consumed += 1
                yield i

    def set_epoch(self, epoch: int) -> None:
        """The next pass is `epoch` from its start; the epoch of a just loaded state keeps the
        loaded position (so `load_state_dict` then `set_epoch(state["epoch"])` resumes)."""
        epoch = int(epoch)
        if not (self._resume and epoch == self.epoch):
            self.epoch, self._consumed, self._resume = epoch, 0, False

    def _identity(self) -> dict[str, Any]:
        """What a saved position is only valid for: a state from another setup is refused."""
        return {
            "dataset": self.fingerprint,
            "num_samples": int(self.shard_offsets[-1]),
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.num_replicas,
            "shuffle": self.shuffle,
            "window_shards": self.window_shards,
            "drop_last": self.drop_last,
        }

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: indices handed out so far ("consumed")."""
        return make_state(
            type(self).__name__,
            epoch=self.epoch,
            consumed=self._consumed,
            identity=self._identity(),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next `__iter__` continues epoch `state["epoch"]` after `state["consumed"]`."""
        st = check_state(state, kind=type(self).__name__, identity=self._identity())
        if st["consumed"] > len(self):
            raise StateMismatchError(
                f"{type(self).__name__}.load_state_dict: consumed={st['consumed']} exceeds the "
                f"{len(self)} indices of an epoch"
            )
        self.epoch, self._consumed, self._resume = st["epoch"], st["consumed"], True


class ChunkShuffleSampler(DistributedChunkSampler):
    """Single-process chunk-local shuffle (for `ChunkedGraphDataset`): shard order random,
    samples shuffled within `window_shards` shards, so a cache of a few shards hits."""

    def __init__(
        self, data: Any, *, shuffle: bool = True, seed: int = 0, window_shards: int = 1
    ) -> None:
        super().__init__(
            data, num_replicas=1, rank=0, shuffle=shuffle, seed=seed, window_shards=window_shards
        )
