"""`build_loader`: a torch DataLoader built from a `LoaderPlan`, with the right sampler and seeds.

- num_workers=0: no prefetch_factor, no persistent_workers, no worker_init_fn (torch rejects or
  ignores them), and the main process's global RNGs are left alone.
- Workers: `WorkerInit` calls `gc.freeze()` (a forked worker's garbage collector then never
  walks, and so never copies, the pages of objects inherited from the parent) and seeds
  `random` / numpy / torch from (seed, rank, epoch, worker); persistent workers are reseeded
  when the epoch changes (`EpochSeededCollate` reads the shared epoch of a `SeedContext`).
- Sampler: map-style tj-data datasets (windows included) get a `DistributedChunkSampler` for
  (rank, world_size) with the plan's `window_shards` (shard-local shuffling keeps the mapped
  working set small); a streaming dataset partitions itself (its rank/world must match).
- `PlannedLoader.set_epoch(e)` reaches the sampler, the dataset, the collate transforms and the
  worker seeds; without a call, each new iteration advances the epoch by one.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler

from tj_data.chunked import ChunkedGraphDataset
from tj_data.collate import forward
from tj_data.order import dist_rank_world
from tj_data.plan import LoaderPlan
from tj_data.samplers import DistributedChunkSampler
from tj_data.seeding import SeedContext, derive_seed, seed_globals, worker_id

__all__ = ["EpochSeededCollate", "PlannedLoader", "WorkerInit", "build_loader"]


class WorkerInit:
    """`worker_init_fn`: gc.freeze, then seed the global RNGs for (seed, rank, epoch, worker)."""

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


class EpochSeededCollate:
    """Collate wrapper that reseeds a (persistent) worker's global RNGs when the epoch changes."""

    def __init__(self, collate: Callable[[Any], Any], seeds: SeedContext, seed: int, rank: int):
        self.collate, self.seeds, self.seed, self.rank = collate, seeds, seed, rank
        self._epoch: int | None = None

    def __call__(self, items: Any) -> Any:
        wid = worker_id()
        if wid >= 0:
            epoch = self.seeds.epoch
            if self._epoch is None:
                self._epoch = epoch  # WorkerInit seeded this epoch already
            elif epoch != self._epoch:
                self._epoch = epoch
                seed_globals(derive_seed(self.seed, self.rank, epoch, wid + 1))
        return self.collate(items)

    def set_epoch(self, epoch: int) -> None:
        forward([self.collate], "set_epoch", epoch)

    def set_rank(self, rank: int) -> None:
        forward([self.collate], "set_rank", rank)


class PlannedLoader(DataLoader):
    """A DataLoader that knows its `plan`, and whose epochs reach sampler, dataset, transforms
    and worker seeds (`set_epoch`; without it, each `iter()` after the first advances by one)."""

    plan: LoaderPlan
    seeds: SeedContext

    def _setup(self, plan: LoaderPlan, seeds: SeedContext) -> None:
        self.plan, self.seeds = plan, seeds
        self._epoch = 0
        self._explicit = True  # the first pass uses epoch 0

    @property
    def epoch(self) -> int:
        return self._epoch

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)
        self._explicit = True
        self.seeds.set_epoch(self._epoch)
        targets = [self.sampler, self.batch_sampler, self.collate_fn]
        if not isinstance(self.dataset, IterableDataset):  # a stream advances its own epochs
            targets.append(self.dataset)
        forward([t for t in targets if t is not None], "set_epoch", self._epoch)

    def __iter__(self) -> Iterator[Any]:
        if not self._explicit:
            self.set_epoch(self._epoch + 1)
        self._explicit = False
        return super().__iter__()


def _apply_plan(dataset: Any, plan: LoaderPlan) -> None:
    """Per-process settings of the plan that live on the dataset."""
    base = getattr(dataset, "base", dataset)
    store = getattr(base, "store", None)
    if plan.max_open_shards is not None and store is not None:
        store.set_max_open_shards(plan.max_open_shards)
    if plan.cache_bytes is not None and isinstance(base, ChunkedGraphDataset):
        base.cache_bytes = int(plan.cache_bytes)
        base.clear_cache()
    if plan.shuffle_buffer_bytes is not None and hasattr(base, "shuffle_buffer_bytes"):
        base.shuffle_buffer_bytes = int(plan.shuffle_buffer_bytes) if base.shuffle else 0


def _default_sampler(
    dataset: Any, plan: LoaderPlan, rank: int, world: int, shuffle: bool, seed: int
) -> Sampler[int]:
    ws = plan.window_shards or 2
    base = getattr(dataset, "base", dataset)
    if isinstance(base, ChunkedGraphDataset):  # shuffle within what the cache holds
        largest = max((s.nbytes for s in base.store.manifest.shards), default=1)
        ws = max(1, min(ws, base.cache_bytes // max(largest, 1)))
    return DistributedChunkSampler(
        dataset,
        num_replicas=world,
        rank=rank,
        shuffle=shuffle,
        seed=seed,
        window_shards=ws,
        drop_last=plan.drop_last,
    )


def build_loader(
    dataset: Any,
    plan: LoaderPlan,
    *,
    sampler: Sampler[Any] | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    shuffle: bool = True,
    seed: int = 0,
    collate_fn: Callable[[Any], Any] | None = None,
    worker_init_fn: Callable[[int], None] | None = None,
    timeout: float = 0,
) -> PlannedLoader:
    """A `PlannedLoader` over `dataset` with `plan`'s settings.

    Args:
        sampler: default: `DistributedChunkSampler` for (rank, world_size) (map-style datasets,
            windows included). A sampler yielding lists of indices (`ByteBudgetBatchSampler`,
            `BatchSampler`, `DynamicBatchSampler`) is used as the batch sampler.
        rank, world_size: default to torch.distributed's when initialised, else 0 and 1.
        seed: seeds the sampler, the worker RNGs and (through set_rank/set_epoch) transforms.
        collate_fn: default: `dataset.collate_fn` (dequantisation and transforms included).
    """
    rank_, world = dist_rank_world(rank, world_size)
    _apply_plan(dataset, plan)
    collate = collate_fn if collate_fn is not None else getattr(dataset, "collate_fn", None)
    forward([dataset, collate], "set_rank", rank_)
    seeds = SeedContext(seed)
    seeds.set_rank(rank_)
    kwargs: dict[str, Any] = {"num_workers": plan.num_workers, "timeout": timeout}
    if plan.num_workers > 0:
        kwargs.update(
            prefetch_factor=plan.prefetch_factor,
            persistent_workers=plan.persistent_workers,
            worker_init_fn=WorkerInit(seed=seed, rank=rank_, seeds=seeds, user_fn=worker_init_fn),
            multiprocessing_context=plan.multiprocessing_context,
        )
        if collate is not None:
            collate = EpochSeededCollate(collate, seeds, seed, rank_)
    pin = plan.pin_memory and torch.cuda.is_available()
    if pin:
        kwargs.update(pin_memory=True, pin_memory_device=plan.device)
    if isinstance(dataset, IterableDataset):
        if sampler is not None:
            raise ValueError("an iterable (streaming) dataset takes no sampler")
        ds_rank = (getattr(dataset, "rank", rank_), getattr(dataset, "world_size", world))
        if ds_rank != (rank_, world):
            raise ValueError(
                f"the streaming dataset partitions for rank/world {ds_rank}, the loader was asked "
                f"for {(rank_, world)}: build the dataset with rank={rank_}, world_size={world}"
            )
        if getattr(dataset, "batch_size", None) is not None:
            kwargs["batch_size"] = None  # the dataset batches (exact resume with workers)
        else:
            kwargs.update(batch_size=plan.batch_size, drop_last=plan.drop_last, collate_fn=collate)
    else:
        if sampler is None:
            sampler = _default_sampler(dataset, plan, rank_, world, shuffle, seed)
        if isinstance(sampler, BatchSampler) or getattr(sampler, "yields_batches", False):
            kwargs["batch_sampler"] = sampler
        else:
            kwargs.update(sampler=sampler, batch_size=plan.batch_size, drop_last=plan.drop_last)
        kwargs["collate_fn"] = collate
    loader = PlannedLoader(dataset, **kwargs)
    loader._setup(plan, seeds)
    return loader
