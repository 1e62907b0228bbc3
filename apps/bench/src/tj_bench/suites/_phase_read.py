"""A finished run's quality and cost figures: the bench's readings of what tj-hybrid's results
API reads back (phase 1's summary; the result, held-out evaluation and metrics log of phases 2 and
3), in their plain (JSON) form. Pure functions: each returns ``Reading`` s for ``ctx.record``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, Literal, NamedTuple

__all__ = ["BASELINES", "Reading", "cache_speedup", "phase1_readings", "phase2_readings",
           "phase3_readings"]  # fmt: skip

MIB, GIB = 2**20, 2**30
BASELINES = ("fixed-time", "max-pressure", "greedy", "max-occupancy")
SETS = ("held_out", "held_out_heavy")


class Reading(NamedTuple):
    name: str
    value: float
    unit: str
    better: Literal["lower", "higher"] | None


def _lower(name: str, value: float, unit: str) -> Reading:
    return Reading(name, value, unit, "lower")


def phase1_readings(summary: Mapping[str, Any], wall_s: float) -> list[Reading]:
    """Phase 1's headline: time, held-out next-step error of the world model against constant
    velocity, data wait, peak tree PSS against the memory budget."""
    ev, wall = summary["eval"], summary["wall_s"]
    return [
        _lower("wall", wall_s, "s"),
        _lower("recording", wall["data"], "s"),
        _lower("training", wall["train"], "s"),
        _lower("error/world_model", ev["model_mae"], "m"),
        Reading("error/constant_velocity", ev["cv_mae"], "m", None),
        Reading("improvement", 100 * ev["improvement"], "%", "higher"),
        _lower("data_wait", 100 * summary["data_wait_fraction"], "%"),
        _lower("peak_tree_pss", summary["peak_tree_pss"] / GIB, "GiB"),
        Reading("budget", summary["budget_bytes"] / GIB, "GiB", None),
    ]


def _mean(summary: Mapping[str, Any], policy: str, metric: str) -> float:
    try:
        return float(summary[policy][metric]["mean"])
    except KeyError:
        return math.nan


def phase2_readings(result: Mapping[str, Any], evaluation: Mapping[str, Any], wall_s: float,
                    *, baselines: bool) -> list[Reading]:  # fmt: skip
    """One phase-2 run: held-out avg delay and low-TTC cost of its policy (``policy``; and of
    the baselines under ``baseline/`` when ``baselines``) on the normal and the ~30% heavier set,
    its training and total wall time, peak tree PSS and the tree USS it left behind."""
    m = result["metrics"]
    out = [_lower("wall", wall_s, "s"), _lower("train_wall", m["train_wall_s"], "s"),
           _lower("peak_tree_pss", m["peak_tree_pss"] / MIB, "MiB"),
           _lower("uss_left", (m["tree_uss_after"] - m["tree_uss_before"]) / MIB, "MiB")]  # fmt: skip
    for label in SETS:
        summary = evaluation[label]["summary"]
        out.append(_lower(f"delay/{label}/policy", _mean(summary, "phase2", "avg_delay"), "s"))
        out.append(_lower(f"low_ttc/{label}/policy", _mean(summary, "phase2", "cost_low_ttc"),
                          "per episode"))  # fmt: skip
        for name in BASELINES if baselines else ():
            if name in summary:
                out.append(Reading(f"baseline/delay/{label}/{name}",
                                   _mean(summary, name, "avg_delay"), "s", None))  # fmt: skip
                out.append(Reading(f"baseline/low_ttc/{label}/{name}",
                                   _mean(summary, name, "cost_low_ttc"), "per episode", None))  # fmt: skip
    return out


def _change(new: float, old: float) -> float:
    """``new`` relative to ``old`` in percent (NaN when ``old`` is 0)."""
    return 100 * (new / old - 1) if old else math.nan


def cache_speedup(rows: Sequence[Mapping[str, Any]]) -> float:
    """Phase 3's GNN-embedding cache: median first-epoch time (computes the frozen GNN) over the
    median later-epoch time (reads the cache), over the logged iterations; NaN if not logged."""
    first = [r["time/epoch_first_s"] for r in rows if "time/epoch_first_s" in r]
    later = [r["time/epoch_later_s"] for r in rows if "time/epoch_later_s" in r]
    if not first or not later:
        return math.nan
    lat = statistics.median(later)
    return statistics.median(first) / lat if lat > 0 else math.nan


def phase3_readings(result: Mapping[str, Any], evaluation: Mapping[str, Any],
                    rows: Sequence[Mapping[str, Any]], wall_s: float) -> list[Reading]:  # fmt: skip
    """One phase-3 run against the phase-2 policy it started from (and the baselines): held-out
    delay and episode cost, their change, the cost limit and final lambda, data wait, the
    embedding cache's speed-up, time, peak tree PSS and the tree USS left behind."""
    m = result["metrics"]
    delay, cost = m["avg_delay"], m["cost"]
    out: list[Reading] = []
    named = ("phase3", "phase2", *BASELINES)
    # then any other evaluated policy (e.g. ``phase2.eval.margins``' hysteresis baselines)
    for policy in (*named, *sorted(set(delay) - set(named))):
        better = "lower" if policy == "phase3" else None
        if policy in delay:
            out.append(Reading(f"delay/{policy}", delay[policy], "s", better))
        if policy in cost:
            out.append(Reading(f"cost/{policy}", cost[policy], "per episode", better))
    heavy = evaluation["held_out_heavy"]["summary"]
    for policy in ("phase3", "phase2"):
        better = "lower" if policy == "phase3" else None
        out.append(Reading(f"heavy/delay/{policy}", _mean(heavy, policy, "avg_delay"), "s", better))
        out.append(Reading(f"heavy/cost/{policy}", _mean(heavy, policy, "cost"), "per episode",
                           better))  # fmt: skip
    limit = m.get("cost_limit")
    out += [
        _lower("cost_change", _change(cost["phase3"], cost["phase2"]), "%"),
        _lower("delay_change", _change(delay["phase3"], delay["phase2"]), "%"),
        Reading("cost_limit", math.nan if limit is None else limit, "per episode", None),
        Reading("lambda", m["lambda"], "multiplier", None),
        _lower("data_wait", 100 * m["data_wait_fraction"], "%"),
        Reading("cache_speedup", cache_speedup(rows), "x", "higher"),
        _lower("wall", wall_s, "s"),
        _lower("train_wall", m["train_wall_s"], "s"),
        _lower("peak_tree_pss", m["peak_tree_pss"] / MIB, "MiB"),
        _lower("uss_left", (m["tree_uss_after"] - m["tree_uss_before"]) / MIB, "MiB"),
    ]
    return out
