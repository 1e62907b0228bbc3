"""The graph policy's forward pass, shared by the RLlib module and the Ray-free ``AgentPolicy``:
padded observations -> one graph batch (``unpad.py``) -> tj-models' ``RiskGNN`` -> ``Controller``
(masked logits, value, cost value). One code path, so the same weights and observations give the
same logits in training (RLlib) and in evaluation (no Ray); plus the checks that an env's spaces fit
an encoder and controller.

Imports torch and tj-models (never Ray): loaded by ``rllib_module.py`` and, on first use, by
``agent_policy.py``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor

from tj_models import Controller, ControllerOutput, GNNConfig, GraphInput, RiskGNN
from tj_rl.control.unpad import OBSERVATION_KEYS, unpad_observations

__all__ = ["check_features", "check_spaces", "controller_inputs", "graph_input", "graph_policy"]

# GraphInput fields that tj-models' read_graph checks when validation is on
_GRAPH_FIELDS = (
    *("x", "edge_index", "edge_attr", "batch", "ptr"),
    *("movement", "phase", "time_in_phase"),
)


def check_spaces(
    observation_space: gym.Space, action_space: gym.Space, who: str = "TrafficRLModule"
) -> tuple[int, int]:
    """(number of actions, movement count the encoder must embed) of one light's spaces."""
    if not isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(f"{who} needs tj-rl's Dict observation space, got {observation_space}")
    missing = [k for k in OBSERVATION_KEYS if k not in observation_space.spaces]
    if missing:
        raise ValueError(f"{who}: observation space lacks {missing} (tj-rl >= 0.6 observations)")
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"{who} needs a Discrete action space, got {action_space}")
    n_actions = int(action_space.n)
    if observation_space["action_mask"].shape != (n_actions,):
        raise ValueError(
            f"{who}: action_mask shape {observation_space['action_mask'].shape} does "
            f"not match the action space {action_space}"
        )
    movements = int(np.max(observation_space["movement"].high)) + 1
    return n_actions, movements


def check_features(gnn: GNNConfig, observation_space: gym.spaces.Dict, who: str) -> None:
    """The encoder reads as many node and edge features as the observations carry."""
    features = (
        observation_space["nodes"].shape[-1],
        observation_space["edge_attr"].shape[-1],
    )
    if features != (gnn.node_features, gnn.edge_features):
        raise ValueError(
            f"{who}: the GNN reads {gnn.node_features} node and {gnn.edge_features} edge "
            f"features, the observations have {features}"
        )


def graph_input(gnn: RiskGNN, obs: Mapping[str, Tensor], *, validate: bool = False) -> GraphInput:
    """The padded batch's graph input (through tj-models' full input checks when ``validate``)."""
    graph = unpad_observations(obs)
    if validate:
        fields = {k: getattr(graph, k) for k in _GRAPH_FIELDS}
        graph = gnn.read(SimpleNamespace(**fields))
    return graph


def graph_policy(
    gnn: RiskGNN,
    controller: Controller,
    obs: Mapping[str, Tensor],
    *,
    frozen_gnn: bool = True,
    validate: bool = False,
) -> ControllerOutput:
    """Encoder + controller on a batch of padded observations (tensors with a leading batch
    axis); ``action_mask`` (any integer dtype, read as bool) masks the logits. A frozen encoder
    runs under ``no_grad``. A controller with ``movement_stats`` > 0 also reads ``phase_lanes``
    and the ``lanes`` rows (``lane_mask`` honoured)."""
    graph = graph_input(gnn, obs, validate=validate)
    no_grad = torch.no_grad() if frozen_gnn else contextlib.nullcontext()
    with no_grad:
        encoded = gnn(graph)
    return controller(encoded, obs["action_mask"].bool(), **controller_inputs(controller, obs))


def controller_inputs(controller: Controller, obs: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The controller's phase-competition keywords from a batch (padded observations or collated
    rollout samples): each green's token reads the lanes it serves (``phase_lanes``) and the lane
    rows (``lane_mask`` honoured); nothing for a controller with ``movement_stats`` 0."""
    if not controller.config.movement_stats:
        return {}
    lanes = obs["lanes"].float() * obs["lane_mask"].unsqueeze(-1).float()
    return {"phase_movements": obs["phase_lanes"].float(), "movement_stats": lanes}
