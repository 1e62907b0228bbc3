"""`plan_loader`: DataLoader settings that fit a RAM budget, with the estimate broken down by term.

The seeds' formula `workers x prefetch x batch x bytes_per_sample` misses most of the cost. The
estimate here sums measured terms for the whole process tree:

| term | what |
|---|---|
| main_process | PSS of this process tree now (the model, the store index, ...) |
| worker_baseline | measured: the tree PSS the first real worker adds + the USS of each further one (`WorkerCost`, kept on the plan as `worker_cost` and reused when it is re-estimated) |
| prefetched_batches | (workers x prefetch + 2) x p99 collated batch (in flight + in use) |
| pinned_buffers | with pin_memory: the same count x batch rounded up to a power of two (the CUDA host allocator caches pinned blocks at those sizes) |
| collate_transient | max(workers, 1) x 2 x batch (samples read + the batch being built) |
| caches | chunk caches (+ one shard being decoded) per worker, HDF5 chunk caches, given caches |
| shuffle_buffer | streaming: per worker, buffer bytes + Python overhead + one read block |
| mapped_pages | npy: the shards a process keeps mapped (the sampler's window); they count in PSS and, as page cache, against a cgroup limit |
| sampler_index | the epoch's index order: 8 bytes per item, built with ~2 temporaries (in the main process; a stream builds its own per worker) |

Batches are sized from the store's size index (p99 of random batches), never from the mean.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tj_data.budget import default_budget
from tj_data.errors import BudgetError
from tj_data.estimate import (
    DatasetProfile,
    WorkerCost,
    batch_bytes,
    estimate_terms,
    profile_dataset,
    worker_baseline,
)
from tj_monitor import tree_memory

__all__ = ["LoaderPlan", "MemoryEstimate", "estimate_plan", "plan_loader"]


def _mb(n: float) -> str:
    return f"{n / 2**20:,.1f} MiB"


@dataclass(kw_only=True, frozen=True)
class MemoryEstimate:
    """Bytes per term (see the module docstring) and their total."""

    terms: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.terms.values())

    @property
    def largest(self) -> tuple[str, int]:
        """The largest term the loader controls (main_process excluded)."""
        terms = {k: v for k, v in self.terms.items() if k != "main_process"} or self.terms
        name = max(terms, key=lambda k: terms[k])
        return name, terms[name]

    def table(self) -> str:
        """Markdown table of the terms."""
        rows = [f"| {k} | {_mb(v)} |" for k, v in self.terms.items()]
        return "\n".join(
            ["| term | estimate |", "|---|---:|", *rows, f"| **total** | **{_mb(self.total)}** |"]
        )


@dataclass(kw_only=True, frozen=True)
class LoaderPlan:
    """DataLoader settings and their memory estimate (`build_loader(dataset, plan)` applies them).

    window_shards: shards a `DistributedChunkSampler` shuffles within (map-style datasets);
    max_open_shards: shards each process keeps mapped (npy); cache_bytes: per-worker chunk cache
    (`ChunkedGraphDataset`); shuffle_buffer_bytes: per-worker buffer (`StreamingGraphDataset`).
    worker_cost: the measured `WorkerCost` of one DataLoader worker over the planned dataset
    (None until measured); `with_` and `estimate_plan` reuse it instead of measuring again.
    """

    num_workers: int
    prefetch_factor: int | None
    batch_size: int
    pin_memory: bool
    persistent_workers: bool
    drop_last: bool = False
    window_shards: int | None = None
    max_open_shards: int | None = None
    cache_bytes: int | None = None
    shuffle_buffer_bytes: int | None = None
    budget_bytes: int = 0
    device: str = "cpu"
    multiprocessing_context: str | None = None
    estimate: MemoryEstimate = field(default_factory=lambda: MemoryEstimate(terms={}))
    worker_cost: WorkerCost | None = None

    def __post_init__(self) -> None:
        if self.num_workers < 0 or self.batch_size < 1:
            raise ValueError(
                f"LoaderPlan: num_workers={self.num_workers} (>= 0), batch_size={self.batch_size} (>= 1)"
            )
        if self.num_workers == 0 and (self.prefetch_factor is not None or self.persistent_workers):
            raise ValueError(
                "LoaderPlan: num_workers=0 takes no prefetch_factor and no persistent_workers"
            )
        if self.num_workers > 0 and (self.prefetch_factor is None or self.prefetch_factor < 1):
            raise ValueError(f"LoaderPlan: prefetch_factor={self.prefetch_factor}: expected >= 1")

    headroom: float = 0.25

    @property
    def required_bytes(self) -> int:
        """main_process + (1 + headroom) x the loader's terms: the margin covers what the
        estimate cannot see (allocator fragmentation, worker heaps growing over an epoch)."""
        main = self.estimate.terms.get("main_process", 0)
        return int(main + (1.0 + self.headroom) * (self.estimate.total - main))

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.budget_bytes

    def with_(self, dataset: Any, **changes: Any) -> LoaderPlan:
        """A copy with `changes`, re-estimated for `dataset` (a worker is measured only when the
        plan has workers and no `worker_cost` yet; the measurement is kept on the copy)."""
        p = replace(self, **changes)
        if p.num_workers and p.worker_cost is None:
            p = replace(p, worker_cost=_measure_worker(dataset, p))
        return replace(p, estimate=estimate_plan(dataset, p))

    def describe(self) -> str:
        return (
            f"{self.num_workers} workers x prefetch {self.prefetch_factor}, batch {self.batch_size}, "
            f"pin_memory={self.pin_memory}, persistent={self.persistent_workers}: "
            f"{_mb(self.estimate.total)} of {_mb(self.budget_bytes)}"
        )


def estimate_plan(
    dataset: Any,
    plan: LoaderPlan,
    *,
    caches: Sequence[Any] = (),
    profile: DatasetProfile | None = None,
    main_bytes: int | None = None,
    worker_cost: WorkerCost | None = None,
) -> MemoryEstimate:
    """The memory estimate of `plan` on `dataset` (terms measured now). The worker term uses
    `worker_cost`, else `plan.worker_cost`, else a worker measured now (`worker_baseline`)."""
    prof = profile or profile_dataset(dataset)
    base = worker_cost if worker_cost is not None else plan.worker_cost
    if not plan.num_workers:
        base = None
    elif base is None:
        base = _measure_worker(dataset, plan)
    return MemoryEstimate(
        terms=estimate_terms(
            prof,
            dataset,
            workers=plan.num_workers,
            prefetch=plan.prefetch_factor,
            batch_size=plan.batch_size,
            pin=plan.pin_memory,
            window_shards=plan.window_shards,
            max_open_shards=plan.max_open_shards,
            cache_bytes=plan.cache_bytes,
            shuffle_bytes=plan.shuffle_buffer_bytes,
            main=tree_memory().pss if main_bytes is None else main_bytes,
            baseline=base,
            extra_caches=_cache_bytes(caches),
        )
    )


def _collate_of(dataset: Any) -> Any:
    return getattr(dataset, "collate_fn", None)


def _measure_worker(dataset: Any, plan: LoaderPlan) -> WorkerCost:
    return worker_baseline(
        dataset,
        _collate_of(dataset),
        multiprocessing_context=plan.multiprocessing_context,
        batch_size=plan.batch_size,
    )


def _cache_bytes(caches: Sequence[Any]) -> int:
    total = 0
    for c in caches:
        n = getattr(c, "max_memory_bytes", None)
        if n is None:
            n = getattr(c, "max_bytes", None)
        if n is None:
            raise TypeError(f"cache {c!r}: expected an object with max_bytes / max_memory_bytes")
        total += int(n) if not hasattr(c, "directory") else 0  # a DiskCache holds no RAM
    return total


def _cores() -> int:
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _auto_batch_size(prof: DatasetProfile, budget: int) -> int:
    target = min(32 << 20, budget // 32)
    for b in (256, 128, 64, 32, 16, 8, 4, 2):
        if batch_bytes(prof, b)[0] <= target:
            return b
    return 1


def plan_loader(
    dataset: Any,
    *,
    budget_bytes: int | None = None,
    batch_size: int | None = None,
    device: str | torch.device = "cpu",
    cpu_count: int | None = None,
    num_workers: int | None = None,
    max_workers: int = 8,
    prefetch_factor: int | None = None,
    window_shards: int = 2,
    drop_last: bool = False,
    caches: Sequence[Any] = (),
    multiprocessing_context: str | None = None,
    headroom: float = 0.25,
    worker_cost: WorkerCost | None = None,
) -> LoaderPlan:
    """The DataLoader settings with the most workers (at most min(cores - 1, max_workers);
    prefetch 2, else 1) whose estimated peak
    memory of the whole process tree fits `budget_bytes` (`autotune_loader` measures deeper
    prefetching and fewer workers too).

    Args:
        dataset: a tj-data dataset (map-style, streaming, or a WindowDataset).
        budget_bytes: default: `default_budget()`, half of the container-aware memory limit
            (`tj_monitor.memory_limit`).
        batch_size: default: the largest power of two <= 256 whose p99 batch is <= min(32 MiB,
            budget / 32).
        device: "cuda..." turns pin_memory on (pinned buffers become a term).
        cpu_count: cores to plan for (default: this process's affinity); workers <= cores - 1.
        num_workers, prefetch_factor: fix them instead of searching.
        max_workers: the search starts at min(cores - 1, max_workers) workers (more rarely
            feeds a GPU faster; `autotune_loader` measures).
        window_shards: shards the chunk sampler shuffles within (reduced to fit if needed).
        caches: extra caches (LRUCache / TieredCache) the training loop holds, for the estimate.
        headroom: margin on the loader's terms (see `LoaderPlan.required_bytes`); 0.25 covers
            the gap measured between the estimate and peak PSS over full epochs.
        worker_cost: a `WorkerCost` measured before (`worker_baseline`, or `worker_cost` of an
            earlier plan over the same dataset); None measures one worker now (~0.3 s with
            fork). The returned plan carries it as `worker_cost`.
    Raises BudgetError naming the term that does not fit.
    """
    budget = default_budget() if budget_bytes is None else int(budget_bytes)
    if budget < 1:
        raise BudgetError(f"budget_bytes={budget_bytes}: expected > 0")
    if headroom < 0.0:
        raise ValueError(f"headroom={headroom}: expected >= 0")
    prof = profile_dataset(dataset)
    if prof.kind == "live" and num_workers not in (None, 0):
        raise BudgetError("a LiveGraphDataset runs in the consuming process: num_workers must be 0")
    dev = str(device)
    pin = dev.startswith("cuda") and torch.cuda.is_available()
    cores = cpu_count if cpu_count is not None else _cores()
    bs = batch_size or _auto_batch_size(prof, budget)
    max_w = min(max(0, cores - 1), max_workers) if cores > 1 and prof.kind != "live" else 0
    worker_range = [num_workers] if num_workers is not None else list(range(max_w, -1, -1))
    baseline = worker_cost
    if baseline is None and max(worker_range) > 0:  # before main: the probe may leave it larger
        baseline = worker_baseline(
            dataset, _collate_of(dataset), multiprocessing_context=multiprocessing_context,
            batch_size=bs,
        )  # fmt: skip
    main = tree_memory().pss
    if main >= budget:
        raise BudgetError(
            f"budget {_mb(budget)} is below what this process tree already uses "
            f"(main_process = {_mb(main)}): raise budget_bytes"
        )
    p99, biggest = batch_bytes(prof, bs)
    if (1.0 + headroom) * 4 * p99 > budget - main:  # 2 batches in use + 2x collate, no workers
        raise BudgetError(
            f"budget {_mb(budget)} is smaller than one batch: batch_size={bs} gives a p99 batch "
            f"of {_mb(p99)} (largest {_mb(biggest)}), and even without workers 4 batches are "
            f"alive (2 in use, 2 being built) next to main_process = {_mb(main)}: lower "
            "batch_size or raise budget_bytes"
        )
    prefetches = [prefetch_factor] if prefetch_factor is not None else [2, 1]
    shard_windows = [w for w in (window_shards, 2, 1) if w <= window_shards]

    def make(w: int, pf: int | None, ws: int) -> LoaderPlan:
        mapped = prof.kind in ("mapped", "streaming")
        open_shards = (2 * ws if prof.kind == "mapped" else 2) if mapped else None
        plan = LoaderPlan(
            num_workers=w,
            prefetch_factor=pf if w else None,
            batch_size=bs,
            pin_memory=pin,
            persistent_workers=w > 0,
            drop_last=drop_last,
            window_shards=ws if prof.kind in ("mapped", "chunked", "hdf5") else None,
            max_open_shards=open_shards,
            cache_bytes=getattr(getattr(dataset, "base", dataset), "cache_bytes", None),
            shuffle_buffer_bytes=getattr(dataset, "shuffle_buffer_bytes", None),
            budget_bytes=budget,
            device=dev,
            multiprocessing_context=multiprocessing_context,
            headroom=headroom,
            worker_cost=baseline,
        )
        terms = estimate_terms(
            prof, dataset, workers=w, prefetch=plan.prefetch_factor, batch_size=bs, pin=pin,
            window_shards=ws, max_open_shards=open_shards, cache_bytes=plan.cache_bytes,
            shuffle_bytes=plan.shuffle_buffer_bytes, main=main,
            baseline=baseline if w else None, extra_caches=_cache_bytes(caches),
        )  # fmt: skip
        return replace(plan, estimate=MemoryEstimate(terms=terms))

    smallest: LoaderPlan | None = None
    for ws in shard_windows:
        for w in worker_range:
            for pf in prefetches if w else [None]:
                plan = make(w, pf, ws)
                if plan.fits:
                    return plan
                smallest = (
                    plan
                    if smallest is None or plan.estimate.total < smallest.estimate.total
                    else smallest
                )
    assert smallest is not None
    name, size = smallest.estimate.largest
    raise BudgetError(
        f"no loader plan fits budget {_mb(budget)}: the smallest tried ({smallest.num_workers} "
        f"workers, prefetch {smallest.prefetch_factor}, batch {bs}, window_shards "
        f"{smallest.window_shards}) needs {_mb(smallest.required_bytes)} (with {headroom:.0%} "
        f"headroom on the loader's terms); the largest term is "
        f"{name} = {_mb(size)}{_HINTS.get(name, '')}\n{smallest.estimate.table()}"
    )


_HINTS = {
    "worker_baseline": " (fewer workers, or a leaner worker start method)",
    "prefetched_batches": " (lower batch_size or prefetch_factor)",
    "pinned_buffers": " (lower batch_size, or pin_memory off)",
    "collate_transient": " (lower batch_size)",
    "caches": " (smaller cache_chunks / cache_bytes / HDF5 rdcc_nbytes, or fewer workers)",
    "shuffle_buffer": " (smaller shuffle_buffer_bytes or read_block)",
    "mapped_pages": " (smaller shards: the mapped working set is whole shards)",
    "sampler_index": " (the epoch's order of this many items: fewer items per epoch)",
}
