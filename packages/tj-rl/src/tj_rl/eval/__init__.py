"""The evaluation room: whole episodes of any ``Policy`` (``evaluate``: a metrics table) and the
held-out comparison of several policies on the same unseen traffic (``evaluate_heldout``), whose
episodes a ``RowCache`` keeps so that each runs once.
"""

# Names load on first use (PEP 562 via lazy_loader): importing the room imports none of its
# modules, so a process pays only for what it touches.
import lazy_loader as _lazy

__getattr__, __dir__, __all__ = _lazy.attach(
    __name__,
    submod_attrs={
        "episodes": ["MetricsTable", "evaluate", "policy_scenario", "run_episode"],
        "heldout": ["HELDOUT_METRICS", "PEDESTRIAN_METRICS", "HeldOutTable", "evaluate_heldout"],
        "jobs": ["EpisodeJob", "run_job", "run_jobs"],
        "row_cache": ["RowCache", "policy_fingerprint"],
    },
)
