"""``cost_limit: auto``: phase 3's limit from the baselines' delay-cost frontier (issue 29).

The rule (``frontier_limit``), with d2, c2 the phase-2 policy's delay and cost: the frontier's
cost at ``(1 + delay_slack) x d2`` (the safest baseline at most that slow), capped at
``cost_limit_fraction x c2``; when no baseline is that fast, ``cost_limit_fraction x c2`` alone.
Phase 3 is then asked to be at least as safe as what exists at its delay, and never less than a
fixed cut below phase 2. The points come from validation traffic (``auto_cost_limit``: the
baselines and the phase-2 policy, phase 3's cost weights), never held-out traffic: choose by
validation, report on held-out (DESIGN §10). They are kept in the phase folder (``limit.json``),
so a resumed run neither simulates them again nor moves its limit.

With ``phase2.validation.windows: held-out`` the points come from the held-out windows, but
PPO-Lagrangian reads the cost of its training episodes, in the training windows, where the same
traffic level may cost far less (fokr_bs_demo: phase 2 52.8 on validation in the held-out quarter
hour, 3-4.5 per training episode: the limit of 31.65 never acted). The Lagrangian then reads the
limit as the same share of phase 2's cost in the training windows (``lagrangian_limit``; phase 2
scored on the validation seeds there): the limit stays "this much below phase 2" where it trains,
and the choice of the exported policy keeps the held-out-window limit it was set in.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tj_hybrid.config import HybridConfig
from tj_hybrid.evaluation.frontier import Frontier, Point, frontier_points
from tj_monitor import atomic_write_json

if TYPE_CHECKING:
    from tj_hybrid.rl_setup import RLSetup

__all__ = ["PHASE2", "CostLimit", "auto_cost_limit", "frontier_limit", "lagrangian_limit"]

log = logging.getLogger(__name__)
PHASE2 = "phase2"  # the phase-2 policy's name among the validation points


@dataclass(frozen=True, kw_only=True)
class CostLimit:
    """The limit, the rule that set it (``frontier``, ``cap`` or ``fallback``) and that in words."""

    value: float
    rule: Literal["frontier", "cap", "fallback"]
    line: str
    # what PPO-Lagrangian reads, in the training windows' units (None: ``value``, the same windows)
    training: float | None = None

    @property
    def lagrangian(self) -> float:
        """The limit the Lagrangian trains under."""
        return self.value if self.training is None else self.training


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
    extra: dict[str, Any] = {}
    if setup.validate_in_heldout and setup.heldout_scenario != setup.scenario:
        same = kept is not None and kept.get("cost_weights") == weights
        train = (tuple(kept["phase2_training_windows"]) if same and "phase2_training_windows"
                 in kept else _phase2_in_training_windows(cfg, setup, agent, weights))  # fmt: skip
        extra["phase2_training_windows"] = [float(train[0]), float(train[1])]
        limit = lagrangian_limit(limit, points[PHASE2][1], float(train[1]))
    atomic_write_json(path, {"cost_weights": weights, "points": points, **extra,
                             **asdict(limit)})  # fmt: skip
    log.info("phase 3: %s", limit.line)
    return limit


def lagrangian_limit(limit: CostLimit, validation_cost: float, training_cost: float) -> CostLimit:
    """``limit`` with what the Lagrangian reads in the training windows: the same share of phase
    2's cost there (``training_cost``) as ``limit.value`` is of it in the validation windows
    (``validation_cost``); phase 2 at no cost in the validation windows leaves the limit as it
    is (a limit of 0 stays 0)."""
    share = training_cost / validation_cost if validation_cost > 0 else 1.0
    training = limit.value * share
    line = (f"{limit.line}. PPO-Lagrangian trains in the training windows, where phase 2's "
            f"validation cost is {training_cost:.2f} (held-out windows: {validation_cost:.2f}): "
            f"it reads the limit as the same share of it, {training:.2f}")  # fmt: skip
    return dataclasses.replace(limit, training=training, line=line)


def _phase2_in_training_windows(cfg: HybridConfig, setup: RLSetup, agent: Path,
                                weights: Mapping[str, float]) -> Point:  # fmt: skip
    """The phase-2 policy's (delay, cost) on the validation seeds in the training windows."""
    from tj_hybrid.evaluation import evaluate_validation
    from tj_rl.control import AgentPolicy

    there = dataclasses.replace(setup, validate_in_heldout=False)
    scored = evaluate_validation(cfg, there, {PHASE2: AgentPolicy(agent)}, cost_weights=weights,
                                 baselines=False)  # fmt: skip
    return frontier_points(scored["summary"])[PHASE2]


def _validation_points(cfg: HybridConfig, setup: RLSetup, agent: Path,
                       weights: Mapping[str, float]) -> dict[str, Point]:  # fmt: skip
    from tj_hybrid.evaluation import evaluate_validation
    from tj_rl.control import AgentPolicy

    scored = evaluate_validation(cfg, setup, {PHASE2: AgentPolicy(agent)}, cost_weights=weights)
    return frontier_points(scored["summary"])
