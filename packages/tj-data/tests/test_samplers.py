"""DistributedChunkSampler and ByteBudgetBatchSampler: exact multisets over 2 ranks x 2 workers,
equal lengths per rank, caps, and bit-identical resume."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from tjdata_testutil import write_store
from torch.utils.data import DataLoader

from tj_data import ByteBudgetBatchSampler, DistributedChunkSampler, MmapGraphDataset
from tj_data.order import pack_by_budget, round_robin_consumed, split_even

N = 101  # not divisible by the world size: padding is exercised


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("s") / "s"
    write_store(path, N, shard_size=10, seed=4)
    return MmapGraphDataset(path)


def _ids(loader) -> list[int]:
    return [i for batch in loader for i in batch.sid.tolist()]


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_chunk_sampler_multiset(ds, drop_last) -> None:
    per_rank = []
    for rank in range(2):
        sampler = DistributedChunkSampler(
            ds, num_replicas=2, rank=rank, seed=7, window_shards=2, drop_last=drop_last
        )
        sampler.set_epoch(3)
        loader = DataLoader(
            ds, batch_size=8, sampler=sampler, num_workers=2, collate_fn=ds.collate_fn
        )
        ids = _ids(loader)
        assert len(ids) == len(sampler) == (50 if drop_last else 51)
        per_rank.append(ids)
    counts = Counter(per_rank[0] + per_rank[1])
    if drop_last:  # one sample dropped, none repeated
        assert len(counts) == N - 1 and set(counts.values()) == {1}
    else:  # every sample, exactly one repeat (the padding: the first of the global order)
        order = DistributedChunkSampler(ds, num_replicas=1, rank=0, seed=7, window_shards=2)
        order.set_epoch(3)
        assert set(counts) == set(range(N))
        assert [k for k, v in counts.items() if v == 2] == [next(iter(order))]
    assert per_rank[0] != sorted(per_rank[0])  # shuffled
    s0 = DistributedChunkSampler(ds, num_replicas=2, rank=0, seed=7, window_shards=2)
    s0.set_epoch(4)
    assert list(s0) != per_rank[0]  # a new order per epoch


def test_chunk_sampler_stays_in_window(ds) -> None:
    s = DistributedChunkSampler(ds, num_replicas=1, rank=0, seed=1, window_shards=2)
    shards = np.asarray(list(s)) // 10
    for k in range(11):  # every shard's samples sit inside one group of 2 shards (<= 20 positions)
        pos = np.flatnonzero(shards == k)
        assert pos.max() - pos.min() < 20
    assert shards.tolist() != sorted(shards.tolist())


def test_sampler_resume_bit_identical(ds) -> None:
    s = DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=5)
    s.set_epoch(2)
    it = iter(s)
    head = [next(it) for _ in range(17)]
    state = s.state_dict()
    rest = list(it)
    t = DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=5)
    t.load_state_dict(state)
    assert list(t) == rest and head + rest == list(s)
    with pytest.raises(ValueError, match="state has seed=5, this DistributedChunkSampler has 6"):
        DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=6).load_state_dict(state)


def test_byte_budget_batches(ds) -> None:
    sizes = ds.size_index()
    cap = int(sizes.nbytes.max() * 3)
    per_rank = []
    for rank in range(2):
        bs = ByteBudgetBatchSampler(
            ds, max_bytes=cap, max_nodes=20, num_replicas=2, rank=rank, seed=2
        )
        batches = list(bs)
        assert len(batches) == len(bs)
        for b in batches:
            assert len(b) == 1 or (sizes.nbytes[b].sum() <= cap and sizes.nodes[b].sum() <= 20)
        loader = DataLoader(ds, batch_sampler=bs, num_workers=2, collate_fn=ds.collate_fn)
        ids = _ids(loader)
        assert ids == [i for b in batches for i in b]
        per_rank.append((len(batches), ids))
    assert per_rank[0][0] == per_rank[1][0]  # same number of batches on every rank
    counts = Counter(per_rank[0][1] + per_rank[1][1])
    assert set(counts) == set(range(N))  # padding repeats whole batches, nothing is missed
    # resume after 3 batches
    bs = ByteBudgetBatchSampler(ds, max_bytes=cap, num_replicas=2, rank=0, seed=2)
    it = iter(bs)
    head = [next(it) for _ in range(3)]
    state = bs.state_dict()
    again = ByteBudgetBatchSampler(ds, max_bytes=cap, num_replicas=2, rank=0, seed=2)
    again.load_state_dict(state)
    assert head + list(again) == list(
        ByteBudgetBatchSampler(ds, max_bytes=cap, num_replicas=2, rank=0, seed=2)
    )
    with pytest.raises(ValueError, match="at least one of"):
        ByteBudgetBatchSampler(ds)


def test_pure_helpers() -> None:
    cuts, over = pack_by_budget([(np.array([3, 3, 3, 9, 1, 1]), 6.0)])
    assert cuts.tolist() == [0, 2, 3, 4, 6] and over == 1
    assert split_even(np.arange(5), 1, 2, drop_last=False).tolist() == [3, 4, 0]
    assert split_even(np.arange(5), 1, 2, drop_last=True).tolist() == [2, 3]
    assert round_robin_consumed(5, [3, 2]) == ([3, 2], 0)
    assert round_robin_consumed(3, [3, 2]) == ([2, 1], 1)
    assert round_robin_consumed(4, [1, 4, 4]) == ([1, 2, 1], 2)
    assert round_robin_consumed(7, [1, 4, 4]) == ([1, 3, 3], 1)
