"""Seeded PPO on a multi-light net repeats: two runs in fresh processes with the same seed and
hash seed give bit-identical weights after every iteration, with one simulation per env runner
and with several (``ParallelEnvRunner``); another seed gives other weights (the check can fail).

Each run is its own interpreter (``PYTHONHASHSEED`` fixed, one torch thread as phase 2 runs), as a
phase-2 child process is. The run is short; the divergence the issue tracker saw on the grid
started at iteration 17 of phase 2 with two torch threads: the benchmark notes in tj-hybrid's
README say what was run for long runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tj_rl.env import Scenario

_RUN = r"""
import hashlib, json, sys
import numpy as np, ray, torch
from ray.rllib.algorithms.ppo import PPOConfig
from tj_rl.env import Scenario
from tj_rl.rllib import (GraphModuleConfig, ParallelEnvRunner, ProcessTrafficSignalEnv,
                         TrafficSignalEnv, shared_module_spec, shared_policy_mapping)
from tj_rl.rllib.module import SHARED_POLICY

sumocfg, end, seed, sims, iters = sys.argv[1], float(sys.argv[2]), *map(int, sys.argv[3:6])
torch.set_num_threads(1)
env_config = {"scenario": Scenario.from_sumocfg(sumocfg).replace(end=end), "metrics": False,
              "pad_to_scenario": True, "reward": "queue", "reward_scale": 0.02}
ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
config = (PPOConfig()
          .environment(ProcessTrafficSignalEnv if sims > 1 else TrafficSignalEnv,
                       env_config=env_config)
          .env_runners(num_env_runners=0, num_envs_per_env_runner=sims,
                       **({"env_runner_cls": ParallelEnvRunner} if sims > 1 else {}))
          .multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)
          .rl_module(rl_module_spec=shared_module_spec(GraphModuleConfig()))
          .training(train_batch_size_per_learner=96, minibatch_size=48, num_epochs=2, lr=1e-3)
          .debugging(seed=seed))
algo = config.build_algo()
digests = []
for _ in range(iters):
    algo.train()
    weights = algo.learner_group.get_weights([SHARED_POLICY])[SHARED_POLICY]
    h = hashlib.sha256()
    for k in sorted(weights):
        h.update(np.ascontiguousarray(weights[k]).tobytes())
    digests.append(h.hexdigest())
algo.stop()
ray.shutdown()
print("DIGESTS " + json.dumps(digests))
"""


def _digests(grid: Scenario, seed: int, sims: int, iters: int = 3) -> list[str]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"}
    assert grid.sumocfg is not None
    out = subprocess.run(
        [sys.executable, "-c", _RUN, str(grid.sumocfg), str(grid.end), str(seed), str(sims),
         str(iters)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    line = next(x for x in out.stdout.splitlines() if x.startswith("DIGESTS "))
    return json.loads(line.removeprefix("DIGESTS "))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("sims", [1, 2])
def test_seeded_ppo_on_the_grid_repeats_bit_for_bit(grid_sc: Scenario, sims: int) -> None:
    first = _digests(grid_sc, seed=7, sims=sims)
    assert len(set(first)) == len(first)  # every iteration changed the weights
    assert _digests(grid_sc, seed=7, sims=sims) == first
    if sims == 1:  # another seed, another policy: the digests can differ
        assert _digests(grid_sc, seed=8, sims=sims, iters=1)[0] != first[0]


def test_the_grid_has_several_lights(grid_sc: Scenario) -> None:
    """The check above is about a multi-light net."""
    from tj_rl.env import TrafficSignalCore

    core = TrafficSignalCore(scenario=grid_sc)
    try:
        assert len(core.possible_agents) == 4
    finally:
        core.close()
    assert Path(grid_sc.sumocfg).is_file()
