"""tj-rl: SUMO scenarios, a vehicle-graph traffic-signal environment with a rule safety shield,
baselines, demand, evaluation, phase-1 recording, phase-3 rollouts and the RLlib glue, in rooms:

- ``tj_rl.env``: scenario, SUMO session, vehicle graph, observations, rule shield, costs, rewards
  (never Ray or torch);
- ``tj_rl.traffic``: demand pools and held-out sets;
- ``tj_rl.control``: baselines and the one actor (observation + mask -> action, log-prob, values);
- ``tj_rl.eval``: episodes and held-out evaluation;
- ``tj_rl.recording``: phase-1 snapshots and ``record_dataset``;
- ``tj_rl.rollout``: phase-3 collection and GAE;
- ``tj_rl.rllib``: RLlib's env adapter, modules, callbacks and the agent export.

The names tj-rl 0.8 exported here still import from ``tj_rl`` during 0.9, with a
``DeprecationWarning`` naming their room; they go in 0.10.
"""

from importlib import metadata as _metadata

__version__ = _metadata.version("tj-rl")  # one source of truth: pyproject.toml

# old top-level name -> (its room, its name there); RaySession and LocalCluster moved to tj-dist
# (DESIGN §3: tj-dist owns the Ray session), SafetyShield is the env's RuleShield now
_MOVED: dict[str, tuple[str, str]] = {
    "COST_NAMES": ("tj_rl.env", "COST_NAMES"),
    "DEFAULT_SPEC": ("tj_rl.env", "DEFAULT_SPEC"),
    "EDGE_FEATURES": ("tj_rl.env", "EDGE_FEATURES"),
    "HELDOUT_METRICS": ("tj_rl.eval", "HELDOUT_METRICS"),
    "PEDESTRIAN_METRICS": ("tj_rl.eval", "PEDESTRIAN_METRICS"),
    "LANE_FEATURES": ("tj_rl.env", "LANE_FEATURES"),
    "METRIC_NAMES": ("tj_rl.env", "METRIC_NAMES"),
    "NODE_FEATURES": ("tj_rl.env", "NODE_FEATURES"),
    "POLICIES": ("tj_rl.control", "POLICIES"),
    "REWARDS": ("tj_rl.env", "REWARDS"),
    "SNAPSHOT_FIELDS": ("tj_rl.recording", "SNAPSHOT_FIELDS"),
    "SUMO_VERSION": ("tj_rl.env", "SUMO_VERSION"),
    "AgentPolicy": ("tj_rl.control", "AgentPolicy"),
    "DemandPool": ("tj_rl.traffic", "DemandPool"),
    "DemandSet": ("tj_rl.traffic", "DemandSet"),
    "DemandSpec": ("tj_rl.traffic", "DemandSpec"),
    "EnvConfig": ("tj_rl.env", "EnvConfig"),
    "EpisodeMetrics": ("tj_rl.env", "EpisodeMetrics"),
    "FixedTimePolicy": ("tj_rl.control", "FixedTimePolicy"),
    "GraphConfig": ("tj_rl.env", "GraphConfig"),
    "GraphModuleConfig": ("tj_rl.rllib", "GraphModuleConfig"),
    "GreedyPolicy": ("tj_rl.control", "GreedyPolicy"),
    "HeldOutTable": ("tj_rl.eval", "HeldOutTable"),
    "LaneMLPConfig": ("tj_rl.rllib", "LaneMLPConfig"),
    "LaneMLPModule": ("tj_rl.rllib", "LaneMLPModule"),
    "LibsumoBackend": ("tj_rl.env", "LibsumoBackend"),
    "LibsumoBusyError": ("tj_rl.env", "LibsumoBusyError"),
    "LocalCluster": ("tj_dist", "LocalCluster"),
    "MaxOccupancyPolicy": ("tj_rl.control", "MaxOccupancyPolicy"),
    "MaxPressurePolicy": ("tj_rl.control", "MaxPressurePolicy"),
    "MetricsTable": ("tj_rl.eval", "MetricsTable"),
    "ModulePolicy": ("tj_rl.rllib", "ModulePolicy"),
    "NativeReaderError": ("tj_rl.env", "NativeReaderError"),
    "ParallelTrafficEnv": ("tj_rl.env", "ParallelTrafficEnv"),
    "PhaseProgram": ("tj_rl.env", "PhaseProgram"),
    "Policy": ("tj_rl.control", "Policy"),
    "RandomPolicy": ("tj_rl.control", "RandomPolicy"),
    "RaySession": ("tj_dist", "RaySession"),
    "RiskConfig": ("tj_rl.recording", "RiskConfig"),
    "SafetyShield": ("tj_rl.env", "RuleShield"),
    "Scenario": ("tj_rl.env", "Scenario"),
    "ScenarioError": ("tj_rl.env", "ScenarioError"),
    "SingleAgentTrafficEnv": ("tj_rl.env", "SingleAgentTrafficEnv"),
    "SnapshotBuilder": ("tj_rl.recording", "SnapshotBuilder"),
    "Spread": ("tj_rl.env", "Spread"),
    "SumoBackend": ("tj_rl.env", "SumoBackend"),
    "SumoDiedError": ("tj_rl.env", "SumoDiedError"),
    "SumoStartError": ("tj_rl.env", "SumoStartError"),
    "SyntheticSpec": ("tj_rl.env", "SyntheticSpec"),
    "TraciBackend": ("tj_rl.env", "TraciBackend"),
    "TrafficCallbacks": ("tj_rl.rllib", "TrafficCallbacks"),
    "TrafficRLModule": ("tj_rl.rllib", "TrafficRLModule"),
    "TrafficSignalCore": ("tj_rl.env", "TrafficSignalCore"),
    "TrafficSignalEnv": ("tj_rl.rllib", "TrafficSignalEnv"),
    "VehicleGraph": ("tj_rl.env", "VehicleGraph"),
    "build_graph": ("tj_rl.env", "build_graph"),
    "build_graphs": ("tj_rl.env", "build_graphs"),
    "build_native_reader": ("tj_rl.env", "build_native_reader"),
    "build_scenario": ("tj_rl.env", "build_scenario"),
    "default_scenario": ("tj_rl.env", "default_scenario"),
    "derive_program": ("tj_rl.env", "derive_program"),
    "evaluate": ("tj_rl.eval", "evaluate"),
    "evaluate_heldout": ("tj_rl.eval", "evaluate_heldout"),
    "export_agent": ("tj_rl.rllib", "export_agent"),
    "gae": ("tj_rl.rollout", "gae"),
    "generate_demand": ("tj_rl.traffic", "generate_demand"),
    "graph_module_spec": ("tj_rl.rllib", "graph_module_spec"),
    "lane_mlp_spec": ("tj_rl.rllib", "lane_mlp_spec"),
    "load_module": ("tj_rl.rllib", "load_module"),
    "make_backend": ("tj_rl.env", "make_backend"),
    "make_policy": ("tj_rl.control", "make_policy"),
    "record_dataset": ("tj_rl.recording", "record_dataset"),
    "shared_module_spec": ("tj_rl.rllib", "shared_module_spec"),
    "shared_policy_mapping": ("tj_rl.rllib", "shared_policy_mapping"),
    "snapshot_schema": ("tj_rl.recording", "snapshot_schema"),
}


def __getattr__(name: str) -> object:
    """The 0.8 names, from their rooms, with a ``DeprecationWarning`` (removed in 0.10)."""
    moved = _MOVED.get(name)
    if moved is None:
        raise AttributeError(f"module 'tj_rl' has no attribute {name!r}")
    import importlib
    import warnings

    module, new = moved
    warnings.warn(
        f"tj_rl.{name} moved: use {module}.{new} (the old name goes in tj-rl 0.10)",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module), new)


__all__ = ["__version__"]
