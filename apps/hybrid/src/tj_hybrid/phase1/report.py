"""``runs/<run>/phase1/report.md`` and its plots: what a person reads after phase 1.

Plots come from the run's own files (metrics JSONL through tj-monitor's analysis, the memory
monitor's curve), so the report can be rebuilt from a finished run directory alone.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_hybrid.run_dir import PhaseDir
from tj_monitor import atomic_write_text, load_run, plot_run, summarize

__all__ = ["ReportInputs", "write_report"]

log = logging.getLogger(__name__)
GiB = 2**30


@dataclass(frozen=True, kw_only=True)
class ReportInputs:
    """Facts gathered by the phase runner that the run files do not hold."""

    profile: str
    nprocs: int
    backend: str
    precision: str
    accumulation_steps: int
    dataset: dict[str, Any]
    loader_plan: dict[str, Any]
    budget_bytes: float
    peak_tree_pss: float | None
    peak_pressure: float | None
    wall_s: dict[str, float]
    target_improvement: float = 0.2


def _fmt_bytes(n: float | None) -> str:
    return "n/a" if n is None else f"{n / GiB:.2f} GiB"


def _table(header: tuple[str, str], rows: Any) -> list[str]:
    out = [f"| {header[0]} | {header[1]} |", "|---|---|"]
    return out + [f"| {k} | {v} |" for k, v in rows]


def _loader_lines(plan: dict[str, Any]) -> list[str]:
    """The loader plan per rank and its memory estimate, term by term (tj-data `plan_loader`)."""
    terms = plan.get("terms_bytes", {})
    total = sum(terms.values())
    rows = [(k, f"{v / 2**20:,.1f} MiB") for k, v in terms.items()]
    rows.append(("**total**", f"**{total / 2**20:,.1f} MiB**"))
    facts = {k: v for k, v in plan.items() if k != "terms_bytes"}
    return [
        "Loader plan per rank (tj-data `plan_loader`; estimate by term):",
        "",
        *_table(("term", "estimate"), rows),
        "",
        *_table(("setting", "value"), facts.items()),
        "",
    ]


def write_report(pdir: PhaseDir, inputs: ReportInputs) -> Path:
    """Write report.md (and the PNGs it links) into ``pdir``; returns the report's path."""
    summary = json.loads(pdir.eval.read_text())
    ev = summary["eval"]
    run = load_run(pdir.logs, skip_bad_lines=True)
    plots = [Path(p).name for p in plot_run(run, pdir.root)]
    rs = summarize(run)
    loss = rs.series.get("train/loss")
    verdict = "beats" if ev["improvement"] >= inputs.target_improvement else "does NOT beat"
    lines = [
        "# Phase 1: world-model pretraining",
        "",
        f"Profile `{inputs.profile}`, {inputs.nprocs} rank(s) on {inputs.backend}, precision "
        f"{inputs.precision}, gradient accumulation x{inputs.accumulation_steps}.",
        "",
        "## Held-out next-step prediction",
        "",
        f"The world model {verdict} constant-velocity extrapolation by the target "
        f"({inputs.target_improvement:.0%}): mean position error "
        f"{ev['model_mae']:.3f} m vs {ev['cv_mae']:.3f} m ({ev['improvement']:.1%} lower) over "
        f"{ev['vehicles']} held-out vehicle-steps.",
        "",
        "| predictor | mean error (m) | RMSE (m) |",
        "|---|---|---|",
        f"| world model | {ev['model_mae']:.3f} | {ev['model_rmse']:.3f} |",
        f"| constant velocity | {ev['cv_mae']:.3f} | {ev['cv_rmse']:.3f} |",
        "",
        "## Training",
        "",
        f"- optimizer steps: {summary['steps']}; final loss: "
        + (f"{loss.last:.4g} (min {loss.min:.4g})" if loss else "n/a"),
        f"- throughput: {summary['windows_per_s']:.1f} windows/s over all ranks",
        f"- data-wait fraction: {summary['data_wait_fraction']:.1%} (time blocked on the loader)",
        "- wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in inputs.wall_s.items()),
        "",
        "## Memory",
        "",
        f"- RAM budget of the loader plan: {_fmt_bytes(inputs.budget_bytes)}",
        f"- peak process-tree PSS (main + ranks + loader workers): {_fmt_bytes(inputs.peak_tree_pss)}",
        f"- peak memory in use on the machine / container (all processes): "
        f"{_fmt_bytes(inputs.peak_pressure)}",
        "",
        *_loader_lines(inputs.loader_plan),
        "## Data",
        "",
        *_table(("item", "value"), inputs.dataset.items()),
        "",
        "## Plots",
        "",
        *[f"![{p}]({p})" for p in plots],
        *(["![memory](memory.png)"] if (pdir.root / "memory.png").exists() else []),
        "",
    ]
    atomic_write_text(pdir.report, "\n".join(lines))
    log.info("phase 1 report: %s", pdir.report)
    return pdir.report
