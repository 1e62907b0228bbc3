"""Vectorised vehicle-graph features on hand-made frames with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from tj_rl.env import EDGE_FEATURES, NODE_FEATURES, GraphConfig, build_graph
from tj_rl.env.features import VehicleFrame


def _frame(xy, angle, speed, accel=None, lane_pos=None, movement=None, offset=None) -> VehicleFrame:
    n = len(xy)
    return VehicleFrame.from_columns(
        tuple(f"v{i}" for i in range(n)),
        xy=xy,
        speed=speed,
        accel=0.0 if accel is None else accel,
        angle=angle,
        lane_pos=0.0 if lane_pos is None else lane_pos,
        length=5.0,
        movement=0 if movement is None else movement,
        stop_offset=0.0 if offset is None else offset,
    )


def test_node_features_layout() -> None:
    # heading east (SUMO angle 90) at (110, 95); centre (100, 100); 30 m before its stop line
    f = _frame([[110.0, 95.0]], [90.0], [8.0], accel=[-1.5], lane_pos=[70.0], offset=[100.0])
    g = build_graph(f, (100.0, 100.0), GraphConfig())
    assert NODE_FEATURES == (
        "rel_x",
        "rel_y",
        "speed",
        "accel",
        "heading_sin",
        "heading_cos",
        "dist_to_stop_line",
        "waiting_time",
        "length",
    )
    np.testing.assert_allclose(g.x[0], [10, -5, 8, -1.5, 0, 1, 30, 0, 5], atol=1e-6)
    assert g.x.dtype == np.float32 and g.edge_index.shape == (2, 0) and g.edge_attr.shape == (0, 4)


def test_following_pair_ttc() -> None:
    # both northbound (angle 0) on one lane: follower at y=0 with 15 m/s, leader at y=20 with 5 m/s
    f = _frame([[0.0, 0.0], [0.0, 20.0]], [0.0, 0.0], [15.0, 5.0])
    g = build_graph(f, (0.0, 0.0), GraphConfig(edge_radius=30))
    assert EDGE_FEATURES == ("dx", "dy", "closing_speed", "inv_ttc")
    assert g.edge_index.shape == (2, 2)
    for (src, dst), attr in zip(g.edge_index.T, g.edge_attr, strict=True):
        sign = 1 if (src, dst) == (1, 0) else -1
        np.testing.assert_allclose(attr[:2], [0, 20 * sign], atol=1e-5)
        assert attr[2] == pytest.approx(10.0)  # closing at 10 m/s
        assert attr[3] == pytest.approx(10.0 / 15.0)  # gap = 20 - 5 m


def test_opposite_lanes_not_on_collision_course() -> None:
    # head-on in neighbouring lanes 3.2 m apart: closing fast, but never closer than 3.2 m
    f = _frame([[0.0, 0.0], [3.2, 40.0]], [0.0, 180.0], [10.0, 10.0])
    g = build_graph(f, (0.0, 0.0), GraphConfig(edge_radius=50))
    assert (g.edge_attr[:, 2] > 19).all() and (g.edge_attr[:, 3] == 0).all()
    # diverging vehicles: negative closing speed, no TTC
    f = _frame([[0.0, 0.0], [0.0, 10.0]], [180.0, 0.0], [5.0, 5.0])
    g = build_graph(f, (0.0, 0.0), GraphConfig())
    assert (g.edge_attr[:, 2] < 0).all() and (g.edge_attr[:, 3] == 0).all()


def test_radius_k_cap_and_overflow_counts() -> None:
    rng = np.random.default_rng(0)
    xy = rng.uniform(-40, 40, size=(30, 2))
    f = _frame(xy, rng.uniform(0, 360, 30), rng.uniform(0, 15, 30))
    cfg = GraphConfig(edge_radius=20.0, k_nearest=3)
    g = build_graph(f, (0.0, 0.0), cfg)
    dst_counts = np.bincount(g.edge_index[1], minlength=30)
    assert dst_counts.max() <= 3
    d = np.linalg.norm(g.x[g.edge_index[0], :2] - g.x[g.edge_index[1], :2], axis=1)
    assert (d <= 20.0 + 1e-4).all()
    np.testing.assert_allclose(
        g.edge_attr[:, :2], g.x[g.edge_index[0], :2] - g.x[g.edge_index[1], :2], atol=1e-4
    )
    # nodes sorted by distance to the centre; caps drop the farthest nodes / longest edges, counted
    r = np.hypot(g.x[:, 0], g.x[:, 1])
    assert (np.diff(r) >= -1e-5).all()
    capped = build_graph(f, (0.0, 0.0), cfg, max_nodes=10, max_edges=5)
    assert capped.num_nodes == 10 and capped.dropped_nodes == 20
    assert capped.edge_index.shape[1] == 5 and capped.dropped_edges > 0
    assert capped.ids == g.ids[:10]


def test_graph_config_errors() -> None:
    with pytest.raises(ValueError, match=r"GraphConfig\.k_nearest"):
        GraphConfig(k_nearest=0)
    with pytest.raises(ValueError, match=r"GraphConfig\.edge_radius"):
        GraphConfig(edge_radius=0)


def test_batched_lights_equal_one_by_one() -> None:
    from tj_rl.env import build_graphs

    rng = np.random.default_rng(1)
    frames, centres = [], []
    for n in (7, 0, 1, 25, 12):
        frames.append(
            _frame(rng.uniform(-50, 50, (n, 2)), rng.uniform(0, 360, n), rng.uniform(0, 15, n))
        )
        centres.append(tuple(rng.uniform(-5, 5, 2)))
    cfg = GraphConfig(edge_radius=25.0, k_nearest=3)
    for caps in ({}, {"max_nodes": 10, "max_edges": 12}):
        batched = build_graphs(frames, centres, cfg, batch_nodes=30, **caps)  # several batches
        for f, c, g in zip(frames, centres, batched, strict=True):
            one = build_graph(f, c, cfg, **caps)
            assert g.ids == one.ids and g.dropped_nodes == one.dropped_nodes
            assert g.dropped_edges == one.dropped_edges
            np.testing.assert_array_equal(g.x, one.x)
            np.testing.assert_array_equal(g.edge_index, one.edge_index)
            np.testing.assert_array_equal(g.edge_attr, one.edge_attr)
            assert (g.edge_index < max(g.num_nodes, 1)).all()


def test_chunked_batch_equals_one_batch() -> None:
    """With both caps, lights are processed in chunks bounded by the distance-tensor budget; the
    result is the same as one batch."""
    from tj_rl.env.graphs import graph_batch, stack_frames

    rng = np.random.default_rng(2)
    frames, centres = [], []
    for n in (9, 3, 0, 14, 6, 11):
        frames.append(
            _frame(rng.uniform(-40, 40, (n, 2)), rng.uniform(0, 360, n), rng.uniform(0, 15, n))
        )
        centres.append(tuple(rng.uniform(-5, 5, 2)))
    data, counts = stack_frames(frames, centres)
    cfg = GraphConfig(edge_radius=30.0, k_nearest=3)
    one = graph_batch(data, counts, cfg, max_nodes=12, max_edges=20)
    chunked = graph_batch(data, counts, cfg, max_nodes=12, max_edges=20, budget=2 * 12 * 12)
    for name in ("nodes", "node_mask", "movement", "edge_index", "edge_attr", "edge_mask"):
        np.testing.assert_array_equal(getattr(chunked, name), getattr(one, name), err_msg=name)
    assert chunked.num_nodes == one.num_nodes and chunked.dropped_edges == one.dropped_edges
    assert sum(one.dropped_nodes) > 0 and sum(one.dropped_edges) > 0
