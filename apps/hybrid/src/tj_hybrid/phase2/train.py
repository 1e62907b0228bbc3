"""Phase 2's training loop: PPO (RLlib new API stack, configured by ``tj_hybrid.rl_setup``) on the
shared graph module, in a Ray session the phase owns; checkpoints every N iterations,
``--resume`` from the newest, the learner's module exported as a tj-models agent at the end
(loadable without Ray)."""

from __future__ import annotations

import dataclasses
import logging
import numbers
import shutil
import time
from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.phase2.validation import CheckpointSelector
from tj_hybrid.progress import StepProgress
from tj_hybrid.rl_setup import RLSetup, build_ppo
from tj_hybrid.run_dir import PhaseDir
from tj_hybrid.training.threads import torch_threads
from tj_monitor import LoggerConfig, MetricsLogger, publish_dir

__all__ = ["export_policy", "fresh_agent_config", "latest_checkpoint", "train_ppo"]

log = logging.getLogger(__name__)
_PREFIX = "iter-"


def latest_checkpoint(folder: Path) -> Path | None:
    """The newest complete RLlib checkpoint folder (``iter-NNNNN``) in ``folder``."""
    done = sorted(p for p in folder.glob(f"{_PREFIX}*") if p.is_dir() and not p.name.endswith("tmp"))
    return done[-1] if done else None


def _save(algo: Any, folder: Path, iteration: int, keep: int) -> Path:
    final = folder / f"{_PREFIX}{iteration:05d}"
    tmp = folder / f".{final.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    algo.save_to_path(str(tmp))
    publish_dir(tmp, final)  # complete or absent: a killed save leaves only a .tmp folder
    for old in sorted(folder.glob(f"{_PREFIX}*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _metrics(result: dict[str, Any], policy: str) -> dict[str, float]:
    runners, learner = result.get("env_runners", {}), result.get("learners", {}).get(policy, {})
    out = {
        "episode/return_mean": runners.get("episode_return_mean"),
        "episode/len_mean": runners.get("episode_len_mean"),
        "episode/count": runners.get("num_episodes"),
        "train/total_loss": learner.get("total_loss"),
        "train/policy_loss": learner.get("policy_loss"),
        "train/vf_loss": learner.get("vf_loss"),
        "train/entropy": learner.get("entropy"),
        "train/mean_kl": learner.get("mean_kl_loss"),
        "train/imitation_kl": learner.get("imitation_kl"),
        "train/imitation_coeff": learner.get("imitation_coeff"),
        "env_steps_lifetime": result.get("num_env_steps_sampled_lifetime"),
        # tj_rl.TrafficCallbacks: per-episode safety costs and shield vetoes (RLlib's window)
        "episode/cost_mean": runners.get("episode_weighted_cost_mean"),
        "episode/vetoes_mean": runners.get("episode_vetoes_mean"),
        "shield/vetoes_lifetime": runners.get("vetoes_lifetime"),
        "episodes_sumo_died": runners.get("episodes_sumo_died"),
        "episodes_gridlock": runners.get("episodes_gridlock"),  # ended as failures (lifetime)
        # RLlib's own timers (smoothed means over iterations, not this iteration's exact split)
        "time/rllib_sampling_s": result.get("timers", {}).get("env_runner_sampling_timer"),
        "time/rllib_learning_s": result.get("timers", {}).get("learner_update_timer"),
    }
    costs = runners.get("episode_costs_mean") or {}
    out |= {f"episode/cost_{name}": value for name, value in costs.items()}
    return {k: float(v) for k, v in out.items() if isinstance(v, numbers.Real)}


def _where() -> str:
    """This process's pid, Ray node (short id) and IP."""
    import os

    import ray

    node = ray.get_runtime_context().get_node_id()[:8]
    return f"pid {os.getpid()} on node {node} ({ray.util.get_node_ip_address()})"


def _log_placement(algo: Any, policy: str, *, remote_runners: bool) -> None:
    """One line: where the driver, the learner and the env runners run, each measured from
    inside it. With ``num_learners=0`` the learner is the driver, on the machine that ran the
    command: a cluster's GPU is used only when the command runs on the GPU machine."""
    import ray

    def learner_place(learner: Any) -> str:
        return f"{_where()}, device {next(learner.module[policy].parameters()).device}"

    (learner,) = (r.get() for r in algo.learner_group.foreach_learner(learner_place))
    line = f"placement: driver {_where()}; learner {learner}"
    if remote_runners:
        nodes = algo.env_runner_group.foreach_env_runner(
            lambda _: ray.get_runtime_context().get_node_id()[:8], local_env_runner=False
        )  # ray only: the runners' processes need not import this module
        count = ", ".join(f"{n} x{nodes.count(n)}" for n in sorted(set(nodes)))
        line += f"; {len(nodes)} env runner(s) on {len(set(nodes))} node(s): {count}"
    log.info(line)
    gpus = int(ray.cluster_resources().get("GPU", 0))
    if gpus and "cuda" not in learner:
        log.warning("the cluster has %d GPU(s) but the learner (this driver) runs on CPU: run "
                    "the phase-2 command on the GPU machine", gpus)  # fmt: skip


def train_ppo(cfg: HybridConfig, setup: RLSetup, pdir: PhaseDir, *, agent_dir: Path | None,
              resume: bool, clone: Path | None = None, lights: int = 1,
              selector: CheckpointSelector | None = None,
              ) -> tuple[Path, list[dict[str, float]]]:  # fmt: skip
    """Train; returns (the final checkpoint, per-iteration metrics). Ray must be running.
    ``clone``: start from this behaviour-cloned agent (``build_ppo``); ``selector``: score every
    checkpoint on validation traffic (early stopping)."""
    with torch_threads(cfg.phase2.torch_threads):
        return _train(cfg, setup, pdir, agent_dir=agent_dir, resume=resume, clone=clone,
                      lights=lights, selector=selector)  # fmt: skip


def _train(cfg: HybridConfig, setup: RLSetup, pdir: PhaseDir, *, agent_dir: Path | None,
           resume: bool, clone: Path | None, lights: int, selector: CheckpointSelector | None,
           ) -> tuple[Path, list[dict[str, float]]]:  # fmt: skip
    from tj_rl.rllib.module import SHARED_POLICY

    p2 = cfg.phase2
    algo = build_ppo(cfg, setup, agent_dir, clone=clone, lights=lights).build_algo()
    _log_placement(algo, SHARED_POLICY, remote_runners=setup.env_runners > 0)
    rows: list[dict[str, float]] = []
    logger = MetricsLogger(pdir.logs, LoggerConfig(console_every=0))
    try:
        newest = latest_checkpoint(pdir.checkpoints) if resume else None
        if newest is not None:
            algo.restore_from_path(str(newest))
            log.info("resumed phase 2 from %s (iteration %d)", newest, algo.iteration)
        progress = StepProgress("phase 2: PPO", total=p2.iterations, start=algo.iteration)
        final = newest
        while algo.iteration < p2.iterations:
            t0 = time.perf_counter()
            result = algo.train()
            it = algo.iteration
            wall = time.perf_counter() - t0
            row = _metrics(result, SHARED_POLICY) | {"time/iteration_s": wall}
            sampled = result.get("env_runners", {}).get("num_env_steps_sampled")  # this iteration
            if isinstance(sampled, numbers.Real):  # numpy scalars included
                row["env_steps_per_s"] = float(sampled) / wall
            if it % p2.checkpoint_every == 0 or it == p2.iterations:
                final = _save(algo, pdir.checkpoints, it, p2.keep_checkpoints)
                if selector is not None:
                    row["validation/avg_delay"] = selector.score(final, it)
            rows.append(row)
            logger.log(it, row)
            progress.update(it, ret=row.get("episode/return_mean", float("nan")))
        progress.close()
        if final is None:
            final = _save(algo, pdir.checkpoints, algo.iteration, p2.keep_checkpoints)
    finally:
        logger.close()
        algo.stop()
    return final, rows


def export_policy(checkpoint: Path, out_dir: Path, *, base: Path | None, preset: str,
                  policy: str = "graph") -> Path:  # fmt: skip
    """The learner's module in ``checkpoint`` as a tj-models agent at ``out_dir`` (the
    lane-MLP baseline, which has no tj-models form: its RLModule folder, copied)."""
    from ray.rllib.core.rl_module.rl_module import RLModule

    from tj_rl.rllib import export_agent
    from tj_rl.rllib.module import SHARED_POLICY

    folder = checkpoint / "learner_group" / "learner" / "rl_module" / SHARED_POLICY
    if policy == "lane-mlp":
        tmp = out_dir.with_name(f".{out_dir.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(folder, tmp)
        shutil.rmtree(out_dir, ignore_errors=True)
        publish_dir(tmp, out_dir)
        return out_dir
    module = RLModule.from_checkpoint(folder)
    return export_agent(module, base if base is not None else fresh_agent_config(module, preset),
                        out_dir)  # fmt: skip


def fresh_agent_config(module: Any, preset: str) -> Any:
    """The agent config of a module trained without a phase-1 agent (``phase2.gnn: random``):
    the preset's world model and shield, the module's own GNN (its movement count follows the
    env's lanes) and controller, its action count."""
    from tj_models import TrafficAgentConfig

    cfg = TrafficAgentConfig.preset(preset, max_actions=module.controller.max_actions)
    return dataclasses.replace(cfg, gnn=module.gnn.config, controller=module.controller.config)
