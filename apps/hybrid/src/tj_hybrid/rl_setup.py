"""The RL setup phases 2 and 3 share, built in the driver before any worker starts: the demand
pool (training traffic) and held-out sets, the env config every env runner or collector builds,
the env-runner count, and RLlib's PPO config of phase 2 (also what the sampling benchmark builds).

The pool is generated once and cached in the data directory (``<data>/demand``) from the source
``tj_hybrid.traffic`` picks (the scenario's own demand, varied, or randomTrips); held-out traffic
uses route seeds never trained on, and evaluation uses SUMO seeds never used in training. Episodes
are time windows of ``phase2.episode_seconds`` inside the scenario's span (``phase2.windows``;
default: one at the scenario's begin), and the pool covers them. tj-rl and Ray are imported when
used: importing this module (and ``tj_hybrid``) stays light.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.traffic import (
    build_traffic,
    demand_source,
    episode_windows,
    own_programs,
    scenario_span,
    split_windows,
)
from tj_monitor import memory_limit

if TYPE_CHECKING:
    from tj_rl.env import EnvConfig, Scenario
    from tj_rl.traffic import DemandSet

__all__ = [
    "DRIVER_PSS",
    "EVAL_WORKER_PSS",
    "RUNNER_PSS",
    "SIM_PSS",
    "RLSetup",
    "build_ppo",
    "env_runner_count",
    "episode_scenario",
    "eval_worker_count",
    "prepare_rl",
    "scenario_widths",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RLSetup:
    """Everything training, collection and evaluation need, built once in the driver."""

    scenario: Scenario  # cut to the episode windows (``scenario.windows`` when several)
    env: EnvConfig  # training env (padded, demand drawn per episode, no SUMO outputs)
    pool_files: tuple[Path, ...]
    held_out: DemandSet
    held_out_heavy: DemandSet
    env_runners: int
    max_lanes: int
    net_cache: Path | None = None  # where nets converted for baselines (sumo-actuated) are kept
    eval_scenario: Scenario | None = None  # held-out windows (None: ``scenario``'s)
    source: str = "random"  # the training demand: "scenario" (its own, varied) or "random"
    validation: DemandSet | None = None  # to choose by (phase2.validation); None: none built
    programs: Scenario | None = None  # what scenario-program runs (None: ``scenario``'s own)
    # validation episodes run in the held-out windows (``phase2.validation.windows: held-out``)
    validate_in_heldout: bool = False

    @property
    def heldout_scenario(self) -> Scenario:
        """The scenario cut to the windows held-out evaluation runs in."""
        return self.eval_scenario if self.eval_scenario is not None else self.scenario

    @property
    def validation_scenario(self) -> Scenario:
        """The scenario cut to the windows validation runs in (``phase2.validation.windows``)."""
        return self.heldout_scenario if self.validate_in_heldout else self.scenario

    def env_config(self) -> dict[str, Any]:
        """The env config an env runner or collector builds (a plain, picklable mapping)."""
        fields = {f.name: getattr(self.env, f.name) for f in dataclasses.fields(self.env)}
        return {**fields, "scenario": self.scenario}


# Measured (a phase-2 benchmark run: one PPO iteration, tiny preset, tree PSS per process): an env
# runner (Ray worker + torch + RLlib + the module + libsumo) ~680 MiB PSS; the driver with the
# learner ~720 MiB plus Ray's own processes (GCS, raylet, agents, log monitor) ~330 MiB.
RUNNER_PSS = 700 * 2**20
DRIVER_PSS = 1100 * 2**20
# An evaluation worker (python + torch + tj-models + the agent + libsumo, one episode run): 466 MiB
# private and 440 MiB of library pages shared with the phase and the other workers (smaps_rollup
# of a worker on the embedded arterial; torch alone is 290 + 220).
EVAL_WORKER_PSS = 700 * 2**20
# A simulation child of ``phase2.sims_per_runner`` > 1 (python + the env + libsumo, no torch).
# Measured: 8 children raised phase 2's peak tree PSS from 1.84 to 2.21 GiB on the embedded net
# (apps/bench phase2, docs/BENCHMARKS.md), ~47 MiB each; 80 leaves room for bigger nets.
SIM_PSS = 80 * 2**20


def env_runner_count(requested: int | None, cpus: int | None = None,
                     budget: int | None = None, sims: int = 1) -> int:  # fmt: skip
    """Env runner processes: as asked, else one per CPU left after the driver and learner, and
    no more than the memory budget holds next to the driver (0: the driver samples itself, the
    only choice on a 1-2 core machine or a small budget). ``sims`` > 1: each runner (and the
    driver) also holds that many simulation children."""
    if requested is not None:
        return requested
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    by_cpu = max(0, cpus - 2)
    if budget is None:
        return by_cpu
    children = sims * SIM_PSS if sims > 1 else 0
    return min(by_cpu, max(0, (budget - DRIVER_PSS - children) // (RUNNER_PSS + children)))


def eval_worker_count(requested: int | str, cpus: int | None = None,
                      budget: int | None = None) -> int:  # fmt: skip
    """Held-out evaluation's worker processes (``phase2.eval.workers``): as asked, else one per
    CPU and no more than the memory budget holds next to the phase's own process (at least 1:
    then the episodes run in the phase)."""
    if requested != "auto":
        return int(requested)
    cpus = cpus if cpus is not None else (os.cpu_count() or 1)
    if budget is None:
        return max(1, cpus)
    return max(1, min(cpus, (budget - DRIVER_PSS) // EVAL_WORKER_PSS))


def _agent_lanes(agent_dir: Path | None) -> int | None:
    """The movement rows the previous phase's GNN embeds (phase 1's ``num_movements``)."""
    if agent_dir is None or not (agent_dir / "config.json").is_file():
        return None
    import json

    return int(
        json.loads((agent_dir / "config.json").read_text())["config"]["gnn"]["num_movements"]
    )


def scenario_widths(cfg: HybridConfig) -> tuple[int, int]:
    """(green phases, movement rows) of the scenario's widest light: what an agent must score and
    embed to control every light of it (read from the net; SUMO does not start)."""
    from tj_rl.control.fit import check_spaces
    from tj_rl.env import TrafficSignalCore

    env = dataclasses.replace(cfg.scenario.env, pad_to_scenario=True, max_lanes=None,
                              max_phases=None, metrics=False)  # fmt: skip
    core = TrafficSignalCore(env, scenario=episode_scenario(cfg))
    try:
        light = core.possible_agents[0]
        return check_spaces(core.observation_spaces[light], core.action_spaces[light],
                            f"scenario {cfg.scenario.path}")  # fmt: skip
    finally:
        core.close()


def episode_scenario(cfg: HybridConfig) -> Scenario:
    """The configured scenario cut to phase 2's (and 3's) episode windows (``ScenarioError``
    for a time or a window outside the scenario's span)."""
    p2 = cfg.phase2
    return episode_windows(scenario_span(cfg), p2.episode_seconds, p2.windows)


def prepare_rl(cfg: HybridConfig, *, agent_dir: Path | None, data_dir: Path,
               temp_dir: Path | None = None) -> RLSetup:  # fmt: skip
    """Build (or reuse) the demand pool and the held-out sets; size the padding and runners.
    ``agent_dir``: the agent whose GNN the policy uses (its lane rows set the padding).
    ``temp_dir``: where the envs' episode folders go (the run dir: an env runner killed with
    SIGKILL cannot remove its own, and they should not pile up in the system temp dir)."""
    from tj_rl.env import TrafficSignalCore

    p2 = cfg.phase2
    span = scenario_span(cfg)
    source = demand_source(cfg, span)
    episodes = episode_windows(span, p2.episode_seconds, p2.windows)
    scenario, held_scenario = split_windows(span, episodes, p2.windows, source)
    log.info("RL setup: episode time windows %s", scenario.describe_windows())
    if p2.validation.windows == "held-out":
        log.info("RL setup: validation episodes run in the held-out windows %s, with their own "
                 "route and SUMO seeds (phase2.validation.windows=held-out)%s",
                 held_scenario.describe_windows(),
                 "; the span holds no other, so these are the training windows"
                 if held_scenario == scenario else "")  # fmt: skip
    if cfg.scenario.plans == "rebuilt":
        log.info("RL setup: the lights switch netconvert's rebuilt plans (scenario.plans=rebuilt: "
                 "%s), not the scenario's own; scenario-program still runs its own",
                 span.net_file.name)  # fmt: skip
    traffic = build_traffic(cfg, span, scenario, data_dir, source)
    files = traffic.pool_files
    lanes = _agent_lanes(agent_dir)
    env = dataclasses.replace(
        cfg.scenario.env, reward=p2.reward, reward_scale=p2.reward_scale, metrics=False,
        pad_to_scenario=True, max_lanes=lanes, route_files=tuple(str(f) for f in files),
        temp_dir=str(temp_dir) if temp_dir is not None else None, gridlock=p2.gridlock,
    )  # fmt: skip
    if temp_dir is not None:
        temp_dir.mkdir(parents=True, exist_ok=True)
    TrafficSignalCore(env, scenario=scenario).close()  # spaces check: fails here, not in Ray
    budget = cfg.memory.budget_bytes(memory_limit())
    runners = env_runner_count(p2.env_runners, budget=budget, sims=p2.sims_per_runner)
    if p2.env_runners is None:
        log.info("RL setup: %d env runner(s) (%d CPUs, memory budget %.1f GiB)", runners,
                 os.cpu_count() or 1, budget / 2**30)  # fmt: skip
    return RLSetup(scenario=scenario, env=env, pool_files=tuple(files),
                   held_out=traffic.held_out, held_out_heavy=traffic.held_out_heavy,
                   env_runners=runners, max_lanes=lanes or 0, net_cache=data_dir / "nets",
                   eval_scenario=held_scenario, source=traffic.source,
                   validation=traffic.validation, programs=own_programs(cfg),
                   validate_in_heldout=p2.validation.windows == "held-out")  # fmt: skip


def build_ppo(cfg: HybridConfig, setup: RLSetup, agent_dir: Path | None, *,
              clone: Path | None = None, lights: int = 1) -> Any:  # fmt: skip
    """RLlib's PPOConfig from the ``phase2`` section on ``setup``'s env, as phase 2 trains it
    (imports Ray; ``agent_dir``: the phase-1 agent whose GNN the module starts from; ``clone``:
    a behaviour-cloned agent (``phase2.imitation``) whose GNN and controller it starts from,
    with the fading KL term to it; ``lights``: the scenario's, to count the fade in env steps)."""
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig

    from tj_rl.rllib import (
        GraphModuleConfig,
        ParallelEnvRunner,
        ProcessTrafficSignalEnv,
        TrafficCallbacks,
        TrafficSignalEnv,
        lane_mlp_spec,
        shared_module_spec,
        shared_policy_mapping,
    )
    from tj_rl.rllib.module import SHARED_POLICY

    p2, ppo = cfg.phase2, cfg.phase2.ppo
    fresh = p2.gnn == "random" or agent_dir is None
    start = str(clone) if clone is not None else None if fresh else str(agent_dir)
    module = GraphModuleConfig(
        preset=cfg.model.preset,
        gnn="finetune" if p2.gnn == "finetune" else "frozen",
        agent_dir=start,
        load_controller=clone is not None,
    )
    spec = lane_mlp_spec() if p2.policy == "lane-mlp" else shared_module_spec(module)
    sims = p2.sims_per_runner
    env_cls = ProcessTrafficSignalEnv if sims > 1 else TrafficSignalEnv
    config = PPOConfig().environment(env_cls, env_config=setup.env_config())
    config = config.callbacks(TrafficCallbacks)  # costs, shield vetoes, SUMO deaths per episode
    config = config.env_runners(
        num_env_runners=setup.env_runners,
        num_envs_per_env_runner=sims,
        num_cpus_per_env_runner=1 if setup.env_runners else 0,
        sample_timeout_s=600,
    )
    if sims > 1:  # the sub-envs step in parallel children, their lights in one forward
        config = config.env_runners(env_runner_cls=ParallelEnvRunner)
    config = config.learners(
        num_learners=0, num_gpus_per_learner=1 if torch.cuda.is_available() else 0
    )
    config = config.multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
    config = config.rl_module(rl_module_spec=spec)
    config = config.training(
        lr=ppo.lr,
        gamma=ppo.gamma,
        lambda_=ppo.gae_lambda,
        clip_param=ppo.clip,
        vf_clip_param=ppo.vf_clip,
        vf_loss_coeff=ppo.vf_coeff,
        entropy_coeff=ppo.entropy,
        num_epochs=ppo.epochs,
        minibatch_size=ppo.minibatch,
        train_batch_size_per_learner=ppo.train_batch,
        grad_clip=ppo.grad_clip,
    )
    im = p2.imitation
    if clone is not None and im.coeff > 0 and im.decay_iterations > 0:
        from tj_rl.rllib import imitation_learner

        fade = im.decay_iterations * ppo.train_batch // max(lights, 1)  # env steps (all lights)
        config = imitation_learner(config, agent_dir=str(clone), coeff=im.coeff,
                                   decay_env_steps=fade)  # fmt: skip
    config = config.fault_tolerance(
        restart_failed_env_runners=True, delay_between_env_runner_restarts_s=1.0
    )
    return config.debugging(seed=cfg.run.seed)
