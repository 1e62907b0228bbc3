"""Feeding a world-model prediction back as the next input graph (the progressive rollout).

Each vehicle of the last observed step keeps its node, movement and id; its features become the
predicted state; vehicles whose predicted presence falls below the threshold become inactive (no
edges, not pooled); edges and edge features are recomputed from the predicted positions and
velocities (``tj_models.geometry``); the signal state comes from the recorded future step, because
the phase sequence is the action the world model is conditioned on, not something it predicts.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tj_models.config import FeatureLayout, RolloutConfig
from tj_models.geometry import edge_features, radius_edges
from tj_models.graph import GraphInput

__all__ = ["apply_delta", "next_graph"]


def apply_delta(x: Tensor, delta: Tensor, layout: FeatureLayout) -> Tensor:
    """Predicted raw state ``x + delta`` made physical: speed and waiting time >= 0, unit heading,
    length unchanged (a vehicle does not change its length)."""
    state = x + delta
    cols = list(state.unbind(-1))
    cols[layout.speed] = cols[layout.speed].clamp(min=0.0)
    cols[layout.waiting_time] = cols[layout.waiting_time].clamp(min=0.0)
    s, c = cols[layout.heading_sin], cols[layout.heading_cos]
    norm = torch.sqrt(s * s + c * c).clamp(min=1e-6)
    cols[layout.heading_sin], cols[layout.heading_cos] = s / norm, c / norm
    cols[layout.length] = x[:, layout.length]
    return torch.stack(cols, dim=-1)


def next_graph(
    graph: GraphInput,
    state: Tensor,
    active: Tensor,
    phase: Tensor | None,
    time_in_phase: Tensor | None,
    layout: FeatureLayout,
    config: RolloutConfig,
) -> GraphInput:
    """The rollout's next input graph: same nodes, predicted ``state``, recomputed edges."""
    pos = state[:, [layout.rel_x, layout.rel_y]]
    edge_index = radius_edges(
        pos, graph.ptr, graph.batch, config.edge_radius, config.max_neighbors, active
    )
    attr = edge_features(
        state, edge_index, layout, config.heading, conflict_distance=config.conflict_distance
    )
    return graph.with_(
        x=state, edge_index=edge_index, edge_attr=attr, phase=phase, time_in_phase=time_in_phase
    )
