"""The policy phase 3 exports (``phase3.select``): choose by validation, report on held-out
(DESIGN §10; issue 28: phase 3 keeps phase 2's gain).

The candidates are phase 2's policy (iteration 0) and the phase-3 policy at every checkpoint
(``candidates/iter-N``, written by rank 0 as it checkpoints). Each is scored on validation traffic
(delay and episode cost, phase 3's cost weights), acting as phase 3 runs it (behind
``phase3.guard`` and the learned shield when set: phase 2's policy too, so the delay slack is
measured from phase 2 behind the guard); ``choose`` takes the lowest delay among those
within the cost limit, else the lowest cost. Phase 2 being a candidate, phase 3 never exports a
policy worse than phase 2's on validation in both delay and cost. The scores are kept with each
candidate's weights checksum (``candidates/scores.json``), so ``--resume`` scores none twice;
phase 2's point is ``limit.json``'s when ``cost_limit: auto`` made one with the same weights.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.evaluation.frontier import Point
from tj_hybrid.phase3.limit import PHASE2
from tj_hybrid.run_dir import PhaseDir
from tj_monitor import atomic_write_json

if TYPE_CHECKING:
    from tj_hybrid.rl_setup import RLSetup

__all__ = ["Choice", "candidate_dir", "candidate_name", "choose", "saved_candidates",
           "select_policy"]  # fmt: skip

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The candidate exported (its iteration; 0: phase 2's policy), its validation point, whether
    it is within the cost limit, and the choice in words (the log's and the report's line)."""

    iteration: int
    point: Point
    within: bool
    line: str
    scores: Mapping[int, Point]  # every candidate's, by iteration


def candidate_name(iteration: int) -> str:
    """How a candidate is named in the log, the report and ``selection.json``."""
    return "phase 2's policy (iteration 0)" if iteration == 0 else f"iteration {iteration}"


def _num(x: float) -> float:
    """NaN sorts last: a candidate that could not be scored is never preferred."""
    return x if math.isfinite(x) else math.inf


def choose(scores: Mapping[int, Point], limit: float, max_delay: float | None = None) -> Choice:
    """The candidate (iteration -> validation (delay, cost)) with the lowest delay among those
    whose cost is at most ``limit``; when none is, the lowest cost. Only candidates at most
    ``max_delay`` slow compete when any is (phase 3 keeps phase 2's gain: the caller passes
    (1 + delay_slack) x phase 2's delay, so phase 2 itself always qualifies). Ties go to the
    lower cost (or delay), then the earlier iteration: a phase-3 checkpoint replaces phase 2's
    policy only when it is better."""
    if not scores:
        raise ValueError("choose: no candidates")
    if max_delay is not None:
        fast = {i: p for i, p in scores.items() if p[0] <= max_delay}
        if fast and len(fast) < len(scores):
            slow = len(scores) - len(fast)
            choice = choose(fast, limit)
            line = f"{choice.line} ({slow} slower than {max_delay:.2f} s left out)"
            return Choice(iteration=choice.iteration, point=choice.point, within=choice.within,
                          line=line, scores=dict(scores))  # fmt: skip
    within = [i for i, (d, c) in scores.items() if c <= limit and math.isfinite(d)]
    n = len(scores)
    if within:
        best = min(within, key=lambda i: (scores[i][0], scores[i][1], i))
        d, c = scores[best]
        line = (f"exported {candidate_name(best)}: validation delay {d:.2f} s, cost {c:.2f} <= "
                f"limit {limit:.2f}; the lowest delay of the {len(within)} of {n} candidates "
                f"within the limit")  # fmt: skip
        return Choice(iteration=best, point=(d, c), within=True, line=line,
                      scores=dict(scores))  # fmt: skip
    best = min(scores, key=lambda i: (_num(scores[i][1]), _num(scores[i][0]), i))
    d, c = scores[best]
    line = (f"exported {candidate_name(best)}: none of the {n} candidates is within the cost "
            f"limit {limit:.2f} on validation; the lowest cost, {c:.2f} (delay {d:.2f} s)"
            )  # fmt: skip
    return Choice(iteration=best, point=(d, c), within=False, line=line,
                  scores=dict(scores))  # fmt: skip


def candidate_dir(pdir: PhaseDir, iteration: int) -> Path:
    """Where rank 0 exports the phase-3 policy of ``iteration`` (a tj-models agent folder)."""
    return pdir.root / "candidates" / f"iter-{iteration:05d}"


def saved_candidates(pdir: PhaseDir) -> dict[int, Path]:
    """The phase-3 candidates exported so far (complete agent folders), by iteration."""
    folder = pdir.root / "candidates"
    found = {int(p.name[5:]): p for p in folder.glob("iter-*")
             if p.name[5:].isdigit() and (p / "config.json").is_file()}  # fmt: skip
    return dict(sorted(found.items()))


def _checksum(agent: Path) -> str:
    """The weights' sha256 that tj-models keeps in the agent's ``config.json``."""
    return str(json.loads((agent / "config.json").read_text())["weights_sha256"])


def _kept_scores(path: Path, how: Mapping[str, Any]) -> dict[str, tuple[str, Point]]:
    """``scores.json``'s ``{iteration: (checksum, point)}`` when made the same way, else {}."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text())
    if data.get("how") != dict(how):
        return {}
    return {i: (str(s), (float(d), float(c))) for i, (s, d, c) in data["scores"].items()}


def _phase2_point(pdir: PhaseDir, weights: Mapping[str, float]) -> Point | None:
    """Phase 2's validation point from ``limit.json`` (``cost_limit: auto``), same weights."""
    path = pdir.root / "limit.json"
    if not path.is_file():
        return None
    kept = json.loads(path.read_text())
    if kept.get("cost_weights") != dict(weights) or PHASE2 not in kept.get("points", {}):
        return None
    d, c = kept["points"][PHASE2]
    return float(d), float(c)


def _score(cfg: HybridConfig, setup: RLSetup, agents: Mapping[int, Path],
           weights: Mapping[str, float]) -> dict[int, Point]:  # fmt: skip
    """Validation (delay, cost) of each candidate, without the baselines (``limit.json`` has
    them), each acting as phase 3's evaluation runs it (``acting_policy``: behind the learned
    shield and the dilemma-zone guard when they are set)."""
    from tj_hybrid.evaluation import acting_policy, evaluate_validation, frontier_points

    policies = {f"iter-{i}": acting_policy(cfg, p) for i, p in agents.items()}
    points = frontier_points(evaluate_validation(cfg, setup, policies, cost_weights=weights,
                                                 baselines=False)["summary"])  # fmt: skip
    return {i: points.get(f"iter-{i}", (math.nan, math.nan)) for i in agents}


def select_policy(cfg: HybridConfig, setup: RLSetup, pdir: PhaseDir, phase2_agent: Path,
                  cost_limit: float) -> Choice:  # fmt: skip
    """Score the candidates not scored yet, ``choose``, export the chosen one to ``pdir.agent``
    and write ``candidates/selection.json``; rank 0, after training (``select: best``)."""
    from tj_models import TrafficAgent

    p3 = cfg.phase3
    weights = {k: float(v) for k, v in p3.cost_weights.items()}
    how = {"cost_weights": weights, "shield_threshold": p3.shield_threshold,
           "guard": dataclasses.asdict(p3.guard),
           "route_seeds": list(cfg.phase2.validation.route_seeds),
           "sumo_seeds": list(cfg.phase2.validation.sumo_seeds)}  # fmt: skip
    agents = {0: phase2_agent, **saved_candidates(pdir)}
    sums = {i: _checksum(p) for i, p in agents.items()}
    store = pdir.root / "candidates" / "scores.json"
    kept = _kept_scores(store, how)
    scores = {i: kept[str(i)][1] for i in agents if kept.get(str(i), ("",))[0] == sums[i]}
    alone = p3.shield_threshold is None and p3.guard.config() is None  # as limit.py scored it
    point = _phase2_point(pdir, weights) if alone else None
    if 0 not in scores and point is not None:  # limit.py scored it the same way
        scores[0] = point
    missing = {i: p for i, p in agents.items() if i not in scores}
    if missing:
        log.info("phase 3: scoring %d candidate(s) on validation traffic: %s", len(missing),
                 ", ".join(candidate_name(i) for i in missing))  # fmt: skip
        scores |= _score(cfg, setup, missing, weights)
    scores = dict(sorted(scores.items()))
    atomic_write_json(store, {"how": how, "scores": {str(i): [sums[i], *scores[i]]
                                                     for i in scores}})  # fmt: skip
    base = scores.get(0)
    bound = (1 + cfg.phase3.delay_slack) * base[0] if base and math.isfinite(base[0]) else None
    choice = choose(scores, cost_limit, max_delay=bound)
    TrafficAgent.load(agents[choice.iteration]).save(pdir.agent)
    atomic_write_json(pdir.root / "candidates" / "selection.json",
                      {"cost_limit": cost_limit, "scores": {str(i): [*p] for i, p in scores.items()},
                       "chosen": choice.iteration, "within": choice.within, "line": choice.line,
                       "agent": str(agents[choice.iteration])})  # fmt: skip
    log.info("phase 3: %s", choice.line)
    return choice
