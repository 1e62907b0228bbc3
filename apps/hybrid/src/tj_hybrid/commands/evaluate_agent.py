"""``tj-hybrid eval --agent PATH``: an exported agent against the configured baselines on the
configured scenario's held-out traffic, with the protocol, tables and plot of the phase reports
(``tj_hybrid.evaluation``), and no training. Everything goes to a folder of its own,
``<run.root>/eval-<scenario>-<timestamp>/`` (``report.md``, ``eval.json``, ``heldout.png``);
the tables are printed too."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any

from tj_hybrid.commands.agent import checked_agent, prepare_agent_setup
from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_name
from tj_hybrid.preflight import check_writable_dir
from tj_hybrid.run_dir import RunDir

__all__ = ["AGENT", "evaluate_agent", "run_eval"]

log = logging.getLogger(__name__)
AGENT = "agent"  # the agent's row in the tables


def run_eval(cfg: HybridConfig, agent: Path | None) -> int:
    """The command: check the inputs (one line and 2 when bad), evaluate, print the tables."""
    try:
        folder = checked_agent(cfg, agent, "eval")
        check_writable_dir(cfg.run.root, "run directory")
    except ConfigError as exc:
        print(f"tj-hybrid: eval: {exc}", file=sys.stderr)
        return 2
    out = RunDir.resolve(cfg.run.root, None, f"eval-{scenario_name(cfg.scenario.path)}").path
    evaluation, report = evaluate_agent(cfg, folder, out)
    for label, title in (("held_out", "Held-out traffic"),
                         ("held_out_heavy", "Held-out traffic, ~30% heavier")):  # fmt: skip
        print(f"\n## {title}\n\n{evaluation[label]['markdown']}")
    from tj_hybrid.evaluation import verdict_lines

    print("", *verdict_lines(evaluation, (AGENT,)), sep="\n")
    print(f"\nreport: {report}")
    return 0


def evaluate_agent(cfg: HybridConfig, agent: Path, out: Path) -> tuple[dict[str, Any], Path]:
    """Evaluate the agent at ``agent`` (already checked) into the folder ``out``: the held-out
    evaluation (``{set: {"markdown", "rows", "summary"}}``) and the report's path."""
    from tj_hybrid.evaluation import (
        acting_note,
        acting_policy,
        evaluate_policies,
        means,
        plans_note,
        plot_heldout,
        save_evaluation,
        verdict_lines,
        write_phase_report,
    )

    out.mkdir(parents=True, exist_ok=True)
    episodes = out / "episodes"
    setup = prepare_agent_setup(cfg, agent, episodes)
    policy = acting_policy(cfg, agent)
    log.info("eval: %s against %s on %s's held-out traffic", agent,
             ", ".join(cfg.phase2.eval.baselines), cfg.scenario.path)  # fmt: skip
    evaluation = evaluate_policies(cfg, setup, {AGENT: policy},
                                   cost_weights=cfg.phase3.cost_weights)  # fmt: skip
    save_evaluation(out / "eval.json", evaluation)
    picture = plot_heldout(evaluation, out / "heldout.png", highlight={AGENT: "tab:green"})
    delay = means(evaluation["held_out"]["summary"], "avg_delay")
    ranked = ", ".join(f"{p} {d:.2f}" for p, d in sorted(delay.items(), key=lambda kv: kv[1]))
    facts = {
        "agent": agent.resolve(),
        "scenario": cfg.scenario.path,
        "held-out time windows": setup.heldout_scenario.describe_windows(),
        "traffic source": setup.source,
        "SUMO seeds": list(cfg.phase2.eval.sumo_seeds),
        "lane rows per light (agent's padding)": setup.max_lanes,
        "acting": acting_note(cfg),
    }
    report = write_phase_report(
        out / "report.md", title=f"Agent on {scenario_name(cfg.scenario.path)} (no training)",
        facts=facts, evaluation=evaluation,
        lead=[f"Average delay (s), best first: {ranked}.", "", *verdict_lines(evaluation, (AGENT,)),
              "",
              *plans_note(cfg.scenario.plans, delay, (AGENT,))], pictures=[picture.name],
    )  # fmt: skip
    if episodes.is_dir() and not any(episodes.iterdir()):
        episodes.rmdir()
    return evaluation, report
