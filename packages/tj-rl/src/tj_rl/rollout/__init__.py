"""The rollout room: phase 3's Ray-free collection (``RolloutCollector``, versioned weights files),
GAE and the graph samples a collected step becomes. Names that need torch load on first use.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "advantages": ["gae"],
        "samples": ["ROLLOUT_FIELDS", "Transition", "fragment_samples", "graph_sample", "rollout_schema"],
        "collector": ["Fragment", "RolloutCollector", "publish_weights", "read_weights"],
        "batch": ["rollout_graph"],
    },
)
