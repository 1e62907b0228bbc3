"""A finished run's quality and cost figures: the bench's readings of what tj-hybrid's results
API reads back typed (phase 1's summary; the result, held-out evaluation and metrics log of phases
2 and 3). Pure functions: each returns ``Reading`` s for ``ctx.record``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

from tj_bench.measure import ratio
from tj_hybrid import Evaluation, HeldOutSet, Phase1Summary, PhaseResult

__all__ = ["BASELINES", "Reading", "cache_speedup", "phase1_readings", "phase2_readings",
           "phase3_readings", "training_speed"]  # fmt: skip

MIB, GIB = 2**20, 2**30
BASELINES = ("fixed-time", "max-pressure", "greedy", "max-occupancy", "advanced-mp",
             "dz-protected", "scenario-program", "sumo-actuated")  # fmt: skip
SETS = ("held_out", "held_out_heavy")


class Reading(NamedTuple):
    name: str
    value: float
    unit: str
    better: Literal["lower", "higher"] | None


def _lower(name: str, value: float, unit: str) -> Reading:
    return Reading(name, value, unit, "lower")


def phase1_readings(summary: Phase1Summary, wall_s: float) -> list[Reading]:
    """Phase 1's headline: time, held-out next-step error of the world model against constant
    velocity, data wait, peak tree PSS against the memory budget."""
    ev, wall = summary.eval, summary.wall_s
    return [
        _lower("wall", wall_s, "s"),
        _lower("recording", wall["data"], "s"),
        _lower("training", wall["train"], "s"),
        _lower("error/world_model", ev.model_mae, "m"),
        Reading("error/constant_velocity", ev.cv_mae, "m", None),
        Reading("improvement", 100 * ev.improvement, "%", "higher"),
        _lower("data_wait", 100 * summary.data_wait_fraction, "%"),
        _lower("peak_tree_pss", (summary.peak_tree_pss or math.nan) / GIB, "GiB"),
        Reading("budget", summary.budget_bytes / GIB, "GiB", None),
    ]


def _memory(m: Mapping[str, Any]) -> list[Reading]:
    """Training time, peak tree PSS and the tree USS a phase left behind (its result's metrics)."""
    return [_lower("train_wall", m["train_wall_s"], "s"),
            _lower("peak_tree_pss", m["peak_tree_pss"] / MIB, "MiB"),
            _lower("uss_left", (m["tree_uss_after"] - m["tree_uss_before"]) / MIB, "MiB")]  # fmt: skip


def _means(held: HeldOutSet, policy: str, *metrics: str) -> list[float]:
    """``policy``'s mean of each of ``metrics`` on ``held`` (NaN where it reports none)."""
    return [held.means(m).get(policy, math.nan) for m in metrics]


def training_speed(rows: Sequence[Mapping[str, Any]]) -> float:
    """Env steps per second of PPO training (sampling and learning) over a run's iterations:
    sampled steps / iteration time, both summed (NaN without rows)."""
    timed = [(r["env_steps_per_s"], r["time/iteration_s"]) for r in rows
             if "env_steps_per_s" in r and "time/iteration_s" in r]  # fmt: skip
    total = sum(t for _, t in timed)
    return sum(v * t for v, t in timed) / total if total > 0 else math.nan


def phase2_readings(result: PhaseResult, evaluation: Evaluation, wall_s: float,
                    *, baselines: bool, rows: Sequence[Mapping[str, Any]] = ()) -> list[Reading]:  # fmt: skip
    """One phase-2 run: held-out avg delay and low-TTC cost of its policy (``policy``; and of
    the baselines under ``baseline/`` when ``baselines``) on the normal and the ~30% heavier set,
    its training and total wall time, peak tree PSS and the tree USS it left behind; with its
    metrics log's ``rows``, the training speed (``env_steps_per_s``)."""
    out = [_lower("wall", wall_s, "s"), *_memory(result.metrics)]
    if rows:
        out.append(Reading("env_steps_per_s", training_speed(rows), "steps/s", "higher"))
    for label in SETS:
        held: HeldOutSet = getattr(evaluation, label)
        delay, low = _means(held, "phase2", "avg_delay", "cost_low_ttc")
        out += [_lower(f"delay/{label}/policy", delay, "s"),
                _lower(f"low_ttc/{label}/policy", low, "per episode")]  # fmt: skip
        if "clone" in held.summary:  # the teacher's clone PPO started from (phase2.imitation)
            out.append(Reading(f"delay/{label}/clone", _means(held, "clone", "avg_delay")[0], "s",
                               None))  # fmt: skip
        for name in [b for b in BASELINES if b in held.summary] if baselines else ():
            delay, low = _means(held, name, "avg_delay", "cost_low_ttc")
            out += [Reading(f"baseline/delay/{label}/{name}", delay, "s", None),
                    Reading(f"baseline/low_ttc/{label}/{name}", low, "per episode", None)]  # fmt: skip
    return out


def cache_speedup(rows: Sequence[Mapping[str, Any]]) -> float:
    """Phase 3's GNN-embedding cache: median first-epoch time (computes the frozen GNN) over the
    median later-epoch time (reads the cache), over the logged iterations; NaN if not logged."""
    first = [r["time/epoch_first_s"] for r in rows if "time/epoch_first_s" in r]
    later = [r["time/epoch_later_s"] for r in rows if "time/epoch_later_s" in r]
    if not first or not later:
        return math.nan
    return ratio(statistics.median(first), statistics.median(later))


def phase3_readings(result: PhaseResult, evaluation: Evaluation,
                    rows: Sequence[Mapping[str, Any]], wall_s: float) -> list[Reading]:  # fmt: skip
    """One phase-3 run against the phase-2 policy it started from (and the baselines): held-out
    delay and episode cost, their change, the cost limit and final lambda, data wait, the
    embedding cache's speed-up, time, peak tree PSS and the tree USS left behind."""
    m = result.metrics
    delay, cost = evaluation.held_out.means("avg_delay"), evaluation.held_out.means("cost")
    out: list[Reading] = []
    named = ("phase3", "phase2", *BASELINES)
    # then any other evaluated policy (e.g. ``phase2.eval.margins``' hysteresis baselines)
    for policy in (*named, *sorted(set(delay) - set(named))):
        better = "lower" if policy == "phase3" else None
        if policy in delay:
            out.append(Reading(f"delay/{policy}", delay[policy], "s", better))
        if policy in cost:
            out.append(Reading(f"cost/{policy}", cost[policy], "per episode", better))
    for policy in ("phase3", "phase2"):
        better = "lower" if policy == "phase3" else None
        heavy_delay, heavy_cost = _means(evaluation.held_out_heavy, policy, "avg_delay", "cost")
        out.append(Reading(f"heavy/delay/{policy}", heavy_delay, "s", better))
        out.append(Reading(f"heavy/cost/{policy}", heavy_cost, "per episode", better))
    limit = m.get("cost_limit")
    return [
        *out,
        _lower("cost_change", 100 * (ratio(cost["phase3"], cost["phase2"]) - 1), "%"),
        _lower("delay_change", 100 * (ratio(delay["phase3"], delay["phase2"]) - 1), "%"),
        Reading("cost_limit", math.nan if limit is None else limit, "per episode", None),
        Reading("lambda", m["lambda"], "multiplier", None),
        _lower("data_wait", 100 * m["data_wait_fraction"], "%"),
        Reading("cache_speedup", cache_speedup(rows), "x", "higher"),
        _lower("wall", wall_s, "s"),
        *_memory(m),
    ]
