"""Phase 3's report: the constraint over training (episode cost against the limit, lambda), the
learning curves, the held-out tables of the phase-3 and phase-2 policies and the baselines, and
where each of them sits between delay and safety cost (``tradeoff.png``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tj_hybrid.evaluation import (
    means,
    plot_heldout,
    plot_learning,
    save_evaluation,
    series,
    write_phase_report,
)
from tj_hybrid.results import read_metrics_log
from tj_hybrid.run_dir import PhaseDir

__all__ = [
    "HIGHLIGHT",
    "PHASE3_PANELS",
    "plot_constraint",
    "plot_phase3_learning",
    "plot_tradeoff",
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


def plot_tradeoff(evaluation: dict[str, Any], out: Path, cost_limit: float | None = None
                  ) -> Path | None:  # fmt: skip
    """``tradeoff.png``: per held-out set, every policy's mean avg delay against its mean episode
    cost, the cost limit as a line. Why: a cost that moves with delay across all controllers is
    one the policy can only cut by cutting delay; this shows it. (No whiskers: the spread over
    episodes is mostly the demand's, the same for every policy, and hides the differences.)"""
    from matplotlib.figure import Figure

    labels = [k for k, v in evaluation.items() if v["summary"]]
    if not labels:
        return None
    fig = Figure(figsize=(5.5 * len(labels), 4.2))
    axes = fig.subplots(1, len(labels), squeeze=False)[0]
    for ax, label in zip(axes, labels, strict=True):
        for name, m in evaluation[label]["summary"].items():
            if "cost" not in m:
                continue
            d, c = m["avg_delay"]["mean"], m["cost"]["mean"]
            color = HIGHLIGHT.get(name, "tab:gray")
            ax.scatter([d], [c], color=color, zorder=3)
            ax.annotate(name, (d, c), textcoords="offset points", xytext=(5, 4), fontsize=8,
                        color=color)  # fmt: skip
        if cost_limit is not None and label == "held_out":
            ax.axhline(cost_limit, linestyle="--", color="tab:red", label="cost limit")
            ax.legend(fontsize=8, loc="lower right")
        ax.set_title(label.replace("_", " "))
        ax.set_xlabel("avg delay (s)")
        ax.set_ylabel("episode cost")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return out


PHASE3_PANELS = (("episode_return_mean", "episode return (training traffic)"),
                 ("policy/entropy", "policy entropy"), ("policy/approx_kl", "approx. KL"),
                 ("time/data_wait_fraction", "data-wait fraction"))  # fmt: skip


def plot_phase3_learning(rows: Sequence[Mapping[str, Any]], out: Path) -> Path | None:
    """``learning.png``: return, entropy, KL and the data-wait fraction per iteration."""
    return plot_learning(rows, out, PHASE3_PANELS, xlabel="phase-3 iteration")


def write_phase3_report(pdir: PhaseDir, evaluation: dict[str, Any], facts: dict[str, Any],
                        cost_limit: float | None = None) -> Path:  # fmt: skip
    """``phase3/report.md`` + PNGs; the evaluation is saved to ``eval.json``."""
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
            f"{cost.get('phase2', nan):.1f}."]  # fmt: skip
    return write_phase_report(
        pdir.report,
        title="Phase 3: PPO-Lagrangian under a safety-cost limit (DDP on streamed rollouts)",
        facts=facts, evaluation=evaluation, lead=lead, pictures=[p.name for p in pngs],
    )  # fmt: skip
