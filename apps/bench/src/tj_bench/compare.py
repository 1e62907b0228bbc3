"""Compare two results files figure by figure: the ratio to the old run and whether it regressed.

A figure regresses when its new median is worse than the old run's *worst* repetition by more
than ``threshold`` (relative): outside the old spread, in the wrong direction. Facts
(``better=None``) are listed but never flagged, nor are figures only one side measured.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tj_bench.markdown import format_value
from tj_bench.results import Results

__all__ = ["Comparison", "compare", "render_comparison"]


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """One figure of both runs: the old and new medians, their ratio (new / old) and the flags
    (never set for a fact, ``better=None``)."""

    better: str | None
    suite: str
    figure: str
    unit: str
    old: float
    new: float
    ratio: float
    regressed: bool
    improved: bool


def _flags(better: str | None, new: float, lo: float, hi: float, t: float) -> tuple[bool, bool]:
    """(regressed, improved): beyond the old [lo, hi] by more than t x its magnitude."""
    if better is None or any(math.isnan(x) for x in (new, lo, hi)):
        return False, False
    above, below = new > hi + t * abs(hi), new < lo - t * abs(lo)
    return (above, below) if better == "lower" else (below, above)


def compare(new: Results, old: Results, threshold: float = 0.10) -> list[Comparison]:
    """Every figure present in both runs (same suite, same name), in the new run's order."""
    if not 0 <= threshold < 1:
        raise ValueError(f"threshold: must be in [0, 1), got {threshold}")
    old_suites = {s.suite: s for s in old.suites if s.status == "ok"}
    out = []
    for suite in new.suites:
        if suite.status != "ok" or suite.suite not in old_suites:
            continue
        old_figs = {f.name: f for f in old_suites[suite.suite].figures}
        for f in suite.figures:
            o = old_figs.get(f.name)
            if o is None:
                continue
            ratio = f.median / o.median if o.median and not math.isnan(o.median) else math.nan
            regressed, improved = _flags(f.better, f.median, o.min, o.max, threshold)
            out.append(Comparison(suite=suite.suite, figure=f.name, unit=f.unit, better=f.better,
                                  old=o.median, new=f.median, ratio=ratio, regressed=regressed,
                                  improved=improved))  # fmt: skip
    return out


def render_comparison(rows: list[Comparison]) -> str:
    lines = ["| suite | figure | old | new | new/old | |", "|---|---|---:|---:|---:|---|"]
    for r in rows:
        flag = "**regressed**" if r.regressed else ("improved" if r.improved else "")
        ratio = "-" if math.isnan(r.ratio) else f"{r.ratio:.2f}x"
        lines.append(f"| {r.suite} | {r.figure} ({r.unit}) | {format_value(r.old)} | "
                     f"{format_value(r.new)} | {ratio} | {flag} |")  # fmt: skip
    return "\n".join(lines)
