"""The lane-MLP baseline module and ``ModulePolicy``: masks honoured exactly, padded lane rows
ignored, and the policy runs in ``evaluate`` on the real env."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ray.rllib.core.columns import Columns

from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.eval import evaluate
from tj_rl.rllib import LaneMLPConfig, ModulePolicy
from tj_rl.rllib.mlp import LaneMLPModule, lane_mlp_spec
from tj_rl.rllib.module import SHARED_POLICY


@pytest.fixture(scope="module")
def spaces(default_sc: Scenario):
    env = TrafficSignalCore(EnvConfig(max_phases=6, max_lanes=24, metrics=False),
                            scenario=default_sc)  # fmt: skip
    return env.observation_spaces["A0"], env.action_spaces["A0"]


def _module(spaces) -> LaneMLPModule:
    torch.manual_seed(0)
    spec = lane_mlp_spec().rl_module_specs[SHARED_POLICY]
    spec.observation_space, spec.action_space = spaces
    return spec.build()


def _batch(space, n: int, seed: int) -> dict[str, torch.Tensor]:
    space.seed(seed)
    obs = [space.sample() for _ in range(n)]
    return {k: torch.as_tensor(np.stack([o[k] for o in obs])) for k in obs[0]}


def test_masked_actions_have_zero_probability_and_values_have_batch_shape(spaces) -> None:
    module = _module(spaces)
    batch = _batch(spaces[0], 16, 3)
    batch["action_mask"][:, 0] = 1  # at least one allowed action per row
    out = module.forward_train({Columns.OBS: batch})
    probs = torch.softmax(out[Columns.ACTION_DIST_INPUTS], -1)
    assert torch.all(probs[~batch["action_mask"].bool()] == 0)
    assert module.compute_values({Columns.OBS: batch}).shape == (16,)


def test_padded_lane_rows_are_ignored(spaces) -> None:
    module = _module(spaces)
    batch = _batch(spaces[0], 4, 5)
    batch["action_mask"][:, 0] = 1
    batch["lane_mask"][:, 20:] = 0
    a = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    batch["lanes"][:, 20:] += 50.0
    b = module.forward_inference({Columns.OBS: batch})[Columns.ACTION_DIST_INPUTS]
    torch.testing.assert_close(a, b)


def test_bad_config() -> None:
    with pytest.raises(ValueError, match="hidden"):
        LaneMLPConfig(hidden=(64, 0))


def test_module_policy_runs_an_episode_with_feasible_actions(default_sc: Scenario, spaces) -> None:
    policy = ModulePolicy(_module(spaces).eval())
    table = evaluate(default_sc, policy, seeds=[1], config=EnvConfig(max_phases=6, max_lanes=24))
    row = table.rows[0]
    assert row["cost_veto"] == 0  # never asked for a masked green
    assert np.isfinite(row["avg_delay"])
