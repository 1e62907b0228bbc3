"""Fixed-shape per-agent observation (DESIGN "RL observation"): the padded vehicle graph, phase
features, lane aggregates and the shield's ``action_mask``.

Keys and shapes (N = max_nodes, E = max_edges, P = green phases of the light, L = its incoming plus
outgoing lanes; with ``EnvConfig`` padding P and L are the scenario's maxima, ``padding.py``):

- ``nodes`` float32 [N, 9] (``features.NODE_FEATURES``), ``node_mask`` int8 [N]
- ``movement`` int64 [N]: each vehicle's movement index (its row of ``lanes``; -1 when that row is
  beyond ``max_lanes``; 0 for padding nodes)
- ``edge_index`` int64 [2, E] (neighbour, vehicle; padded with 0), ``edge_attr`` float32 [E, 4],
  ``edge_mask`` int8 [E]
- ``phase`` float32 [P + 3]: one-hot current green, in-clearance flag, time in green / max green
  (clipped to 1), min-green-reached flag (the three flags are always the last three entries)
- ``time_in_phase`` float32 [1]: seconds the current green has shown (0 during clearance)
- ``lanes`` float32 [L, 5] per movement (incoming lane with its upstream lanes, outgoing lane with its
  downstream lanes), over the vehicles within the observation radius: halting vehicles, occupancy
  (vehicles per 7.5 m of observed road), summed waiting time (s), and the moving vehicles (speed
  >= 0.1 m/s) that reach the stop line within 5 s and within 10 s at their speed (``ARRIVAL_S``;
  what a hold-or-switch call turns on: a green kept 5 s more serves the first);
  ``lane_mask`` int8 [L]: real rows
- ``phase_lanes`` int8 [P, L] (static): +1 on the incoming ``lanes`` rows green P serves, -1 on
  the outgoing rows its links feed, 0 elsewhere (padded rows and actions: 0). What a green does to
  which movements differs between lights; a policy shared by several lights reads it here.
- ``action_mask`` int8 [P]: 1 where the shield accepts that green now (padded actions: 0)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from tj_rl.env.features import EDGE_FEATURES, NODE_FEATURES, ROW_COLUMNS
from tj_rl.env.graphs import PaddedGraphs
from tj_rl.env.rewards import LaneStats
from tj_rl.env.topology import LightTopology

__all__ = [
    "ARRIVAL_S",
    "LANE_FEATURES",
    "LaneLayout",
    "assemble_observations",
    "lane_batch",
    "lane_capacity",
    "light_slices",
    "observation_space",
    "phase_features",
    "phase_values",
    "split_lanes",
]

ARRIVAL_S: tuple[float, float] = (5.0, 10.0)  # horizons of the two arrival columns
LANE_FEATURES: tuple[str, ...] = (
    "halting", "occupancy", "waiting_time", "arriving_5s", "arriving_10s"
)  # fmt: skip
_SPEED, _WAIT, _MOVE, _DIST = (
    ROW_COLUMNS.index(c) for c in ("speed", "waiting_time", "movement", "dist_to_stop_line")
)
_VEHICLE_SLOT = 7.5  # m per vehicle (length + min gap) for the occupancy feature


def lane_capacity(light: LightTopology, obs_radius: float) -> np.ndarray:
    """Vehicles that fit on each movement's observed road (7.5 m per vehicle), at least 1."""
    return np.maximum(np.minimum(light.movement_length, obs_radius) / _VEHICLE_SLOT, 1.0).astype(
        np.float32
    )


def observation_space(
    light: LightTopology,
    max_nodes: int,
    max_edges: int,
    *,
    n_phases: int | None = None,
    n_lanes: int | None = None,
) -> spaces.Dict:
    """The light's observation space; ``n_phases`` / ``n_lanes`` pad (or cut, for lanes) its
    ``phase`` / ``action_mask`` and ``lanes`` / ``lane_mask`` widths (default: its own)."""
    p = light.program.n_greens if n_phases is None else n_phases
    n_lanes = light.n_in + light.n_out if n_lanes is None else n_lanes
    inf = np.float32(np.inf)
    return spaces.Dict(
        {
            "nodes": spaces.Box(-inf, inf, (max_nodes, len(NODE_FEATURES)), np.float32),
            "node_mask": spaces.MultiBinary(max_nodes),
            "movement": spaces.Box(-1, max(n_lanes - 1, 0), (max_nodes,), np.int64),
            "edge_index": spaces.Box(0, max_nodes - 1, (2, max_edges), np.int64),
            "edge_attr": spaces.Box(-inf, inf, (max_edges, len(EDGE_FEATURES)), np.float32),
            "edge_mask": spaces.MultiBinary(max_edges),
            "phase": spaces.Box(0.0, 1.0, (p + 3,), np.float32),
            "time_in_phase": spaces.Box(0.0, inf, (1,), np.float32),
            "lanes": spaces.Box(0.0, inf, (n_lanes, len(LANE_FEATURES)), np.float32),
            "lane_mask": spaces.MultiBinary(n_lanes),
            "phase_lanes": spaces.Box(-1, 1, (p, n_lanes), np.int8),
            "action_mask": spaces.MultiBinary(p),
        }
    )


def phase_values(
    n_greens: int,
    current: int,
    in_clearance: bool,
    time_in_green: float,
    min_green: float,
    max_green: float,
) -> list[float]:
    """The ``phase`` features as a list (the env converts all lights' lists at once);
    ``n_greens`` is the one-hot's width (the light's greens, or the padded width)."""
    f = [0.0] * (n_greens + 3)
    f[current] = 1.0
    f[-3] = float(in_clearance)
    f[-2] = min(time_in_green / max_green, 1.0)
    f[-1] = float(not in_clearance and time_in_green >= min_green)
    return f


def phase_features(
    light: LightTopology,
    current: int,
    in_clearance: bool,
    time_in_green: float,
    min_green: float,
    max_green: float,
) -> np.ndarray:
    """float32 [P + 3]: one-hot current green, in-clearance flag, time in green / max green
    (clipped to 1), min-green-reached flag."""
    values = phase_values(
        light.program.n_greens, current, in_clearance, time_in_green, min_green, max_green
    )
    return np.array(values, np.float32)


@dataclass(frozen=True, kw_only=True)
class LaneLayout:
    """Where each light's movements sit in the concatenated per-step lane arrays (static)."""

    offsets: tuple[int, ...]  # first movement of each light
    sizes: tuple[int, ...]  # n_in + n_out of each light
    capacity: np.ndarray  # float32 [total]: lane_capacity of every light, concatenated
    offset_array: np.ndarray  # intp [L, 1]: offsets, for adding to movement indices
    incoming: np.ndarray  # bool [total]: the movement is an incoming (approach) lane

    @classmethod
    def of(cls, lights: Sequence[LightTopology], obs_radius: float) -> LaneLayout:
        sizes = tuple(lt.n_in + lt.n_out for lt in lights)
        offsets = tuple(int(o) for o in np.cumsum((0, *sizes[:-1])))
        capacity = np.concatenate([lane_capacity(lt, obs_radius) for lt in lights])
        incoming = np.concatenate([np.arange(lt.n_in + lt.n_out) < lt.n_in for lt in lights])
        return cls(
            offsets=offsets,
            sizes=sizes,
            capacity=capacity,
            offset_array=np.array(offsets, np.intp)[:, None],
            incoming=incoming,
        )

    @property
    def total(self) -> int:
        return int(self.capacity.shape[0])


def lane_batch(
    data: np.ndarray, counts: Sequence[int], layout: LaneLayout
) -> tuple[list[LaneStats], np.ndarray, float]:
    """Per-movement aggregates of every light's observed vehicles (all of them: before the node
    cap), the ``lanes`` observation rows [total, 5] float32 and the halting vehicles on all
    incoming lanes together (the system queue; exact: they are integer counts), with one bincount
    per column for all lights.

    ``data`` is ``session.LightReads.data`` [L, m, 16]: pad rows have speed NaN and waiting 0, so
    they add nothing to the halting and waiting sums; the counts are weighted by a real-row mask.
    Halting: speed < 0.1 m/s (SUMO's definition)."""
    width = data.shape[1]
    move = data[..., _MOVE].astype(np.intp)
    move += layout.offset_array
    move = move.ravel()
    total = layout.total
    if all(c == width for c in counts):
        count = np.bincount(move, minlength=total).astype(np.float32)
    else:
        real = np.arange(width) < np.asarray(counts)[:, None]
        count = np.bincount(move, weights=real.ravel(), minlength=total).astype(np.float32)
    halting = np.bincount(move, weights=data[..., _SPEED].ravel() < 0.1, minlength=total)
    waiting = np.bincount(move, weights=data[..., _WAIT].ravel(), minlength=total)
    feats = np.empty((total, len(LANE_FEATURES)), np.float32)
    feats[:, 0] = halting
    np.divide(count, layout.capacity, out=feats[:, 1])
    feats[:, 2] = waiting
    speed, dist = data[..., _SPEED].ravel(), data[..., _DIST].ravel()
    with np.errstate(invalid="ignore", divide="ignore"):  # pad rows: NaN speed, never arriving
        eta = np.where((speed >= 0.1) & (dist >= 0), dist / speed, np.inf)
    for col, horizon in enumerate(ARRIVAL_S, start=3):
        feats[:, col] = np.bincount(move, weights=eta <= horizon, minlength=total)
    return split_lanes(count, feats, layout), feats, float(halting[layout.incoming].sum())


def split_lanes(count: np.ndarray, feats: np.ndarray, layout: LaneLayout) -> list[LaneStats]:
    """Each light's ``LaneStats`` from the step's vehicle counts [total] float32 and ``lanes``
    rows (halting and waiting copied out, so the observation rows stay independent)."""
    halting, waiting = feats[:, 0].copy(), feats[:, 2].copy()
    return [
        LaneStats(count=count[o : o + n], halting=halting[o : o + n], waiting=waiting[o : o + n])
        for o, n in zip(layout.offsets, layout.sizes, strict=True)
    ]


def light_slices(
    phase_widths: Sequence[int], lane_widths: Sequence[int]
) -> list[tuple[slice, slice, slice]]:
    """Each light's (phase, lanes, action_mask) slice of the step's concatenated small arrays, from
    the per-light widths (P of the one-hot and mask, L of the lanes rows)."""
    out, phase, lane, mask = [], 0, 0, 0
    for p, n_lanes in zip(phase_widths, lane_widths, strict=True):
        out.append(
            (slice(phase, phase + p + 3), slice(lane, lane + n_lanes), slice(mask, mask + p))
        )
        phase, lane, mask = phase + p + 3, lane + n_lanes, mask + p
    return out


def assemble_observations(
    batch: PaddedGraphs,
    movement: np.ndarray,
    lane_feats: np.ndarray,
    lane_mask: np.ndarray,
    phases: np.ndarray,
    time_in_phase: np.ndarray,
    masks: np.ndarray,
    slices: Sequence[tuple[slice, slice, slice]],
    phase_lanes: Sequence[np.ndarray],
) -> list[dict[str, np.ndarray]]:
    """Every light's observation dict: views of the step's batched arrays (fresh every step), the
    graph arrays taken by iterating them (one C loop per key instead of an index per light).
    ``movement`` is int64 [lights, N]; ``lane_feats`` / ``lane_mask`` are laid out by ``slices``
    (padded rows included); ``time_in_phase`` is float32 [lights, 1]; ``phase_lanes`` are the
    lights' static [P, L] arrays (copied: an observation never aliases the env's state)."""
    return [
        {
            "nodes": nodes,
            "node_mask": node_mask,
            "movement": movement,
            "edge_index": edge_index,
            "edge_attr": edge_attr,
            "edge_mask": edge_mask,
            "phase": phases[sl[0]],
            "time_in_phase": tip,
            "lanes": lane_feats[sl[1]],
            "lane_mask": lane_mask[sl[1]],
            "phase_lanes": pl.copy(),
            "action_mask": masks[sl[2]],
        }
        for nodes, node_mask, movement, edge_index, edge_attr, edge_mask, tip, sl, pl in zip(
            batch.nodes,
            batch.node_mask,
            movement,
            batch.edge_index,
            batch.edge_attr,
            batch.edge_mask,
            time_in_phase,
            slices,
            phase_lanes,
            strict=True,
        )
    ]
