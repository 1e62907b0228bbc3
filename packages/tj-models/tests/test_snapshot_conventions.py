"""The rollout rebuilds edges exactly as tj-rl records the snapshots (hand-computed scene).

The expected numbers mirror ``tj_rl.features._edges`` (math heading, k nearest within the radius,
message neighbour -> vehicle, inverse TTC = closing / bumper gap on a collision course only). They
are written out by hand because tj-models must not import tj-rl.
"""

from __future__ import annotations

import pytest
import torch

from tj_models import FeatureLayout, RolloutConfig, edge_features
from tj_models.feedback import next_graph
from tj_models.graph import GraphInput

LAYOUT = FeatureLayout()


def _vehicle(x: float, y: float, direction: tuple[float, float], speed: float, length: float):
    """One node row; ``direction`` = (cos, sin) of the heading, math convention."""
    row = torch.zeros(9)
    row[LAYOUT.rel_x], row[LAYOUT.rel_y], row[LAYOUT.speed] = x, y, speed
    row[LAYOUT.heading_cos], row[LAYOUT.heading_sin] = direction
    row[LAYOUT.length] = length
    return row


EAST, WEST, NORTH = (1.0, 0.0), (-1.0, 0.0), (0.0, 1.0)

# one pair per graph: (vehicle a, vehicle b, features of edge b -> a, features of edge a -> b)
PAIRS = {
    # rear-end course: 10 m/s towards a stopped car 25 m ahead; gap 25 - (4 + 6)/2 = 20 -> 10/20
    "collision_course": (
        _vehicle(0, 0, EAST, 10, 4),
        _vehicle(25, 0, EAST, 0, 6),
        [25, 0, 10, 0.5],
        [-25, 0, 10, 0.5],
    ),
    # closing at 12 m/s but passing 6 m apart (closest approach 6 > 2.5): not a conflict
    "closing_passing_wide": (
        _vehicle(0, 0, EAST, 10, 4),
        _vehicle(8, 6, WEST, 5, 4),
        [8, 6, 12, 0],
        [-8, -6, 12, 0],
    ),
    # the follower is slower: distance grows at 3 m/s
    "separating": (
        _vehicle(0, 0, EAST, 5, 4.5),
        _vehicle(10, 0, EAST, 8, 4.5),
        [10, 0, -3, 0],
        [-10, 0, -3, 0],
    ),
    # same velocity: no closing, no conflict, and no 0/0 in the closest-approach time
    "zero_relative_velocity": (
        _vehicle(0, 0, EAST, 10, 4.5),
        _vehicle(5, 0, EAST, 10, 4.5),
        [5, 0, 0, 0],
        [-5, 0, 0, 0],
    ),
    # crossing paths, both at the conflict point in 1 s: dp = (12, -16), dv = (-12, 16),
    # closing 400 / 20 = 20, gap 20 - (6 + 14)/2 = 10 -> 2 (under SUMO's angle they would not meet)
    "crossing": (
        _vehicle(-12, 0, EAST, 12, 6),
        _vehicle(0, -16, NORTH, 16, 14),
        [12, -16, 20, 2],
        [-12, 16, 20, 2],
    ),
    # bumpers already overlap (4 m apart, 5 m cars): the gap floors at 0.1 -> 1 / 0.1
    "overlapping": (
        _vehicle(0, 0, EAST, 3, 5),
        _vehicle(4, 0, EAST, 2, 5),
        [4, 0, 1, 10],
        [-4, 0, 1, 10],
    ),
    # stopped car 2.4 m to the side (< 2.5): dp = (7, 2.4), |dp| = 7.4, closing 7.4 * 7 / 7.4 = 7,
    # gap 7.4 - 4.4 = 3 -> 7/3
    "near_miss_inside_conflict_distance": (
        _vehicle(0, 0, EAST, 7.4, 4.4),
        _vehicle(7, 2.4, EAST, 0, 4.4),
        [7, 2.4, 7, 7 / 3],
        [-7, -2.4, 7, 7 / 3],
    ),
}


def _graph(rows: list[torch.Tensor], counts: list[int]) -> GraphInput:
    x = torch.stack(rows)
    ptr = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()])
    batch = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    return GraphInput(
        x=x,
        edge_index=torch.zeros(2, 0, dtype=torch.long),
        edge_attr=torch.zeros(0, 4),
        batch=batch,
        ptr=ptr,
    )


def _pair_scene() -> tuple[GraphInput, torch.Tensor, torch.Tensor]:
    rows, src, dst, attr = [], [], [], []
    for i, (a, b, b_to_a, a_to_b) in enumerate(PAIRS.values()):
        rows += [a, b]
        src += [2 * i + 1, 2 * i]
        dst += [2 * i, 2 * i + 1]
        attr += [b_to_a, a_to_b]
    return _graph(rows, [2] * len(PAIRS)), torch.tensor([src, dst]), torch.tensor(attr)


def test_rollout_edges_match_the_hand_computed_snapshot() -> None:
    graph, edge_index, expected = _pair_scene()
    active = torch.ones(graph.num_nodes, dtype=torch.bool)
    out = next_graph(graph, graph.x, active, None, None, LAYOUT, RolloutConfig())
    assert torch.equal(out.edge_index, edge_index)
    for name, got, want in zip(
        [n for n in PAIRS for _ in (0, 1)], out.edge_attr, expected, strict=True
    ):
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-5), (name, got, want)


def test_conflict_distance_is_the_collision_course_threshold() -> None:
    graph, edge_index, expected = _pair_scene()
    near_miss = list(PAIRS).index("near_miss_inside_conflict_distance")
    tight = edge_features(graph.x, edge_index, LAYOUT, "math", conflict_distance=2.3)
    assert not tight[2 * near_miss : 2 * near_miss + 2, 3].any()  # 2.4 m to the side: off course
    others = torch.ones(len(expected), dtype=torch.bool)
    others[2 * near_miss : 2 * near_miss + 2] = False
    assert torch.allclose(tight[others], expected[others], rtol=1e-5, atol=1e-5)


def test_sumo_heading_reads_swapped_components() -> None:
    graph, edge_index, expected = _pair_scene()
    x = graph.x.clone()  # SUMO angle: heading_sin is the x component, heading_cos the y component
    x[:, [LAYOUT.heading_sin, LAYOUT.heading_cos]] = graph.x[
        :, [LAYOUT.heading_cos, LAYOUT.heading_sin]
    ]
    sumo = edge_features(x, edge_index, LAYOUT, "sumo")
    assert torch.allclose(sumo, expected, rtol=1e-5, atol=1e-5)
    crossing = list(PAIRS).index("crossing")  # the math reading of SUMO data misses the conflict
    assert edge_features(x, edge_index, LAYOUT, "math")[2 * crossing, 3] == 0
    with pytest.raises(ValueError, match="heading"):
        edge_features(x, edge_index, LAYOUT, "north")


def test_edge_features_stay_finite_and_differentiable() -> None:
    graph, edge_index, _ = _pair_scene()
    x = graph.x.clone().requires_grad_(True)
    attr = edge_features(x, edge_index, LAYOUT)
    attr.sum().backward()
    assert torch.isfinite(attr).all() and torch.isfinite(x.grad).all()
    collision = list(PAIRS).index("collision_course")
    # a longer car shortens the gap: d(closing / gap)/d(length) = 0.5 * closing / gap^2 per edge,
    # two edges -> 2 * 0.5 * 10 / 20^2
    assert x.grad[2 * collision, LAYOUT.length].item() == pytest.approx(0.025, rel=1e-5)


def test_edges_are_the_k_nearest_within_the_radius() -> None:
    # on a line at x = 0, 3, 7, 12, 18, 25, 60: each vehicle receives from its 4 nearest within
    # 30 m, sorted by distance (tj-rl's order); the one at 60 m has nobody within 30 m
    rows = [_vehicle(p, 0, EAST, 0, 4) for p in (0, 3, 7, 12, 18, 25, 60)]
    graph = _graph(rows, [7])
    active = torch.ones(7, dtype=torch.bool)
    out = next_graph(graph, graph.x, active, None, None, LAYOUT, RolloutConfig())
    sources = {0: [1, 2, 3, 4], 1: [0, 2, 3, 4], 2: [1, 3, 0, 4], 3: [2, 4, 1, 0]}
    sources |= {4: [3, 5, 2, 1], 5: [4, 3, 2, 1]}
    want = [(s, d) for d, ss in sources.items() for s in ss]
    assert list(map(tuple, out.edge_index.t().tolist())) == want
