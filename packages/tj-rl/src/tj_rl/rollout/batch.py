"""A collated batch of rollout samples (``samples.py``, collated by tj-data) -> the graph input.

``rollout_graph`` builds tj-models' ``GraphInput`` from a ``tj_data.GraphBatch`` of rollout
samples: the same fields ``unpad_observations`` builds from padded observations. Phase 3 encodes
it once per collected batch (the GNN is frozen), reuses the output across epochs and runs the one
actor's ``heads`` on it (``tj_rl.control.actor``), which gives the logits the collector sampled
from for the same weights (a test checks it against the actor on padded inputs).
"""

from __future__ import annotations

from typing import Any

from tj_models import GraphInput
from tj_rl.control.unpad import green_count, phase_index

__all__ = ["rollout_graph"]


def rollout_graph(batch: Any) -> GraphInput:
    """``GraphInput`` of a collated batch of rollout samples (a ``tj_data.GraphBatch``)."""
    width = batch.action_mask.shape[-1]
    return GraphInput(
        x=batch.x.float(),
        edge_index=batch.edge_index.long(),
        edge_attr=batch.edge_attr.float(),
        batch=batch.batch.long(),
        ptr=batch.ptr.long(),
        movement=batch.movement.long(),
        phase=phase_index(batch.phase[:, :width]),
        time_in_phase=batch.time_in_phase.reshape(-1).float(),
        phase_count=green_count(batch.phase_lanes),
    )
