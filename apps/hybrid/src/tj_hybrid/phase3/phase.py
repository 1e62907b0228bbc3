"""Phase 3 as the registry sees it: plan, DDP ranks with their collectors under a memory monitor,
the exported agent chosen on validation traffic among phase 2's and every checkpoint's, then it
evaluated without Ray against the phase-2 policy and the baselines, the phase report (the runner
then writes the run's final report)."""

from __future__ import annotations

import logging
import time
from typing import Any

from tj_hybrid.config import ConfigError, HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.multinode import (
    Torchrun,
    node_shares,
    rank_result,
    rank_zero_value,
    torchrun_launch,
)
from tj_hybrid.phase_api import PhaseContext, PhaseResult
from tj_hybrid.preflight import check_controllable_lights, check_scenario, check_writable_dir

__all__ = ["PHASE", "Phase3", "run_phase3"]

log = logging.getLogger(__name__)


class Phase3:
    """Constrained optimisation: controller + shield critic under a safety-cost limit."""

    def preflight(self, config: HybridConfig) -> None:
        if config.phase2.policy != "graph":
            raise ConfigError("phase 3 fine-tunes phase 2's graph policy (a tj-models agent); "
                              f"phase2.policy={config.phase2.policy!r} exports none")  # fmt: skip
        check_scenario(config)
        check_controllable_lights(config)
        check_writable_dir(scenario_data_dir(config), "data directory")

    def run(self, context: PhaseContext) -> PhaseResult:
        from tj_hybrid.isolate import run_isolated
        from tj_monitor import MemoryMonitor, memory_limit, tree_memory

        cfg, pdir = context.config, context.phase_dir.create()
        if context.previous_agent is None:
            raise ConfigError("phase 3 starts from phase 2's agent; none was given")
        budget = cfg.memory.budget_bytes(memory_limit())
        # The ranks, their collectors and the evaluation (torch, tj-models, libsumo in-process)
        # live in a child that ends with the phase: the tree returns to its level of before.
        before = tree_memory()
        launch = torchrun_launch()
        if launch is not None:  # this process is a rank: the phase runs in it
            out = run_phase3(context, budget, launch)
            if out is None:
                return rank_result(context)
            after = tree_memory()
            return _result(context, out, budget, before, after, peak=after.pss)
        monitor = MemoryMonitor(cfg.monitor.to_config(jsonl_path=pdir.root / "memory.jsonl"))
        with monitor:
            out = run_isolated(run_phase3, context, budget, hash_seed=cfg.run.seed)
        after = tree_memory()
        monitor.save(pdir.memory)
        monitor.plot(pdir.root / "memory.png")
        return _result(context, out, budget, before, after,
                       peak=monitor.peaks.get("tree_pss") or 0)  # fmt: skip


def _result(context: PhaseContext, out: dict, budget: int, before: Any, after: Any,
            peak: float) -> PhaseResult:  # fmt: skip
    """The phase's report and result from ``run_phase3``'s output (rank 0 / the parent)."""
    from tj_hybrid.evaluation import acting_note, means
    from tj_hybrid.phase3.report import write_phase3_report

    pdir = context.phase_dir
    summary, evaluation = out["summary"], out["evaluation"]
    needed = _collectors_needed(summary, out["collectors"])
    facts = {
        "plan": out["plan"],
        "iterations": summary["iterations"], "policy version": summary["policy_version"],
        "cost limit": f"{out['cost_limit']:.2f}: {out['limit']}",
        "exported": f"iteration {out['exported']} (0: phase 2's policy; phase3.select: "
                    f"{context.config.phase3.select})",
        "acting": acting_note(context.config),
        "final lambda": f"{summary['lambda']:.4f}",
        "data-wait fraction": f"{summary['data_wait_fraction']:.1%} "
                              f"(after the first iteration: "
                              f"{summary['data_wait_fraction_steady']:.1%}; {needed})",
        "stale samples dropped": int(summary["dropped_stale"]),
        "collector restarts": int(summary["collector_restarts"]),
        "queue peak / bound per rank (MiB)":
            f"{summary['queue_bytes_peak'] / 2**20:.1f} / {out['queue_bytes'] / 2**20:.1f}",
        "train wall s": round(out["train_wall_s"], 1),
        "peak process-tree PSS (MiB)": f"{peak / 2**20:.0f} of a {budget / 2**20:.0f} budget",
        "tree USS before / after phase 3 (MiB)":
            f"{before.uss / 2**20:.0f} / {after.uss / 2**20:.0f} "
            f"({(after.uss - before.uss) / 2**20:+.0f})",
    }  # fmt: skip
    report = write_phase3_report(pdir, evaluation, facts, out["cost_limit"],
                                 lines=out["selection"])  # fmt: skip
    summ = evaluation["held_out"]["summary"]
    delay, cost = means(summ, "avg_delay"), means(summ, "cost")
    result = PhaseResult(
        name=context.spec.name, agent=pdir.agent, report=report,
        headline=(f"held-out avg delay {delay['phase3']:.1f} s, episode cost "
                  f"{cost['phase3']:.1f} (phase 2: {delay['phase2']:.1f} s, "
                  f"{cost['phase2']:.1f}; limit {out['cost_limit']:.1f})"),
        metrics={**summary, "avg_delay": delay, "cost": cost,
                 "train_wall_s": out["train_wall_s"], "peak_tree_pss": peak,
                 "exported_iteration": out["exported"],
                 "budget_bytes": budget, "tree_uss_before": before.uss,
                 "tree_uss_after": after.uss, "tree_pss_before": before.pss,
                 "tree_pss_after": after.pss},
    )  # fmt: skip
    return result


def run_phase3(context: PhaseContext, budget: int, launch: Torchrun | None = None) -> dict | None:
    """The isolated child: plan, the DDP ranks (each with its collectors), the exported policy
    chosen on validation (``select.py``), then the held-out evaluation of the phase-3 and phase-2
    policies against the baselines (no Ray). Under torchrun (``launch``) every rank calls it in
    place: each machine plans its own collectors, rank 0 chooses and evaluates (the others wait,
    then get None)."""
    import tj_dist
    from tj_hybrid.evaluation import acting_policy, evaluate_policies
    from tj_hybrid.handoff import load_handoff
    from tj_hybrid.phase3.limit import CostLimit, auto_cost_limit
    from tj_hybrid.phase3.plan import Phase3Plan, plan_phase3
    from tj_hybrid.phase3.report import selection_lines
    from tj_hybrid.phase3.select import select_policy
    from tj_hybrid.phase3.train import Phase3Job, train_rank
    from tj_rl.control import AgentPolicy

    cfg, pdir = context.config, context.phase_dir
    assert context.previous_agent is not None
    load_handoff(context.previous_agent, context.spec)  # checksum + fit, before any process
    if cfg.phase3.guard.config() is not None:
        log.info("phase 3: the lights act behind the dilemma-zone guard (phase3.guard), in "
                 "training and evaluation: %s", cfg.phase3.guard.describe())  # fmt: skip
    tj_dist.apply_env_defaults(tj_dist.detect_environment())
    t0 = time.perf_counter()
    def make_plan() -> Phase3Plan:
        assert context.previous_agent is not None
        return plan_phase3(cfg, agent_dir=context.previous_agent,
                           temp_dir=pdir.root / "episodes", budget=budget, launch=launch)  # fmt: skip

    if launch is None:
        plan = make_plan()
    else:  # the demand pool is written to the data folder: once per machine
        tj_dist.init_distributed(cfg.dist.backend)
        plan = node_shares(launch, make_plan)
    limit: CostLimit | None = None
    if cfg.phase3.cost_limit == "auto":  # rank 0 scores validation traffic, every rank gets it
        if launch is None or launch.is_main:
            limit = auto_cost_limit(cfg, plan.setup, context.previous_agent, pdir.root)
        if launch is not None:
            limit = rank_zero_value(limit)
    job = Phase3Job(cfg=cfg, phase_dir=pdir, agent_dir=str(context.previous_agent),
                    env_config=plan.env_config, space=plan.space, world=plan.world,
                    collectors_per_rank=plan.collectors_per_rank, queue_bytes=plan.queue_bytes,
                    budget=budget, resume=context.resume, threads=plan.threads,
                    cost_limit=(limit.lagrangian if limit is not None
                                else float(cfg.phase3.cost_limit)),
                    node=launch.node_rank if launch else 0,
                    log_level=logging.getLogger().getEffectiveLevel())  # fmt: skip
    if plan.world.nprocs == 1 or launch is not None:
        summary = train_rank(job)
    else:
        summary = tj_dist.launch_local(train_rank, plan.world.nprocs, job,
                                       backend=plan.world.backend)[0]  # fmt: skip
    train_wall = time.perf_counter() - t0
    with tj_dist.rank_zero_only() as main:  # the other ranks wait (torchrun ends a job at once)
        if not main:
            return None
        assert summary is not None
        # the limit in validation's units (the Lagrangian's may be in the training windows')
        cost_limit = limit.value if limit is not None else summary["cost_limit"]
        # the exported policy: validation's choice among phase 2's and every checkpoint's
        choice = (select_policy(cfg, plan.setup, pdir, context.previous_agent, cost_limit)
                  if cfg.phase3.select == "best" else None)  # fmt: skip
        # the phase-3 policy acts as it trained: behind the learned shield and the dilemma-zone
        # guard when they are set (``acting_policy``); phase 2's as phase 2 left it
        policies = {"phase3": acting_policy(cfg, pdir.agent),
                    "phase2": AgentPolicy(context.previous_agent)}  # fmt: skip
        evaluation = evaluate_policies(cfg, plan.setup, policies,
                                       cost_weights=cfg.phase3.cost_weights)  # fmt: skip
    return {"summary": summary, "evaluation": evaluation, "plan": plan.reason,
            "cost_limit": cost_limit,
            "limit": limit.line if limit is not None else "set in the config",
            "selection": selection_lines(choice),
            "exported": choice.iteration if choice is not None else summary["iterations"],
            "queue_bytes": plan.queue_bytes, "train_wall_s": train_wall,
            "collectors": plan.collectors_per_rank * plan.world.nprocs}  # fmt: skip


def _collectors_needed(summary: dict, collectors: int) -> str:
    """How many collectors would hide the data wait, from this run's own rates."""
    wait, train = summary["data_wait_fraction_steady"], summary["train_fraction"]
    if wait != wait:  # one iteration only: no steady state
        wait = summary["data_wait_fraction"]
    if wait < 0.10 or train <= 0:
        return f"{collectors} collector(s) keep it under 10%"
    # collectors produce while the ranks train; waiting means they produce too slowly by
    # (wait + train) / train
    need = int(-(-collectors * (wait + train) // train))
    return f"{collectors} collector(s); about {need} would keep the ranks busy"


PHASE = Phase3()
