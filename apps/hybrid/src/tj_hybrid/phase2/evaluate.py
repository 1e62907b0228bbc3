"""Phase 2's evaluation and report: the exported policy (run without Ray) against tj-rl's
baselines on held-out traffic (route seeds never trained on, and a ~30% heavier set) and SUMO
seeds never used in training, same protocol; ``report.md`` with the table and learning curves."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.phase2.setup import Phase2Setup
from tj_hybrid.run_dir import PhaseDir
from tj_hybrid.training import torch_threads
from tj_monitor import atomic_write_json, atomic_write_text, load_run, plot_run

__all__ = ["evaluate_policy", "write_report"]

log = logging.getLogger(__name__)


def evaluate_policy(cfg: HybridConfig, setup: Phase2Setup, agent: Path) -> dict[str, Any]:
    """Held-out tables (normal and heavy traffic) of the agent and the configured baselines."""
    from tj_rl.control import AgentPolicy
    from tj_rl.eval import evaluate_heldout
    from tj_rl.rllib import ModulePolicy, load_module

    env = dataclasses.replace(setup.env, metrics=True, route_files=())
    trained = (ModulePolicy(load_module(agent)) if cfg.phase2.policy == "lane-mlp"
               else AgentPolicy(agent))  # fmt: skip
    policies: dict[str, Any] = {"phase2": trained}
    policies |= cfg.phase2.eval.baseline_policies()
    out: dict[str, Any] = {}
    for label, demand in (("held_out", setup.held_out), ("held_out_heavy", setup.held_out_heavy)):
        with torch_threads(1):  # one small forward per decision (see training/threads.py)
            table = evaluate_heldout(setup.scenario, policies, demand, cfg.phase2.eval.sumo_seeds,
                                     config=env, training_seeds=())  # fmt: skip
        out[label] = {"markdown": table.to_markdown(), "rows": table.rows,
                      "summary": {p: {m: s._asdict() for m, s in ms.items()}
                                  for p, ms in table.summary().items()}}  # fmt: skip
    return out


def write_report(pdir: PhaseDir, evaluation: dict[str, Any], facts: dict[str, Any]) -> Path:
    """``report.md`` + PNGs from the run's own files and the evaluation."""
    atomic_write_json(pdir.eval, {k: {"summary": v["summary"], "rows": v["rows"]}
                                  for k, v in evaluation.items()})  # fmt: skip
    from tj_hybrid.phase2.plots import plot_heldout, plot_learning

    plots = [Path(p).name for p in plot_run(load_run(pdir.logs, skip_bad_lines=True), pdir.root)]
    learning = plot_learning(pdir.logs / "metrics.jsonl", pdir.root / "learning.png")
    plots = [*([learning.name] if learning else []), *plots]
    heldout = plot_heldout({k: {"summary": v["summary"]} for k, v in evaluation.items()},
                           pdir.root / "heldout.png")  # fmt: skip
    delay = {p: s["avg_delay"]["mean"] for p, s in evaluation["held_out"]["summary"].items()}
    best = min((p for p in delay if p != "phase2"), key=delay.__getitem__, default=None)
    lines = [
        "# Phase 2: safe RL (RLlib PPO on the vehicle graph, shielded)",
        "",
        *(f"- {k}: {v}" for k, v in facts.items()),
        "",
        "## Held-out traffic (route seeds never trained on; SUMO seeds never used)",
        "",
        f"Average delay: phase-2 policy {delay.get('phase2', float('nan')):.2f} s"
        + (f", best baseline {best} {delay[best]:.2f} s." if best else "."),
        "",
        f"![{heldout.name}]({heldout.name})",
        "",
        evaluation["held_out"]["markdown"],
        "",
        "## Held-out traffic, ~30% heavier",
        "",
        evaluation["held_out_heavy"]["markdown"],
        "",
        "## Learning curves",
        "",
        *[f"![{p}]({p})" for p in plots],
        "",
    ]
    atomic_write_text(pdir.report, "\n".join(lines))
    return pdir.report
