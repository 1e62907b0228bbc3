"""Phase 2: safe RL with Ray RLlib PPO on the vehicle graph, behind the safety shield.

``tj_hybrid.phase2.phase.PHASE`` is the registry's entry point.
"""

from tj_hybrid._warnings import quiet_known_warnings

quiet_known_warnings()  # before tj-models (PyG) is imported

__all__: list[str] = []
