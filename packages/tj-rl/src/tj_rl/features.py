"""Vehicle-graph features of one light at one decision step, vectorised in numpy.

Node features (``NODE_FEATURES``, DESIGN "Traffic snapshot"): position relative to the light's centre,
speed, acceleration, heading as a unit vector (angle counter-clockwise from +x: ``heading_cos`` is the
x component, ``heading_sin`` the y component), distance to the stop line along the lanes (negative
past it), waiting time, length. Edges link each vehicle to its ``k`` nearest neighbours within
``radius`` (message flows neighbour -> vehicle: ``edge_index[0]`` is the neighbour). Edge features:
``dx, dy`` (neighbour minus vehicle), closing speed (rate at which their distance shrinks) and
inverse time-to-collision: ``closing / gap`` for pairs on a collision course (closest approach within
``conflict_distance``), else 0, where gap is the centre distance minus half of both lengths.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import traci.constants as tc

__all__ = [
    "EDGE_FEATURES",
    "NODE_FEATURES",
    "VEHICLE_VARS",
    "GraphConfig",
    "VehicleFrame",
    "VehicleGraph",
    "build_graph",
    "frame_from_subscription",
]

NODE_FEATURES: tuple[str, ...] = (
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
EDGE_FEATURES: tuple[str, ...] = ("dx", "dy", "closing_speed", "inv_ttc")

# Vehicle variables subscribed around each light (context subscription); never fetched one by one.
VEHICLE_VARS: tuple[int, ...] = (
    tc.VAR_POSITION,
    tc.VAR_SPEED,
    tc.VAR_ACCELERATION,
    tc.VAR_ANGLE,
    tc.VAR_LANE_ID,
    tc.VAR_LANEPOSITION,
    tc.VAR_WAITING_TIME,
    tc.VAR_LENGTH,
)


@dataclass(frozen=True, kw_only=True)
class GraphConfig:
    """Edge radius (m), neighbour cap, conflict distance (m) for the TTC course test."""

    edge_radius: float = 30.0
    k_nearest: int = 4
    conflict_distance: float = 2.5

    def __post_init__(self) -> None:
        if self.edge_radius <= 0:
            raise ValueError(f"GraphConfig.edge_radius: {self.edge_radius}, must be > 0")
        if self.k_nearest < 1:
            raise ValueError(f"GraphConfig.k_nearest: {self.k_nearest}, must be >= 1")
        if self.conflict_distance <= 0:
            raise ValueError(
                f"GraphConfig.conflict_distance: {self.conflict_distance}, must be > 0"
            )


@dataclass(frozen=True, kw_only=True)
class VehicleFrame:
    """Raw state of the vehicles near one light (one row per vehicle)."""

    ids: tuple[str, ...]
    xy: np.ndarray  # float64 [n, 2]
    speed: np.ndarray  # float64 [n]
    accel: np.ndarray
    angle: np.ndarray  # SUMO degrees, clockwise from north
    lane_pos: np.ndarray
    waiting: np.ndarray
    length: np.ndarray
    movement: np.ndarray  # int64 [n]
    stop_offset: np.ndarray  # float64 [n]; dist_to_stop_line = stop_offset - lane_pos

    def __len__(self) -> int:
        return len(self.ids)


def frame_from_subscription(
    results: Mapping[str, Mapping[int, Any]], lane_table: Mapping[str, tuple[int, float]]
) -> VehicleFrame:
    """Turn a context-subscription result (vehicle id -> {var: value}) into arrays.

    Vehicles on lanes outside the light's lane table are dropped (they belong to no movement here).
    """
    ids: list[str] = []
    rows: list[tuple[float, ...]] = []
    for vid, d in results.items():
        entry = lane_table.get(d[tc.VAR_LANE_ID])
        if entry is None:
            continue
        x, y = d[tc.VAR_POSITION]
        ids.append(vid)
        rows.append(
            (
                x,
                y,
                d[tc.VAR_SPEED],
                d[tc.VAR_ACCELERATION],
                d[tc.VAR_ANGLE],
                d[tc.VAR_LANEPOSITION],
                d[tc.VAR_WAITING_TIME],
                d[tc.VAR_LENGTH],
                entry[0],
                entry[1],
            )
        )
    a = np.asarray(rows, dtype=np.float64).reshape(len(rows), 10)
    return VehicleFrame(
        ids=tuple(ids),
        xy=a[:, 0:2],
        speed=a[:, 2],
        accel=a[:, 3],
        angle=a[:, 4],
        lane_pos=a[:, 5],
        waiting=a[:, 6],
        length=a[:, 7],
        movement=a[:, 8].astype(np.int64),
        stop_offset=a[:, 9],
    )


@dataclass(frozen=True, kw_only=True)
class VehicleGraph:
    """Node and edge arrays of one light's vehicle graph, nodes sorted by distance to the centre."""

    ids: tuple[str, ...]
    x: np.ndarray  # float32 [n, 9]
    movement: np.ndarray  # int64 [n]
    edge_index: np.ndarray  # int64 [2, e], local node ids
    edge_attr: np.ndarray  # float32 [e, 4]
    dropped_nodes: int  # vehicles beyond max_nodes (farthest first)
    dropped_edges: int  # edges beyond max_edges (longest first)

    @property
    def num_nodes(self) -> int:
        return len(self.ids)


def _edges(
    xy: np.ndarray, vel: np.ndarray, length: np.ndarray, cfg: GraphConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = len(xy)
    if n < 2:
        return np.zeros((2, 0), np.int64), np.zeros((0, 4), np.float32), np.zeros(0)
    d = xy[None, :, :] - xy[:, None, :]  # d[i, j] = p_j - p_i
    dist = np.linalg.norm(d, axis=2)
    np.fill_diagonal(dist, np.inf)
    k = min(cfg.k_nearest, n - 1)
    nbr = (
        np.argpartition(dist, k - 1, axis=1)[:, :k]
        if k < n - 1
        else np.argsort(dist, axis=1)[:, :k]
    )
    dst = np.repeat(np.arange(n), k)
    src = nbr.reshape(-1)
    keep = dist[dst, src] <= cfg.edge_radius
    dst, src = dst[keep], src[keep]
    order = np.lexsort((dist[dst, src], dst))
    dst, src = dst[order], src[order]
    dp = xy[src] - xy[dst]
    dv = vel[src] - vel[dst]
    r = dist[dst, src]
    closing = -(dp * dv).sum(axis=1) / np.maximum(r, 1e-6)
    dv2 = (dv * dv).sum(axis=1)
    t_star = np.where(dv2 > 1e-9, -(dp * dv).sum(axis=1) / np.maximum(dv2, 1e-9), 0.0)
    closest = np.linalg.norm(dp + dv * t_star[:, None], axis=1)
    gap = np.maximum(r - 0.5 * (length[src] + length[dst]), 0.1)
    on_course = (closing > 0) & (t_star > 0) & (closest < cfg.conflict_distance)
    inv_ttc = np.where(on_course, closing / gap, 0.0)
    attr = np.stack([dp[:, 0], dp[:, 1], closing, inv_ttc], axis=1).astype(np.float32)
    return np.stack([src, dst]).astype(np.int64), attr, r


def build_graph(
    frame: VehicleFrame,
    centre: tuple[float, float],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
) -> VehicleGraph:
    """Node features and k-nearest edges; drops (and counts) the farthest nodes / longest edges."""
    rel = frame.xy - np.asarray(centre, dtype=np.float64)
    order = np.argsort(np.hypot(rel[:, 0], rel[:, 1]), kind="stable")
    dropped_nodes = 0
    if max_nodes is not None and len(order) > max_nodes:
        dropped_nodes = len(order) - max_nodes
        order = order[:max_nodes]
    rad = np.deg2rad(frame.angle[order])
    hx, hy = np.sin(rad), np.cos(rad)  # SUMO: clockwise from north -> unit vector (x, y)
    speed = frame.speed[order]
    x = np.stack(
        [
            rel[order, 0],
            rel[order, 1],
            speed,
            frame.accel[order],
            hy,
            hx,
            frame.stop_offset[order] - frame.lane_pos[order],
            frame.waiting[order],
            frame.length[order],
        ],
        axis=1,
    ).astype(np.float32)
    vel = np.stack([hx * speed, hy * speed], axis=1)
    edge_index, edge_attr, r = _edges(frame.xy[order], vel, frame.length[order], cfg)
    dropped_edges = 0
    if max_edges is not None and edge_index.shape[1] > max_edges:
        dropped_edges = edge_index.shape[1] - max_edges
        keep = np.sort(np.argsort(r, kind="stable")[:max_edges])
        edge_index, edge_attr = edge_index[:, keep], edge_attr[keep]
    return VehicleGraph(
        ids=tuple(frame.ids[i] for i in order),
        x=x.reshape(len(order), len(NODE_FEATURES)),
        movement=frame.movement[order],
        edge_index=edge_index,
        edge_attr=edge_attr,
        dropped_nodes=dropped_nodes,
        dropped_edges=dropped_edges,
    )
