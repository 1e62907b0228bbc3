"""StreamingGraphDataset: partition multisets over 2 ranks x 2 workers, equal rank lengths, a
byte-bounded shuffle buffer, exact mid-epoch resume; live mode with a blocking bounded queue."""

from __future__ import annotations

import threading
import time
from collections import Counter

import numpy as np
import pytest
from tjdata_testutil import id_schema, random_sample, write_store
from torch.utils.data import DataLoader

from tj_data import (
    ByteShuffleBuffer,
    LiveGraphDataset,
    LiveQueue,
    LoaderPlan,
    StreamingGraphDataset,
    build_loader,
)
from tj_data.live import QueueClosed

N = 203


@pytest.fixture(scope="module", params=["npy", "hdf5"])
def path(request, tmp_path_factory):
    p = tmp_path_factory.mktemp("s") / "s"
    write_store(p, N, shard_size=20, backend=request.param, seed=6)
    return p


def _ids(items) -> list[int]:
    out = []
    for it in items:
        out += it.sid.tolist() if hasattr(it, "sid") else [int(it["sid"])]
    return out


@pytest.mark.parametrize("uneven", ["pad", "drop"])
def test_multiset_two_ranks_two_workers(path, uneven) -> None:
    per_rank = []
    for rank in range(2):
        ds = StreamingGraphDataset(
            path,
            rank=rank,
            world_size=2,
            seed=3,
            uneven=uneven,
            shuffle_buffer_bytes=4096,
            batch_size=8,
        )
        ds.set_epoch(1)
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        ids = _ids(loader)
        assert len(ids) == len(ds) == (101 if uneven == "drop" else 102)
        per_rank.append(ids)
    counts = Counter(per_rank[0] + per_rank[1])
    if uneven == "drop":
        assert len(counts) == N - 1 and set(counts.values()) == {1}
    else:
        assert set(counts) == set(range(N)) and sum(v - 1 for v in counts.values()) == 1
    assert per_rank[0] != sorted(per_rank[0])


def test_epochs_differ_and_sequential_without_shuffle(path) -> None:
    ds = StreamingGraphDataset(path, seed=3, shuffle_buffer_bytes=4096)
    e0, e1 = _ids(ds), _ids(ds)  # each pass advances the epoch
    assert sorted(e0) == sorted(e1) == list(range(N)) and e0 != e1
    plain = StreamingGraphDataset(path, shuffle=False, world_size=2, rank=1)
    assert _ids(plain) == [*range(102, N), 0]  # contiguous part, padded from the start


def test_resume_in_process_bit_identical(path) -> None:
    ds = StreamingGraphDataset(path, seed=9, shuffle_buffer_bytes=3000)
    ds.set_epoch(4)
    full = _ids(ds)
    ds.set_epoch(4)
    it = iter(ds)
    head = [int(next(it)["sid"]) for _ in range(57)]
    state = ds.state_dict()
    assert state["consumed"] == 57 and state["epoch"] == 4
    again = StreamingGraphDataset(path, seed=9, shuffle_buffer_bytes=3000)
    again.load_state_dict(state)
    rest = list(again)
    assert head + _ids(rest) == full
    for s in rest[:3]:  # resumed samples are real data, not placeholders
        assert set(s) == {"x", "edge_index", "edge_attr", "sid"}


def test_resume_two_workers_bit_identical(path) -> None:
    """A PlannedLoader's state after k batches (workers prefetched more) resumes at batch k+1."""
    plan = LoaderPlan(
        num_workers=2, prefetch_factor=2, batch_size=4, pin_memory=False, persistent_workers=False
    )

    def make():
        ds = StreamingGraphDataset(
            path, seed=2, rank=0, world_size=2, batch_size=4, shuffle_buffer_bytes=2000
        )
        loader = build_loader(ds, plan, rank=0, world_size=2, seed=2)
        loader.set_epoch(7)
        return loader

    full = [b.sid.tolist() for b in make()]
    assert len(full) == 26  # 51 + 51 samples per worker -> 13 batches each
    for consumed in (1, 25):
        loader = make()
        it = iter(loader)
        head = [next(it).sid.tolist() for _ in range(consumed)]
        state = loader.state_dict()
        del it
        again = make()
        again.load_state_dict(state)
        rest = [b.sid.tolist() for b in again]
        assert head + rest == full and state["source"]["epoch"] == 7


def test_shuffle_buffer_bounded_in_bytes() -> None:
    rng = np.random.default_rng(0)
    buf: ByteShuffleBuffer[int] = ByteShuffleBuffer(1000, rng)
    sizes = rng.integers(1, 200, 500)
    out = []
    for i, size in enumerate(sizes.tolist()):
        out += list(buf.push(i, size))
        assert buf.nbytes <= 1000
    out += list(buf.drain())
    assert sorted(out) == list(range(500)) and out != list(range(500))
    zero: ByteShuffleBuffer[int] = ByteShuffleBuffer(0, rng)
    assert [o for i in range(5) for o in zero.push(i, 1)] == list(range(5))


def test_live_queue_blocks_and_streams() -> None:
    schema = id_schema()
    q = LiveQueue(max_items=4, max_bytes=1 << 20)
    rng = np.random.default_rng(0)
    samples = [random_sample(rng, schema, i) for i in range(30)]
    q.put(samples[0])
    for s in samples[1:4]:
        q.put(s)
    with pytest.raises(TimeoutError, match="LiveQueue full"):
        q.put(samples[4], timeout=0.05)  # blocks instead of growing
    assert len(q) == 4

    def produce():
        for s in samples[4:]:
            q.put(s)
        q.close()

    t = threading.Thread(target=produce)
    t.start()
    time.sleep(0.05)
    assert len(q) <= 4
    ds = StreamingGraphDataset.live(q, schema, batch_size=7, shuffle_buffer_bytes=2000, seed=1)
    assert isinstance(ds, LiveGraphDataset)
    batches = list(DataLoader(ds, batch_size=None, num_workers=0))
    t.join()
    ids = [i for b in batches for i in b.sid.tolist()]
    assert sorted(ids) == list(range(30)) and [b.num_graphs for b in batches] == [7, 7, 7, 7, 2]
    with pytest.raises(QueueClosed):
        q.put(samples[0])
    gen = (s for s in samples[:5])  # a generator source works the same way
    assert sorted(_ids(LiveGraphDataset(gen, schema))) == list(range(5))
