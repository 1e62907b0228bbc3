"""A trained policy against the best baseline on one held-out set: the line a user reads first
(issue 28's measure: the policy's average delay against the lowest of every baseline's, and
whether it wins episode by episode or only on the mean).

Read from a set's per-episode rows (``{"policy", "window_index", "route_index", "seed",
"avg_delay", ...}``, as ``eval.json`` keeps them): the best baseline is the one with the lowest
mean delay on that set, and the paired count uses tj-rl's ``HeldOutTable.worse_than`` (same
window, route file and SUMO seed; an episode without a delay counts as worse).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["SETS", "TRAINED", "Verdict", "verdict", "verdict_lines"]

TRAINED = ("agent", "clone", "phase2", "phase3")  # the rows the app gives learned policies
SETS = (("held_out", "held-out"), ("held_out_heavy", "~30% heavier"))  # evaluation key, words


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """``policy`` against ``best`` (the baseline with the lowest mean delay) on one set."""

    policy: str
    best: str
    delay: float  # mean avg delay over the set's episodes, s
    best_delay: float
    not_worse: int  # episodes where the policy's delay is at most the best baseline's
    paired: int  # episodes compared (same window, route file, SUMO seed)
    worst: float  # the policy's worst episode, s (inf: one where no trip finished)
    best_worst: float

    @property
    def change(self) -> float:
        """Relative delay against the best baseline (-0.05: 5% below it)."""
        return self.delay / self.best_delay - 1.0

    def line(self) -> str:
        """One sentence: the means, the change, the paired count and the worst episodes."""
        return (f"{self.policy} {self.delay:.2f} s against the best baseline, {self.best}, "
                f"{self.best_delay:.2f} s ({self.change:+.1%}); not slower in "
                f"{self.not_worse} of {self.paired} episodes; worst episode {_s(self.worst)} "
                f"({self.best}: {_s(self.best_worst)})")  # fmt: skip


def _delays(rows: Sequence[Mapping[str, Any]], policy: str) -> list[float]:
    """The policy's episode delays, NaN (no trip finished) included."""
    return [float(r.get("avg_delay", math.nan)) for r in rows if r["policy"] == policy]


def _mean(delays: Sequence[float]) -> float:
    """Over the episodes with a delay, as the tables' spreads are (NaN when none has one)."""
    done = [d for d in delays if math.isfinite(d)]
    return sum(done) / len(done) if done else math.nan


def _worst(delays: Sequence[float]) -> float:
    """The highest delay; inf when an episode has none (nothing finished: the worst there is)."""
    return max((d if math.isfinite(d) else math.inf) for d in delays)


def _s(x: float) -> str:
    return f"{x:.2f} s" if math.isfinite(x) else "no trip finished"


def verdict(rows: Sequence[Mapping[str, Any]], policy: str, *,
            trained: Collection[str] = TRAINED) -> Verdict | None:  # fmt: skip
    """``policy`` against the best of the rows' other policies that are not ``trained``; None
    when the set has no delay of ``policy`` or no baseline with one."""
    from tj_rl.eval import HeldOutTable

    mine = _delays(rows, policy)
    names = list(dict.fromkeys(r["policy"] for r in rows))
    baselines = {p: d for p in names if p not in trained and p != policy
                 and math.isfinite(_mean(d := _delays(rows, p)))}  # fmt: skip
    if not math.isfinite(_mean(mine)) or not baselines:
        return None
    best = min(baselines, key=lambda p: _mean(baselines[p]))
    table = HeldOutTable(policies=(policy, best), rows=[dict(r) for r in rows
                                                        if r["policy"] in (policy, best)])  # fmt: skip
    worse, paired = table.worse_than(reference=best)[policy]
    ref = baselines[best]
    return Verdict(policy=policy, best=best, delay=_mean(mine), best_delay=_mean(ref),
                   not_worse=paired - worse, paired=paired, worst=_worst(mine),
                   best_worst=_worst(ref))  # fmt: skip


def verdict_lines(evaluation: Mapping[str, Mapping[str, Any]], policies: Sequence[str]) -> list[str]:
    """Markdown bullets, one per (set, policy) with a verdict: ``policies`` (trained rows, in the
    order wanted) against the best baseline on each held-out set of ``evaluation``
    (``{set: {"rows": [...]}}``, as ``eval.json`` keeps it)."""
    lines = []
    for key, words in SETS:
        rows = evaluation.get(key, {}).get("rows") or []
        for policy in policies:
            v = verdict(rows, policy)
            if v is not None:
                lines.append(f"- {words}: {v.line()}")
    return lines
