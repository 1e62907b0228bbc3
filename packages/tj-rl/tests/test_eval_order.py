"""Evaluation order: a held-out row depends only on (policy, traffic, SUMO seed, env settings),
never on the episodes that ran before it in the process (issue 27, item 6).

Given the training env config (``route_files``: the demand pool an env draws a file from per
episode, by its episode count), ``evaluate_heldout`` used to run each episode on the pool file of
that count instead of the held-out file its row names: the same baseline on the same held-out
file and SUMO seed gave other numbers after an ``AgentPolicy`` episode. Real SUMO, a tiny agent
with untrained weights, 2-minute episodes."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from tj_models import TrafficAgent, TrafficAgentConfig
from tj_rl.control.agent_policy import AgentPolicy
from tj_rl.control.fit import check_spaces
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.eval.heldout import HELDOUT_METRICS, evaluate_heldout
from tj_rl.traffic.demand import DemandPool

# what a row says about its episode besides who ran it and when
_OUTCOME = ("routes", "seed", "window", "status", "return", *HELDOUT_METRICS)


@pytest.fixture(scope="module")
def traffic(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario):
    """(training config with a 3-file pool, one held-out route file)."""
    pool = DemandPool.for_scenario(default_sc, tmp_path_factory.mktemp("pool"), seeds=(1, 2, 3),
                                   rates=(900,))  # fmt: skip
    held, _heavy = pool.held_out((10,))
    config = EnvConfig(route_files=tuple(str(f) for f in pool.build()))
    return config, held.files[0]


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario) -> Path:
    """A tiny tj-models agent that fits the default light (untrained weights)."""
    core = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    light = core.possible_agents[0]
    greens, lanes = check_spaces(core.observation_spaces[light], core.action_spaces[light])
    core.close()
    base = TrafficAgentConfig.preset("tiny", max_actions=greens)
    torch.manual_seed(0)
    config = replace(base, gnn=replace(base.gnn, num_movements=lanes))
    return TrafficAgent(config).save(tmp_path_factory.mktemp("agent") / "agent")


def _outcome(row: dict) -> dict:
    return {k: row[k] for k in _OUTCOME}


def test_a_baseline_gives_the_same_row_before_and_after_an_agent_episode(
    traffic, agent: Path, default_sc: Scenario
) -> None:
    config, held = traffic
    policies = {"before": "max-pressure", "agent": AgentPolicy(agent), "after": "max-pressure"}
    table = evaluate_heldout(default_sc, policies, [held], seeds=[7], config=config)
    rows = {r["policy"]: r for r in table.rows}
    assert [r["policy"] for r in table.rows] == ["before", "agent", "after"]  # one env, in order
    assert _outcome(rows["before"]) == _outcome(rows["after"])
    # and each is the episode its row names: the held-out file, whatever the config's pool
    alone = evaluate_heldout(default_sc, ["max-pressure"], [held], seeds=[7],
                             config=replace(config, route_files=()))  # fmt: skip
    assert _outcome(rows["after"]) == _outcome(alone.rows[0])
    assert rows["after"]["routes"] == held.name and rows["after"]["throughput"] > 0
