"""`ByteBudgetBatchSampler`: variable-size graphs packed into batches capped by bytes, nodes,
edges and/or samples, computed from the store's size index (no sample is read).

The global order is the chunk-local shuffle of `DistributedChunkSampler`; batches are packed
greedily in that order, then split across ranks so every rank gets the same number of batches
(padding repeats batches from the start, or drop_last drops the tail). Resumable state:
`tj_data.state` ("consumed" counts batches).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

from tj_data.order import chunk_shuffle_order, dist_rank_world, pack_by_budget, split_even
from tj_data.samplers import data_fingerprint, store_of
from tj_data.state import StateMismatchError, check_state, make_state

__all__ = ["ByteBudgetBatchSampler"]

log = logging.getLogger(__name__)


class ByteBudgetBatchSampler(Sampler[list[int]]):
    """Batches of indices whose summed stored bytes / nodes / edges / count stay under the caps.

    A single sample larger than a cap forms a batch of its own (counted in `oversized` and
    logged). Use as DataLoader(batch_sampler=...)."""

    yields_batches = True  # build_loader passes it as batch_sampler

    def __init__(
        self,
        data: Any,
        *,
        max_bytes: int | None = None,
        max_nodes: int | None = None,
        max_edges: int | None = None,
        max_samples: int | None = None,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        window_shards: int = 2,
        drop_last: bool = False,
    ) -> None:
        caps = {
            "max_bytes": max_bytes,
            "max_nodes": max_nodes,
            "max_edges": max_edges,
            "max_samples": max_samples,
        }
        if all(v is None for v in caps.values()):
            raise ValueError("ByteBudgetBatchSampler needs at least one of " + ", ".join(caps))
        for name, v in caps.items():
            if v is not None and v < 1:
                raise ValueError(f"{name}={v}: expected >= 1")
        if callable(getattr(data, "chunk_layout", None)):
            raise TypeError(
                "ByteBudgetBatchSampler packs samples of a store; for windows use "
                "DistributedChunkSampler (or a RandomSampler) with a batch size"
            )
        store = store_of(data)
        self.shard_offsets = store.shard_offsets.copy()
        self.sizes = store.size_index()
        self.caps = caps
        self.rank, self.num_replicas = dist_rank_world(rank, num_replicas)
        self.shuffle, self.seed, self.window_shards, self.drop_last = (
            shuffle,
            seed,
            window_shards,
            drop_last,
        )
        self.fingerprint = data_fingerprint(data)
        self.epoch = 0
        self.oversized = 0
        self._consumed = 0  # batches handed out in this epoch
        self._resume = False  # the next __iter__ continues at _consumed (after load_state_dict)
        self._plan: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _batches(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, cuts, this rank's batch ids) for the current epoch (cached per epoch)."""
        if self._plan is not None and self._plan[0] == self.epoch:
            return self._plan[1:]
        order = chunk_shuffle_order(
            self.shard_offsets,
            seed=self.seed,
            epoch=self.epoch,
            window_shards=self.window_shards,
            shuffle=self.shuffle,
        )
        s = self.sizes
        terms = []
        for name, arr in (("max_bytes", s.nbytes), ("max_nodes", s.nodes), ("max_edges", s.edges)):
            if self.caps[name] is not None:
                terms.append((arr[order], self.caps[name]))
        if self.caps["max_samples"] is not None:
            terms.append((np.ones(len(order)), self.caps["max_samples"]))
        cuts, self.oversized = pack_by_budget(terms)
        if self.oversized:
            log.warning(
                "%d samples exceed a cap on their own and form single-sample batches",
                self.oversized,
            )
        mine = split_even(
            np.arange(len(cuts) - 1), self.rank, self.num_replicas, drop_last=self.drop_last
        )
        self._plan = (self.epoch, order, cuts, mine)
        return order, cuts, mine

    def __len__(self) -> int:
        return len(self._batches()[2])

    def __iter__(self) -> Iterator[list[int]]:
        order, cuts, mine = self._batches()
        start = self._consumed if self._resume else 0
        self._consumed, self._resume = start, False
        for b in mine[start:].tolist():
            self._consumed += 1
            yield order[cuts[b] : cuts[b + 1]].tolist()

    def set_epoch(self, epoch: int) -> None:
        """The next pass is `epoch` from its start (a just loaded state's epoch keeps its
        position)."""
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
            "caps": dict(self.caps),
        }

    def state_dict(self) -> dict[str, Any]:
        """Position in the epoch: batches handed out so far ("consumed")."""
        return make_state(
            type(self).__name__,
            epoch=self.epoch,
            consumed=self._consumed,
            identity=self._identity(),
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The next `__iter__` continues epoch `state["epoch"]` after `state["consumed"]`."""
        st = check_state(state, kind=type(self).__name__, identity=self._identity())
        epoch, self.epoch = self.epoch, st["epoch"]
        if st["consumed"] > len(self):  # the batch count of the loaded epoch
            self.epoch = epoch
            raise StateMismatchError(
                f"{type(self).__name__}.load_state_dict: consumed={st['consumed']} exceeds the "
                f"{len(self)} batches of epoch {st['epoch']}"
            )
        self._consumed, self._resume = st["consumed"], True
