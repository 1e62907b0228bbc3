"""The synthetic traffic generator follows the snapshot contract it stands in for."""

from __future__ import annotations

import itertools

import pytest
import torch

from tj_models import FeatureLayout, edge_features, match_nodes
from tj_models.synthetic import SyntheticTrafficConfig, simulate_stream


def test_stream_follows_the_snapshot_contract() -> None:
    cfg = SyntheticTrafficConfig(steps=12, warmup_steps=6, arrival_rate=0.6)
    stream = simulate_stream(cfg, seed=3)
    assert len(stream) == 12
    for cur, nxt in itertools.pairwise(stream):
        n = cur.num_nodes
        assert cur.x.shape == (n, 9) and cur.y_next.shape == (n, 9) and torch.isfinite(cur.x).all()
        assert cur.movement.min() >= 0 and cur.movement.max() < 12
        assert set(cur.risk.unique().tolist()) <= {0.0, 1.0}
        # y_next is the same vehicle's x at the next step
        idx = match_nodes(
            torch.zeros(n, dtype=torch.long),
            cur.vehicle_id,
            torch.zeros(nxt.num_nodes, dtype=torch.long),
            nxt.vehicle_id,
            key_base=10**6,
        )
        assert torch.equal(cur.y_mask, idx >= 0)
        assert torch.equal(cur.y_next[cur.y_mask], nxt.x[idx[idx >= 0]])
        # edges and their features come from the shared geometry code
        assert torch.allclose(
            cur.edge_attr, edge_features(cur.x, cur.edge_index, FeatureLayout(), "math")
        )
        assert (cur.edge_index[0] != cur.edge_index[1]).all()
        # tj-rl's k nearest within the radius: at most 4 incoming edges, none longer than 30 m
        if cur.edge_index.numel():
            assert torch.bincount(cur.edge_index[1]).max() <= 4
            assert cur.edge_attr[:, :2].norm(dim=-1).max() <= 30.0 + 1e-4
        # math heading: velocity (speed*cos, speed*sin) is the direction of travel
        xy_moved = (cur.y_next[:, :2] - cur.x[:, :2])[cur.y_mask]
        heading = cur.x[cur.y_mask][:, [5, 4]]
        assert torch.all((xy_moved * heading).sum(-1) >= -1e-4)  # nobody drives backwards
    assert sum(float(s.risk.sum()) for s in stream) > 0  # dilemma-zone braking makes risk labels


def test_streams_are_reproducible() -> None:
    cfg = SyntheticTrafficConfig(steps=4, warmup_steps=2)
    a, b = simulate_stream(cfg, seed=5), simulate_stream(cfg, seed=5)
    assert all(
        torch.equal(x.x, y.x) and torch.equal(x.edge_index, y.edge_index)
        for x, y in zip(a, b, strict=True)
    )


def test_initial_vehicles_fill_the_first_step() -> None:
    cfg = SyntheticTrafficConfig(steps=3, warmup_steps=0, arrival_rate=0.0, initial_vehicles=15.0)
    first = [simulate_stream(cfg, seed=s)[0] for s in range(40)]
    counts = torch.tensor([float(d.num_nodes) for d in first])
    assert 11 < counts.mean() < 16  # Poisson(15), less the few that found no room on a lane
    for d in first:  # placed on the approaches, at least 15 m apart on a lane
        dist, lane = d.x[:, 6], d.movement
        for m in lane.unique():
            s = dist[lane == m].sort().values
            assert (s >= 0).all() and (s <= cfg.approach_length).all()
            assert (s.diff() >= 15.0 - 1e-3).all()
    empty = SyntheticTrafficConfig(steps=3, warmup_steps=0, arrival_rate=0.0)
    assert simulate_stream(empty, seed=0)[0].num_nodes == 0
    with pytest.raises(ValueError, match="initial_vehicles"):
        SyntheticTrafficConfig(initial_vehicles=-1.0)
