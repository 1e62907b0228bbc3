"""What phase 2 prepares in the driver before Ray starts: the demand pool (training traffic) and
held-out sets, the env config every env runner builds, the graph module's config, PPO's config.

The pool is generated once and cached in the data directory (``<data>/demand``); held-out traffic
uses route seeds never trained on, and evaluation uses SUMO seeds never used in training.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_monitor import memory_limit
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.traffic import DemandPool, DemandSet

__all__ = ["DRIVER_PSS", "RUNNER_PSS", "Phase2Setup", "env_runner_count", "prepare"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Phase2Setup:
    """Everything the training loop and the evaluation need, built once in the driver."""

    scenario: Scenario
    env: EnvConfig  # training env (padded, demand drawn per episode, no SUMO outputs)
    pool_files: tuple[Path, ...]
    held_out: DemandSet
    held_out_heavy: DemandSet
    env_runners: int
    max_lanes: int

    def env_config(self) -> dict[str, Any]:
        """The env config RLlib hands every env runner (a plain, picklable mapping)."""
        fields = {f.name: getattr(self.env, f.name) for f in dataclasses.fields(self.env)}
        return {**fields, "scenario": self.scenario}


# Measured (a phase-2 benchmark run: one PPO iteration, tiny preset, tree PSS per process): an env
# runner (Ray worker + torch + RLlib + the module + libsumo) ~680 MiB PSS; the driver with the
# learner ~720 MiB plus Ray's own processes (GCS, raylet, agents, log monitor) ~330 MiB.
RUNNER_PSS = 700 * 2**20
DRIVER_PSS = 1100 * 2**20


def env_runner_count(requested: int | None, cpus: int | None = None,
                     budget: int | None = None) -> int:  # fmt: skip
    """Env runner processes: as asked, else one per CPU left after the driver and learner, and
    no more than the memory budget holds next to the driver (0: the driver samples itself, the
    only choice on a 1-2 core machine or a small budget)."""
    if requested is not None:
        return requested
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    by_cpu = max(0, cpus - 2)
    if budget is None:
        return by_cpu
    return min(by_cpu, max(0, (budget - DRIVER_PSS) // RUNNER_PSS))


def _agent_lanes(agent_dir: Path | None) -> int | None:
    """The movement rows the previous phase's GNN embeds (phase 1's ``num_movements``)."""
    if agent_dir is None or not (agent_dir / "config.json").is_file():
        return None
    import json

    return int(json.loads((agent_dir / "config.json").read_text())["config"]["gnn"]["num_movements"])


def prepare(cfg: HybridConfig, *, agent_dir: Path | None, data_dir: Path,
            temp_dir: Path | None = None) -> Phase2Setup:  # fmt: skip
    """Build (or reuse) the demand pool and the held-out sets; size the padding and runners.
    ``temp_dir``: where the envs' episode folders go (the run dir: an env runner killed with
    SIGKILL cannot remove its own, and they should not pile up in the system temp dir)."""
    p2 = cfg.phase2
    scenario = Scenario.from_sumocfg(cfg.scenario.path, end=p2.episode_seconds)
    pool = DemandPool.for_scenario(scenario, data_dir / "demand",
                                   seeds=tuple(range(1, p2.demand.train_seeds + 1)),
                                   rates=tuple(p2.demand.rates))  # fmt: skip
    files = pool.build()
    held, heavy = pool.held_out(p2.demand.heldout_seeds, heavy_factor=p2.demand.heavy_factor)
    lanes = _agent_lanes(agent_dir)
    env = dataclasses.replace(
        cfg.scenario.env, reward=p2.reward, reward_scale=p2.reward_scale, metrics=False,
        pad_to_scenario=True, max_lanes=lanes, route_files=tuple(str(f) for f in files),
        temp_dir=str(temp_dir) if temp_dir is not None else None,
    )  # fmt: skip
    if temp_dir is not None:
        temp_dir.mkdir(parents=True, exist_ok=True)
    TrafficSignalCore(env, scenario=scenario).close()  # spaces check: fails here, not in Ray
    budget = cfg.memory.budget_bytes(memory_limit())
    runners = env_runner_count(p2.env_runners, budget=budget)
    if p2.env_runners is None:
        log.info("phase 2: %d env runner(s) (%d CPUs, memory budget %.1f GiB)", runners,
                 os.cpu_count() or 1, budget / 2**30)  # fmt: skip
    return Phase2Setup(scenario=scenario, env=env, pool_files=tuple(files), held_out=held,
                       held_out_heavy=heavy, env_runners=runners,
                       max_lanes=lanes or 0)  # fmt: skip
