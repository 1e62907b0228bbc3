"""Phase 1 end to end: data, statistics, loader plan, DDP training under a memory monitor, report.

The parent process prepares everything that is done once (recording, statistics, the loader
plan), then spawns the ranks with ``tj_dist.launch_local`` while a ``tj_monitor.MemoryMonitor``
watches the whole process tree (ranks, their DataLoader workers, SUMO during recording). Under
torchrun (``launch``) this process is a rank: it joins the group first, the dataset is made by
the waves of ``node_shares`` (rank 0, then each other node's first rank, then the rest), every
rank plans for its own machine and trains in place; rank 0 alone monitors and reports.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

import tj_dist
from tj_hybrid.config.schema import HybridConfig
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.multinode import Torchrun, node_shares
from tj_hybrid.phase1.data import DatasetInfo, ensure_dataset
from tj_hybrid.phase1.loader import LoaderSpec, feature_statistics, plan_phase1_loader
from tj_hybrid.phase1.report import ReportInputs, write_report
from tj_hybrid.phase1.train import Phase1Job, train_rank
from tj_hybrid.run_dir import PhaseDir
from tj_hybrid.training import World, resolve_world
from tj_models import TrafficAgentConfig
from tj_monitor import MemoryMonitor, atomic_write_json

__all__ = ["Phase1Result", "agent_config", "phase1_world", "run_phase1"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Phase1Result:
    """What phase 1 produced: held-out errors, throughput and where the report is."""

    eval: dict[str, float]
    data_wait_fraction: float
    windows_per_s: float
    peak_tree_pss: float | None
    report: Path


def agent_config(
    cfg: HybridConfig, *, num_movements: int, max_actions: int, dt: float
) -> TrafficAgentConfig:
    """The model preset adapted to the data: movement/action counts, decision interval and the
    recorder's graph conventions (the world model's rollout must rebuild edges the same way)."""
    base = TrafficAgentConfig.preset(
        cfg.model.preset, max_actions=max_actions, debug=cfg.model.debug
    )
    g = cfg.scenario.env.graph
    wm = base.world_model
    rollout = replace(wm.rollout, edge_radius=g.edge_radius, max_neighbors=g.k_nearest,
                      conflict_distance=g.conflict_distance, heading="math")  # fmt: skip
    return replace(
        base,
        gnn=replace(base.gnn, num_movements=max(base.gnn.num_movements, num_movements)),
        world_model=replace(wm, decision_interval=dt, rollout=rollout,
                            activation_checkpointing=cfg.model.activation_checkpointing),
    )  # fmt: skip


def phase1_world(
    cfg: HybridConfig, gpus: int | None = None, launch: Torchrun | None = None
) -> World:
    """Ranks and accumulation for phase 1 on this machine (``gpus`` injectable for tests)."""
    if gpus is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return resolve_world(cfg.dist, effective_batch=cfg.phase1.effective_batch,
                         micro_batch=cfg.phase1.loader.batch_size, gpus=gpus,
                         section="phase1", launch=launch)  # fmt: skip


def _prepare(cfg: HybridConfig, world: World) -> tuple[DatasetInfo, dict, LoaderSpec, dict]:
    """Everything that writes to the data folder (the stores, their statistics, the quantised
    copy) and the loader plan: once per machine under torchrun."""
    ds = ensure_dataset(cfg)
    stats = feature_statistics(cfg, ds)
    spec, plan_info = plan_phase1_loader(cfg, ds, world=world)
    return ds, stats, spec, plan_info


def run_phase1(
    cfg: HybridConfig, pdir: PhaseDir, *, resume: bool = False, profile: str = "custom",
    launch: Torchrun | None = None,
) -> Phase1Result | None:
    """Run phase 1 into ``pdir``; ``resume`` continues from its newest checkpoint. Under
    torchrun (``launch``) every rank calls it; rank 0 gets the result, the others None."""
    wall: dict[str, float] = {}
    t0 = time.perf_counter()
    env = tj_dist.detect_environment()
    tj_dist.apply_env_defaults(env)
    world = phase1_world(cfg, launch=launch)  # first: a batch that does not divide is an error
    main = launch is None or launch.is_main
    if main:
        pdir.create()
    for path in (scenario_data_dir(cfg), pdir.root):
        tj_dist.check_data_path(path, env)

    monitor = MemoryMonitor(cfg.monitor.to_config(jsonl_path=pdir.root / "memory.jsonl"))
    with monitor if main else contextlib.nullcontext():
        if launch is None:
            ds, stats, spec, plan_info = _prepare(cfg, world)
        else:  # the group first: the data waves wait at its barriers
            tj_dist.init_distributed(world.backend)
            ds, stats, spec, plan_info = node_shares(launch, lambda: _prepare(cfg, world))
        wall["data"] = time.perf_counter() - t0
        agent_cfg = agent_config(cfg, num_movements=ds.num_movements, max_actions=ds.max_actions,
                                 dt=ds.decision_interval)  # fmt: skip
        threads = cfg.dist.threads_per_rank or max(1, (os.cpu_count() or 1) // world.local_nprocs)
        job = Phase1Job(cfg=cfg, phase_dir=pdir, loader=spec, agent_config=agent_cfg.to_dict(),
                        feature_stats=stats, decision_interval=ds.decision_interval,
                        resume=resume, threads=threads, world=world,
                        log_level=logging.getLogger().getEffectiveLevel())  # fmt: skip
        t1 = time.perf_counter()
        if world.nprocs == 1 or launch is not None:  # torchrun: this process is a rank
            summary = train_rank(job)
        else:
            summary = tj_dist.launch_local(train_rank, world.nprocs, job,
                                           backend=world.backend)[0]  # fmt: skip
        wall["train"] = time.perf_counter() - t1
    if not main:
        return None
    monitor.save(pdir.memory)
    monitor.plot(pdir.root / "memory.png")
    assert summary is not None
    peak = monitor.peaks
    precision = tj_dist.choose_precision(cfg.amp.precision, world.device_type).precision
    wall["total"] = time.perf_counter() - t0
    budget = plan_info["budget_bytes_per_rank"] * world.local_nprocs
    report = write_report(
        pdir,
        ReportInputs(
            profile=profile,
            nprocs=world.nprocs,
            backend=world.backend,
            precision=precision,
            accumulation_steps=world.accumulation_steps,
            dataset={k: str(v) if isinstance(v, Path) else v for k, v in asdict(ds).items()},
            loader_plan=plan_info,
            budget_bytes=budget,
            peak_tree_pss=peak.get("tree_pss"),
            peak_pressure=peak.get("container_used"),
            wall_s=wall,
        ),
    )
    atomic_write_json(pdir.summary, {**summary, "wall_s": wall,
                      "peak_tree_pss": peak.get("tree_pss"), "budget_bytes": budget})  # fmt: skip
    return Phase1Result(
        eval=summary["eval"],
        data_wait_fraction=summary["data_wait_fraction"],
        windows_per_s=summary["windows_per_s"],
        peak_tree_pss=peak.get("tree_pss"),
        report=report,
    )
