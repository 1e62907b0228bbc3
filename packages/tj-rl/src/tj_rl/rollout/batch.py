"""A collated batch of rollout samples (``rollout.py``, collated by tj-data) -> the graph policy.

``rollout_graph`` builds tj-models' ``GraphInput`` from a ``tj_data.GraphBatch`` of rollout samples
(the same fields ``unpad_observations`` builds from padded observations), ``rollout_policy`` runs
the controller on it, given the encoder's output: phase 3 computes that output once per collected
batch (the GNN is frozen) and reuses it across epochs. The logits are the ones the collector
sampled from for the same weights (a test checks it against ``graph_policy`` on padded inputs).
"""

from __future__ import annotations

from typing import Any

from tj_models import Controller, ControllerOutput, GNNOutput, GraphInput
from tj_rl.control.graph_policy import controller_inputs
from tj_rl.control.unpad import phase_index

__all__ = ["rollout_graph", "rollout_policy"]


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
    )


def rollout_policy(controller: Controller, encoded: GNNOutput, batch: Any) -> ControllerOutput:
    """The controller on ``encoded`` (the encoder's output on ``rollout_graph(batch)``), masked by
    the samples' ``action_mask``; phase competition inputs when the controller reads them."""
    fields = {k: getattr(batch, k) for k in ("action_mask", "lanes", "lane_mask", "phase_lanes")}
    return controller(encoded, batch.action_mask.bool(), **controller_inputs(controller, fields))
