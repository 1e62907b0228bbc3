"""A phase's ``report.md`` around its held-out evaluation: the title, the phase's facts, a lead
(the headline numbers, a picture), tj-rl's table of every policy on normal and on ~30% heavier
held-out traffic, then the phase's pictures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tj_hybrid.results import HeldOutSet
from tj_monitor import atomic_write_text

__all__ = ["means", "plans_note", "write_phase_report"]


def means(summary: Mapping[str, Mapping[str, Any]], metric: str) -> dict[str, float]:
    """Policy -> mean of ``metric`` in one set's summary (the policies that report it): the
    results API's ``HeldOutSet.means``, on the summary as the phase holds it."""
    return HeldOutSet.from_summary(summary).means(metric)


def plans_note(plans: str, delay: Mapping[str, float], trained: Sequence[str]) -> list[str]:
    """A line when the best baseline is ``sumo-actuated`` and the trained policies switch the
    scenario's own plans: part of its lead is its plans (netconvert's), which the trained ones
    can have too (``scenario.plans: rebuilt``). Else nothing."""
    baselines = {p: d for p, d in delay.items() if p not in trained}
    if plans != "own" or not baselines or min(baselines, key=baselines.__getitem__) != "sumo-actuated":
        return []
    return ["The best baseline, sumo-actuated, switches netconvert's rebuilt plans; the trained "
            "policies here switch the scenario's own. `--set scenario.plans=rebuilt` trains and "
            "evaluates every controller on the rebuilt plans (apps/hybrid README, \"The greens the "
            "lights switch\")."]  # fmt: skip


def write_phase_report(path: Path, *, title: str, facts: Mapping[str, Any],
                       evaluation: Mapping[str, Any], lead: Sequence[str],
                       pictures: Sequence[str], pictures_title: str = "Pictures") -> Path:  # fmt: skip
    """Write the report to ``path``; ``pictures``: PNG file names beside it. Returns ``path``."""
    lines = [
        f"# {title}",
        "",
        *(f"- {k}: {v}" for k, v in facts.items()),
        "",
        "## Held-out traffic (route seeds never trained on; SUMO seeds never used)",
        "",
        *lead,
        "",
        evaluation["held_out"]["markdown"],
        "",
        "## Held-out traffic, ~30% heavier",
        "",
        evaluation["held_out_heavy"]["markdown"],
        "",
        f"## {pictures_title}",
        "",
        *[f"![{p}]({p})" for p in pictures],
        "",
    ]
    atomic_write_text(path, "\n".join(lines))
    return path
