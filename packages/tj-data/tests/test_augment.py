"""Augmenter: deterministic given the seed, different across workers and epochs (real DataLoader
workers), vehicle-consistent jitter over a window, edge dropout bookkeeping, time shift bounds."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tjdata_traffic import traffic_schema, write_traffic

from tj_data import (
    AugmentConfig,
    Augmenter,
    GraphStoreWriter,
    LoaderPlan,
    MmapGraphDataset,
    SchemaMismatchError,
    WindowDataset,
    build_loader,
)

PHASE1 = AugmentConfig.preset("phase1", edge_dropout=0.3, node_mask=0.2)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_traffic(tmp_path_factory.mktemp("a") / "s", episodes=2, steps=30)


def test_presets_and_bad_columns() -> None:
    assert AugmentConfig.preset("phase2").enabled is False
    p3 = AugmentConfig.preset("phase3")
    assert p3.time_shift > 0 and p3.speed_noise > 0 and p3.position_jitter == 0
    assert p3.edge_dropout == 0 and p3.node_mask == 0
    p1 = AugmentConfig.preset("phase1")
    assert all(
        getattr(p1, k) > 0
        for k in ("time_shift", "speed_noise", "position_jitter", "edge_dropout", "node_mask")
    )
    with pytest.raises(SchemaMismatchError, match=r"field 'x' has no columns \['velocity'\]"):
        Augmenter(
            AugmentConfig(speed_noise=1.0, speed_columns={"x": ["velocity"]}), traffic_schema()
        )
    with pytest.raises(ValueError, match="edge_dropout"):
        AugmentConfig(edge_dropout=1.5)
    with pytest.raises(ValueError, match="preset 'phase9'"):
        AugmentConfig.preset("phase9")


def test_deterministic_and_bookkeeping(store: Path) -> None:
    ds = MmapGraphDataset(store)
    idx = list(range(40))

    def run(seed: int) -> torch.Tensor:
        b = Augmenter(PHASE1, ds.schema, seed=seed)(ds.collate_fn(ds.__getitems__(idx)))
        e = b.edge_ptr
        assert e[-1] == b.num_edges == b.edge_attr.shape[0]
        assert torch.equal(b.batch, ds.collate_fn(ds.__getitems__(idx)).batch)  # nodes kept
        # edges still join nodes of their own graph
        assert torch.equal(b.batch[b.edge_index[0]], b.batch[b.edge_index[1]])
        return torch.cat([b.x.reshape(-1), b.edge_attr.reshape(-1)])

    a, b, c = run(5), run(5), run(6)
    assert torch.equal(a, b) and not torch.equal(a, c)
    plain = ds.collate_fn(ds.__getitems__(idx))
    out = Augmenter(PHASE1, ds.schema, seed=1)(ds.collate_fn(ds.__getitems__(idx)))
    assert out.num_edges < plain.num_edges  # 30% dropped
    assert float(out.x[:, 2].min()) >= 0.0  # speed clipped at speed_min


def test_explicit_generator_keys_the_draws(store: Path) -> None:
    """A caller-keyed generator (e.g. by position in the epoch) decides the draws, not the
    seed context's per-process call count: the same key gives the same batch, in any order."""
    ds = MmapGraphDataset(store)
    win = WindowDataset(ds, window=3, stream_key="intersection")
    aug = Augmenter(PHASE1.__class__.preset("phase1", time_shift=0), ds.schema, seed=0)

    def draw(key: int) -> torch.Tensor:
        steps = aug.apply_window(
            win.collate_fn(win.__getitems__([1, 4])), rng=np.random.default_rng(key)
        )
        return torch.cat([s.x.reshape(-1) for s in steps])

    first = draw(11)
    draw(12)  # other calls in between do not shift the stream
    assert torch.equal(draw(11), first) and not torch.equal(draw(12), first)


def test_window_jitter_follows_the_vehicle(store: Path) -> None:
    ds = MmapGraphDataset(store)
    cfg = AugmentConfig(position_jitter=2.0)
    win = WindowDataset(ds, window=4, stream_key="intersection")
    raw = win.collate_fn(win.__getitems__([0, 3, 7]))
    aug = Augmenter(cfg, ds.schema, seed=0).apply_window(
        win.collate_fn(win.__getitems__([0, 3, 7]))
    )
    offsets: dict[tuple[int, int], torch.Tensor] = {}
    for r, a in zip(raw, aug, strict=True):
        d = a.x[:, :2] - r.x[:, :2]
        assert float(d.abs().max()) <= 2.0 + 1e-5 and float(d.abs().max()) > 0
        for i in range(r.num_nodes):
            key = (int(r.batch[i]), int(r.vehicle_id[i]))
            if key in offsets:
                assert torch.allclose(offsets[key], d[i], atol=1e-5)  # same vehicle, same offset
            offsets[key] = d[i]
        ei = r.edge_index
        want = d[ei[0]] - d[ei[1]]  # dx = neighbour - vehicle follows the jitter
        assert torch.allclose(a.edge_attr[:, :2] - r.edge_attr[:, :2], want, atol=1e-4)


def test_time_shift_stays_in_stream(store: Path) -> None:
    ds = MmapGraphDataset(store)
    aug = Augmenter(AugmentConfig(time_shift=3), ds.schema, seed=0)
    plain = WindowDataset(ds, window=5, horizon=1, stream_key="intersection")
    shifted = WindowDataset(ds, window=5, horizon=1, stream_key="intersection", transforms=[aug])
    w = np.arange(len(plain))
    a, b = plain.window_indices(w), shifted.window_indices(w)
    assert not np.array_equal(a, b)
    st = ds.store
    inter = np.concatenate([st.shard_arrays(k)["intersection"] for k in range(st.num_shards)])
    episode = np.searchsorted(st.episode_ends, b, side="right")
    assert (inter[b] == inter[b[:, :1]]).all() and (episode == episode[:, :1]).all()
    assert (np.abs(b[:, 0] - a[:, 0]) <= 3 * 2).all()  # 3 steps of 2 interleaved streams


def _identical_store(path: Path, n: int = 48) -> Path:
    x = np.tile(np.arange(9, dtype=np.float32), (6, 1)) + 10
    with GraphStoreWriter(path, traffic_schema(), shard_size=16) as w:
        for _i in range(n):
            w.append(
                {
                    "x": x, "vehicle_id": np.arange(6), "y_next": x,
                    "edge_index": np.array([[0, 1, 2], [1, 2, 3]]),
                    "edge_attr": np.ones((3, 4), np.float32), "intersection": 0, "sim_time": 0.0,
                }
            )  # fmt: skip
    return path


def test_workers_epochs_and_seeds_differ(tmp_path: Path) -> None:
    ds = MmapGraphDataset(_identical_store(tmp_path / "same"), transforms=[])
    cfg = AugmentConfig(speed_noise=1.0)
    plan = LoaderPlan(
        num_workers=2, prefetch_factor=1, batch_size=8, pin_memory=False, persistent_workers=True
    )

    def epochs(seed: int) -> list[list[torch.Tensor]]:
        ds.transforms = (Augmenter(cfg, ds.schema, seed=seed),)
        loader = build_loader(ds, plan, shuffle=False, seed=seed)
        return [[b.x[:, 2].clone() for b in loader] for _ in range(2)]  # epoch 0, then 1

    first, again, other = epochs(0), epochs(0), epochs(1)
    e0, e1 = first
    assert all(torch.equal(a, b) for a, b in zip(e0, again[0], strict=True))  # deterministic
    assert all(torch.equal(a, b) for a, b in zip(e1, again[1], strict=True))
    assert not torch.equal(e0[0], e0[1])  # batch 0 (worker 0) vs batch 1 (worker 1)
    assert len({tuple(b.tolist()) for b in e0}) == len(e0)  # no two batches alike
    assert not any(torch.equal(a, b) for a, b in zip(e0, e1, strict=True))  # epochs differ
    assert not torch.equal(e0[0], other[0][0])  # seeds differ
