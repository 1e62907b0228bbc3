"""tj-rl: SUMO scenarios, a vehicle-graph traffic-signal environment with a safety shield,
baselines, SUMO-output metrics and phase-1 dataset recording."""

from importlib import metadata as _metadata

from tj_rl.adapters import ParallelTrafficEnv, SingleAgentTrafficEnv
from tj_rl.backends import LibsumoBackend, SumoBackend, TraciBackend, make_backend
from tj_rl.baselines import (
    POLICIES,
    FixedTimePolicy,
    GreedyPolicy,
    MaxOccupancyPolicy,
    MaxPressurePolicy,
    MetricsTable,
    Policy,
    RandomPolicy,
    evaluate,
    make_policy,
)
from tj_rl.builder import DEFAULT_SPEC, SyntheticSpec, build_scenario, default_scenario
from tj_rl.config import COST_NAMES, EnvConfig
from tj_rl.demand import DemandPool, DemandSet, DemandSpec, generate_demand
from tj_rl.env import TrafficSignalCore
from tj_rl.errors import LibsumoBusyError, ScenarioError, SumoDiedError, SumoStartError
from tj_rl.features import EDGE_FEATURES, NODE_FEATURES, GraphConfig, VehicleGraph
from tj_rl.gae import gae
from tj_rl.graphs import build_graph, build_graphs
from tj_rl.heldout import HELDOUT_METRICS, HeldOutTable, evaluate_heldout
from tj_rl.metrics import METRIC_NAMES, EpisodeMetrics, Spread
from tj_rl.native_reader import NativeReaderError, build_native_reader
from tj_rl.observation import LANE_FEATURES
from tj_rl.recording import record_dataset
from tj_rl.rewards import REWARDS
from tj_rl.runtime import SUMO_VERSION
from tj_rl.scenario import Scenario
from tj_rl.shield import PhaseProgram, SafetyShield, derive_program
from tj_rl.snapshot import SNAPSHOT_FIELDS, RiskConfig, SnapshotBuilder, snapshot_schema

__version__ = _metadata.version("tj-rl")  # one source of truth: pyproject.toml


# Names whose modules import Ray RLlib (and torch, tj-models): loaded on first use only (PEP 562),
# so env, recording and evaluation processes never pay for them. ``AgentPolicy`` and
# ``export_agent`` load torch and tj-models but never Ray.
# ``gae`` (numpy only) is imported above, not here: a lazy name equal to its own module's name
# resolves to the module (importing ``tj_rl.gae`` binds the package attribute to the submodule).
_LAZY = {
    "LaneMLPConfig": "tj_rl.rllib_mlp",
    "LaneMLPModule": "tj_rl.rllib_mlp",
    "lane_mlp_spec": "tj_rl.rllib_mlp",
    "ModulePolicy": "tj_rl.module_policy",
    "load_module": "tj_rl.module_policy",
    "AgentPolicy": "tj_rl.agent_policy",
    "export_agent": "tj_rl.agent_io",
    "TrafficSignalEnv": "tj_rl.rllib",
    "GraphModuleConfig": "tj_rl.rllib_module",
    "TrafficRLModule": "tj_rl.rllib_module",
    "graph_module_spec": "tj_rl.rllib_module",
    "shared_module_spec": "tj_rl.rllib_module",
    "shared_policy_mapping": "tj_rl.rllib_module",
    "RaySession": "tj_rl.ray_session",
    "LocalCluster": "tj_rl.ray_cluster",
    "TrafficCallbacks": "tj_rl.rllib_callbacks",
}


def __getattr__(name: str) -> object:
    """Load the heavy names of ``_LAZY`` on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'tj_rl' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "COST_NAMES",
    "DEFAULT_SPEC",
    "EDGE_FEATURES",
    "HELDOUT_METRICS",
    "LANE_FEATURES",
    "METRIC_NAMES",
    "NODE_FEATURES",
    "POLICIES",
    "REWARDS",
    "SNAPSHOT_FIELDS",
    "SUMO_VERSION",
    "AgentPolicy",
    "DemandPool",
    "DemandSet",
    "DemandSpec",
    "EnvConfig",
    "EpisodeMetrics",
    "FixedTimePolicy",
    "GraphConfig",
    "GraphModuleConfig",
    "GreedyPolicy",
    "HeldOutTable",
    "LaneMLPConfig",
    "LaneMLPModule",
    "LibsumoBackend",
    "LibsumoBusyError",
    "LocalCluster",
    "MaxOccupancyPolicy",
    "MaxPressurePolicy",
    "MetricsTable",
    "ModulePolicy",
    "NativeReaderError",
    "ParallelTrafficEnv",
    "PhaseProgram",
    "Policy",
    "RandomPolicy",
    "RaySession",
    "RiskConfig",
    "SafetyShield",
    "Scenario",
    "ScenarioError",
    "SingleAgentTrafficEnv",
    "SnapshotBuilder",
    "Spread",
    "SumoBackend",
    "SumoDiedError",
    "SumoStartError",
    "SyntheticSpec",
    "TraciBackend",
    "TrafficCallbacks",
    "TrafficRLModule",
    "TrafficSignalCore",
    "TrafficSignalEnv",
    "VehicleGraph",
    "__version__",
    "build_graph",
    "build_graphs",
    "build_native_reader",
    "build_scenario",
    "default_scenario",
    "derive_program",
    "evaluate",
    "evaluate_heldout",
    "export_agent",
    "gae",
    "generate_demand",
    "graph_module_spec",
    "lane_mlp_spec",
    "load_module",
    "make_backend",
    "make_policy",
    "record_dataset",
    "shared_module_spec",
    "shared_policy_mapping",
    "snapshot_schema",
]
