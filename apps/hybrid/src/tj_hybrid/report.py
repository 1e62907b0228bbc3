"""The run's final report, ``runs/<run>/report.md``: every phase in one page.

Written by the runner after every phase, from the run's own files: each phase's ``result.json`` (headline, wall
time, data wait, memory before and after), the last trained policy against the best baseline
(``tj_hybrid.evaluation.verdict``), phase 3's held-out evaluation (fixed-time,
max-pressure, greedy, max-occupancy, advanced-mp, the phase-2 and the phase-3 policy side by side), the
constraint and the learning curves (the phases' PNGs), and one memory curve across all phases
(``tj_monitor.plot_memory_stages``) with the budget and the monitor's warn/cleanup lines.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from tj_hybrid.phase_api import PhaseResult
from tj_hybrid.phases import REGISTRY
from tj_hybrid.results import HeldOutSet, phase_dir, read_evaluation
from tj_hybrid.run_dir import RunDir
from tj_monitor import atomic_write_text

__all__ = ["write_run_report"]

_COLUMNS = (("avg_delay", "avg delay (s)"), ("avg_trip_time", "trip time (s)"),
            ("mean_queue", "queue"), ("throughput", "throughput"), ("cost", "episode cost"),
            ("cost_low_ttc", "low TTC"), ("cost_hard_braking", "hard braking"),
            ("cost_emergency_braking", "emergency braking"), ("cost_teleport", "teleports"),
            ("cost_collision", "collisions"), ("vetoes", "vetoes"))  # fmt: skip
_ORDER = ("fixed-time", "max-pressure", "greedy", "max-occupancy", "advanced-mp", "scenario-program",
          "sumo-actuated", "clone", "phase2", "phase3")


def _results(run_dir: RunDir) -> dict[str, PhaseResult]:
    out = {}
    for spec in REGISTRY:
        result = PhaseResult.load(run_dir.phase(spec.folder).result)
        if result is not None:
            out[spec.folder] = result
    return out


def _table(held_out: HeldOutSet) -> list[str]:
    summary = held_out.summary
    policies = [p for p in _ORDER if p in summary] + [p for p in summary if p not in _ORDER]
    cols = [(k, t) for k, t in _COLUMNS if k in next(iter(summary.values()))]
    lines = ["| policy | " + " | ".join(t for _, t in cols) + " |", "|---|" + "---:|" * len(cols)]
    for p in policies:
        cells = [f"{summary[p][k].mean:.2f} ± {summary[p][k].std:.2f}" for k, _ in cols]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return lines


def _verdict(run_dir: RunDir) -> list[str]:
    """The run's last trained policy (phase 3's, else phase 2's) against the best baseline on
    each held-out set: the section a user reads first."""
    from tj_hybrid.evaluation import verdict_lines

    for phase, policy in (("3", "phase3"), ("2", "phase2")):
        if phase_dir(run_dir, phase).eval.is_file():
            ev = read_evaluation(run_dir, phase)
            found = verdict_lines({"held_out": {"rows": ev.held_out.rows},
                                   "held_out_heavy": {"rows": ev.held_out_heavy.rows}}, (policy,))  # fmt: skip
            if found:
                return ["", "## The trained policy against the best baseline", "", *found]
    return []


def _wait(name: str, result: PhaseResult) -> str:
    m = result.metrics
    if "data_wait_fraction" in m and isinstance(m["data_wait_fraction"], (int, float)):
        steady = m.get("data_wait_fraction_steady")
        if isinstance(steady, (int, float)) and math.isfinite(steady):
            return f"{m['data_wait_fraction']:.1%} ({steady:.1%} after the first iteration)"
        return f"{m['data_wait_fraction']:.1%}"
    if name == "phase2":
        return "n/a (RLlib samples, then learns)"
    return "n/a"


def _mib(value: Any) -> str:
    return f"{value / 2**20:.0f}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def write_run_report(run_dir: RunDir) -> Path:
    """Write ``report.md`` (+ ``memory.png``) in the run directory; returns its path."""
    from tj_monitor import RunFormatError, load_stages, plot_memory_stages

    results = _results(run_dir)
    budget = next((r.metrics.get("budget_bytes") for r in results.values()
                   if r.metrics.get("budget_bytes")), None)  # fmt: skip
    try:
        memory = plot_memory_stages(load_stages(run_dir.path, skip_bad_lines=True),
                                    run_dir.path / "memory.png", budget=budget)  # fmt: skip
    except RunFormatError:
        memory = None
    lines = [f"# Run {run_dir.path.name}: final report", "",
             "| phase | result | wall (min) | data wait | peak tree PSS (MiB) | tree USS before -> after (MiB) |",
             "|---|---|---:|---:|---:|---|"]  # fmt: skip
    for name, r in results.items():
        m = r.metrics
        wall = m.get("wall_s")
        lines.append(
            f"| {name} | {r.headline} | {f'{wall / 60:.1f}' if wall else '-'} | "
            f"{_wait(name, r)} | {_mib(m.get('peak_tree_pss'))} | "
            f"{_mib(m.get('tree_uss_before'))} -> {_mib(m.get('tree_uss_after'))} |")  # fmt: skip
    lines += _verdict(run_dir)
    if phase_dir(run_dir, "3").eval.is_file():
        evaluation = read_evaluation(run_dir, "3")
        for title, held_out in (("Held-out traffic (route seeds never trained on)",
                                 evaluation.held_out),
                                ("Held-out traffic, ~30% heavier", evaluation.held_out_heavy)):  # fmt: skip
            lines += ["", f"## {title}", "", *_table(held_out)]
    pictures = [("phase3/constraint.png", "episode cost against the limit, and lambda"),
                ("phase3/heldout.png", "held-out delay"), ("phase3/heldout_cost.png",
                 "held-out episode cost"), ("phase2/learning.png", "phase 2 learning curves"),
                ("phase3/learning.png", "phase 3 learning curves")]  # fmt: skip
    lines += ["", "## Pictures", ""]
    if memory is not None:
        lines.append("Memory across all phases (tree PSS; budget and the monitor's thresholds):\n\n"
                     f"![memory]({memory.name})\n")  # fmt: skip
    for rel, what in pictures:
        if (run_dir.path / rel).is_file():
            lines.append(f"{what}:\n\n![{what}]({rel})\n")
    lines += ["", "Summarise the run's logs: `tj-monitor analyze " + str(run_dir.path) + "`", ""]
    path = run_dir.path / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path
