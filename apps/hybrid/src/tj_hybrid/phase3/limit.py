"""``cost_limit: auto``: phase 3's limit from the baselines' delay-cost frontier (issue 29).

The rule (``frontier_limit``), with d2, c2 the phase-2 policy's delay and cost: the frontier's
cost at ``(1 + delay_slack) x d2`` (the safest baseline at most that slow), capped at
``cost_limit_fraction x c2``; when no baseline is that fast, ``cost_limit_fraction x c2`` alone.
Phase 3 is then asked to be at least as safe as what exists at its delay, and never less than a
fixed cut below phase 2. The points come from validation traffic (``auto_cost_limit``: the
baselines and the phase-2 policy, phase 3's cost weights), never held-out traffic: choose by
validation, report on held-out (DESIGN §10). They are kept in the phase folder (``limit.json``),
so a resumed run neither simulates them again nor moves its limit.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tj_hybrid.config import HybridConfig
from tj_hybrid.evaluation.frontier import Frontier, Point, frontier_points
from tj_monitor import atomic_write_json

if TYPE_CHECKING:
    from tj_hybrid.rl_setup import RLSetup

__all__ = ["PHASE2", "CostLimit", "auto_cost_limit", "frontier_limit"]

log = logging.getLogger(__name__)
PHASE2 = "phase2"  # the phase-2 policy's name among the validation points


@dataclass(frozen=True, kw_only=True)
class CostLimit:
    """The limit, the rule that set it (``frontier``, ``cap`` or ``fallback``) and that in words."""

    value: float
    rule: Literal["frontier", "cap", "fallback"]
    line: str


def frontier_limit(baselines: Mapping[str, Point], phase2: Point, *, slack: float,
                   fraction: float) -> CostLimit:  # fmt: skip
    """The limit from the baselines' (delay, cost) and the phase-2 policy's (module docstring)."""
    d2, c2 = phase2
    delay, cap = (1 + slack) * d2, fraction * c2
    frontier = Frontier.of(baselines)
    step = frontier.cost_at(delay)
    ours = (f"phase 2 at {d2:.2f} s, cost {c2:.2f}; frontier: {frontier.describe()} "
            f"(validation traffic)")  # fmt: skip
    if step is None:
        return CostLimit(value=cap, rule="fallback",
                         line=f"cost limit {cap:.2f} = {fraction:g} x phase 2's cost: no baseline on "
                              f"the frontier is at most {delay:.2f} s = (1 + {slack:g}) x phase 2's "
                              f"delay; {ours}")  # fmt: skip
    name, cost = step
    if cost > cap:
        return CostLimit(value=cap, rule="cap",
                         line=f"cost limit {cap:.2f} = {fraction:g} x phase 2's cost, below the "
                              f"frontier's {cost:.2f} ({name}) at {delay:.2f} s = (1 + {slack:g}) x "
                              f"phase 2's delay; {ours}")  # fmt: skip
    return CostLimit(value=cost, rule="frontier",
                     line=f"cost limit {cost:.2f} = the frontier's cost ({name}) at {delay:.2f} s = "
                          f"(1 + {slack:g}) x phase 2's delay, at most {cap:.2f} = {fraction:g} x "
                          f"phase 2's cost; {ours}")  # fmt: skip


def auto_cost_limit(cfg: HybridConfig, setup: RLSetup, agent: Path, folder: Path) -> CostLimit:
    """Score the baselines and the phase-2 ``agent`` on validation traffic with phase 3's cost
    weights (or read the points a run before kept in ``folder/limit.json``, when they were made
    with the same weights) and apply ``frontier_limit``; the rule's line goes to the log."""
    p3 = cfg.phase3
    path = folder / "limit.json"
    weights = {k: float(v) for k, v in p3.cost_weights.items()}
    kept = json.loads(path.read_text()) if path.is_file() else None
    if kept is not None and kept.get("cost_weights") == weights:
        points = {k: (float(d), float(c)) for k, (d, c) in kept["points"].items()}
    else:
        points = _validation_points(cfg, setup, agent, weights)
    if PHASE2 not in points:
        raise RuntimeError(f"cost_limit auto: the phase-2 policy has no validation score ({path})")
    baselines = {k: p for k, p in points.items() if k != PHASE2}
    limit = frontier_limit(baselines, points[PHASE2], slack=p3.delay_slack,
                           fraction=p3.cost_limit_fraction)  # fmt: skip
    atomic_write_json(path, {"cost_weights": weights, "points": points, **asdict(limit)})
    log.info("phase 3: %s", limit.line)
    return limit


def _validation_points(cfg: HybridConfig, setup: RLSetup, agent: Path,
                       weights: Mapping[str, float]) -> dict[str, Point]:  # fmt: skip
    from tj_hybrid.evaluation import evaluate_validation
    from tj_rl.control import AgentPolicy

    scored = evaluate_validation(cfg, setup, {PHASE2: AgentPolicy(agent)}, cost_weights=weights)
    return frontier_points(scored["summary"])
