"""Phase 3's report: the constraint over training (episode cost against the limit, lambda), the
learning curves, the held-out tables of the phase-3 and phase-2 policies and the baselines, and
where each of them sits between delay and safety cost against the baselines' frontier
(``tradeoff.png`` and the report's lines: the frontier, the correlation of cost with delay), and
which candidate was exported, by its validation point (``select.py``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tj_hybrid.evaluation import (
    Frontier,
    Point,
    correlation,
    dominated_by,
    frontier_points,
    means,
    plot_heldout,
    plot_learning,
    save_evaluation,
    series,
    verdict_lines,
    write_phase_report,
)
from tj_hybrid.phase3.select import Choice, candidate_name
from tj_hybrid.results import read_metrics_log
from tj_hybrid.run_dir import PhaseDir

__all__ = [
    "HIGHLIGHT",
    "PHASE3_PANELS",
    "frontier_lines",
    "plot_constraint",
    "plot_phase3_learning",
    "plot_tradeoff",
    "selection_lines",
    "write_phase3_report",
]

HIGHLIGHT = {"phase3": "tab:blue", "phase2": "tab:green"}


def plot_constraint(rows: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    """``constraint.png``: mean episode cost per iteration against the limit, lambda beside it."""
    from matplotlib.figure import Figure

    x, cost = series(rows, "episode_cost_mean")
    if not x:
        return None
    fig = Figure(figsize=(8, 3.6))
    ax = fig.subplots()
    ax.plot(x, cost, marker="o", label="mean episode cost (training)")
    lx, limit = series(rows, "cost_limit")
    ax.plot(lx, limit, linestyle="--", color="tab:red", label="cost limit")
    ax.set_xlabel("phase-3 iteration")
    ax.set_ylabel("episode cost")
    ax.grid(alpha=0.3)
    twin = ax.twinx()
    kx, lam = series(rows, "lambda")
    twin.plot(kx, lam, color="tab:purple", label="lambda")
    twin.set_ylabel("lambda")
    lines = ax.get_legend_handles_labels()
    more = twin.get_legend_handles_labels()
    ax.legend(lines[0] + more[0], lines[1] + more[1], fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def _baselines(points: Mapping[str, Point]) -> dict[str, Point]:
    """The baselines' points: every policy but the trained ones (``HIGHLIGHT``)."""
    return {n: p for n, p in points.items() if n not in HIGHLIGHT}


def plot_tradeoff(evaluation: dict[str, Any], out: Path, cost_limit: float | None = None
                  ) -> Path | None:  # fmt: skip
    """``tradeoff.png``: per held-out set, every policy at (mean avg delay, mean episode cost),
    the baselines' frontier as a step line through its points (marked), the phase-2 and phase-3
    policies highlighted, the cost limit as a line on the held-out panel. Why: phase 3 is meant
    to sit on or beyond the frontier; a cost that moves with delay across all controllers is one
    it can only cut by cutting delay, and this shows it. (No whiskers: the spread over episodes
    is mostly the demand's, the same for every policy, and hides the differences.)"""
    from matplotlib.figure import Figure

    labels = [k for k, v in evaluation.items() if frontier_points(v["summary"])]
    if not labels:
        return None
    fig = Figure(figsize=(5.5 * len(labels), 4.2))
    axes = fig.subplots(1, len(labels), squeeze=False)[0]
    for ax, label in zip(axes, labels, strict=True):
        points = frontier_points(evaluation[label]["summary"])
        front = Frontier.of(_baselines(points))
        if front.names:  # the step: the cheapest baseline at most that slow, to the plot's edge
            xs = [front.points[n][0] for n in front.names]
            ys = [front.points[n][1] for n in front.names]
            right = max(d for d, _ in points.values())
            ax.step([*xs, right], [*ys, ys[-1]], where="post", color="tab:orange", zorder=2,
                    label="frontier of the baselines")  # fmt: skip
        for name, (d, c) in points.items():
            on = name in front.names
            color = HIGHLIGHT.get(name, "tab:orange" if on else "tab:gray")
            ax.scatter([d], [c], color=color, zorder=3, s=70 if name in HIGHLIGHT else 30,
                       marker="*" if name in HIGHLIGHT else "D" if on else "o")  # fmt: skip
            ax.annotate(name, (d, c), textcoords="offset points", xytext=(5, 4), fontsize=8,
                        color=color)  # fmt: skip
        if cost_limit is not None and label == "held_out":
            ax.axhline(cost_limit, linestyle="--", color="tab:red", label="cost limit")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="upper right")
        ax.set_title(label.replace("_", " "))
        ax.set_xlabel("avg delay (s)")
        ax.set_ylabel("episode cost")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


def frontier_lines(evaluation: Mapping[str, Any]) -> list[str]:
    """The report's words on the trade-off, per held-out set: the baselines' frontier, where each
    trained policy stands against it, and Pearson's r of cost with delay across every policy."""
    lines = []
    for label, item in evaluation.items():
        points = frontier_points(item["summary"])
        if not points:
            continue
        front = Frontier.of(_baselines(points))
        where = [f"{n} " + (f"dominated by {', '.join(dom)}" if (dom := dominated_by(p, front.points))
                            else "on or beyond it")
                 for n, p in points.items() if n in HIGHLIGHT]  # fmt: skip
        lines.append(f"- {label.replace('_', ' ')}: frontier of the baselines (delay, cost; lower "
                     f"is better on both): {front.describe()}; {'; '.join(where) or 'no trained policy'}"
                     f"; cost vs delay across the {len(points)} policies: Pearson r = "
                     f"{correlation(points):.2f}")  # fmt: skip
    return lines


def selection_lines(choice: Choice | None) -> list[str]:
    """The report's lines on the exported policy: every candidate's validation (delay, cost) and
    the choice (``phase3.select: best``), or that the last iteration's was taken (``last``)."""
    if choice is None:
        return ["- exported: the last iteration's policy (phase3.select: last)"]
    seen = "; ".join(f"{candidate_name(i)}: {d:.2f} s, {c:.2f}" for i, (d, c) in choice.scores.items())
    return [f"- validation (avg delay, episode cost) per candidate: {seen}", f"- {choice.line}"]


PHASE3_PANELS = (("episode_return_mean", "episode return (training traffic)"),
                 ("policy/entropy", "policy entropy"), ("policy/approx_kl", "approx. KL"),
                 ("time/data_wait_fraction", "data-wait fraction"))  # fmt: skip


def plot_phase3_learning(rows: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    """``learning.png``: return, entropy, KL and the data-wait fraction per iteration."""
    return plot_learning(rows, out, PHASE3_PANELS, xlabel="phase-3 iteration")


def write_phase3_report(pdir: PhaseDir, evaluation: dict[str, Any], facts: dict[str, Any],
                        cost_limit: float | None = None, lines: Sequence[str] = ()) -> Path:  # fmt: skip
    """``phase3/report.md`` + PNGs; the evaluation is saved to ``eval.json``; ``lines`` lead the
    report's words on the trade-off (the exported candidate: ``selection_lines``)."""
    save_evaluation(pdir.eval, evaluation)
    rows = read_metrics_log(pdir.metrics)
    pngs = [p for p in (plot_constraint(rows, pdir.root / "constraint.png"),
                        plot_phase3_learning(rows, pdir.root / "learning.png"),
                        plot_heldout(evaluation, pdir.root / "heldout.png", highlight=HIGHLIGHT),
                        plot_heldout(evaluation, pdir.root / "heldout_cost.png", metric="cost",
                                     highlight=HIGHLIGHT),
                        plot_tradeoff(evaluation, pdir.root / "tradeoff.png", cost_limit))
            if p]  # fmt: skip
    summary = evaluation["held_out"]["summary"]
    delay, cost = means(summary, "avg_delay"), means(summary, "cost")
    nan = float("nan")
    lead = [f"Phase-3 policy: avg delay {delay.get('phase3', nan):.2f} s, episode cost "
            f"{cost.get('phase3', nan):.1f}; phase-2 policy: {delay.get('phase2', nan):.2f} s, "
            f"{cost.get('phase2', nan):.1f}.", "", *verdict_lines(evaluation, ("phase3", "phase2")),
            "", *lines, *frontier_lines(evaluation)]  # fmt: skip
    return write_phase_report(
        pdir.report,
        title="Phase 3: PPO-Lagrangian under a safety-cost limit (DDP on streamed rollouts)",
        facts=facts, evaluation=evaluation, lead=lead, pictures=[p.name for p in pngs],
    )  # fmt: skip
