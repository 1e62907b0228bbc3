"""Phase 1: world-model pretraining on a recorded SUMO dataset (DDP, AMP, accumulation).

``tj_hybrid.phase1.phase.PHASE`` is the registry's entry point; ``run_phase1`` runs it directly.
"""

from tj_hybrid._warnings import quiet_known_warnings

quiet_known_warnings()  # before tj-models (PyG) is imported, here and in every spawned rank

from tj_hybrid.phase1.run import Phase1Result, run_phase1  # noqa: E402

__all__ = ["Phase1Result", "run_phase1"]
