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
from tj_data.samplers import data_fingerprint, order_identity
from tj_data.state import SamplerPosition
from tj_data.store import store_of

__all__ = ["ByteBudgetBatchSampler"]

log = logging.getLogger(__name__)


class ByteBudgetBatchSampler(SamplerPosition, Sampler[list[int]]):
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
        self.oversized = 0
        self._init_position()  # "consumed": batches handed out in the epoch
        self._plan: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None

    def _batches(self, epoch: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(order, cuts, this rank's batch ids) for `epoch` (default: the current one; cached
        per epoch)."""
        epoch = self.epoch if epoch is None else epoch
        if self._plan is not None and self._plan[0] == epoch:
            return self._plan[1:]
        order = chunk_shuffle_order(
            self.shard_offsets,
            seed=self.seed,
            epoch=epoch,
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
        self._plan = (epoch, order, cuts, mine)
        return order, cuts, mine

    def __len__(self) -> int:
        return len(self._batches()[2])

    def __iter__(self) -> Iterator[list[int]]:
        order, cuts, mine = self._batches()
        for b in mine[self._start_pass() :].tolist():
            self._consumed += 1
            yield order[cuts[b] : cuts[b + 1]].tolist()

    # ----- state protocol (tj_data.state.Resumable) -----------------------------------------
    def _state_identity(self) -> dict[str, Any]:
        """What a saved position is only valid for: a state from another setup is refused."""
        return {**order_identity(self), "caps": dict(self.caps)}

    def _consumed_limit(self, state: dict[str, Any]) -> tuple[int, str]:
        return len(self._batches(state["epoch"])[2]), f"batches of epoch {state['epoch']}"
