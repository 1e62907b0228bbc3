"""Phase 2 as the registry sees it: PPO in a Ray session the phase owns, then the exported agent
evaluated without Ray on held-out traffic against the baselines."""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tj_hybrid.config import HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.phase_api import PhaseContext, PhaseResult
from tj_hybrid.preflight import (
    check_controllable_lights,
    check_lookahead,
    check_scenario,
    check_writable_dir,
)
from tj_hybrid.run_dir import PhaseDir

if TYPE_CHECKING:
    from tj_hybrid.phase2.validation import CheckpointSelector

__all__ = ["PHASE", "Phase2", "run_phase2"]

log = logging.getLogger(__name__)


class Phase2:
    """Safe RL: the controller learns to pick greens from the vehicle graph behind the shield."""

    def preflight(self, config: HybridConfig) -> None:
        check_scenario(config)
        check_controllable_lights(config)  # before Ray starts, naming the file
        check_lookahead(config)
        check_writable_dir(scenario_data_dir(config), "data directory")

    def run(self, context: PhaseContext) -> PhaseResult:
        from tj_hybrid.isolate import run_isolated
        from tj_monitor import MemoryMonitor, atomic_write_text, memory_limit, tree_memory

        cfg, pdir = context.config, context.phase_dir.create()
        # Ray, RLlib and the learner live in a child process: the tree's memory returns to its
        # level of before the phase when the child ends (tj_hybrid.isolate). The monitor watches
        # the whole tree: this process, the child, Ray's processes and workers, SUMO in them.
        before = tree_memory()
        monitor = MemoryMonitor(cfg.monitor.to_config(jsonl_path=pdir.root / "memory.jsonl"))
        with monitor:
            # the run's seed is also the hash seed of the child and of Ray's workers (repeatable)
            result: PhaseResult = run_isolated(run_phase2, context, hash_seed=cfg.run.seed)
        after = tree_memory()
        monitor.save(pdir.memory)
        monitor.plot(pdir.root / "memory.png")
        peak = monitor.peaks.get("tree_pss") or 0
        budget = cfg.memory.budget_bytes(memory_limit())
        lines = [
            f"- peak process-tree PSS: {peak / 2**20:.0f} MiB (memory budget "
            f"{budget / 2**20:.0f} MiB); curve: memory.png",
            # USS (private pages) is what the phase left behind; PSS also moves with the pages
            # this tree shares with unrelated processes (other Pythons mapping the same libraries)
            f"- trainer process tree USS before / after phase 2: {before.uss / 2**20:.0f} / "
            f"{after.uss / 2**20:.0f} MiB ({(after.uss - before.uss) / 2**20:+.0f} MiB); PSS "
            f"{before.pss / 2**20:.0f} / {after.pss / 2**20:.0f} MiB",
        ]
        for line in lines:
            log.info(line[2:])
        atomic_write_text(result.report, result.report.read_text() + "\n" + "\n".join(lines) + "\n")
        metrics = {**result.metrics, "tree_pss_before": before.pss, "tree_pss_after": after.pss,
                   "tree_uss_before": before.uss, "tree_uss_after": after.uss,
                   "peak_tree_pss": peak, "budget_bytes": budget}  # fmt: skip
        return dataclasses.replace(result, metrics=metrics)


def run_phase2(context: PhaseContext) -> PhaseResult:
    """Train (PPO in a Ray session of its own), export, evaluate on held-out traffic, report."""
    from tj_dist.ray_session import RaySession, RaySessionConfig
    from tj_hybrid.evaluation import means, plans_note
    from tj_hybrid.gridlock_rule import fit_teleport_rule
    from tj_hybrid.phase2.evaluate import evaluate_policy, write_report
    from tj_hybrid.phase2.imitation import start_from_teacher
    from tj_hybrid.phase2.train import train_ppo
    from tj_hybrid.phase2.validation import CheckpointSelector
    from tj_hybrid.rl_setup import prepare_rl
    from tj_monitor import memory_limit

    cfg, pdir = context.config, context.phase_dir.create()
    base = context.previous_agent if cfg.phase2.gnn != "random" else None
    t0 = time.perf_counter()
    local = cfg.phase2.ray_address is None
    setup = prepare_rl(cfg, agent_dir=context.previous_agent, data_dir=scenario_data_dir(cfg),
                       temp_dir=pdir.root / "episodes" if local else None)  # fmt: skip
    fitted = fit_teleport_rule(cfg, setup)
    setup, gridlock_line = fitted.setup, fitted.line
    p2 = cfg.phase2
    start = None
    if p2.imitation.enabled and p2.policy == "graph":
        start = start_from_teacher(cfg, setup, base, pdir.root / "imitation",
                                   scored=fitted.delays)  # fmt: skip
    elif p2.imitation.enabled:
        log.info("phase2.imitation: the lane-MLP policy starts fresh (only the graph policy "
                 "clones a teacher)")  # fmt: skip
    selector = CheckpointSelector(cfg=cfg, setup=setup, folder=pdir.root / "validation",
                                  base=base).load()  # fmt: skip
    if start is not None:
        selector.start_from(start.agent, start.validation["clone"][0])
    ray_cfg = RaySessionConfig(
        address=cfg.phase2.ray_address,
        num_cpus=(setup.env_runners + 1) if local else None,
        budget=cfg.memory.budget_bytes(memory_limit()) if local else 0.6,
        temp_dir=pdir.root / "ray" if local else None,
        env_vars={"PYTHONHASHSEED": str(cfg.run.seed)},  # a cluster's workers (local: inherited)
    )
    with RaySession(ray_cfg) as session:
        if not local and cfg.phase2.env_runners is None:  # a cluster: its CPUs, not this machine's
            import ray

            cpus = int(ray.cluster_resources().get("CPU", 0))
            setup = dataclasses.replace(setup, env_runners=cpus)  # the learner runs here
            log.info("phase 2 on the cluster at %s: %d CPUs, %d env runner(s)",
                     cfg.phase2.ray_address, cpus, setup.env_runners)  # fmt: skip
        checkpoint, rows = train_ppo(
            cfg, setup, pdir, agent_dir=base, resume=context.resume,
            clone=start.agent if start else None, lights=start.lights if start else 1,
            selector=selector,
        )  # fmt: skip
    chosen = _export(cfg, checkpoint, pdir, base, selector)
    t_train = time.perf_counter() - t0
    evaluation = evaluate_policy(cfg, setup, pdir.agent, clone=start.agent if start else None)
    res = session.result
    facts = {
        "iterations": cfg.phase2.iterations, "env runners": setup.env_runners,
        "policy": cfg.phase2.policy, "GNN": cfg.phase2.gnn, "reward": f"{cfg.phase2.reward} x {cfg.phase2.reward_scale}",
        "training pool": f"{len(setup.pool_files)} route files",
        "start": f"clone of {start.teacher}" if start else "fresh controller",
        "exported": chosen,
        "gridlock rule": gridlock_line or _gridlock_note(cfg),
        "train wall s": round(t_train, 1),
        "tree PSS before / during / after Ray (MiB)": (
            f"{res.pss_before / 2**20:.0f} / {res.pss_started / 2**20:.0f} / "
            f"{res.pss_after / 2**20:.0f}" if res else "n/a"),
    }  # fmt: skip
    delay = means(evaluation["held_out"]["summary"], "avg_delay")
    note = plans_note(cfg.scenario.plans, delay, ("phase2", "clone"))
    for line in note:
        log.info("phase 2: %s", line)
    report = write_report(pdir, evaluation, facts,
                          lines=[*(start.lines() if start else []), *selector.lines(), *note])
    others = ", ".join(f"{p} {d:.1f} s" for p, d in delay.items() if p != "phase2")
    return PhaseResult(
        name=context.spec.name, agent=pdir.agent, report=report,
        headline=f"held-out avg delay {delay['phase2']:.1f} s ({others})",
        metrics={"avg_delay": delay, "iterations": len(rows), "train_wall_s": t_train},
    )  # fmt: skip


def _gridlock_note(cfg: HybridConfig) -> str:
    """Training's gridlock rule in words when ``fit_teleport_rule`` fitted none."""
    g = cfg.phase2.gridlock
    if g is None:
        return "off (phase2.gridlock: null)"
    teleports = "off" if g.teleports is None else f"{g.teleports} within {g.window_s:g} s"
    return f"teleports {teleports}, as configured; stuck queues within {g.window_s:g} s"


def _export(cfg: HybridConfig, checkpoint: Path, pdir: PhaseDir, base: Path | None,
            selector: CheckpointSelector) -> str:  # fmt: skip
    """The exported policy: validation's best checkpoint (``select: best``), else the last;
    returns which, in words."""
    from tj_hybrid.phase2.train import export_policy
    from tj_monitor import publish_dir

    best = selector.best
    if cfg.phase2.validation.select == "best" and best is not None:
        tmp = pdir.agent.with_name(f".{pdir.agent.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(selector.best_agent, tmp)
        publish_dir(tmp, pdir.agent)
        if best[0] == 0:
            return ("the clone PPO started from (no checkpoint beat its validation delay, "
                    f"{best[1]:.2f} s)")
        return f"iteration {best[0]} (best validation delay, {best[1]:.2f} s)"
    export_policy(checkpoint, pdir.agent, base=base, preset=cfg.model.preset,
                  policy=cfg.phase2.policy)  # fmt: skip
    return f"the last iteration ({checkpoint.name})"


PHASE = Phase2()
