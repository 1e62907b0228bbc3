"""Phase 2's evaluation and report: the exported policy (run without Ray) against the baselines
on held-out traffic (``tj_hybrid.evaluation``: route seeds never trained on, and a ~30% heavier
set; SUMO seeds never used in training); ``report.md`` with the tables and learning curves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.evaluation import (
    evaluate_policies,
    plot_heldout,
    plot_learning,
    save_evaluation,
    verdict_lines,
    write_phase_report,
)
from tj_hybrid.results import read_metrics_log
from tj_hybrid.rl_setup import RLSetup
from tj_hybrid.run_dir import PhaseDir
from tj_monitor import load_run, plot_run

__all__ = ["PHASE2_PANELS", "evaluate_policy", "trained_policy", "write_report"]

PHASE2_PANELS = (("episode/return_mean", "episode return (training traffic)"),
                 ("train/entropy", "policy entropy"), ("train/mean_kl", "KL per iteration"),
                 ("env_steps_per_s", "env steps / s"),
                 ("validation/avg_delay", "validation avg delay (s)"))  # fmt: skip


def trained_policy(cfg: HybridConfig, agent: Path) -> Any:
    """Phase 2's exported policy as a tj-rl policy (run without Ray)."""
    from tj_rl.control import AgentPolicy
    from tj_rl.rllib import ModulePolicy, load_module

    return (ModulePolicy(load_module(agent)) if cfg.phase2.policy == "lane-mlp"
            else AgentPolicy(agent))  # fmt: skip


def evaluate_policy(cfg: HybridConfig, setup: RLSetup, agent: Path, *,
                    clone: Path | None = None) -> dict[str, Any]:  # fmt: skip
    """Held-out tables (normal and heavy traffic) of the agent and the configured baselines
    (and of the behaviour clone PPO started from, ``clone``: teacher, clone and final policy
    side by side)."""
    from tj_rl.control import AgentPolicy

    policies = {"phase2": trained_policy(cfg, agent)}
    if clone is not None:
        policies["clone"] = AgentPolicy(clone)
    return evaluate_policies(cfg, setup, policies)


def write_report(pdir: PhaseDir, evaluation: dict[str, Any], facts: dict[str, Any], *,
                 lines: list[str] | None = None) -> Path:  # fmt: skip
    """``report.md`` + PNGs from the run's own files and the evaluation (saved to eval.json);
    ``lines``: how the policy started and was chosen (under the lead)."""
    save_evaluation(pdir.eval, evaluation)
    plots = [Path(p).name for p in plot_run(load_run(pdir.logs, skip_bad_lines=True), pdir.root)]
    learning = plot_learning(read_metrics_log(pdir.metrics), pdir.root / "learning.png",
                             PHASE2_PANELS, xlabel="PPO iteration")  # fmt: skip
    plots = [*([learning.name] if learning else []), *plots]
    heldout = plot_heldout(evaluation, pdir.root / "heldout.png", highlight={"phase2": "tab:green"})
    lead = [
        "Against the best baseline (average delay; each set's own best):",
        "",
        *verdict_lines(evaluation, ("phase2", "clone")),
        "",
        *(lines or []),
        *([""] if lines else []),
        f"![{heldout.name}]({heldout.name})",
    ]
    return write_phase_report(
        pdir.report, title="Phase 2: safe RL (RLlib PPO on the vehicle graph, shielded)",
        facts=facts, evaluation=evaluation, lead=lead, pictures=plots,
        pictures_title="Learning curves",
    )  # fmt: skip
