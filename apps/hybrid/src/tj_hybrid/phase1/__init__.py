"""Phase 1: world-model pretraining on a recorded SUMO dataset (DDP, AMP, accumulation)."""

from tj_hybrid.phase1.run import Phase1Result, run_phase1

__all__ = ["Phase1Result", "run_phase1"]
