"""Fixed-shape per-agent observation (DESIGN "RL observation"): the padded vehicle graph, phase
features, lane aggregates and the shield's ``action_mask``.

Keys and shapes (N = max_nodes, E = max_edges, P = green phases of the light, L = its incoming plus
outgoing lanes):

- ``nodes`` float32 [N, 9] (``features.NODE_FEATURES``), ``node_mask`` int8 [N]
- ``edge_index`` int64 [2, E] (neighbour, vehicle; padded with 0), ``edge_attr`` float32 [E, 4],
  ``edge_mask`` int8 [E]
- ``phase`` float32 [P + 3]: one-hot current green, in-clearance flag, time in green / max green
  (clipped to 1), min-green-reached flag
- ``lanes`` float32 [L, 3] per movement (incoming lane with its upstream lanes, outgoing lane with its
  downstream lanes), over the vehicles within the observation radius: halting vehicles, occupancy
  (vehicles per 7.5 m of observed road), summed waiting time (s)
- ``action_mask`` int8 [P]: 1 where the shield accepts that green now
"""

from __future__ import annotations

import numpy as np
from gymnasium import spaces

from tj_rl.features import EDGE_FEATURES, NODE_FEATURES, VehicleGraph
from tj_rl.rewards import LaneStats
from tj_rl.topology import LightTopology

__all__ = [
    "LANE_FEATURES",
    "lane_capacity",
    "observation_space",
    "pad_observation",
    "phase_features",
]

LANE_FEATURES: tuple[str, ...] = ("halting", "occupancy", "waiting_time")
_VEHICLE_SLOT = 7.5  # m per vehicle (length + min gap) for the occupancy feature


def lane_capacity(light: LightTopology, obs_radius: float) -> np.ndarray:
    """Vehicles that fit on each movement's observed road (7.5 m per vehicle), at least 1."""
    return np.maximum(np.minimum(light.movement_length, obs_radius) / _VEHICLE_SLOT, 1.0).astype(
        np.float32
    )


def observation_space(light: LightTopology, max_nodes: int, max_edges: int) -> spaces.Dict:
    p = light.program.n_greens
    n_lanes = light.n_in + light.n_out
    inf = np.float32(np.inf)
    return spaces.Dict(
        {
            "nodes": spaces.Box(-inf, inf, (max_nodes, len(NODE_FEATURES)), np.float32),
            "node_mask": spaces.MultiBinary(max_nodes),
            "edge_index": spaces.Box(0, max_nodes - 1, (2, max_edges), np.int64),
            "edge_attr": spaces.Box(-inf, inf, (max_edges, len(EDGE_FEATURES)), np.float32),
            "edge_mask": spaces.MultiBinary(max_edges),
            "phase": spaces.Box(0.0, 1.0, (p + 3,), np.float32),
            "lanes": spaces.Box(0.0, inf, (n_lanes, len(LANE_FEATURES)), np.float32),
            "action_mask": spaces.MultiBinary(p),
        }
    )


def phase_features(
    light: LightTopology,
    current: int,
    in_clearance: bool,
    time_in_green: float,
    min_green: float,
    max_green: float,
) -> np.ndarray:
    p = light.program.n_greens
    f = np.zeros(p + 3, dtype=np.float32)
    f[current] = 1.0
    f[p] = float(in_clearance)
    f[p + 1] = min(time_in_green / max_green, 1.0)
    f[p + 2] = float(not in_clearance and time_in_green >= min_green)
    return f


def pad_observation(
    graph: VehicleGraph,
    light: LightTopology,
    lanes: LaneStats,
    phase: np.ndarray,
    action_mask: np.ndarray,
    max_nodes: int,
    max_edges: int,
    capacity: np.ndarray,
) -> dict[str, np.ndarray]:
    """Pad ``graph`` (already capped at max_nodes / max_edges) into the fixed-shape dict."""
    n, e = graph.num_nodes, graph.edge_index.shape[1]
    nodes = np.zeros((max_nodes, len(NODE_FEATURES)), np.float32)
    nodes[:n] = graph.x
    node_mask = np.zeros(max_nodes, np.int8)
    node_mask[:n] = 1
    edge_index = np.zeros((2, max_edges), np.int64)
    edge_index[:, :e] = graph.edge_index
    edge_attr = np.zeros((max_edges, len(EDGE_FEATURES)), np.float32)
    edge_attr[:e] = graph.edge_attr
    edge_mask = np.zeros(max_edges, np.int8)
    edge_mask[:e] = 1
    lane_feats = np.stack([lanes.halting, lanes.count / capacity, lanes.waiting], axis=1)
    return {
        "nodes": nodes,
        "node_mask": node_mask,
        "edge_index": edge_index,
        "edge_attr": edge_attr,
        "edge_mask": edge_mask,
        "phase": phase,
        "lanes": lane_feats.astype(np.float32),
        "action_mask": action_mask.astype(np.int8),
    }
