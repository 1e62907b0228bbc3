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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
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
    "build_graphs",
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


_SCALARS = itemgetter(
    tc.VAR_SPEED,
    tc.VAR_ACCELERATION,
    tc.VAR_ANGLE,
    tc.VAR_LANEPOSITION,
    tc.VAR_WAITING_TIME,
    tc.VAR_LENGTH,
)


def frame_from_subscription(
    results: Mapping[str, Mapping[int, Any]], lane_table: Mapping[str, tuple[int, float]]
) -> VehicleFrame:
    """Turn a context-subscription result (vehicle id -> {var: value}) into one array.

    Vehicles on lanes outside the light's lane table are dropped (they belong to no movement here).
    """
    kept = [(vid, d) for vid, d in results.items() if d[tc.VAR_LANE_ID] in lane_table]
    data = np.empty((len(kept), len(FRAME_COLUMNS)), np.float64)
    if kept:
        data[:, 0:2] = [d[tc.VAR_POSITION] for _, d in kept]
        data[:, 2:8] = [_SCALARS(d) for _, d in kept]
        data[:, 8:10] = [lane_table[d[tc.VAR_LANE_ID]] for _, d in kept]
    return VehicleFrame(tuple(vid for vid, _ in kept), data)


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
    xy: np.ndarray, light: np.ndarray, vel: np.ndarray, length: np.ndarray, cfg: GraphConfig
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """k-nearest edges within ``radius`` among nodes of the same light (``light`` [n] ids);
    sorted by (target, distance). Returns global edge_index [2, e], edge_attr [e, 4], lengths."""
    n = len(xy)
    if n < 2:
        return np.zeros((2, 0), np.int64), np.zeros((0, 4), np.float32), np.zeros(0)
    diff = xy[None, :, :] - xy[:, None, :]  # diff[i, j] = p_j - p_i
    dist2 = np.einsum("ijk,ijk->ij", diff, diff)
    dist2[light[:, None] != light[None, :]] = np.inf
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


def build_graphs(
    frames: Sequence[VehicleFrame],
    centres: Sequence[tuple[float, float]],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
    batch_nodes: int = 512,
) -> list[VehicleGraph]:
    """The graphs of several lights, computed together (one set of numpy calls per batch of up
    to ``batch_nodes`` vehicles instead of one per light: the per-call overhead dominates at
    a few dozen vehicles per light)."""
    out: list[VehicleGraph] = []
    start = 0
    while start < len(frames):
        stop, total = start, 0
        while stop < len(frames) and (stop == start or total + len(frames[stop]) <= batch_nodes):
            total += len(frames[stop])
            stop += 1
        out += _build_batch(frames[start:stop], centres[start:stop], cfg, max_nodes, max_edges)
        start = stop
    return out


def _build_batch(frames, centres, cfg, max_nodes, max_edges) -> list[VehicleGraph]:
    counts = np.array([len(f) for f in frames], np.int64)
    data = np.concatenate([f.data for f in frames]) if len(frames) > 1 else frames[0].data
    light = np.repeat(np.arange(len(frames)), counts)
    rel_all = data[:, 0:2] - np.asarray(centres, np.float64).reshape(-1, 2)[light]
    order = np.lexsort((np.einsum("ij,ij->i", rel_all, rel_all), light))  # by light, then distance
    first = np.concatenate([[0], np.cumsum(counts)[:-1]])
    kept = counts if max_nodes is None else np.minimum(counts, max_nodes)
    if max_nodes is not None and (counts > max_nodes).any():
        order = order[np.arange(len(order)) - first[light[order]] < max_nodes]
    d, lt = data[order], light[order]
    rad = np.deg2rad(d[:, _ANGLE])
    hx, hy = np.sin(rad), np.cos(rad)  # SUMO: clockwise from north -> unit vector (x, y)
    x = np.empty((len(d), len(NODE_FEATURES)), np.float32)
    x[:, 0:2] = rel_all[order]
    x[:, 2] = d[:, _SPEED]
    x[:, 3] = d[:, _ACCEL]
    x[:, 4] = hy
    x[:, 5] = hx
    x[:, 6] = d[:, _OFFSET] - d[:, _LANE_POS]
    x[:, 7] = d[:, _WAIT]
    x[:, 8] = d[:, _LEN]
    vel = np.stack([hx * d[:, _SPEED], hy * d[:, _SPEED]], axis=1)
    edge_index, edge_attr, r = _edges(d[:, 0:2], lt, vel, d[:, _LEN], cfg)
    movement = d[:, _MOVE].astype(np.int64)
    node_start = np.concatenate([[0], np.cumsum(kept)])
    edge_start = np.searchsorted(lt[edge_index[1]], np.arange(len(frames) + 1))
    graphs = []
    offset_all = np.concatenate([[0], np.cumsum(counts)])
    for i, f in enumerate(frames):
        a, b = node_start[i], node_start[i + 1]
        ea, eb = edge_start[i], edge_start[i + 1]
        ei, ea_attr, er = edge_index[:, ea:eb] - a, edge_attr[ea:eb], r[ea:eb]
        dropped_edges = 0
        if max_edges is not None and ei.shape[1] > max_edges:
            dropped_edges = ei.shape[1] - max_edges
            keep = np.sort(np.argsort(er, kind="stable")[:max_edges])
            ei, ea_attr = ei[:, keep], ea_attr[keep]
        local = order[a:b] - offset_all[i]
        graphs.append(
            VehicleGraph(
                ids=tuple(f.ids[j] for j in local),
                x=x[a:b],
                movement=movement[a:b],
                edge_index=ei,
                edge_attr=ea_attr,
                dropped_nodes=int(counts[i] - kept[i]),
                dropped_edges=dropped_edges,
            )
        )
    return graphs


def build_graph(
    frame: VehicleFrame,
    centre: tuple[float, float],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
) -> VehicleGraph:
    """Node features and k-nearest edges of one light; drops (and counts) the farthest nodes and
    the longest edges beyond the caps."""
    return build_graphs([frame], [centre], cfg, max_nodes=max_nodes, max_edges=max_edges)[0]
