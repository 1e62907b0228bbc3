"""The delay-safety frontier of a set of controllers: each one's (mean delay, mean episode cost),
lower is better on both. Phase 3 is measured against it (issue 29): its ``cost_limit: auto`` is
the frontier's cost near phase 2's delay, and its report draws it. Pure functions on numbers.

The frontier's cost at a delay is a *step*: the lowest cost of a controller on it that is at
most that slow. Why not a line between two frontier points: no controller sits between them (a
signal run half by one and half by the other does not average their outcomes), and the step is
what a user can deploy today, so a limit read from it asks for nothing beyond the known."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass

import numpy as np

from tj_hybrid.evaluation.phase_report import means

__all__ = ["Frontier", "Point", "correlation", "dominated_by", "frontier_points", "pareto_front"]

Point = tuple[float, float]  # (mean delay s, mean episode cost)


def _finite(points: Mapping[str, Point]) -> dict[str, Point]:
    return {n: (float(d), float(c)) for n, (d, c) in points.items()
            if math.isfinite(d) and math.isfinite(c)}  # fmt: skip


def dominated_by(point: Point, points: Mapping[str, Point]) -> list[str]:
    """The names in ``points`` at most as slow and as costly as ``point`` and better on one."""
    d, c = point
    return [n for n, (dn, cn) in _finite(points).items()
            if dn <= d and cn <= c and (dn < d or cn < c)]  # fmt: skip


def pareto_front(points: Mapping[str, Point]) -> list[str]:
    """The names on the Pareto frontier of ``points``, by delay (then cost, then name): those no
    other point dominates. Equal points are all on it; a NaN point is on nothing."""
    finite = _finite(points)
    on = [n for n, p in finite.items() if not dominated_by(p, finite)]
    return sorted(on, key=lambda n: (*finite[n], n))


def correlation(points: Mapping[str, Point]) -> float:
    """Pearson's r of cost with delay across ``points`` (NaN below 2 points or with no spread):
    near 1, a lower cost mostly means a lower delay, and a constraint on it trades nothing."""
    finite = _finite(points)
    if len(finite) < 2:
        return math.nan
    delay, cost = np.array(list(finite.values())).T
    if np.ptp(delay) == 0 or np.ptp(cost) == 0:
        return math.nan
    return float(np.corrcoef(delay, cost)[0, 1])


def frontier_points(summary: Mapping[str, Mapping[str, object]],
                    names: Collection[str] | None = None) -> dict[str, Point]:  # fmt: skip
    """(mean ``avg_delay``, mean ``cost``) per policy of one evaluated set's summary that has a
    cost; ``names``: only these policies (None: all)."""
    delay, cost = means(summary, "avg_delay"), means(summary, "cost")
    keep = [p for p in cost if p in delay and (names is None or p in names)]
    return {p: (delay[p], cost[p]) for p in keep}


@dataclass(frozen=True, kw_only=True)
class Frontier:
    """``points`` (name -> (delay, cost)) and the names on their frontier, by delay."""

    points: dict[str, Point]
    names: tuple[str, ...]

    @classmethod
    def of(cls, points: Mapping[str, Point]) -> Frontier:
        return cls(points=dict(points), names=tuple(pareto_front(points)))

    def cost_at(self, delay: float) -> tuple[str, float] | None:
        """The frontier's step at ``delay``: (name, cost) of its cheapest controller at most
        that slow; None when none is."""
        fast = [(self.points[n][1], n) for n in self.names if self.points[n][0] <= delay]
        if not fast:
            return None
        cost, name = min(fast)
        return name, cost

    def describe(self) -> str:
        """``a (8.73 s, 10.5), b (...)``: the frontier in words, by delay."""
        return ", ".join(f"{n} ({self.points[n][0]:.2f} s, {self.points[n][1]:.1f})"
                         for n in self.names) or "none"  # fmt: skip
