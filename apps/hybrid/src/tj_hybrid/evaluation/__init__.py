"""Held-out evaluation as phases 2 and 3 report it: a set of policies next to the baselines on
held-out traffic (one protocol for every caller), the phase report around it, the plots.

An evaluation here is the in-process form ``{set: {"markdown", "rows", "summary"}}`` that
``save_evaluation`` writes to a phase's ``eval.json``; ``tj_hybrid.results`` reads it back typed.
``frontier``: the controllers' delay-cost frontier (phase 3's limit and trade-off picture);
``verdict``: a trained policy against the best baseline, the line every report leads with.
"""

from tj_hybrid.evaluation.acting import acting_note, acting_policy
from tj_hybrid.evaluation.frontier import (
    Frontier,
    Point,
    correlation,
    dominated_by,
    frontier_points,
    pareto_front,
)
from tj_hybrid.evaluation.heldout import (
    EVAL_METRICS,
    delays,
    evaluate_policies,
    evaluate_validation,
    held_out_set,
    row_cache,
    save_evaluation,
    validation_delays,
    validation_table,
    weighted_cost,
)
from tj_hybrid.evaluation.phase_report import means, plans_note, write_phase_report
from tj_hybrid.evaluation.plots import plot_heldout, plot_learning, series
from tj_hybrid.evaluation.verdict import TRAINED, Verdict, verdict, verdict_lines

__all__ = [
    "EVAL_METRICS",
    "TRAINED",
    "Frontier",
    "Point",
    "Verdict",
    "acting_note",
    "acting_policy",
    "correlation",
    "delays",
    "dominated_by",
    "evaluate_policies",
    "evaluate_validation",
    "frontier_points",
    "held_out_set",
    "means",
    "pareto_front",
    "plans_note",
    "plot_heldout",
    "plot_learning",
    "row_cache",
    "save_evaluation",
    "series",
    "validation_delays",
    "validation_table",
    "verdict",
    "verdict_lines",
    "weighted_cost",
    "write_phase_report",
]
