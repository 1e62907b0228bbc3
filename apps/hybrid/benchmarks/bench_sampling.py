"""Phase 2's sampling speed: env decisions per second through RLlib with the graph module against
the bare env with a random policy, the time split into env, module forward and RLlib's own
overhead (connectors, episode bookkeeping, action sampling), median of N rounds.

- bare env: ``TrafficSignalCore`` with phase 2's env config, random feasible actions;
- module forward: the graph module's ``forward_exploration`` on one decision's observation, timed
  over the observations the bare env produced;
- RLlib: the local env runner of a PPO algorithm built like phase 2's (``num_env_runners=0``),
  ``env_runner.sample(num_timesteps=N)`` with the module in the loop.

RLlib's own share = (RLlib time - env time - forward time) / RLlib time.

    uv run python apps/hybrid/benchmarks/bench_sampling.py --rounds 3 --decisions 720
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import statistics
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np


def bare_env(setup, decisions: int, seed: int) -> tuple[float, list[dict]]:
    """In a process of its own (libsumo runs one simulation per process: the local env runner's
    is open in this one)."""
    import torch

    from tj_rl import TrafficSignalCore

    torch.set_num_threads(1)
    env = TrafficSignalCore(setup.env, scenario=setup.scenario)
    rng = np.random.default_rng(seed)
    kept: list[dict] = []
    try:
        obs, _ = env.reset(seed=seed)
        t0, n = time.perf_counter(), 0
        while n < decisions:
            actions = {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}
            obs, _, _, trunc, _ = env.step(actions)
            n += len(actions)
            if len(kept) < 200:
                kept += [dict(o) for o in obs.values()]
            if trunc["__all__"]:
                obs, _ = env.reset(seed=seed + n)
        return (time.perf_counter() - t0) / n, kept
    finally:
        env.close()


def forward_time(module, observations: list[dict]) -> float:
    import torch
    from ray.rllib.core.columns import Columns

    batches = [{k: torch.from_numpy(np.asarray(v)[None]) for k, v in o.items()} for o in observations]
    with torch.no_grad():
        module.forward_exploration({Columns.OBS: batches[0]})  # warm-up
        t0 = time.perf_counter()
        for b in batches:
            module.forward_exploration({Columns.OBS: b})
    return (time.perf_counter() - t0) / len(batches)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--decisions", type=int, default=720)
    ap.add_argument("--agent", type=Path, help="a phase-1 agent dir (default: random GNN)")
    args = ap.parse_args()

    import torch

    from tj_hybrid.config import load_config
    from tj_hybrid.phase2.setup import prepare
    from tj_hybrid.phase2.train import build_ppo
    from tj_rl.ray_session import RaySession, RaySessionConfig
    from tj_rl.rllib_module import SHARED_POLICY

    torch.set_num_threads(1)  # one env runner = one core, as in training
    cfg = load_config(profile="smoke", overrides=["phase2.env_runners=0"]).config
    data = Path(tempfile.mkdtemp(prefix="tj-bench-sampling-"))
    setup = prepare(cfg, agent_dir=args.agent, data_dir=data)
    rows = []
    with RaySession(RaySessionConfig(num_cpus=1, budget=4 * 2**30, temp_dir=data / "ray")):
        algo = build_ppo(cfg, setup, args.agent).build_algo()
        runner = algo.env_runner
        module = runner.module[SHARED_POLICY]
        runner.sample(num_timesteps=64)  # warm-up: env started, connectors built
        for r in range(args.rounds):
            with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
                env_s, observations = pool.submit(bare_env, setup, args.decisions, 100 + r).result()
            fwd_s = forward_time(module, observations)
            t0 = time.perf_counter()
            episodes = runner.sample(num_timesteps=args.decisions)
            rl_s = (time.perf_counter() - t0) / sum(len(e) for e in episodes)
            rows.append({"bare_env_ms": env_s * 1e3, "forward_ms": fwd_s * 1e3, "rllib_ms": rl_s * 1e3,
                         "rllib_own_share": (rl_s - env_s - fwd_s) / rl_s})  # fmt: skip
        algo.stop()
    machine = f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs"
    print(f"Machine: {machine}; {args.rounds} rounds of {args.decisions} decisions; median [min, max]\n")
    print("| per decision | median | min | max |\n|---|---:|---:|---:|")
    for k in rows[0]:
        vals = [row[k] for row in rows]
        print(f"| {k} | {statistics.median(vals):.3f} | {min(vals):.3f} | {max(vals):.3f} |")


if __name__ == "__main__":
    main()
