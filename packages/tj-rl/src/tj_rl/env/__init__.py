"""The environment room: scenarios, SUMO sessions, the vehicle graph, observations, the rule
shield, costs, rewards, kernels and readers. Never imports Ray or torch (a fresh-interpreter test
checks every module of this room).
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "adapters": ["ParallelTrafficEnv", "SingleAgentTrafficEnv"],
        "backends": ["LibsumoBackend", "SumoBackend", "TraciBackend", "make_backend"],
        "builder": ["DEFAULT_SPEC", "SyntheticSpec", "build_scenario", "default_scenario"],
        "clearance": ["ite_intervals"],
        "config": ["COST_NAMES", "EnvConfig"],
        "core": ["TrafficSignalCore"],
        "dilemma": ["DilemmaZone"],
        "errors": ["LibsumoBusyError", "ScenarioError", "SumoDiedError", "SumoStartError"],
        "features": ["EDGE_FEATURES", "NODE_FEATURES", "GraphConfig", "VehicleGraph"],
        "graphs": ["build_graph", "build_graphs"],
        "gridlock": ["GRIDLOCK", "GridlockConfig", "GridlockDetector"],
        "metrics": ["METRIC_NAMES", "EpisodeMetrics", "Spread"],
        "native_reader": ["NativeReaderError", "build_native_reader"],
        "observation": ["LANE_FEATURES"],
        "person_flows": ["late_person_flows"],
        "rewards": ["REWARDS"],
        "runtime": ["SUMO_VERSION"],
        "scenario": ["Scenario", "TimeWindow", "parse_time", "sumocfg_stem"],
        "shield": ["PhaseProgram", "RuleShield", "derive_program"],
    },
)
