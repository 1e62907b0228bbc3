"""Phase 3's plan, made in the parent before any rank starts: ranks and accumulation, collectors
per rank from the CPUs and the memory budget, the queue's byte bound, threads per rank, and the
env every collector builds (phase 2's training traffic, phase 3's cost weights)."""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tj_hybrid.config import HybridConfig, parse_bytes
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.gridlock_rule import fit_teleport_rule
from tj_hybrid.multinode import Torchrun
from tj_hybrid.rl_setup import RLSetup, prepare_rl
from tj_hybrid.training import World, resolve_world

__all__ = ["COLLECTOR_PSS", "RANK_PSS", "Phase3Plan", "byte_bound", "collector_count", "plan_phase3"]

log = logging.getLogger(__name__)

# Measured per process (tree PSS, tiny preset, embedded net): a collector (torch + tj-models +
# libsumo + the env) and a rank (torch, the agent, DDP, its batch and cache).
COLLECTOR_PSS = 450 * 2**20
RANK_PSS = 700 * 2**20


@dataclass(frozen=True, kw_only=True)
class Phase3Plan:
    world: World
    collectors_per_rank: int
    queue_bytes: int
    threads: int
    env_config: dict[str, Any]
    space: dict[str, Any]
    budget: int
    reason: str
    setup: RLSetup  # phase 2's scenario, demand pool and held-out traffic


def collector_count(requested: int | None, *, nprocs: int, cpus: int, budget: int) -> int:
    """Collectors in all: as asked, else one per CPU left after the ranks, within what the budget
    holds next to the ranks, and at least one per rank (each rank owns its collectors)."""
    if requested is not None:
        return max(requested, nprocs)
    by_cpu = cpus - nprocs
    by_memory = max(0, (budget - nprocs * RANK_PSS) // COLLECTOR_PSS)
    return max(nprocs, min(by_cpu, by_memory))


def byte_bound(value: float | str | None, budget: float, *, default: float) -> int:
    """A byte bound from the config, in ``memory.budget``'s convention: a size (``"64M"``,
    ``1e8``), a fraction in (0, 1] of the run's memory ``budget``, or ``default`` when None."""
    if value is None:
        size = default
    else:
        size = parse_bytes(value)
        size = size if size > 1 else size * budget
    return max(1, int(size))


def plan_phase3(cfg: HybridConfig, *, agent_dir: Path, temp_dir: Path, budget: int,
                gpus: int | None = None, cpus: int | None = None,
                launch: Torchrun | None = None) -> Phase3Plan:  # fmt: skip
    """The plan for this machine (``gpus``/``cpus`` injectable for tests); under torchrun
    (``launch``) the ranks are the job's, the collectors and threads this machine's."""
    import torch

    from tj_rl.env import TrafficSignalCore

    p3 = cfg.phase3
    if gpus is None:
        gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    cpus = cpus or os.cpu_count() or 1
    world = resolve_world(cfg.dist, effective_batch=p3.effective_batch, micro_batch=p3.micro_batch,
                          gpus=gpus, section="phase3", launch=launch)  # fmt: skip
    here = world.local_nprocs  # the ranks sharing this machine's cores and memory
    if p3.samples_per_iteration % world.nprocs:
        from tj_hybrid.config import ConfigError

        raise ConfigError(f"phase3.samples_per_iteration={p3.samples_per_iteration} is not a "
                          f"multiple of {world.nprocs} rank(s)")  # fmt: skip
    total = collector_count(p3.collect.collectors, nprocs=here, cpus=cpus, budget=budget)
    per_rank = max(1, total // here)
    setup = prepare_rl(cfg, agent_dir=agent_dir, data_dir=scenario_data_dir(cfg),
                       temp_dir=temp_dir)  # fmt: skip
    fitted = fit_teleport_rule(cfg, setup)  # as phase 2 trained (the rows are cached)
    setup, gridlock = fitted.setup, fitted.line
    env = dataclasses.replace(setup.env, cost_weights=dict(p3.cost_weights))  # phase 3's costs
    collect = dataclasses.replace(setup, env=env)  # the env every collector builds
    core = TrafficSignalCore(env, scenario=setup.scenario)
    try:
        space = core.observation_spaces[core.possible_agents[0]]
        shapes = {k: np.zeros(v.shape, v.dtype) for k, v in space.spaces.items()}
    finally:
        core.close()
    queue_bytes = byte_bound(p3.collect.queue, budget, default=min(64 * 2**20, 0.01 * budget))
    threads = cfg.dist.threads_per_rank or max(1, (cpus - per_rank * here) // here)
    reason = (f"{here} rank(s) x {per_rank} collector(s) ({cpus} CPUs, budget "
              f"{budget / 2**30:.1f} GiB); queue {queue_bytes / 2**20:.0f} MiB per rank; "
              f"{threads} torch thread(s) per rank"
              + (f"; training's gridlock rule: {gridlock}" if gridlock else ""))  # fmt: skip
    log.info("phase 3 plan: %s", reason)
    return Phase3Plan(world=world, collectors_per_rank=per_rank, queue_bytes=queue_bytes,
                      threads=threads, env_config=collect.env_config(),
                      space=shapes, budget=budget, reason=reason, setup=setup)  # fmt: skip
