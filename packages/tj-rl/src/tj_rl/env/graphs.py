"""The vehicle graphs of several lights in one padded batch: a fixed number of numpy calls per
decision step, whatever the number of lights and vehicles.

Input is the lights' vehicle rows stacked as ``data`` [L, m, 16] (``features.ROW_COLUMNS``), each
light's real rows first, the rest ``PAD_ROW``. NaN pads need no masks: they sort after every real
vehicle, are never within an edge radius (NaN compares false) and add nothing to sums weighted by
speed or waiting time. Nodes are sorted by distance to the light's centre with one stable argsort for
all lights; edges are each vehicle's ``k`` nearest neighbours within the radius, from one
[L, n, n] distance tensor whose sorted rows give the edge list already in (vehicle, length) order.

The per-call overhead of numpy (thousands of instructions per call) dominates at a few dozen vehicles
per light, so the code counts calls: one stable sort for all lights, no per-light loops, one
allocation per output dtype, derived columns computed in the Python pass that reads SUMO's results.
``numba_kernels.graph_batch_numba`` computes the same arrays bit for bit in one compiled call
(``EnvConfig(kernel="numba")``): faster steps for numba's import in every env process. This numpy
version stays the default and the reference the compiled one is tested against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tj_rl.env.features import (
    EDGE_FEATURES,
    FRAME_INDEX,
    NODE_FEATURES,
    PAD_ROW,
    ROW_COLUMNS,
    GraphConfig,
    VehicleFrame,
    VehicleGraph,
)

__all__ = [
    "PaddedGraphs",
    "build_graph",
    "build_graphs",
    "graph_batch",
    "split_graphs",
    "stack_frames",
]

_NF, _EF = len(NODE_FEATURES), len(EDGE_FEATURES)
# ROW_COLUMNS indices: the node features first, then the raw values
_SPEED, _HSIN, _LEN = 2, 4, 8
_X, _Y, _ANGLE, _LANE_POS, _MOVE, _OFFSET, _KEY = range(_NF, _NF + 7)
# 0-d operands: cheaper for numpy than Python floats (no scalar conversion per call)
_HALF, _MIN_R, _MIN_DV2, _MIN_GAP, _ZERO = (np.array(v) for v in (0.5, 1e-6, 1e-9, 0.1, 0.0))


@dataclass(slots=True)
class PaddedGraphs:
    """Padded graphs of L lights (fresh arrays on every call: observations may alias them).

    ``order[l, i]`` is the row of node ``i`` in light ``l``'s input rows (nodes are sorted by
    distance); ``num_nodes`` / ``num_edges`` are the real counts after the caps, ``dropped_*``
    what the caps removed (farthest vehicles, longest edges)."""

    nodes: np.ndarray  # float32 [L, N, 9]
    node_mask: np.ndarray  # int8 [L, N]
    movement: np.ndarray  # int64 [L, N]
    edge_index: np.ndarray  # int64 [L, 2, E] local (neighbour, vehicle)
    edge_attr: np.ndarray  # float32 [L, E, 4]
    edge_mask: np.ndarray  # int8 [L, E]
    order: np.ndarray  # intp [L, n]
    num_nodes: list[int]
    num_edges: list[int]
    dropped_nodes: list[int]
    dropped_edges: list[int]


def graph_batch(
    data: np.ndarray,
    counts: list[int],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
    budget: int = 1 << 18,
) -> PaddedGraphs:
    """Node features and k-nearest edges of every light in ``data`` [L, m, 16] (``counts[l]`` real
    rows, then pads). Caps drop (and count) the farthest nodes and the longest edges; ``None`` sizes
    the padding to the largest light instead. With both caps, lights are processed in chunks whose
    distance tensor (lights x n x n) stays within ``budget`` entries (many lights with crowded
    approaches would otherwise allocate L * max_nodes^2 at once)."""
    n_lights = data.shape[0]
    if max_nodes is not None and max_edges is not None and n_lights > 1:
        n = min(max(counts), max_nodes)
        per_chunk = max(1, budget // max(n * n, 1))
        if per_chunk < n_lights:
            parts = [
                _graph_batch(data[a : a + per_chunk], counts[a : a + per_chunk], cfg,
                             max_nodes, max_edges)
                for a in range(0, n_lights, per_chunk)
            ]  # fmt: skip
            return _concat(parts)
    return _graph_batch(data, counts, cfg, max_nodes, max_edges)


def _concat(parts: list[PaddedGraphs]) -> PaddedGraphs:
    width = max(p.order.shape[1] for p in parts)
    order = np.zeros((sum(len(p.order) for p in parts), width), np.intp)
    start = 0
    for p in parts:
        order[start : start + len(p.order), : p.order.shape[1]] = p.order
        start += len(p.order)
    arrays = ("nodes", "node_mask", "movement", "edge_index", "edge_attr", "edge_mask")
    lists = ("num_nodes", "num_edges", "dropped_nodes", "dropped_edges")
    return PaddedGraphs(
        order=order,
        **{a: np.concatenate([getattr(p, a) for p in parts]) for a in arrays},
        **{a: [v for p in parts for v in getattr(p, a)] for a in lists},
    )


def _graph_batch(data, counts, cfg, max_nodes, max_edges) -> PaddedGraphs:
    n_lights = data.shape[0]
    kept = counts if max_nodes is None else [min(c, max_nodes) for c in counts]
    n = max(kept, default=0)
    order = data[..., _KEY].argsort(axis=1, kind="stable")[:, :n]  # nearest first, pads last
    # [L, n, 16] rows in node order
    d = data[:, order[0]] if n_lights == 1 else data[np.arange(n_lights)[:, None], order]
    edges = _select_edges(d, cfg, max_edges)
    width = n if max_nodes is None else max_nodes
    out = _outputs(n_lights, width, edges["cap"])
    x = out["nodes"][:, :n]
    x[...] = d[..., :_NF]
    out["movement"][:, :n] = d[..., _MOVE]
    if all(k == n for k in kept):
        out["node_mask"][:, :n] = 1
    else:  # pad rows inside the real width: zero them
        real = np.arange(n) < np.asarray(kept)[:, None]
        x[~real] = 0.0
        out["node_mask"][:, :n] = real
    if edges["num_total"]:
        # velocity (x, y) = speed * (heading_cos, heading_sin)
        vel = d[..., _HSIN : _HSIN + 2][..., ::-1] * d[..., _SPEED : _SPEED + 1]
        _edge_features(d, vel, edges, cfg, out)
    return PaddedGraphs(
        order=order,
        num_nodes=list(kept),
        dropped_nodes=[c - k for c, k in zip(counts, kept, strict=True)],
        num_edges=edges["num"],
        dropped_edges=edges["dropped"],
        **out,
    )


def _outputs(n_lights: int, width: int, cap: int) -> dict[str, np.ndarray]:
    """Zeroed output arrays, one allocation per dtype (views of it)."""
    nn, ne = n_lights * width, n_lights * cap
    f32 = np.zeros(nn * _NF + ne * _EF, np.float32)
    i64 = np.zeros(nn + 2 * ne, np.int64)
    i8 = np.zeros(nn + ne, np.int8)
    return {
        "nodes": f32[: nn * _NF].reshape(n_lights, width, _NF),
        "edge_attr": f32[nn * _NF :].reshape(n_lights, cap, _EF),
        "movement": i64[:nn].reshape(n_lights, width),
        "edge_index": i64[nn:].reshape(n_lights, 2, cap),
        "node_mask": i8[:nn].reshape(n_lights, width),
        "edge_mask": i8[nn:].reshape(n_lights, cap),
    }


def _select_edges(d: np.ndarray, cfg: GraphConfig, max_edges: int | None) -> dict:
    """Each vehicle's k nearest neighbours within the radius (its own light only), capped at the
    ``max_edges`` shortest per light; edge order: by vehicle (node order), then by length."""
    n_lights, n = d.shape[0], d.shape[1]
    k = min(cfg.k_nearest, n - 1)
    if k < 1:
        cap = max_edges or 0
        return {"cap": cap, "num": [0] * n_lights, "dropped": [0] * n_lights, "num_total": 0}
    px, py = d[..., _X], d[..., _Y]
    dx = px[:, None, :] - px[:, :, None]  # dx[l, i, j] = x_j - x_i (neighbour j of vehicle i)
    dy = py[:, None, :] - py[:, :, None]
    dist2 = dx * dx
    dist2 += dy * dy
    dist2.reshape(n_lights, n * n)[:, :: n + 1] = np.inf  # no self loops
    nbr = dist2.argsort(axis=2, kind="stable")[:, :, :k]
    dist2.sort(axis=2)
    d2k = dist2[:, :, :k]  # = dist2 at nbr
    within = d2k <= cfg.edge_radius * cfg.edge_radius
    li, dst, _ = within.nonzero()  # by (light, vehicle, distance)
    src = nbr[within]
    r = np.sqrt(d2k[within])
    num = [len(li)] if n_lights == 1 else np.bincount(li, minlength=n_lights).tolist()
    cap = max(num) if max_edges is None else max_edges
    dropped = [max(e - cap, 0) for e in num]
    if any(dropped):  # keep each light's shortest `cap` edges, in their order
        keep = np.ones(len(li), bool)
        start = 0
        for e in num:
            if e > cap:
                seg = keep[start : start + e]
                seg[:] = False
                seg[np.argsort(r[start : start + e], kind="stable")[:cap]] = True
            start += e
        li, dst, src, r = li[keep], dst[keep], src[keep], r[keep]
        num = [min(e, cap) for e in num]
    return {"cap": cap, "num": num, "dropped": dropped, "num_total": len(li),
            "li": li, "dst": dst, "src": src, "r": r}  # fmt: skip


def _edge_features(d, vel, edges: dict, cfg: GraphConfig, out: dict) -> None:
    """dx, dy, closing speed and inverse TTC of the selected edges, written into ``out``."""
    n_lights, n = d.shape[0], d.shape[1]
    li, dst, src, r = edges["li"], edges["dst"], edges["src"], edges["r"]
    if n_lights == 1:
        node_s, node_d = src, dst
    else:
        node_s, node_d = li * n + src, li * n + dst
    pos = d[..., _X : _Y + 1].reshape(n_lights * n, 2)
    dp = pos.take(node_s, axis=0)  # neighbour - vehicle
    dp -= pos.take(node_d, axis=0)
    vel = vel.reshape(n_lights * n, 2)
    dv = vel.take(node_s, axis=0)
    dv -= vel.take(node_d, axis=0)
    length = d[..., _LEN].reshape(n_lights * n)
    prod = dp * dv
    neg_dot = prod[:, 0] + prod[:, 1]
    np.negative(neg_dot, out=neg_dot)
    np.multiply(dv, dv, out=prod)
    closing = neg_dot / np.maximum(r, _MIN_R)
    t_star = neg_dot / np.maximum(prod[:, 0] + prod[:, 1], _MIN_DV2)
    closest = dv * t_star[:, None]
    closest += dp
    closest *= closest
    gap = length.take(node_s)
    gap += length.take(node_d)
    gap *= _HALF
    np.subtract(r, gap, out=gap)
    np.maximum(gap, _MIN_GAP, out=gap)
    conflict = cfg.conflict_distance * cfg.conflict_distance
    on_course = closest[:, 0] + closest[:, 1] < conflict
    on_course &= closing > _ZERO
    attr = np.empty((len(r), _EF))
    attr[:, 0:2] = dp
    attr[:, 2] = closing
    attr[:, 3] = np.where(on_course, closing / gap, _ZERO)
    if n_lights == 1:
        e = len(r)
        out["edge_attr"][0, :e] = attr
        out["edge_index"][0, 0, :e] = src
        out["edge_index"][0, 1, :e] = dst
        out["edge_mask"][0, :e] = 1
        return
    num, cap = edges["num"], edges["cap"]
    slot = np.arange(len(li)) - (np.cumsum(num) - num)[li]
    at = li * cap + slot  # [l, slot] in [L, cap]
    out["edge_attr"].reshape(n_lights * cap, _EF)[at] = attr
    out["edge_mask"].reshape(n_lights * cap)[at] = 1
    at += li * cap  # [l, 0, slot] in [L, 2, cap]
    ei = out["edge_index"].reshape(n_lights * 2 * cap)
    ei[at] = src
    ei[at + cap] = dst


def stack_frames(
    frames: Sequence[VehicleFrame], centres: Sequence[tuple[float, float]]
) -> tuple[np.ndarray, list[int]]:
    """``data`` [L, m, 16] (``ROW_COLUMNS``: real rows, then ``PAD_ROW``) and the counts of
    several frames; the derived columns are computed as the env's parse computes them."""
    counts = [len(f) for f in frames]
    data = np.empty((len(frames), max(counts, default=0), len(ROW_COLUMNS)), np.float64)
    data[:] = PAD_ROW
    for i, (f, centre) in enumerate(zip(frames, centres, strict=True)):
        raw, rows = f.data, data[i, : counts[i]]
        rows[:, FRAME_INDEX] = raw
        np.subtract(raw[:, 0:2], np.asarray(centre, np.float64), out=rows[:, 0:2])
        rad = np.deg2rad(raw[:, 4])
        rows[:, _HSIN] = np.cos(rad)
        rows[:, _HSIN + 1] = np.sin(rad)
        rows[:, 6] = raw[:, 9] - raw[:, 5]  # dist_to_stop_line = stop_offset - lane_pos
        rows[:, _KEY] = rows[:, 0] * rows[:, 0] + rows[:, 1] * rows[:, 1]
    return data, counts


def split_graphs(batch: PaddedGraphs, ids: Sequence[Sequence[str]]) -> list[VehicleGraph]:
    """Per-light ``VehicleGraph`` views of a batch (``ids[l]``: light l's vehicle ids by row)."""
    out = []
    nodes, movement, edge_index, edge_attr = (
        batch.nodes, batch.movement, batch.edge_index, batch.edge_attr
    )  # fmt: skip
    order = batch.order.tolist()
    for i, n in enumerate(batch.num_nodes):
        e = batch.num_edges[i]
        names = ids[i]
        out.append(
            VehicleGraph(
                ids=tuple([names[j] for j in order[i][:n]]),
                x=nodes[i, :n],
                movement=movement[i, :n],
                edge_index=edge_index[i, :, :e],
                edge_attr=edge_attr[i, :e],
                dropped_nodes=batch.dropped_nodes[i],
                dropped_edges=batch.dropped_edges[i],
            )
        )
    return out


def build_graphs(
    frames: Sequence[VehicleFrame],
    centres: Sequence[tuple[float, float]],
    cfg: GraphConfig,
    *,
    max_nodes: int | None = None,
    max_edges: int | None = None,
    batch_nodes: int = 512,
) -> list[VehicleGraph]:
    """The graphs of several lights, computed together in batches of up to ``batch_nodes``
    vehicles (one set of numpy calls per batch; the batch bounds the [L, n, n] distance tensor)."""
    out: list[VehicleGraph] = []
    start = 0
    while start < len(frames):
        stop, total = start, 0
        while stop < len(frames) and (stop == start or total + len(frames[stop]) <= batch_nodes):
            total += len(frames[stop])
            stop += 1
        group = frames[start:stop]
        data, counts = stack_frames(group, centres[start:stop])
        batch = graph_batch(data, counts, cfg, max_nodes=max_nodes, max_edges=max_edges)
        out += split_graphs(batch, [f.ids for f in group])
        start = stop
    return out


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
