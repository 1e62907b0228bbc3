"""The env's per-step feature computations compiled with numba (``EnvConfig(kernel="numba")``):
``graphs.graph_batch``, ``observation.lane_batch`` and ``costs.safety_counts``, each giving the
numpy version's arrays bit for bit in one call.

Why a second implementation: at a few dozen vehicles per light the numpy version's time is numpy's
per-call overhead (~40 calls per step), and each SUMO step evicts the caches that machinery relies
on, so it costs ~2x its warm time inside the env loop. One compiled loop nest has no such overhead,
and it needs no [L, n, n] distance tensor: each vehicle keeps its ``k`` nearest neighbours in a
small sorted buffer while it scans the others.

Same results as numpy by construction, checked bit for bit in the tests (random batches with ties
and binding caps, and recorded SUMO steps): nodes are ordered by an
insertion sort on the squared distance (stable, like numpy's stable argsort), neighbours by
(distance, node index) as a stable argsort of the distance row gives them, the edge cap keeps the
shortest edges with ties by edge order (a stable argsort of the lengths), and every float
expression is evaluated in numpy's order without contraction into fused multiply-adds (numba's
default without ``fastmath``).

Costs, paid only by processes that choose this kernel (development VM, README "Feature kernels"):
numba's import and its LLVM library, +120 MiB PSS for a single env process (245 against 125 MiB)
and +63 MiB per process when four env processes share the library pages; ~0.8 s more start-up
with a warm cache; on the first run after an install or an edit of this file, ~12 s to compile the
kernels (numba caches the machine code in ``__pycache__`` next to this file, or in its user cache
directory where that is read-only).
"""

from __future__ import annotations

import numpy as np

try:
    import numba
except ImportError as exc:  # a dependency of tj-rl; say which kernel needs it
    raise ImportError(
        f"EnvConfig(kernel='numba') needs numba, which failed to import: {exc}. Install numba "
        "or use kernel='numpy'."
    ) from exc

from tj_rl.env.features import EDGE_FEATURES, NODE_FEATURES, GraphConfig
from tj_rl.env.graphs import PaddedGraphs
from tj_rl.env.observation import ARRIVAL_S, LANE_FEATURES, LaneLayout, split_lanes
from tj_rl.env.rewards import LaneStats

__all__ = ["graph_batch_numba", "lane_batch_numba", "safety_counts_numba"]

_NF, _EF = len(NODE_FEATURES), len(EDGE_FEATURES)
# ROW_COLUMNS indices (as in graphs.py)
_SPEED, _HSIN, _HCOS, _LEN = 2, 4, 5, 8
_WAIT = 7
_DIST = NODE_FEATURES.index("dist_to_stop_line")
_X, _Y, _MOVE, _KEY = _NF, _NF + 1, _NF + 4, _NF + 6
_NL = len(LANE_FEATURES)
_SOON, _LATER = ARRIVAL_S


@numba.njit(cache=True, nogil=True)
def _kernel(data, counts, max_nodes, max_edges, k, radius2, conflict2):  # pragma: no cover - jit
    # numpy's graph_batch takes k = min(k, n - 1); a vehicle never has more than n - 1 candidates,
    # so the plain k selects the same neighbours
    n_lights, m = data.shape[0], data.shape[1]
    kept = np.minimum(counts, max_nodes)
    n = 0
    for li in range(n_lights):
        n = max(n, kept[li])
    nodes = np.zeros((n_lights, max_nodes, _NF), np.float32)
    node_mask = np.zeros((n_lights, max_nodes), np.int8)
    movement = np.zeros((n_lights, max_nodes), np.int64)
    edge_index = np.zeros((n_lights, 2, max_edges), np.int64)
    edge_attr = np.zeros((n_lights, max_edges, _EF), np.float32)
    edge_mask = np.zeros((n_lights, max_edges), np.int8)
    order = np.empty((n_lights, n), np.intp)
    num_edges = np.zeros(n_lights, np.int64)
    dropped_edges = np.zeros(n_lights, np.int64)
    # per-light scratch: the row of each node, its k nearest (distance^2, node) and the edges
    rows = np.empty(m, np.intp)
    best_d = np.empty(k, np.float64)
    best_j = np.empty(k, np.intp)
    e_src = np.empty(max(n * k, 1), np.intp)
    e_dst = np.empty(max(n * k, 1), np.intp)
    e_d2 = np.empty(max(n * k, 1), np.float64)
    for li in range(n_lights):
        c, nk = counts[li], kept[li]
        key = data[li, :, _KEY]
        # stable insertion sort of the real rows by squared distance; pad rows keep their places
        for i in range(c):
            v = key[i]
            p = i
            while p > 0 and key[rows[p - 1]] > v:
                rows[p] = rows[p - 1]
                p -= 1
            rows[p] = i
        for i in range(c, m):
            rows[i] = i
        for i in range(n):
            order[li, i] = rows[i]
        for i in range(nk):
            r = data[li, rows[i]]
            for f in range(_NF):
                nodes[li, i, f] = r[f]
            node_mask[li, i] = 1
            movement[li, i] = np.int64(r[_MOVE])
        # k nearest neighbours within the radius, nearest first, ties by node index
        ne = 0
        for i in range(nk):
            xi, yi = data[li, rows[i], _X], data[li, rows[i], _Y]
            nb = 0
            for j in range(nk):
                if j == i:
                    continue
                dx = data[li, rows[j], _X] - xi
                dy = data[li, rows[j], _Y] - yi
                d2 = dx * dx + dy * dy
                if not d2 <= radius2 or (nb == k and not d2 < best_d[k - 1]):
                    continue
                p = nb if nb < k else k - 1  # full: the last one falls out
                while p > 0 and best_d[p - 1] > d2:
                    best_d[p], best_j[p] = best_d[p - 1], best_j[p - 1]
                    p -= 1
                best_d[p], best_j[p] = d2, j
                if nb < k:
                    nb += 1
            for q in range(nb):
                e_src[ne], e_dst[ne], e_d2[ne] = best_j[q], i, best_d[q]
                ne += 1
        keep = ne if ne <= max_edges else max_edges
        num_edges[li], dropped_edges[li] = keep, ne - keep
        if ne > max_edges:  # the `max_edges` shortest, ties by edge order, in edge order
            chosen = np.sort(np.argsort(np.sqrt(e_d2[:ne]), kind="mergesort")[:max_edges])
        else:
            chosen = np.arange(ne)
        for slot in range(keep):
            e = chosen[slot]
            s, d = rows[e_src[e]], rows[e_dst[e]]
            rs, rd = data[li, s], data[li, d]
            dp0, dp1 = rs[_X] - rd[_X], rs[_Y] - rd[_Y]
            ds, dd = rs[_SPEED], rd[_SPEED]
            dv0 = rs[_HCOS] * ds - rd[_HCOS] * dd
            dv1 = rs[_HSIN] * ds - rd[_HSIN] * dd
            dist = np.sqrt(e_d2[e])
            neg_dot = -(dp0 * dv0 + dp1 * dv1)
            closing = neg_dot / max(dist, 1e-6)
            t_star = neg_dot / max(dv0 * dv0 + dv1 * dv1, 1e-9)
            c0 = dv0 * t_star + dp0
            c1 = dv1 * t_star + dp1
            gap = max(dist - (rs[_LEN] + rd[_LEN]) * 0.5, 0.1)
            on_course = c0 * c0 + c1 * c1 < conflict2 and closing > 0.0
            edge_attr[li, slot, 0] = dp0
            edge_attr[li, slot, 1] = dp1
            edge_attr[li, slot, 2] = closing
            edge_attr[li, slot, 3] = closing / gap if on_course else 0.0
            edge_index[li, 0, slot] = e_src[e]
            edge_index[li, 1, slot] = e_dst[e]
            edge_mask[li, slot] = 1
    return (nodes, node_mask, movement, edge_index, edge_attr, edge_mask, order, kept,
            num_edges, dropped_edges)  # fmt: skip


def graph_batch_numba(
    data: np.ndarray,
    counts: list[int],
    cfg: GraphConfig,
    *,
    max_nodes: int,
    max_edges: int,
) -> PaddedGraphs:
    """``graphs.graph_batch(data, counts, cfg, max_nodes=..., max_edges=...)``, compiled; both
    caps are required (the env's padded observation)."""
    if max_nodes < 1 or max_edges < 1:
        raise ValueError(f"graph_batch_numba: caps must be >= 1, got {max_nodes}, {max_edges}")
    out = _kernel(
        data,
        np.asarray(counts, np.int64),
        max_nodes,
        max_edges,
        cfg.k_nearest,
        cfg.edge_radius * cfg.edge_radius,
        cfg.conflict_distance * cfg.conflict_distance,
    )
    nodes, node_mask, movement, edge_index, edge_attr, edge_mask, order, kept, ne, de = out
    kept_l = kept.tolist()
    return PaddedGraphs(
        nodes=nodes,
        node_mask=node_mask,
        movement=movement,
        edge_index=edge_index,
        edge_attr=edge_attr,
        edge_mask=edge_mask,
        order=order,
        num_nodes=kept_l,
        num_edges=ne.tolist(),
        dropped_nodes=[c - k for c, k in zip(counts, kept_l, strict=True)],
        dropped_edges=de.tolist(),
    )


@numba.njit(cache=True, nogil=True)
def _lanes(data, counts, offsets, capacity, incoming):  # pragma: no cover - jit
    total = capacity.shape[0]
    count = np.zeros(total, np.float64)
    halting = np.zeros(total, np.float64)
    waiting = np.zeros(total, np.float64)
    soon = np.zeros(total, np.float64)
    later = np.zeros(total, np.float64)
    for li in range(data.shape[0]):  # rows in order: the sums of numpy's bincount
        for i in range(counts[li]):
            mv = np.intp(data[li, i, _MOVE]) + offsets[li]
            count[mv] += 1.0
            speed, dist = data[li, i, _SPEED], data[li, i, _DIST]
            if speed < 0.1:
                halting[mv] += 1.0
            elif dist >= 0.0:  # moving towards the stop line: seconds to reach it (float32)
                eta = dist / speed
                soon[mv] += 1.0 if eta <= _SOON else 0.0
                later[mv] += 1.0 if eta <= _LATER else 0.0
            waiting[mv] += data[li, i, _WAIT]
    feats = np.empty((total, _NL), np.float32)  # observation.LANE_FEATURES
    count32 = count.astype(np.float32)
    queue = 0.0
    for j in range(total):
        feats[j, 0] = halting[j]
        feats[j, 1] = count32[j] / capacity[j]
        feats[j, 2] = waiting[j]
        feats[j, 3] = soon[j]
        feats[j, 4] = later[j]
        if incoming[j]:
            queue += halting[j]
    return count32, feats, queue


def lane_batch_numba(
    data: np.ndarray, counts: list[int], layout: LaneLayout
) -> tuple[list[LaneStats], np.ndarray, float]:
    """``observation.lane_batch``, compiled."""
    count, feats, queue = _lanes(
        data,
        np.asarray(counts, np.int64),
        layout.offset_array[:, 0],
        layout.capacity,
        layout.incoming,
    )
    return split_lanes(count, feats, layout), feats, queue


@numba.njit(cache=True, nogil=True)
def _safety(nodes, edge_attr, edge_index, num_nodes, num_edges, ttc, brake):  # pragma: no cover
    n_lights = nodes.shape[0]
    low_ttc = np.zeros(n_lights, np.int64)
    hard = np.zeros(n_lights, np.int64)
    flagged = np.zeros(nodes.shape[1], np.bool_)
    for li in range(n_lights):
        flagged[:] = False
        for e in range(num_edges[li]):
            if edge_attr[li, e, 3] > ttc:
                v = edge_index[li, 1, e]
                if not flagged[v]:
                    flagged[v] = True
                    low_ttc[li] += 1
        for i in range(num_nodes[li]):
            if nodes[li, i, 3] < brake:
                hard[li] += 1
    return low_ttc, hard


def safety_counts_numba(
    batch: PaddedGraphs, *, ttc_threshold: float, hard_brake_decel: float
) -> tuple[np.ndarray, np.ndarray]:
    """``costs.safety_counts``, compiled (same float32 comparisons)."""
    return _safety(
        batch.nodes,
        batch.edge_attr,
        batch.edge_index,
        np.asarray(batch.num_nodes, np.int64),
        np.asarray(batch.num_edges, np.int64),
        np.float32(1.0 / ttc_threshold),
        np.float32(-hard_brake_decel),
    )
