"""tj-models: the networks TJ Transport trains.

``RiskGNN`` (vehicle graph -> embeddings + risk), ``WorldModel`` (window -> next traffic state,
rolled out progressively), ``Controller`` (influence-weighted phase-query attention -> masked phase
logits, value, cost value), ``SafetyShield`` / ``ShieldedPolicy`` (learned per-action safety cost
on top of the env's rule mask) and ``TrafficAgent`` bundling them with phase-aware freezing, size
presets and safetensors checkpoints. Inputs are any batch with PyG field names.
"""

from importlib import metadata as _metadata

from tj_models.agent import COMPONENTS, PHASE_COMPONENTS, TrafficAgent
from tj_models.checkpoint import CheckpointError
from tj_models.config import (
    PRESETS,
    ControllerConfig,
    FeatureLayout,
    GNNConfig,
    RolloutConfig,
    ShieldConfig,
    TrafficAgentConfig,
    WorldModelConfig,
    config_from_dict,
    config_to_dict,
)
from tj_models.controller import MASK_FILL, Controller, ControllerOutput, masked_logits
from tj_models.geometry import edge_features, match_nodes, radius_edges
from tj_models.gnn import GNNOutput, RiskGNN
from tj_models.graph import GraphInput, InvalidGraphError, NonFiniteError, check_finite, read_graph
from tj_models.lagrange import Lagrange, LagrangeConfig, PIDLagrange, make_lagrange
from tj_models.losses import (
    LossOutput,
    StepTargets,
    WorldModelLossConfig,
    world_model_loss,
    world_model_targets,
)
from tj_models.pooling import graph_pool, movement_aggregates, movement_pool
from tj_models.ppo import (
    PPOLoss,
    lagrangian_advantage,
    normalize_advantages,
    ppo_lagrangian_loss,
)
from tj_models.schedule import HorizonSchedule
from tj_models.served import ServedMovements
from tj_models.shield import SafetyShield, ShieldedOutput, ShieldedPolicy, shield_cost_loss
from tj_models.world_model import StepPrediction, WorldModel, WorldModelOutput

__version__ = _metadata.version("tj-models")  # one source of truth: pyproject.toml

__all__ = [
    "COMPONENTS",
    "MASK_FILL",
    "PHASE_COMPONENTS",
    "PRESETS",
    "CheckpointError",
    "Controller",
    "ControllerConfig",
    "ControllerOutput",
    "FeatureLayout",
    "GNNConfig",
    "GNNOutput",
    "GraphInput",
    "HorizonSchedule",
    "InvalidGraphError",
    "Lagrange",
    "LagrangeConfig",
    "LossOutput",
    "NonFiniteError",
    "PIDLagrange",
    "PPOLoss",
    "RiskGNN",
    "RolloutConfig",
    "SafetyShield",
    "ServedMovements",
    "ShieldConfig",
    "ShieldedOutput",
    "ShieldedPolicy",
    "StepPrediction",
    "StepTargets",
    "TrafficAgent",
    "TrafficAgentConfig",
    "WorldModel",
    "WorldModelConfig",
    "WorldModelLossConfig",
    "WorldModelOutput",
    "__version__",
    "check_finite",
    "config_from_dict",
    "config_to_dict",
    "edge_features",
    "graph_pool",
    "lagrangian_advantage",
    "make_lagrange",
    "masked_logits",
    "match_nodes",
    "movement_aggregates",
    "movement_pool",
    "normalize_advantages",
    "ppo_lagrangian_loss",
    "radius_edges",
    "read_graph",
    "shield_cost_loss",
    "world_model_loss",
    "world_model_targets",
]
