"""Per-graph and per-(graph, movement) pooling and movement aggregates (queue / count).

Built on ``torch_geometric.utils.scatter`` with an explicit ``dim_size`` from ``ptr`` so that empty
graphs (an intersection with no vehicle, a normal case) pool to zeros instead of shifting indices.
An optional node mask drops nodes (vehicles predicted to have left during a rollout).
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch_geometric.utils import scatter

__all__ = ["graph_pool", "movement_aggregates", "movement_pool"]


def graph_pool(h: Tensor, batch: Tensor, num_graphs: int, mask: Tensor | None = None) -> Tensor:
    """``[B, 2D]``: mean and max of node rows per graph; zeros for graphs with no (active) node."""
    if mask is not None:
        h, batch = h[mask], batch[mask]
    mean = scatter(h, batch, dim=0, dim_size=num_graphs, reduce="mean")
    top = scatter(h, batch, dim=0, dim_size=num_graphs, reduce="max")
    return torch.cat([mean, top], dim=-1)


def _movement_index(
    movement: Tensor, batch: Tensor, num_movements: int, mask: Tensor | None
) -> tuple[Tensor, Tensor]:
    keep = movement >= 0
    if mask is not None:
        keep = keep & mask
    return keep, batch[keep] * num_movements + movement[keep]


def movement_pool(
    h: Tensor,
    movement: Tensor,
    batch: Tensor,
    num_graphs: int,
    num_movements: int,
    mask: Tensor | None = None,
) -> Tensor:
    """``[B, M, D]``: mean of node rows per (graph, movement); nodes with movement -1 are skipped."""
    keep, index = _movement_index(movement, batch, num_movements, mask)
    pooled = scatter(h[keep], index, dim=0, dim_size=num_graphs * num_movements, reduce="mean")
    return pooled.view(num_graphs, num_movements, h.shape[-1])


def movement_aggregates(
    speed: Tensor,
    movement: Tensor,
    batch: Tensor,
    num_graphs: int,
    num_movements: int,
    queue_speed: float,
    mask: Tensor | None = None,
) -> Tensor:
    """``[B, M, 2]``: (vehicle count, queued count) per (graph, movement); queued = speed < threshold."""
    keep, index = _movement_index(movement, batch, num_movements, mask)
    ones = torch.ones_like(speed[keep], dtype=torch.float32)
    queued = (speed[keep] < queue_speed).float()
    values = torch.stack([ones, queued], dim=-1)
    total = scatter(values, index, dim=0, dim_size=num_graphs * num_movements, reduce="sum")
    return total.view(num_graphs, num_movements, 2)
