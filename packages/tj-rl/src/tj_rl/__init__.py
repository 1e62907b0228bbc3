"""tj-rl: SUMO scenarios, a vehicle-graph traffic-signal environment with a safety shield,
baselines, SUMO-output metrics and phase-1 dataset recording."""

from importlib import metadata as _metadata

from tj_rl.adapters import ParallelTrafficEnv, SingleAgentTrafficEnv
from tj_rl.backends import LibsumoBackend, SumoBackend, TraciBackend, make_backend
from tj_rl.baselines import (
    POLICIES,
    FixedTimePolicy,
    GreedyPolicy,
    MaxPressurePolicy,
    MetricsTable,
    Policy,
    RandomPolicy,
    evaluate,
    make_policy,
)
from tj_rl.builder import DEFAULT_SPEC, SyntheticSpec, build_scenario, default_scenario
from tj_rl.config import COST_NAMES, EnvConfig
from tj_rl.env import TrafficSignalCore
from tj_rl.errors import LibsumoBusyError, ScenarioError, SumoDiedError, SumoStartError
from tj_rl.features import EDGE_FEATURES, NODE_FEATURES, GraphConfig, VehicleGraph
from tj_rl.graphs import build_graph, build_graphs
from tj_rl.metrics import METRIC_NAMES, EpisodeMetrics
from tj_rl.native_reader import NativeReaderError, build_native_reader
from tj_rl.observation import LANE_FEATURES
from tj_rl.recording import record_dataset
from tj_rl.rewards import REWARDS
from tj_rl.runtime import SUMO_VERSION
from tj_rl.scenario import Scenario
from tj_rl.shield import PhaseProgram, SafetyShield, derive_program
from tj_rl.snapshot import SNAPSHOT_FIELDS, RiskConfig, SnapshotBuilder, snapshot_schema

__version__ = _metadata.version("tj-rl")  # one source of truth: pyproject.toml


def __getattr__(name: str) -> object:
    """``TrafficSignalEnv`` imports Ray RLlib: load it on first use only (PEP 562)."""
    if name == "TrafficSignalEnv":
        from tj_rl.rllib import TrafficSignalEnv

        return TrafficSignalEnv
    raise AttributeError(f"module 'tj_rl' has no attribute {name!r}")


__all__ = [
    "COST_NAMES",
    "DEFAULT_SPEC",
    "EDGE_FEATURES",
    "LANE_FEATURES",
    "METRIC_NAMES",
    "NODE_FEATURES",
    "POLICIES",
    "REWARDS",
    "SNAPSHOT_FIELDS",
    "SUMO_VERSION",
    "EnvConfig",
    "EpisodeMetrics",
    "FixedTimePolicy",
    "GraphConfig",
    "GreedyPolicy",
    "LibsumoBackend",
    "LibsumoBusyError",
    "MaxPressurePolicy",
    "MetricsTable",
    "NativeReaderError",
    "ParallelTrafficEnv",
    "PhaseProgram",
    "Policy",
    "RandomPolicy",
    "RiskConfig",
    "SafetyShield",
    "Scenario",
    "ScenarioError",
    "SingleAgentTrafficEnv",
    "SnapshotBuilder",
    "SumoBackend",
    "SumoDiedError",
    "SumoStartError",
    "SyntheticSpec",
    "TraciBackend",
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
    "make_backend",
    "make_policy",
    "record_dataset",
    "snapshot_schema",
]
