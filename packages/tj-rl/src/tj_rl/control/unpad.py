"""Padded observations (DESIGN "RL observation") -> one graph batch for tj-models, in torch.

A batch of B observations has fixed shapes (``nodes`` [B, N, 9], ``edge_index`` [B, 2, E] with
per-sample local ids, masks ...). ``unpad_observations`` keeps the real nodes and edges of all
samples in sample order and turns each local node id into a batch-global one (the sample's node
offset ``ptr[b]`` plus its rank among the sample's real nodes), with a fixed number of tensor ops
whatever B is: no Python loop over samples. Masks are honoured as given: a node counts only where
``node_mask`` is 1 (real nodes need not be a prefix), an edge only where ``edge_mask`` is 1 and both
its ends are real nodes. The input tensors are never modified.

Imports torch and tj-models: only the RLlib module (``rllib_module.py``) loads this.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from tj_models import GraphInput

__all__ = ["OBSERVATION_KEYS", "green_count", "phase_index", "unpad_observations"]

# the observation keys the graph module reads (``observation.py``; the last three: phase competition)
OBSERVATION_KEYS: tuple[str, ...] = (
    "nodes",
    "node_mask",
    "movement",
    "edge_index",
    "edge_attr",
    "edge_mask",
    "phase",
    "time_in_phase",
    "action_mask",
    "lanes",
    "lane_mask",
    "phase_lanes",
)


def phase_index(one_hot: Tensor) -> Tensor:
    """[B] index of the current green from the one-hot [B, P] (an all-zero row is -1)."""
    hot = one_hot > 0.5
    none = torch.full_like(hot[:, 0], -1, dtype=torch.long)
    return torch.where(hot.any(-1), hot.long().argmax(-1), none)


def green_count(phase_lanes: Tensor) -> Tensor:
    """[B] int64: how many greens each light has, from ``phase_lanes`` [B, P, L] (a real green
    serves or feeds at least one lane; padded rows are all 0, and real greens come first).

    It is tj-models' ``phase_count``: the controller's program order wraps at it, as it does on
    phase 1's recorded batches (the padded width P would put the greens before the current one
    at the wrong distance on a light with fewer greens than P). A green that moves no vehicle
    (a pedestrian-only one) has an all-0 row: as the last green of a program it is not counted.
    On SUMO's fokr_bs_demo, fkk_in, A10KW and DRT every light's count is its green count."""
    real = (phase_lanes != 0).any(-1)  # [B, P]
    rank = torch.arange(1, real.shape[-1] + 1, device=real.device)
    return (real.long() * rank).amax(-1)


def unpad_observations(obs: Mapping[str, Tensor]) -> GraphInput:
    """One ``GraphInput`` (PyG names: ``x``, ``edge_index`` batch-global, ``edge_attr``, ``batch``,
    ``ptr``, ``movement``, per-graph ``phase``, ``time_in_phase`` and, when the batch has
    ``phase_lanes``, ``phase_count``) from a batch of padded observations (tensors with a leading
    batch axis; masks of any integer or bool dtype)."""
    nodes = obs["nodes"]
    b, n, f = nodes.shape
    node_mask = obs["node_mask"].bool()
    local = obs["edge_index"].long()  # [B, 2, E]
    # an edge is real when its mask says so and both ends are real nodes
    edge_mask = (
        obs["edge_mask"].bool()
        & node_mask.gather(1, local[:, 0])
        & node_mask.gather(1, local[:, 1])
    )
    flat = node_mask.reshape(-1)
    counts = node_mask.sum(1)
    ptr = F.pad(torch.cumsum(counts, 0), (1, 0))
    # batch-global id of every (sample, slot) that holds a real node (others: unused)
    global_id = torch.cumsum(flat.long(), 0) - 1
    sample, slot = edge_mask.nonzero(as_tuple=True)  # sample-major: edges stay grouped
    base = sample * n
    edge_index = torch.stack(
        [global_id[base + local[sample, 0, slot]], global_id[base + local[sample, 1, slot]]]
    )
    width = obs["action_mask"].shape[-1]
    return GraphInput(
        x=nodes.reshape(b * n, f)[flat].float(),
        edge_index=edge_index,
        edge_attr=obs["edge_attr"][sample, slot].float(),
        batch=torch.arange(b, device=nodes.device).repeat_interleave(counts),
        ptr=ptr,
        movement=obs["movement"].reshape(b * n)[flat].long(),
        phase=phase_index(obs["phase"][:, :width]),
        time_in_phase=obs["time_in_phase"].reshape(b).float(),
        phase_count=green_count(obs["phase_lanes"]) if "phase_lanes" in obs else None,
    )
