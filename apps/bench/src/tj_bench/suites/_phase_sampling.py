"""Phase 2's sampling speed per decision, one env runner's view: the bare env with random feasible
actions, the graph module's forward on one decision, and RLlib's local env runner with the module
in the loop; RLlib's own share (connectors, episode bookkeeping, action sampling) =
(RLlib - env - forward) / RLlib.

``sampling_rounds`` runs in a spawned child process (``tj_monitor.run_in_child``: Ray, RLlib and
libsumo never enter the runner), which builds PPO like phase 2 does with ``num_env_runners=0``;
the bare env runs in a process of its own again, since libsumo holds one simulation per process
and the local env runner's is open in the child. The forward is timed at the batch one env-runner
step gives it: the lights of ``phase2.sims_per_runner`` simulations.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tj_monitor import run_in_child

__all__ = ["sampling_rounds"]


def _bare_env(setup: Any, decisions: int, seed: int) -> tuple[float, list[dict]]:
    """s per decision of ``TrafficSignalCore`` with random feasible actions, and up to 200 of
    its observations (the module forward's input)."""
    import torch

    from tj_rl.control import RandomPolicy
    from tj_rl.env import TrafficSignalCore

    torch.set_num_threads(1)
    env = TrafficSignalCore(setup.env, scenario=setup.scenario)
    policy = RandomPolicy(seed)
    kept: list[dict] = []
    try:
        obs, infos = env.reset(seed=seed)
        t0, n = time.perf_counter(), 0
        while n < decisions:
            actions = policy.compute_actions(obs, infos)
            obs, _, term, trunc, infos = env.step(actions)
            n += len(actions)
            if len(kept) < 200:
                kept += [dict(o) for o in obs.values()]
            if trunc["__all__"] or term["__all__"]:  # term: a gridlock (phase2.gridlock)
                obs, infos = env.reset(seed=seed + n)
        return (time.perf_counter() - t0) / n, kept
    finally:
        env.close()


def _forward_s(module: Any, observations: list[dict], batch: int) -> float:
    """s per decision of ``forward_exploration`` on batches of ``batch`` observations (the
    decisions one env-runner step scores at once: lights x simulations per runner)."""
    import torch
    from ray.rllib.core.columns import Columns

    groups = [observations[i:i + batch] for i in range(0, len(observations) - batch + 1, batch)]
    batches = [
        {k: torch.from_numpy(np.stack([np.asarray(o[k]) for o in g])) for k in g[0]}
        for g in groups
    ]
    with torch.no_grad():
        module.forward_exploration({Columns.OBS: batches[0]})  # warm-up
        t0 = time.perf_counter()
        for b in batches:
            module.forward_exploration({Columns.OBS: b})
    return (time.perf_counter() - t0) / (len(batches) * batch)


def _measure(profile: str | None, overrides: Sequence[str], agent: Path | None, work: Path,
             decisions: int, rounds: int) -> list[dict[str, float]]:  # fmt: skip
    import torch

    from tj_dist.ray_session import RaySession, RaySessionConfig
    from tj_hybrid import build_ppo, load_config, prepare_rl, scenario_data_dir
    from tj_rl.rllib.module import SHARED_POLICY

    torch.set_num_threads(1)  # one env runner = one core, as in training
    cfg = load_config(profile=profile, overrides=[*overrides, "phase2.env_runners=0"]).config
    setup = prepare_rl(cfg, agent_dir=agent, data_dir=scenario_data_dir(cfg),
                       temp_dir=work / "episodes")  # fmt: skip
    rows = []
    with RaySession(RaySessionConfig(num_cpus=1, budget=4 * 2**30, temp_dir=work / "ray")):
        algo = build_ppo(cfg, setup, agent).build_algo()
        try:
            runner = algo.env_runner
            module = runner.module[SHARED_POLICY]
            runner.sample(num_timesteps=64)  # warm-up: env started, connectors built
            lights = len(runner.env.envs[0].unwrapped.possible_agents)
            for r in range(rounds):
                env_s, observations = run_in_child(_bare_env, setup, decisions, 100 + r)
                fwd_s = _forward_s(module, observations, lights * cfg.phase2.sims_per_runner)
                t0 = time.perf_counter()
                episodes = runner.sample(num_timesteps=decisions)
                rl_s = (time.perf_counter() - t0) / sum(len(e) for e in episodes)
                rows.append({"bare_env": env_s * 1e3, "forward": fwd_s * 1e3, "rllib": rl_s * 1e3,
                             "rllib_share": 100 * (rl_s - env_s - fwd_s) / rl_s})  # fmt: skip
        finally:
            algo.stop()
    return rows


def sampling_rounds(profile: str | None, sets: Sequence[str], agent: Path | None, work: Path,
                    decisions: int, rounds: int) -> list[dict[str, float]]:  # fmt: skip
    """``rounds`` measurements of ``decisions`` decisions each, with phase 2's config from
    ``profile`` and ``sets`` (the runs' ``--set`` values) and the GNN of the phase-1 ``agent``
    (``None``: random): per round ``bare_env``, ``forward``, ``rllib`` (ms per decision) and
    ``rllib_share`` (%)."""
    work.mkdir(parents=True, exist_ok=True)
    return run_in_child(_measure, profile, list(sets), agent, work, decisions, rounds)
