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
    "FRAME_COLUMNS",
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


# columns of VehicleFrame.data
_X, _Y, _SPEED, _ACCEL, _ANGLE, _LANE_POS, _WAIT, _LEN, _MOVE, _OFFSET = range(10)
FRAME_COLUMNS = (
    "x", "y", "speed", "accel", "angle", "lane_pos", "waiting", "length", "movement", "stop_offset"
)  # fmt: skip


@dataclass(frozen=True)
class VehicleFrame:
    """Raw state of the vehicles near one light: ``data`` float64 [n, 10] with ``FRAME_COLUMNS``
    (position m, speed m/s, accel m/s^2, SUMO angle in degrees clockwise from north, lane position
    m, waiting time s, length m, movement index, stop-line offset m), one row per vehicle."""

    ids: tuple[str, ...]
    data: np.ndarray

    def __len__(self) -> int:
        return len(self.ids)

    @classmethod
    def from_columns(cls, ids: tuple[str, ...], **columns: Any) -> VehicleFrame:
        """Build from named columns (``xy`` [n, 2] or ``x``/``y``, and the other FRAME_COLUMNS)."""
        n = len(ids)
        data = np.zeros((n, len(FRAME_COLUMNS)), np.float64)
        if "xy" in columns:
            data[:, 0:2] = np.asarray(columns.pop("xy"), np.float64).reshape(n, 2)
        for name, value in columns.items():
            data[:, FRAME_COLUMNS.index(name)] = value
        return cls(tuple(ids), data)


def frame_from_subscription(
    results: Mapping[str, Mapping[int, Any]], lane_table: Mapping[str, tuple[int, float]]
) -> VehicleFrame:
    """Turn a context-subscription result (vehicle id -> {var: value}) into one array.

    Vehicles on lanes outside the light's lane table are dropped (they belong to no movement here).
    """
    ids: list[str] = []
    rows: list[tuple[float, ...]] = []
    get = lane_table.get
    for vid, d in results.items():
        entry = get(d[tc.VAR_LANE_ID])
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
    return VehicleFrame(tuple(ids), np.array(rows, dtype=np.float64).reshape(len(rows), 10))


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
    diff = xy[None, :, :] - xy[:, None, :]  # diff[i, j] = p_j - p_i
    dist2 = np.einsum("ijk,ijk->ij", diff, diff)
    np.fill_diagonal(dist2, np.inf)
    k = min(cfg.k_nearest, n - 1)
    nbr = np.argpartition(dist2, k - 1, axis=1)[:, :k]
    dst = np.repeat(np.arange(n), k)
    src = nbr.reshape(-1)
    d2 = dist2[dst, src]
    keep = d2 <= cfg.edge_radius * cfg.edge_radius
    dst, src, d2 = dst[keep], src[keep], d2[keep]
    order = np.lexsort((d2, dst))
    dst, src, d2 = dst[order], src[order], d2[order]
    r = np.sqrt(d2)
    dp = xy[src] - xy[dst]
    dv = vel[src] - vel[dst]
    dot = np.einsum("ij,ij->i", dp, dv)
    dv2 = np.einsum("ij,ij->i", dv, dv)
    closing = -dot / np.maximum(r, 1e-6)
    t_star = -dot / np.maximum(dv2, 1e-9)
    closest = dp + dv * t_star[:, None]
    closest2 = np.einsum("ij,ij->i", closest, closest)
    gap = np.maximum(r - 0.5 * (length[src] + length[dst]), 0.1)
    on_course = (closing > 0) & (closest2 < cfg.conflict_distance * cfg.conflict_distance)
    attr = np.empty((len(dst), 4), np.float32)
    attr[:, 0:2] = dp
    attr[:, 2] = closing
    attr[:, 3] = np.where(on_course, closing / gap, 0.0)
    return np.stack([src, dst]), attr, r


def build_graph(
    frame: VehicleFrame,
    centre: tuple[float, float],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
) -> VehicleGraph:
    """Node features and k-nearest edges; drops (and counts) the farthest nodes / longest edges."""
    rel_all = frame.data[:, 0:2] - np.asarray(centre, dtype=np.float64)
    order = np.argsort(np.einsum("ij,ij->i", rel_all, rel_all), kind="stable")
    dropped_nodes = 0
    if max_nodes is not None and len(order) > max_nodes:
        dropped_nodes = len(order) - max_nodes
        order = order[:max_nodes]
    d = frame.data[order]
    n = len(d)
    rad = np.deg2rad(d[:, _ANGLE])
    hx, hy = np.sin(rad), np.cos(rad)  # SUMO: clockwise from north -> unit vector (x, y)
    x = np.empty((n, len(NODE_FEATURES)), np.float32)
    x[:, 0:2] = rel_all[order]
    x[:, 2] = d[:, _SPEED]
    x[:, 3] = d[:, _ACCEL]
    x[:, 4] = hy
    x[:, 5] = hx
    x[:, 6] = d[:, _OFFSET] - d[:, _LANE_POS]
    x[:, 7] = d[:, _WAIT]
    x[:, 8] = d[:, _LEN]
    vel = np.empty((n, 2))
    vel[:, 0] = hx * d[:, _SPEED]
    vel[:, 1] = hy * d[:, _SPEED]
    edge_index, edge_attr, r = _edges(d[:, 0:2], vel, d[:, _LEN], cfg)
    dropped_edges = 0
    if max_edges is not None and edge_index.shape[1] > max_edges:
        dropped_edges = edge_index.shape[1] - max_edges
        keep = np.sort(np.argsort(r, kind="stable")[:max_edges])
        edge_index, edge_attr = edge_index[:, keep], edge_attr[keep]
    return VehicleGraph(
        ids=tuple(frame.ids[i] for i in order),
        x=x,
        movement=d[:, _MOVE].astype(np.int64),
        edge_index=edge_index,
        edge_attr=edge_attr,
        dropped_nodes=dropped_nodes,
        dropped_edges=dropped_edges,
    )
