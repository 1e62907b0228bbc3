"""`build_loader`: a torch DataLoader built from a `LoaderPlan`, with the right sampler and seeds.

- num_workers=0: no prefetch_factor, no persistent_workers, no worker_init_fn (torch rejects or
  ignores them), and the main process's global RNGs are left alone.
- Workers: `tj_data.seeding.WorkerInit` calls `gc.freeze()` (a forked worker's garbage collector
  then never walks, and so never copies, the pages of objects inherited from the parent) and seeds
  `random` / numpy / torch from (seed, rank, epoch, worker); persistent workers are reseeded
  when the epoch changes (`EpochSeededCollate` reads the shared epoch of a `SeedContext`).
- Sampler: map-style tj-data datasets (windows included) get a `DistributedChunkSampler` for
  (rank, world_size) with the plan's `window_shards` (shard-local shuffling keeps the mapped
  working set small); a streaming dataset partitions itself (its rank/world must match).
- `PlannedLoader.set_epoch(e)` reaches the sampler, the dataset (streams too), the collate
  transforms and the worker seeds; without a call, each new iteration advances the epoch by one.
- Resumable state (`tj_data.state`): the loader counts the batches it handed to the caller and
  keeps its sampler's (or stream's) state at exactly that position: prefetched batches are not
  counted, so `state_dict()` after k batches resumes, in a fresh loader, at batch k + 1.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, IterableDataset, Sampler

from tj_data.chunked import ChunkedGraphDataset
from tj_data.collate import forward
from tj_data.order import dist_rank_world
from tj_data.plan import LoaderPlan
from tj_data.samplers import DistributedChunkSampler
from tj_data.seeding import SeedContext, WorkerInit, derive_seed, seed_globals, worker_id
from tj_data.state import Resumable

__all__ = ["EpochSeededCollate", "PlannedLoader", "build_loader"]


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


class PlannedLoader(Resumable, DataLoader):
    """A DataLoader that knows its `plan`, and whose epochs reach sampler, dataset, transforms
    and worker seeds (`set_epoch`; without it, each `iter()` after the first advances by one).

    `state_dict()` / `load_state_dict()` (`tj_data.state.Resumable`): the position after the
    batches this loader handed out ("consumed", batches of the epoch) with its source's state at
    that position ("source": the sampler's, the batch sampler's or the stream's). A map-style
    loader records the sampler's state as each index batch is sent to the workers and commits it
    when that batch is delivered (delivery is in order); a stream with workers is positioned by
    the count of delivered batches (the stream maps it to its workers' round-robin)."""

    plan: LoaderPlan
    seeds: SeedContext

    def _setup(self, plan: LoaderPlan, seeds: SeedContext) -> None:
        self.plan, self.seeds = plan, seeds
        self._epoch = 0
        self._explicit = True  # the first pass uses epoch 0
        self._sent: deque[dict[str, Any]] = deque()  # source states of sent, undelivered batches
        self._position: dict[str, Any] | None = None  # source state after the last delivery
        self._pass_start: dict[str, Any] | None = None  # source state when the pass began
        self._delivered = 0  # batches handed out in this epoch (a resumed pass starts above 0)
        self._pass_delivered = 0  # batches handed out by the current pass
        self._resume_batches: int | None = None
        self._worker_epoch: int | None = None  # epoch persistent stream workers stream next

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def _streams(self) -> bool:
        return isinstance(self.dataset, IterableDataset)

    def set_epoch(self, epoch: int) -> None:
        epoch = int(epoch)
        if not (self._resume_batches is not None and epoch == self._epoch):
            # a new pass from the start (a just loaded position is kept for its own epoch)
            self._resume_batches, self._position, self._pass_start = None, None, None
            self._delivered = 0
        self._epoch = epoch
        self._explicit = True
        self.seeds.set_epoch(self._epoch)
        targets = [self.sampler, self.batch_sampler, self.collate_fn, self.dataset]
        forward([t for t in targets if t is not None], "set_epoch", self._epoch)
        if self._worker_epoch is not None and self._worker_epoch != epoch:
            self._restart_workers()  # persistent stream copies would not see this epoch

    def _restart_workers(self) -> None:
        """Drop persistent workers: their copies of a stream carry its epoch and position."""
        self._iterator, self._worker_epoch = None, None

    def _source(self) -> Any:
        """The object whose state is the loader's position (None: nothing stateful)."""
        if self._streams:
            found = [self.dataset]
        else:
            found = [self.batch_sampler, getattr(self.batch_sampler, "sampler", None), self.sampler]
        for obj in found:
            if callable(getattr(obj, "state_dict", None)) and callable(
                getattr(obj, "load_state_dict", None)
            ):
                return obj
        return None

    @property
    def _index_sampler(self) -> Any:
        # DataLoader's iterators draw index batches from this (torch >= 1.2): wrap it so each
        # batch sent records the source's state (the ordering torchdata's loader relies on too)
        inner = super()._index_sampler
        sent = getattr(self, "_sent", None)
        source = self._source() if sent is not None and not self._streams else None
        return inner if source is None else _Recorder(inner, source, sent)

    def __iter__(self) -> Iterator[Any]:
        if not self._explicit:
            self.set_epoch(self._epoch + 1)
        self._explicit = False
        source = self._source()
        self._sent.clear()
        self._pass_start = self._position = None if source is None else source.state_dict()
        self._delivered, self._resume_batches = self._resume_batches or 0, None
        self._pass_delivered = 0
        it = super().__iter__()
        if self._streams and self.persistent_workers:
            self._worker_epoch = self._epoch + 1
        return _Counted(it, self)

    def _delivered_one(self) -> None:
        self._delivered += 1
        self._pass_delivered += 1
        if self._sent:
            self._position = self._sent.popleft()

    # ----- state protocol (tj_data.state.Resumable) -----------------------------------------
    def _state_identity(self) -> dict[str, Any]:
        # a stream's split over workers depends on their number; a sampler's does not
        return {"num_workers": self.num_workers} if self._streams else {}

    def _stateful_source(self, method: str) -> Any:
        source = self._source()
        if source is None:
            raise TypeError(
                f"PlannedLoader: {type(self.sampler).__name__} has no {method}(); use a tj-data "
                "sampler (the default) for a resumable position"
            )
        return source

    def _get_position(self) -> dict[str, Any]:
        """Position after the batches handed out so far (see the class docstring)."""
        source = self._stateful_source("state_dict")
        if not self._streams:
            inner = self._position if self._position is not None else source.state_dict()
        elif self.num_workers == 0 or self._pass_start is None:
            inner = source.state_dict()  # in this process, the stream counts exactly
        elif self.batch_size is not None:
            raise ValueError(
                "PlannedLoader: a stream batched by DataLoader workers cannot be positioned "
                "exactly; give the dataset batch_size= (build_loader then passes batches through)"
            )
        else:
            inner = dict(self._pass_start)
            inner["consumed"] += self._pass_delivered
        return {"epoch": inner["epoch"], "consumed": self._delivered, "source": dict(inner)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """The next iteration continues after the saved position (then epochs go on as usual).
        Also takes the state of the source alone (what tj-data 0.1 checkpoints held)."""
        self._stateful_source("load_state_dict")
        if isinstance(state, Mapping) and "source" in state:
            super().load_state_dict(state)  # checked, then _reset_position
        else:
            self._resume_at(state, 0)

    def _reset_position(self, state: dict[str, Any]) -> None:
        self._resume_at(state["source"], state["consumed"])

    def _resume_at(self, inner: Any, batches: int) -> None:
        """Load the source's state; the next pass counts on from `batches` delivered."""
        source = self._stateful_source("load_state_dict")
        source.load_state_dict(inner)
        self.set_epoch(source.state_dict()["epoch"])  # the source keeps its loaded position
        self._resume_batches = self._delivered = batches
        self._position = self._pass_start = None
        self._sent.clear()
        if self._streams:
            self._restart_workers()


class _Recorder:
    """An index sampler that appends `source.state_dict()` to `sent` as each batch leaves it."""

    def __init__(self, inner: Any, source: Any, sent: deque[dict[str, Any]]) -> None:
        self.inner, self.source, self.sent = inner, source, sent

    def __iter__(self) -> Iterator[Any]:
        for batch in self.inner:
            self.sent.append(self.source.state_dict())
            yield batch

    def __len__(self) -> int:
        return len(self.inner)


class _Counted:
    """The DataLoader's iterator, telling the loader of every batch it hands out."""

    def __init__(self, it: Any, loader: PlannedLoader) -> None:
        self._it, self._loader = it, loader

    def __iter__(self) -> _Counted:
        return self

    def __next__(self) -> Any:
        batch = next(self._it)
        self._loader._delivered_one()
        return batch

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:  # _shutdown_workers and friends
        return getattr(self._it, name)


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
