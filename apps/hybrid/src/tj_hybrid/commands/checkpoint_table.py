"""Every policy a phase kept, side by side (no SUMO, no torch): each one's validation delay and
cost, its held-out delay against the best baseline with the standard error of that paired
difference, its held-out cost, and the lines a reader needs: what validation picked, what would
have been best in hindsight, and whether validation ranks the policies as held-out traffic does.

Inputs are what the evaluation keeps: validation ``{name: (mean delay, mean cost)}`` and held-out
sets ``{set: {"rows": [...]}}`` with one row per (policy, episode) (``window_index``,
``route_index``, ``seed``, ``avg_delay``, ``cost``), the candidates' names among the baselines'.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tj_hybrid.evaluation.frontier import correlation
from tj_hybrid.evaluation.verdict import SETS, verdict

__all__ = ["Candidate", "CandidateRow", "candidate_rows", "paired_se", "plot_candidates",
           "summary_lines", "to_markdown"]


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """A kept policy: its row name, the PPO iteration it is from (0: the clone PPO started
    from; None: not known) and whether it is the policy phase 2 exported."""

    name: str
    iteration: int | None
    exported: bool = False

    def __post_init__(self) -> None:
        if self.iteration is not None and self.iteration < 0:
            raise ValueError(f"Candidate {self.name}: iteration must be >= 0, got {self.iteration}")

    @property
    def when(self) -> str:
        return "?" if self.iteration is None else str(self.iteration)


@dataclass(frozen=True, kw_only=True)
class CandidateRow:
    """One candidate's numbers; a set's ``change`` is against that set's best baseline (-0.05:
    5% below it) and ``se`` the standard error of the paired difference, in the same unit."""

    candidate: Candidate
    validation: float  # mean avg delay over the validation episodes, s (NaN: not scored)
    validation_cost: float  # mean weighted episode cost there (NaN: not scored)
    delay: dict[str, float]  # set key -> mean held-out avg delay, s
    change: dict[str, float]  # set key -> relative to the set's best baseline
    se: dict[str, float]  # set key -> standard error of that change
    best: dict[str, str]  # set key -> the set's best baseline
    best_delay: dict[str, float]  # set key -> its mean avg delay, s
    worst: dict[str, float]  # set key -> the candidate's worst episode, s
    cost: dict[str, float]  # set key -> mean weighted episode cost (NaN: rows without one)


def paired_se(rows: Sequence[Mapping[str, Any]], policy: str, reference: str) -> float:
    """Standard error of ``policy``'s mean delay minus ``reference``'s over the episodes both ran
    (same window, route file and SUMO seed), relative to ``reference``'s mean there; NaN below
    two pairs."""
    def by_episode(name: str) -> dict[tuple[Any, ...], float]:
        return {(r["window_index"], r["route_index"], r["seed"]): float(r["avg_delay"])
                for r in rows if r["policy"] == name}  # fmt: skip

    mine, ref = by_episode(policy), by_episode(reference)
    pairs = [(mine[k], ref[k]) for k in mine.keys() & ref.keys()
             if math.isfinite(mine[k]) and math.isfinite(ref[k])]  # fmt: skip
    if len(pairs) < 2:
        return math.nan
    a, b = np.array(pairs).T
    return float(np.std(a - b, ddof=1) / math.sqrt(len(pairs)) / b.mean())


def _mean_cost(rows: Sequence[Mapping[str, Any]], policy: str) -> float:
    costs = [float(r["cost"]) for r in rows if r["policy"] == policy and "cost" in r]
    return sum(costs) / len(costs) if costs else math.nan


def candidate_rows(candidates: Sequence[Candidate],
                   validation: Mapping[str, tuple[float, float]],
                   evaluation: Mapping[str, Mapping[str, Any]]) -> list[CandidateRow]:  # fmt: skip
    """A row per candidate, in the given order; the best baseline of each set is the lowest mean
    among the policies that are not candidates."""
    names = {c.name for c in candidates}
    out = []
    for c in candidates:
        delay, change, se, best, best_delay, worst, cost = {}, {}, {}, {}, {}, {}, {}
        for key, _ in SETS:
            rows = evaluation.get(key, {}).get("rows") or []
            v = verdict(rows, c.name, trained=names)
            if v is None:
                continue
            delay[key], change[key], worst[key] = v.delay, v.change, v.worst
            best[key], best_delay[key] = v.best, v.best_delay
            se[key] = paired_se(rows, c.name, v.best)
            cost[key] = _mean_cost(rows, c.name)
        vd, vc = validation.get(c.name, (math.nan, math.nan))
        out.append(CandidateRow(candidate=c, validation=float(vd), validation_cost=float(vc),
                                delay=delay, change=change, se=se, best=best,
                                best_delay=best_delay, worst=worst, cost=cost))  # fmt: skip
    return out


def _pct(x: float | None, se: float | None = None) -> str:
    if x is None or not math.isfinite(x):
        return "n/a"
    return f"{x:+.1%}" + (f" +- {se:.1%}" if se is not None and math.isfinite(se) else "")


def _s(x: float | None) -> str:
    return f"{x:.2f}" if x is not None and math.isfinite(x) else "n/a"


def to_markdown(rows: Sequence[CandidateRow]) -> str:
    """The table: iteration, validation delay and cost, each held-out set's delay and change
    (+- its paired standard error), the worst held-out episode, the held-out cost; the exported
    row marked."""
    head = ("| policy | iteration | validation, s | validation cost | held-out, s | against the "
            "best baseline | worst episode, s | cost | ~30% heavier, s | against its best | "
            "cost |")  # fmt: skip
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        c, h, hh = r.candidate, "held_out", "held_out_heavy"
        name = f"**{c.name}** (exported)" if c.exported else c.name
        lines.append(f"| {name} | {c.when} | {_s(r.validation)} | {_s(r.validation_cost)} | "
                     f"{_s(r.delay.get(h))} | {_pct(r.change.get(h), r.se.get(h))} | "
                     f"{_s(r.worst.get(h))} | {_s(r.cost.get(h))} | {_s(r.delay.get(hh))} | "
                     f"{_pct(r.change.get(hh), r.se.get(hh))} | {_s(r.cost.get(hh))} |")  # fmt: skip
    return "\n".join(lines)


def summary_lines(rows: Sequence[CandidateRow]) -> list[str]:
    """Markdown bullets: validation's pick on held-out traffic, the best in hindsight (for
    reading only), and Pearson's r of validation with held-out delay across the candidates."""
    key = "held_out"
    scored = [r for r in rows if key in r.delay]
    if not scored:
        return ["- no candidate has a held-out delay"]
    best = scored[0].best[key]

    def said(r: CandidateRow) -> str:
        return (f"{r.candidate.name} (iteration {r.candidate.when}): {r.delay[key]:.2f} s, "
                f"{_pct(r.change[key], r.se.get(key))} against {best}")  # fmt: skip

    out = []
    exported = [r for r in scored if r.candidate.exported]
    if exported:
        out.append(f"- exported (validation's pick): {said(exported[0])}")
    hindsight = min(scored, key=lambda r: r.delay[key])
    out.append(f"- lowest held-out delay, in hindsight: {said(hindsight)}. For reading only: a "
               "policy chosen on held-out traffic would make it a validation set")  # fmt: skip
    pairs = {x.candidate.name: (x.validation, x.delay[key]) for x in scored
             if math.isfinite(x.validation)}  # fmt: skip
    r = correlation(pairs) if len(pairs) >= 3 else math.nan  # 2 points: r is +-1, says nothing
    if math.isfinite(r):
        out.append(f"- validation against held-out delay across the {len(scored)} policies: "
                   f"Pearson's r = {r:.2f} (near 1: validation ranks them as held-out traffic "
                   "does; near 0: it cannot tell them apart)")  # fmt: skip
    ses = [x.se[key] for x in scored if math.isfinite(x.se.get(key, math.nan))]
    if ses:
        out.append(f"- a paired difference against {best} has a standard error of "
                   f"{min(ses):.1%} to {max(ses):.1%} on these episodes: policies closer than "
                   "about twice that are not told apart")  # fmt: skip
    return out


_START = {"phase2": "PPO iteration (0: the clone it started from)",
          "phase3": "PPO-Lagrangian iteration (0: phase 2's policy)"}


def plot_candidates(rows: Sequence[CandidateRow], out: Path, *,
                    phase: str = "phase2") -> Path | None:  # fmt: skip
    """``checkpoints.png``: validation and held-out delay against the iteration (held-out with
    its paired standard error), each set's best baseline as a dashed line, the exported policy
    starred; ``phase`` names the axis and what chose. None when no candidate has both an
    iteration and a held-out delay."""
    if phase not in _START:
        raise ValueError(f"plot_candidates: phase must be one of {sorted(_START)}, got {phase!r}")
    from matplotlib.figure import Figure  # tj-monitor[report]: a dependency of the app

    drawn = sorted((r for r in rows if r.candidate.iteration is not None and "held_out" in r.delay),
                   key=lambda r: r.candidate.iteration or 0)  # fmt: skip
    if not drawn:
        return None
    fig = Figure(figsize=(10.5, 4.2))
    ax = fig.subplots()
    x = [r.candidate.iteration for r in drawn]
    for key, words, colour in (("held_out", "held-out", "tab:blue"),
                               ("held_out_heavy", "~30% heavier", "tab:purple")):  # fmt: skip
        if not all(key in r.delay for r in drawn):
            continue
        y = [r.delay[key] for r in drawn]
        err = [r.se.get(key, math.nan) * r.best_delay[key] for r in drawn]
        err = [e if math.isfinite(e) else 0.0 for e in err]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=3, color=colour, label=words)
        ax.axhline(drawn[0].best_delay[key], ls="--", color=colour, alpha=0.6,
                   label=f"{words}: best baseline, {drawn[0].best[key]}")  # fmt: skip
        for r in drawn:
            if r.candidate.exported:
                ax.plot([r.candidate.iteration], [r.delay[key]], marker="*", ms=16, color=colour,
                        ls="none")  # fmt: skip
    if any(math.isfinite(r.validation) for r in drawn):
        ax.plot(x, [r.validation for r in drawn], marker="s", color="tab:orange",
                label=f"validation (what {phase.replace('phase', 'phase ')} chose by)")  # fmt: skip
    ax.set_xlabel(f"{_START[phase]}; star: exported")
    ax.set_ylabel("average delay (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the lines
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out
