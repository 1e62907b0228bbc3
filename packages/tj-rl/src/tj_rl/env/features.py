"""Vehicle-graph features of one light at one decision step: names, raw vehicle rows, graph type.

Node features (``NODE_FEATURES``, DESIGN "Traffic snapshot"): position relative to the light's centre,
speed, acceleration, heading as a unit vector (angle counter-clockwise from +x: ``heading_cos`` is the
x component, ``heading_sin`` the y component), distance to the stop line along the lanes (negative
past it), waiting time, length. Edges link each vehicle to its ``k`` nearest neighbours within
``radius`` (message flows neighbour -> vehicle: ``edge_index[0]`` is the neighbour). Edge features:
``dx, dy`` (neighbour minus vehicle), closing speed (rate at which their distance shrinks) and
inverse time-to-collision: ``closing / gap`` for pairs on a collision course (closest approach within
``conflict_distance``), else 0, where gap is the centre distance minus half of both lengths. They are
computed vectorised in numpy for all lights of a step together by ``graphs.graph_batch``.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np
import traci.constants as tc

__all__ = [
    "EDGE_FEATURES",
    "FRAME_COLUMNS",
    "FRAME_INDEX",
    "NODE_FEATURES",
    "PAD_BYTES",
    "PAD_ROW",
    "ROW_COLUMNS",
    "ROW_STRUCT",
    "VEHICLE_VARS",
    "GraphConfig",
    "VehicleFrame",
    "VehicleGraph",
    "frame_from_subscription",
    "subscription_rows",
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


# Rows of a step's vehicle table (``session.LightReads``), built in the Python pass that reads SUMO's
# results: first the node features exactly as NODE_FEATURES (so the observation is one copy), then
# the raw values the edges, lane aggregates and VehicleFrame need. A few float operations per
# vehicle there are far cheaper than the numpy calls they replace.
ROW_COLUMNS: tuple[str, ...] = (
    *NODE_FEATURES, "x", "y", "angle", "lane_pos", "movement", "stop_offset", "dist2"
)  # fmt: skip
# FRAME_COLUMNS as ROW_COLUMNS indices (VehicleFrame.data = rows[:, FRAME_INDEX])
FRAME_INDEX: tuple[int, ...] = tuple(
    ROW_COLUMNS.index("waiting_time" if c == "waiting" else c) for c in FRAME_COLUMNS
)
_NAN = float("nan")
# A padding row: NaN position, distance and speed (sorted last, never within an edge radius, never
# halting), zero elsewhere.
PAD_ROW: tuple[float, ...] = tuple(
    _NAN if c in ("rel_x", "rel_y", "speed", "x", "y", "dist2") else 0.0 for c in ROW_COLUMNS
)
_VALUES = itemgetter(*VEHICLE_VARS)
_DEG = math.pi / 180.0  # as math.radians and numpy.deg2rad
# one row as native float64 bytes: packing in the loop and one np.frombuffer over the joined bytes
# costs a third of converting a list of Python floats to numpy
ROW_STRUCT = struct.Struct(f"{len(ROW_COLUMNS)}d")
PAD_BYTES: bytes = ROW_STRUCT.pack(*PAD_ROW)


def subscription_rows(
    results: Mapping[str, Mapping[int, Any]],
    lane_table: Mapping[str, tuple[int, float]],
    centre: tuple[float, float],
    rows: list[bytes],
    ids: list[str],
) -> int:
    """Append the ``ROW_COLUMNS`` of every vehicle in a context-subscription result (vehicle id ->
    {var: value}), packed by ``ROW_STRUCT``, to ``rows`` and its id to ``ids``; return how many
    were kept.

    Vehicles on lanes outside the light's lane table are dropped (they belong to no movement here).
    One pass of plain Python over the dicts (they are Python objects already), one conversion to
    numpy later for all lights together: far cheaper than a numpy call per column and light.
    Heading: SUMO's angle is clockwise from north, so the unit vector is (sin, cos) of it.
    """
    get, add, add_id, pack = lane_table.get, rows.append, ids.append, ROW_STRUCT.pack
    cx, cy = centre
    sin, cos = math.sin, math.cos
    kept = 0
    for vid, d in results.items():
        (x, y), speed, accel, angle, lane, lane_pos, waiting, length = _VALUES(d)
        move = get(lane)
        if move is not None:
            rx, ry = x - cx, y - cy
            rad = angle * _DEG
            offset = move[1]
            add(pack(rx, ry, speed, accel, cos(rad), sin(rad), offset - lane_pos, waiting, length,
                     x, y, angle, lane_pos, move[0], offset, rx * rx + ry * ry))  # fmt: skip
            add_id(vid)
            kept += 1
    return kept


def frame_from_subscription(
    results: Mapping[str, Mapping[int, Any]], lane_table: Mapping[str, tuple[int, float]]
) -> VehicleFrame:
    """Turn a context-subscription result (vehicle id -> {var: value}) into one ``VehicleFrame``."""
    rows: list[bytes] = []
    ids: list[str] = []
    n = subscription_rows(results, lane_table, (0.0, 0.0), rows, ids)
    data = np.frombuffer(b"".join(rows), np.float64).reshape(n, len(ROW_COLUMNS))
    return VehicleFrame(tuple(ids), data[:, FRAME_INDEX])


@dataclass(kw_only=True, slots=True)
class VehicleGraph:
    """Node and edge arrays of one light's vehicle graph, nodes sorted by distance to the centre.

    A per-step value: treat it as read-only (not frozen: it is built for every light at every
    decision, and a frozen dataclass costs several times more to construct)."""

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
