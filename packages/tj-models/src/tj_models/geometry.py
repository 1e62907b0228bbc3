"""Vehicle matching across steps and the vehicle-graph geometry (radius edges, edge features).

``match_nodes`` finds each vehicle of one step in another step of the same stream by
(graph, vehicle_id). ``radius_edges`` and ``edge_features`` rebuild a graph from (predicted)
vehicle states during the world-model rollout with exactly the conventions tj-rl records the
snapshots with (``tj_rl.env.features``; docs/ARCHITECTURE.md "Traffic snapshot"):

* heading: math convention by default (angle counter-clockwise from +x, so the velocity is
  ``speed * (heading_cos, heading_sin)``); ``"sumo"`` reads SUMO's angle (clockwise from +y);
* edges: each vehicle receives from its ``max_neighbors`` nearest vehicles of the same graph
  within ``radius`` (message neighbour -> vehicle, ``edge_index[0]`` is the neighbour);
* an edge ``s -> d`` carries ``[x_s - x_d, y_s - y_d, closing, inv_ttc]``: ``closing =
  -(dp . dv) / |dp|`` (positive when the pair approaches) and ``inv_ttc = closing / gap`` with
  ``gap = max(|dp| - (len_s + len_d) / 2, 0.1)`` only for pairs on a collision course (closing and
  closest approach, at ``t* = -(dp . dv) / |dv|^2``, below ``conflict_distance``), else 0.

Hand-written rather than ``torch_geometric.nn.radius_graph`` because that needs ``pyg-lib`` or
``torch-cluster``, which have no wheels on the default index for current torch; the graphs are
small (tens of vehicles), so exact all-pairs within each graph is cheap and fully vectorised.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tj_models.config import FeatureLayout
from tj_models.graph import InvalidGraphError

__all__ = ["edge_features", "match_nodes", "radius_edges", "velocity"]


def match_nodes(
    src_batch: Tensor, src_id: Tensor, dst_batch: Tensor, dst_id: Tensor, *, key_base: int
) -> Tensor:
    """Index into ``dst`` of each ``src`` node with the same (graph, id), or -1 when absent.

    ``key_base`` must exceed every id (the caller computes it once per window). Duplicate ids in a
    graph of ``dst`` are ambiguous and rejected.
    """
    src_key = src_batch * key_base + src_id
    dst_key = dst_batch * key_base + dst_id
    if dst_key.numel() == 0:
        return torch.full_like(src_key, -1)
    sorted_key, order = torch.sort(dst_key)
    if sorted_key.numel() > 1 and bool((sorted_key[1:] == sorted_key[:-1]).any()):
        raise InvalidGraphError(
            "`vehicle_id` repeats inside one graph; ids must be unique per graph"
        )
    pos = torch.searchsorted(sorted_key, src_key).clamp(max=sorted_key.numel() - 1)
    found = sorted_key[pos] == src_key
    return torch.where(found, order[pos], torch.full_like(pos, -1))


def velocity(x: Tensor, layout: FeatureLayout, heading: str) -> Tensor:
    """``[N, 2]`` velocity from speed and heading (math: 0 = +x, ccw; sumo: 0 = +y, clockwise)."""
    if heading not in ("math", "sumo"):
        raise ValueError(f"heading must be 'math' or 'sumo', got {heading!r}")
    speed = x[:, layout.speed]
    s, c = x[:, layout.heading_sin], x[:, layout.heading_cos]
    if heading == "sumo":
        return torch.stack([speed * s, speed * c], dim=-1)
    return torch.stack([speed * c, speed * s], dim=-1)


def edge_features(
    x: Tensor,
    edge_index: Tensor,
    layout: FeatureLayout,
    heading: str = "math",
    *,
    conflict_distance: float = 2.5,
) -> Tensor:
    """``[E, 4]`` edge features of the snapshot contract from node states.

    Differentiable in ``x`` (the collision-course test is a mask; the gap is clamped, so the inverse
    TTC is finite, also for zero relative velocity or overlapping vehicles).
    """
    src, dst = edge_index
    pos = x[:, [layout.rel_x, layout.rel_y]]
    vel = velocity(x, layout, heading)
    dp = pos[src] - pos[dst]
    dv = vel[src] - vel[dst]
    dot = (dp * dv).sum(-1)
    dist = dp.norm(dim=-1).clamp(min=1e-3)
    closing = -dot / dist
    length = x[:, layout.length]
    gap = (dist - 0.5 * (length[src] + length[dst])).clamp(min=0.1)
    with torch.no_grad():  # a mask: no gradient, so no graph kept for it
        t_star = -dot / (dv * dv).sum(-1).clamp(min=1e-9)
        closest = dp + dv * t_star[:, None]
        on_course = (closing > 0) & ((closest * closest).sum(-1) < conflict_distance**2)
    inv_ttc = torch.where(on_course, closing / gap, torch.zeros_like(closing))
    return torch.cat([dp, closing[:, None], inv_ttc[:, None]], dim=-1)


def radius_edges(
    pos: Tensor,
    ptr: Tensor,
    batch: Tensor,
    radius: float,
    max_neighbors: int = 0,
    active: Tensor | None = None,
) -> Tensor:
    """``[2, E]`` edges ``s -> d`` between distinct active nodes of one graph at most ``radius``
    apart.

    With ``max_neighbors > 0`` each node keeps only its nearest ``max_neighbors`` sources, and the
    edges are sorted by (destination, distance), as tj-rl writes them (ties may order differently).
    """
    n = pos.shape[0]
    device = pos.device
    if n == 0:
        return torch.empty(2, 0, dtype=torch.long, device=device)
    counts = (ptr[1:] - ptr[:-1])[batch]  # size of each node's graph
    dst = torch.repeat_interleave(torch.arange(n, device=device), counts)
    first = torch.cumsum(counts, 0) - counts
    offset = torch.arange(dst.numel(), device=device) - torch.repeat_interleave(first, counts)
    src = ptr[batch[dst]] + offset
    with torch.no_grad():
        d2 = (pos[src] - pos[dst]).pow(2).sum(-1)
        keep = (src != dst) & (d2 <= radius * radius)
        if active is not None:
            keep = keep & active[src] & active[dst]
        src, dst, d2 = src[keep], dst[keep], d2[keep]
        if max_neighbors > 0 and dst.numel():
            # rank sources of each destination by distance: sort by distance, then stably by dst
            order = torch.argsort(d2, stable=True)
            order = order[torch.argsort(dst[order], stable=True)]
            src, dst = src[order], dst[order]
            per_dst = torch.bincount(dst, minlength=n)
            start = torch.cumsum(per_dst, 0) - per_dst
            rank = torch.arange(dst.numel(), device=device) - start[dst]
            keep = rank < max_neighbors
            src, dst = src[keep], dst[keep]
    return torch.stack([src, dst])
