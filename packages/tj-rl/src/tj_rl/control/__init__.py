"""The control room: the baselines (ours, Advanced-MP, and the SUMO programs users deploy: the
scenario's own, SUMO's actuated control), and the one actor every learned-policy caller uses
(RLlib's module, phase 3's collector and learner, ``AgentPolicy``, evaluation). Names that need
torch load on first use.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "baselines": [
            "POLICIES",
            "FixedTimePolicy",
            "GreedyPolicy",
            "MaxOccupancyPolicy",
            "MaxPressurePolicy",
            "MixedPolicy",
            "Policy",
            "RandomPolicy",
            "describe_policy",
            "make_policy",
        ],
        "advanced_mp": ["AdvancedMaxPressurePolicy"],
        "dz_guard": ["GUARD_RULES", "DzGuard", "DzGuardConfig", "GuardedPolicy", "zone_count"],
        "dz_protect": ["DilemmaProtectedPolicy"],
        "lookahead": ["LookaheadPolicy", "lookahead_unsupported"],
        "programs": ["ScenarioProgramPolicy", "SumoActuatedPolicy"],
        "actuated_net": ["ActuatedSpec", "actuated_net", "rebuilt_plans", "tls_types"],
        "actor": ["MASK_FILL", "Actor", "ActorOutput", "choose"],
        "agent_policy": ["AgentPolicy"],
        "fit": ["check_agent_env"],
    },
)
