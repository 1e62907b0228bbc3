"""One resumable-state protocol (tj_data.state): a PlannedLoader's state taken after k batches
resumes a fresh loader at exactly batch k + 1, on 2 ranks (rank/world explicit, no process
group), with 0 and 2 DataLoader workers, for the chunk sampler, the byte-budget batch sampler,
windows and the stream; states of another dataset, seed, world or kind are refused; states of
tj-data 0.1 ("offset") load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tjdata_testutil import id_schema, random_sample, write_store
from torch.distributed.checkpoint.stateful import Stateful

from tj_data import (
    ByteBudgetBatchSampler,
    ChunkShuffleSampler,
    DistributedChunkSampler,
    LiveGraphDataset,
    LoaderPlan,
    MmapGraphDataset,
    StreamingGraphDataset,
    WindowDataset,
    build_loader,
)
from tj_data.state import StateMismatchError

N = 101  # not divisible by 2 ranks x batch 4: padding and a short last batch


@pytest.fixture(scope="module")
def path(tmp_path_factory) -> Path:
    p = tmp_path_factory.mktemp("st") / "s"
    write_store(p, N, shard_size=10, seed=4, episode_every=25)
    return p


def _plan(workers: int, batch: int = 4) -> LoaderPlan:
    return LoaderPlan(
        num_workers=workers, prefetch_factor=2 if workers else None, batch_size=batch,
        pin_memory=False, persistent_workers=False,
    )  # fmt: skip


def _ids(batch) -> list[int]:
    return batch.sid.tolist() if hasattr(batch, "sid") else [s.sid.tolist() for s in batch]


def _make(kind: str, path: Path, rank: int, workers: int):
    """A fresh PlannedLoader for `kind` on `rank` of 2 (shuffled, seed 5)."""
    if kind == "stream":
        ds = StreamingGraphDataset(
            path, rank=rank, world_size=2, seed=5, batch_size=4, shuffle_buffer_bytes=2000
        )
        return build_loader(ds, _plan(workers), rank=rank, world_size=2, seed=5)
    ds = MmapGraphDataset(path)
    sampler = None
    if kind == "windows":
        ds = WindowDataset(ds, window=3, horizon=1)
    elif kind == "budget":
        cap = int(ds.size_index().nbytes.max() * 3)
        sampler = ByteBudgetBatchSampler(ds, max_bytes=cap, num_replicas=2, rank=rank, seed=5)
    return build_loader(ds, _plan(workers), sampler=sampler, rank=rank, world_size=2, seed=5)


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["chunk", "budget", "stream", "windows"])
def test_resume_after_k_batches_equals_an_uninterrupted_run(path, kind, workers) -> None:
    for rank in (0, 1):
        loader = _make(kind, path, rank, workers)
        full = [[_ids(b) for b in loader] for _ in range(2)]  # epochs 0 and 1
        assert len(full[0]) >= 8 and full[0] != full[1]
        k = 5
        loader = _make(kind, path, rank, workers)
        it = iter(loader)
        head = [_ids(next(it)) for _ in range(k)]  # workers have prefetched beyond these
        state = loader.state_dict()
        del it
        assert head == full[0][:k]
        assert (state["epoch"], state["consumed"]) == (0, k)
        fresh = _make(kind, path, rank, workers)
        fresh.load_state_dict(state)
        assert fresh.epoch == 0
        assert [_ids(b) for b in fresh] == full[0][k:]  # batch k + 1 first
        assert [_ids(b) for b in fresh] == full[1]  # then the next epoch, whole


def test_state_taken_with_each_batch_survives_look_ahead(path) -> None:
    """The documented way to report what the step consumed: keep the state taken right after
    each batch with it; a consumer that reads one batch ahead (gradient accumulation) saves
    the state of the last batch it used, also across an epoch end."""
    loader = _make("chunk", path, 1, 2)
    full = [[_ids(b) for b in loader] for _ in range(2)]
    loader = _make("chunk", path, 1, 2)

    def tagged():
        while True:
            for batch in loader:
                yield batch, loader.state_dict()

    stream = tagged()
    used = len(full[0]) + 2  # stop inside epoch 1
    for _ in range(used):
        _used, state = next(stream)
    ahead, _ = next(stream)  # read ahead, never used
    assert _ids(ahead) == full[1][2]
    fresh = _make("chunk", path, 1, 2)
    fresh.load_state_dict(state)
    assert fresh.epoch == 1 and [_ids(b) for b in fresh] == full[1][2:]


def test_state_at_the_end_of_an_epoch_resumes_with_the_next(path) -> None:
    loader = _make("chunk", path, 0, 0)
    full = [[_ids(b) for b in loader] for _ in range(2)]
    loader = _make("chunk", path, 0, 0)
    list(loader)
    state = loader.state_dict()
    assert state["consumed"] == len(full[0]) and state["source"]["consumed"] == 51
    fresh = _make("chunk", path, 0, 0)
    fresh.load_state_dict(state)
    assert list(fresh) == [] and [_ids(b) for b in fresh] == full[1]


def test_stream_with_workers_moves_to_a_new_epoch_and_forgets_a_resume(path) -> None:
    """Defect: with non-persistent workers, each pass streamed epoch 0 again (the workers copy
    the main process's dataset, whose epoch nothing advanced), and a loaded position was skipped
    again in the following epoch."""
    loader = _make("stream", path, 0, 2)
    epochs = [[_ids(b) for b in loader] for _ in range(3)]
    assert epochs[0] != epochs[1] != epochs[2] != epochs[0]
    it = iter(loader := _make("stream", path, 0, 2))
    [next(it) for _ in range(3)]
    state = loader.state_dict()
    del it
    fresh = _make("stream", path, 0, 2)
    fresh.load_state_dict(state)
    assert [_ids(b) for b in fresh] == epochs[0][3:]
    assert [_ids(b) for b in fresh] == epochs[1]  # whole: the resume is not applied again


def test_every_positioned_object_is_a_dcp_stateful(path) -> None:
    ds = MmapGraphDataset(path)
    objs = [
        DistributedChunkSampler(ds, num_replicas=2, rank=0),
        ChunkShuffleSampler(ds),
        ByteBudgetBatchSampler(ds, max_samples=4),
        StreamingGraphDataset(path),
        LiveGraphDataset([], id_schema()),
        _make("chunk", path, 0, 0),
    ]
    for obj in objs:
        assert isinstance(obj, Stateful)
        state = obj.state_dict()
        assert {"kind", "version", "epoch", "consumed"} <= set(state)
        obj.load_state_dict(state)  # its own state loads


def test_foreign_states_are_refused_by_name(path, tmp_path) -> None:
    ds = MmapGraphDataset(path)
    s = DistributedChunkSampler(ds, num_replicas=2, rank=0, seed=5)
    it = iter(s)
    [next(it) for _ in range(7)]
    state = s.state_dict()
    other = tmp_path / "other"
    write_store(other, N, shard_size=10, seed=99)  # same length, other content
    cases = [
        (
            DistributedChunkSampler(MmapGraphDataset(other), num_replicas=2, rank=0, seed=5),
            "dataset=",
        ),
        (DistributedChunkSampler(ds, num_replicas=2, rank=0, seed=6), "seed=5"),
        (DistributedChunkSampler(ds, num_replicas=3, rank=0, seed=5), "world_size=2"),
        (DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=5), "rank=0"),
        (ChunkShuffleSampler(ds, seed=5), "written by a DistributedChunkSampler"),
        (ByteBudgetBatchSampler(ds, max_samples=4), "written by a DistributedChunkSampler"),
    ]
    for target, match in cases:
        with pytest.raises(StateMismatchError, match=match):
            target.load_state_dict(state)
    win = WindowDataset(ds, window=3)
    with pytest.raises(StateMismatchError, match="dataset="):
        DistributedChunkSampler(win, num_replicas=2, rank=0, seed=5).load_state_dict(state)
    with pytest.raises(StateMismatchError, match="consumed=999 exceeds"):
        DistributedChunkSampler(ds, num_replicas=2, rank=0, seed=5).load_state_dict(
            {**state, "consumed": 999}
        )
    stream = _make("stream", path, 0, 2)
    with pytest.raises(StateMismatchError, match="num_workers=2"):  # another worker split
        _make("stream", path, 0, 0).load_state_dict(stream.state_dict())
    with pytest.raises(StateMismatchError, match="rank=0"):  # each rank loads its own
        _make("chunk", path, 1, 0).load_state_dict(_make("chunk", path, 0, 0).state_dict())


def test_states_of_tj_data_0_1_load(path) -> None:
    """tj-data 0.1 wrote {"offset", "num_replicas", ...} (no "version"): it still resumes."""
    ds = MmapGraphDataset(path)
    s = DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=5)
    s.set_epoch(2)
    full = list(s)
    old = {"epoch": 2, "offset": 17, "seed": 5, "num_replicas": 2, "rank": 1, "shuffle": True,
           "window_shards": 2, "num_samples": N}  # fmt: skip
    t = DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=5)
    t.load_state_dict(old)
    assert list(t) == full[17:]
    loader = _make("chunk", path, 1, 0)  # the loader takes its sampler's old state too
    loader.load_state_dict(old)
    assert loader.epoch == 2 and sum(len(_ids(b)) for b in loader) == len(full) - 17
    with pytest.raises(StateMismatchError, match="seed=5, this DistributedChunkSampler has 6"):
        DistributedChunkSampler(ds, num_replicas=2, rank=1, seed=6).load_state_dict(old)
    with pytest.raises(StateMismatchError, match="needs 'offset' or 'consumed'"):
        t.load_state_dict({k: v for k, v in old.items() if k != "offset"})


def test_live_dataset_keeps_epoch_and_count() -> None:
    schema = id_schema()
    samples = [random_sample(np.random.default_rng(i), schema, i) for i in range(9)]
    live = LiveGraphDataset(samples, schema, batch_size=2, shuffle_buffer_bytes=0)
    it = iter(live)
    [next(it) for _ in range(3)]
    state = live.state_dict()
    assert (state["epoch"], state["consumed"]) == (0, 3)
    again = LiveGraphDataset(samples, schema, batch_size=2, shuffle_buffer_bytes=0)
    again.load_state_dict(state)
    assert sum(1 for _ in again) == 5 and again.state_dict()["consumed"] == 8
    with pytest.raises(StateMismatchError, match="batch_size=2"):
        LiveGraphDataset(samples, schema, batch_size=3).load_state_dict(state)


def test_persistent_stream_workers_follow_epoch_jumps_and_loads(path) -> None:
    """Persistent workers keep their own copy of a stream (epoch, position): a jump of epochs or
    a load restarts them, so they stream what the loader says."""
    plan = LoaderPlan(
        num_workers=2, prefetch_factor=2, batch_size=4, pin_memory=False, persistent_workers=True
    )

    def make():
        ds = StreamingGraphDataset(
            path, rank=1, world_size=2, seed=5, batch_size=4, shuffle_buffer_bytes=2000
        )
        return build_loader(ds, plan, rank=1, world_size=2, seed=5)

    reference = _make("stream", path, 1, 2)
    full = [[_ids(b) for b in reference] for _ in range(3)]
    loader = make()
    assert [_ids(b) for b in loader] == full[0]
    loader.set_epoch(2)
    assert [_ids(b) for b in loader] == full[2]
    loader.set_epoch(0)
    it = iter(loader)
    [next(it) for _ in range(4)]
    state = loader.state_dict()
    del it
    loader.load_state_dict(state)  # the same loader, its workers alive
    assert [_ids(b) for b in loader] == full[0][4:]
    assert [_ids(b) for b in loader] == full[1]
