"""WindowDataset: windows never cross episodes, follow one stream key, collate per step;
node matching by id."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from tj_data import (
    GraphStoreWriter,
    MmapGraphDataset,
    Schema,
    SchemaMismatchError,
    WindowDataset,
    match_nodes,
    match_nodes_batched,
)

SCHEMA = Schema.graph(
    node_features=2,
    edge_features=1,
    node_fields={"vid": "int64"},
    sample_fields={"episode": "int64", "intersection": "int64", "step": "int64"},
)
EPISODE_STEPS = [7, 3, 12]  # decision steps per episode
INTERSECTIONS = 3  # recorded interleaved within each step


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    path = tmp_path_factory.mktemp("w") / "s"
    rng = np.random.default_rng(0)
    with GraphStoreWriter(path, SCHEMA, shard_size=10) as w:
        for ep, steps in enumerate(EPISODE_STEPS):
            for t in range(steps):
                for k in range(INTERSECTIONS):
                    n = int(rng.integers(1, 5))
                    w.append(
                        {
                            "x": rng.random((n, 2)),
                            "edge_index": np.zeros((2, 0), int),
                            "edge_attr": np.zeros((0, 1)),
                            "vid": rng.permutation(10)[:n] + 100 * t,
                            "episode": ep,
                            "intersection": k,
                            "step": t,
                        }
                    )
            w.end_episode()
    return MmapGraphDataset(path)


def test_windows_never_cross_episodes(ds) -> None:
    win = WindowDataset(ds, window=4, horizon=2, stride=1)
    idx = win.window_indices(np.arange(len(win)))
    ends = ds.episode_ends
    for row in idx:
        assert np.all(np.diff(row) == 1)
        assert len(set(np.searchsorted(ends, row, side="right").tolist())) == 1
    total = sum(max(0, s * INTERSECTIONS - 6 + 1) for s in EPISODE_STEPS)
    assert len(win) == total


@pytest.mark.parametrize("stride", [1, 2])
def test_stream_key_follows_one_intersection(ds, stride) -> None:
    win = WindowDataset(ds, window=3, horizon=1, stride=stride, stream_key="intersection")
    expect = sum(INTERSECTIONS * len(range(0, s - 4 + 1, stride)) for s in EPISODE_STEPS)
    assert len(win) == expect  # the 3-step episode has no window of 4 steps
    loader = DataLoader(
        win,
        batch_size=5,
        shuffle=True,
        collate_fn=win.collate_fn,
        generator=torch.Generator().manual_seed(0),
    )
    n_windows = 0
    for steps in loader:
        assert len(steps) == 4
        inter = torch.stack([s.intersection for s in steps])
        ep = torch.stack([s.episode for s in steps])
        t = torch.stack([s.step for s in steps])
        assert (inter == inter[0]).all() and (ep == ep[0]).all()
        assert (t - t[0] == torch.arange(4)[:, None]).all()
        assert (t[0] % stride == 0).all()
        n_windows += steps[0].num_graphs
    assert n_windows == len(win)
    with pytest.raises(SchemaMismatchError, match="per-sample field"):
        WindowDataset(ds, window=2, stream_key="vid")


def test_match_nodes() -> None:
    ia, ib = match_nodes(np.array([5, 3, 9, 1]), np.array([1, 7, 5]))
    assert ia.tolist() == [3, 0] and ib.tolist() == [0, 2]
    from tj_data import collate_graphs

    def g(ids):
        return {
            "x": np.zeros((len(ids), 2), np.float32),
            "edge_index": np.zeros((2, 0), np.int32),
            "edge_attr": np.zeros((0, 1), np.float32),
            "vid": np.array(ids),
            "episode": 0,
            "intersection": 0,
            "step": 0,
        }

    a = collate_graphs([g([1, 2, 3]), g([2, 4])], schema=SCHEMA)
    b = collate_graphs([g([3, 2]), g([4, 1, 2])], schema=SCHEMA)
    pa, pb = match_nodes_batched(a, b, "vid")
    pairs = sorted(zip(pa.tolist(), pb.tolist(), strict=True))
    # graph 0: ids 2,3 match; graph 1: ids 2,4 match; id 1 of graph 1 (b) is not in graph 1 of a
    assert pairs == [(1, 1), (2, 0), (3, 4), (4, 2)]
    assert (a.vid[pa] == b.vid[pb]).all() and (a.batch[pa] == b.batch[pb]).all()
