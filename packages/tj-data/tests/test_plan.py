"""plan_loader / build_loader / autotune_loader with real DataLoader workers: the estimate against
measured tree PSS, a budget that holds over an epoch, errors naming the term, seeding, samplers."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
import torch
from tjdata_traffic import write_traffic

from tj_data import (
    BudgetError,
    ChunkedGraphDataset,
    DistributedChunkSampler,
    GraphBatch,
    GraphStoreWriter,
    HDF5GraphDataset,
    LoaderPlan,
    MmapGraphDataset,
    StreamingGraphDataset,
    WindowDataset,
    autotune_loader,
    build_loader,
    hand_plans,
    plan_loader,
)
from tj_data.synthetic import SCHEMA, make_block
from tj_monitor import PeakPssSampler, tree_memory

MiB = 1 << 20


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """~170 MB npy store, 4 MB shards (heavy-tailed graph sizes from tj_data.synthetic, as in the data benchmark)."""
    path = tmp_path_factory.mktemp("big") / "s"
    rng = np.random.default_rng(0)
    with GraphStoreWriter(path, SCHEMA, shard_size=2048) as w:
        for b in range(4):
            w.append_block(*make_block(rng, 20_000, b * 20_000))
    return path


def test_estimate_vs_measured_pss_and_budget_holds(big: Path) -> None:
    """Tolerance: the estimated loader share (terms other than main_process) is within
    [0.6, 2.0] x the measured growth of the tree's peak PSS, and with the default 25% headroom
    the peak over a whole epoch (~40 distinct shards, more than the budget) stays under it."""
    ds = MmapGraphDataset(big)
    assert ds.store.manifest.nbytes > 150 * MiB
    budget = tree_memory().pss + 150 * MiB  # the store does not fit in what the loader gets
    plan = plan_loader(ds, budget_bytes=budget, batch_size=64, num_workers=2)
    terms = plan.estimate.terms
    assert set(terms) == {
        "main_process", "worker_baseline", "prefetched_batches", "pinned_buffers",
        "collate_transient", "caches", "shuffle_buffer", "mapped_pages", "sampler_index",
    }  # fmt: skip
    assert plan.fits and plan.max_open_shards == 2 * plan.window_shards
    assert terms["worker_baseline"] > 4 * MiB and terms["mapped_pages"] > 8 * MiB
    loader = build_loader(ds, plan)
    main = tree_memory().pss
    n = 0
    with PeakPssSampler(interval=0.05) as peak:
        for b in loader:
            n += b.num_graphs
    assert n == len(ds)
    measured = peak.peak_pss - main
    loader_share = plan.estimate.total - terms["main_process"]
    assert peak.peak_pss <= budget, (peak.peak_pss / MiB, budget / MiB, plan.estimate.table())
    assert 0.6 * measured <= loader_share <= 2.0 * measured, (measured / MiB, loader_share / MiB)


def test_errors_name_the_term(big: Path, tmp_path: Path) -> None:
    ds = MmapGraphDataset(big)
    main = tree_memory().pss
    with pytest.raises(BudgetError, match="already uses"):
        plan_loader(ds, budget_bytes=main // 2)
    with pytest.raises(BudgetError, match=r"smaller than one batch: batch_size=8192"):
        plan_loader(ds, budget_bytes=main + 32 * MiB, batch_size=8192, num_workers=0)
    stream = StreamingGraphDataset(big, shuffle_buffer_bytes=400 * MiB)
    with pytest.raises(
        BudgetError, match=r"largest term is shuffle_buffer = .*shuffle_buffer_bytes"
    ):
        plan_loader(stream, budget_bytes=main + 200 * MiB, batch_size=32, num_workers=0)
    chunked = ChunkedGraphDataset(big, cache_chunks=40)
    with pytest.raises(BudgetError, match=r"largest term is caches = .*cache_chunks"):
        plan_loader(chunked, budget_bytes=main + 120 * MiB, batch_size=32, num_workers=0)
    with pytest.raises(ValueError, match="num_workers=0 takes no prefetch_factor"):
        LoaderPlan(
            num_workers=0,
            prefetch_factor=2,
            batch_size=8,
            pin_memory=False,
            persistent_workers=False,
        )


def test_terms_of_windows_streams_and_hdf5(tmp_path: Path) -> None:
    path = write_traffic(tmp_path / "t", episodes=2, steps=30)
    base = MmapGraphDataset(path)
    budget = tree_memory().pss + 512 * MiB
    single = plan_loader(base, budget_bytes=budget, batch_size=8, num_workers=0)
    win = WindowDataset(base, window=4, horizon=1, stream_key="intersection")
    wplan = plan_loader(win, budget_bytes=budget, batch_size=8, num_workers=0)
    ratio = wplan.estimate.terms["prefetched_batches"] / single.estimate.terms["prefetched_batches"]
    assert 3.0 < ratio < 7.0  # a window batch holds 5 steps
    assert win.size_index().nodes.sum() > 0 and len(win.size_index()) == len(win)
    stream = StreamingGraphDataset(path, shuffle_buffer_bytes=MiB)
    splan = plan_loader(stream, budget_bytes=budget, batch_size=8, num_workers=0)
    assert MiB <= splan.estimate.terms["shuffle_buffer"] < 4 * MiB
    with GraphStoreWriter(tmp_path / "h", base.schema, backend="hdf5") as w:
        w.append(base[0])
    hplan = plan_loader(
        HDF5GraphDataset(tmp_path / "h"), budget_bytes=budget, batch_size=1, num_workers=0
    )
    assert hplan.estimate.terms["caches"] == 4 * MiB  # the HDF5 chunk cache of one open file


class RecordRng:
    """Transform recording draws of the three global RNGs (seeded per worker and epoch)."""

    def __call__(self, batch: GraphBatch) -> GraphBatch:
        batch.meta["rng"] = (np.random.rand(), float(torch.rand(1)), random.random())
        return batch


def test_zero_workers_seeds_and_sampler_pairing(tmp_path: Path) -> None:
    path = write_traffic(tmp_path / "t", episodes=2, steps=30)
    ds = MmapGraphDataset(path, transforms=[RecordRng()])
    zero = plan_loader(ds, budget_bytes=tree_memory().pss + 256 * MiB, batch_size=8, num_workers=0)
    assert (zero.num_workers, zero.prefetch_factor, zero.persistent_workers) == (0, None, False)
    state = np.random.get_state()
    loader = build_loader(ds, zero)
    it = iter(loader)
    assert np.array_equal(np.random.get_state()[1], state[1])  # main RNGs left alone
    assert (
        loader.num_workers == 0 and loader.prefetch_factor is None and loader.worker_init_fn is None
    )
    assert sum(b.num_graphs for b in it) == len(ds)
    two = LoaderPlan(
        num_workers=2, prefetch_factor=1, batch_size=8, pin_memory=False, persistent_workers=True
    )

    def draws(rank: int, seed: int) -> list[list[tuple[float, float, float]]]:
        loader = build_loader(ds, two, rank=rank, world_size=2, seed=seed)
        return [[b.meta["rng"] for b in loader] for _ in range(2)]  # epochs 0 and 1

    a, again, other_rank = draws(0, 0), draws(0, 0), draws(1, 0)
    assert a == again  # reproducible
    e0, e1 = a
    assert len(set(e0[:2])) == 2  # worker 0 and worker 1 differ
    assert all(
        x != y for x, y in zip(e0, e1, strict=False)
    )  # persistent workers reseeded per epoch
    assert all(x != y for x, y in zip(e0, other_rank[0], strict=False))  # ranks differ
    # pairing: each rank reads its own half, shard-locally shuffled
    seen = []
    for rank in (0, 1):
        loader = build_loader(ds, zero, rank=rank, world_size=2, seed=3)
        assert isinstance(loader.sampler, DistributedChunkSampler)
        seen.append(
            np.concatenate([b.sim_time.numpy() * 10 + b.intersection.numpy() for b in loader])
        )
    assert len(seen[0]) == len(seen[1]) == -(-len(ds) // 2)
    win = WindowDataset(MmapGraphDataset(path), window=3, stream_key="intersection")
    idx = [list(build_loader(win, zero, rank=r, world_size=2).sampler) for r in (0, 1)]
    assert len(idx[0]) == len(idx[1]) and len(set(idx[0]) | set(idx[1])) == len(win)
    stream = StreamingGraphDataset(path, rank=0, world_size=1, batch_size=8)
    with pytest.raises(ValueError, match=r"partitions for rank/world \(0, 1\)"):
        build_loader(stream, zero, rank=1, world_size=2)
    assert build_loader(stream, zero).batch_size is None  # the stream batches itself


def test_autotune_measures_and_picks(tmp_path: Path) -> None:
    path = write_traffic(tmp_path / "t", episodes=2, steps=40)
    ds = MmapGraphDataset(path)
    budget = tree_memory().pss + 512 * MiB
    base = plan_loader(ds, budget_bytes=budget, batch_size=16, num_workers=0)
    one = LoaderPlan(
        num_workers=1, prefetch_factor=2, batch_size=16, pin_memory=False, persistent_workers=True
    )
    res = autotune_loader(
        ds, budget, {"none": base, "one": one}, seconds_per_candidate=0.5, warmup_batches=1
    )
    assert [r.name for r in res.table] == ["none", "one"]
    assert all(r.samples_per_s > 0 and r.peak_pss > 0 and not r.over_budget for r in res.table)
    best = max(res.table, key=lambda r: r.samples_per_s)
    assert res.best_name == best.name and "| none | 0 |" in res.markdown()
    with pytest.raises(BudgetError, match="no candidate stayed within the budget"):
        autotune_loader(ds, tree_memory().pss // 2, {"one": one}, seconds_per_candidate=0.3)
    seen: list[int] = []
    stepped = autotune_loader(
        ds,
        budget,
        {"none": base},
        seconds_per_candidate=0.3,
        warmup_batches=1,
        step_fn=lambda batch: seen.append(batch.num_graphs),
        rounds=2,
    )
    assert seen and all(n == 16 for n in seen[:-1])  # the step ran on every measured batch
    row = stepped.table[0]
    assert len(stepped.table) == 1 and row.samples_per_s > 0
    assert row.batches == len(seen)  # both rounds counted; warm-up batches are not steps
    with pytest.raises(ValueError, match="rounds=0"):
        autotune_loader(ds, budget, {"none": base}, rounds=0)
    names = list(hand_plans(one, cores=2))
    assert names[0] == "safe 4x2 (capped: 2x2)" and names[-1] == "no workers" and len(names) == 4
