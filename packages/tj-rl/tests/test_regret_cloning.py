"""Cost-sensitive cloning (AggreVaTe): the look-ahead teacher's regrets are recorded per light and
step, a decision weighs what a wrong green costs there (0 where every green costs the same, 1
where nothing is known), and a clone follows the heavy decisions when labels conflict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tj_rl.control import LookaheadPolicy
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.imitation import CloneConfig, Demonstrations, clone, record_demonstrations
from tj_rl.rllib.module import GraphModuleConfig, graph_module_spec

ENV = EnvConfig(metrics=False, pad_to_scenario=True, reward="queue", reward_scale=0.02)


def _demos(masks, actions, regrets=None) -> Demonstrations:
    masks = np.asarray(masks, np.int8)
    return Demonstrations(obs={"action_mask": masks}, actions=np.asarray(actions),
                          returns=np.zeros(len(actions), np.float32),
                          regrets=None if regrets is None else np.asarray(regrets, np.float32))  # fmt: skip


def test_weights_from_regrets() -> None:
    nan = np.nan
    d = _demos(
        masks=[[1, 1, 0], [1, 1, 1], [1, 1, 0], [1, 1, 1]],
        actions=[0, 2, 1, 0],
        regrets=[[0, 4, nan], [2, 6, 0], [nan, nan, nan], [0, 0, 0]],
    )
    w = d.weights()
    # raw: 4 (the other green), mean(2, 6) = 4, unknown -> 1, all alike -> 0; known mean = 8/3
    np.testing.assert_allclose(w, [4 / (8 / 3), 4 / (8 / 3), 1.0, 0.0], rtol=1e-6)
    assert np.all(_demos([[1, 1]], [0]).weights() == 1.0)  # no regrets: every decision alike


def test_regrets_survive_concatenation_and_are_checked() -> None:
    a = _demos([[1, 1]], [0], [[0, 3]])
    b = _demos([[1, 1]], [1])  # a teacher without regrets
    both = a + b
    assert both.regrets is not None and both.regrets.shape == (2, 2)
    assert both.regrets[0, 1] == 3 and np.isnan(both.regrets[1]).all()
    assert (b + b).regrets is None
    with pytest.raises(ValueError, match="regrets"):
        _demos([[1, 1]], [0], [[0, 1, 2]])


def test_the_lookahead_teacher_records_its_regrets(grid_sc: Scenario) -> None:
    env = TrafficSignalCore(ENV, scenario=grid_sc.replace(end=120.0))
    try:
        demos = record_demonstrations(env, LookaheadPolicy(horizon_s=15.0), [1])
    finally:
        env.close()
    reg = demos.regrets
    assert reg is not None and reg.shape == demos.obs["action_mask"].shape
    known = np.isfinite(reg).any(axis=1)
    assert known.any()  # some decisions had a choice
    rows = np.flatnonzero(known)
    # the teacher takes a best green: its own regret is 0, the others >= 0, infeasible unknown
    assert np.all(reg[rows, demos.actions[rows]] == 0)
    assert np.all(np.nan_to_num(reg[rows], nan=0.0) >= 0)
    assert np.isnan(reg[rows][demos.obs["action_mask"][rows] == 0]).all()


@pytest.mark.parametrize("weighting, expected", [("regret", 0), ("none", 1)])
def test_a_clone_follows_the_heavy_decisions(grid_sc: Scenario, weighting: str,
                                             expected: int) -> None:  # fmt: skip
    """One real observation repeated: 1/4 of the copies say green 0 at a high regret, 3/4 say
    green 1 where it hardly matters. Weighted, the clone picks 0; unweighted, the majority."""
    env = TrafficSignalCore(ENV, scenario=grid_sc.replace(end=60.0))
    try:
        obs, _ = env.reset(seed=1)
        light = env.possible_agents[0]
        spaces = env.observation_spaces[light], env.action_spaces[light]
    finally:
        env.close()
    one = {k: np.asarray(v) for k, v in obs[light].items()}
    one["action_mask"] = np.zeros_like(one["action_mask"])
    one["action_mask"][:2] = 1
    n = 64
    labels = np.array([0] * (n // 4) + [1] * (3 * n // 4))
    regrets = np.full((n, len(one["action_mask"])), np.nan, np.float32)
    regrets[labels == 0, :2] = [0.0, 20.0]
    regrets[labels == 1, :2] = [0.1, 0.0]
    demos = Demonstrations(obs={k: np.stack([v] * n) for k, v in one.items()}, actions=labels,
                           returns=np.zeros(n, np.float32), regrets=regrets)  # fmt: skip
    torch.manual_seed(0)
    module = graph_module_spec(GraphModuleConfig(), observation_space=spaces[0],
                               action_space=spaces[1]).build()  # fmt: skip
    clone(module.actor, [module.controller], demos,
          CloneConfig(epochs=40, patience=40, lr=3e-3, weighting=weighting))  # fmt: skip
    with torch.no_grad():
        batch = {k: torch.from_numpy(v[:1]) for k, v in demos.obs.items()}
        assert int(module.actor.forward(batch).logits.argmax(-1)) == expected


def test_clone_config_weighting_is_checked() -> None:
    with pytest.raises(ValueError, match="weighting"):
        CloneConfig(weighting="advantage")  # type: ignore[arg-type]
