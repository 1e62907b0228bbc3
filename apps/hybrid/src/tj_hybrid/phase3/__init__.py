"""Phase 3: PPO-Lagrangian under a safety-cost limit, DDP + gradient accumulation on rollouts
streamed from collector processes through a bounded tj-data queue.

``tj_hybrid.phase3.phase.PHASE`` is the registry's entry point.
"""

from tj_hybrid._warnings import quiet_known_warnings

quiet_known_warnings()  # before tj-models (PyG) is imported

__all__: list[str] = []
