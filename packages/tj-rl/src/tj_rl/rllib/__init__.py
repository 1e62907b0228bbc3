"""The RLlib room: the ``MultiAgentEnv`` adapter, the graph RLModule and the lane-MLP baseline
module, callbacks (costs, vetoes, SUMO deaths) and the export to a tj-models agent. Every name
loads Ray on first use, never at ``import tj_rl.rllib``.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "env": ["ProcessTrafficSignalEnv", "TrafficSignalEnv"],
        "vector": ["ParallelEnvRunner", "ParallelVectorEnv"],
        "module": [
            "SHARED_POLICY",
            "GraphModuleConfig",
            "TrafficRLModule",
            "graph_module_spec",
            "shared_module_spec",
            "shared_policy_mapping",
        ],
        "mlp": ["LaneMLPConfig", "LaneMLPModule", "lane_mlp_spec"],
        "callbacks": ["TrafficCallbacks"],
        "export": ["export_agent"],
        "imitation": [
            "IMITATION_KEY",
            "ImitationPPOLearner",
            "imitation_coeff",
            "imitation_learner",
        ],
        "module_policy": ["ModulePolicy", "load_module"],
    },
)
