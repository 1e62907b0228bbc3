"""``TrafficCallbacks`` on RLlib's own episode and metrics objects, fed by real SUMO episodes (no
Ray cluster: the callbacks run where RLlib's env runner would call them). The PPO run that reports
the same keys through ``result["env_runners"]`` is in ``test_rllib_faults.py``."""

from __future__ import annotations

import numpy as np
import pytest
from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

from tj_rl.env import COST_NAMES, EnvConfig, Scenario, TrafficSignalCore
from tj_rl.rllib.callbacks import (
    COSTS_KEY,
    DIED_KEY,
    REASONS_KEY,
    VETOES_KEY,
    VETOES_LIFETIME_KEY,
    WEIGHTED_COST_KEY,
    TrafficCallbacks,
    sumo_died_reasons,
)


def _run(env: TrafficSignalCore, logger: MetricsLogger, *, seed: int, cut_every: int = 0):
    """One episode through the callbacks as RLlib's env runner drives them (start after reset, a
    step callback after every step, end after the last; the episode cut into a new chunk every
    ``cut_every`` steps, as ``sample()`` does between calls). Random actions from the whole action
    space, so the shield vetoes some. Returns the env's infos of every step."""
    callbacks = TrafficCallbacks()
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    episode = MultiAgentEpisode()
    episode.add_env_reset(observations=obs, infos=infos)
    callbacks.on_episode_start(episode=episode, env_index=0, metrics_logger=logger)
    steps = []
    while True:
        actions = {a: int(rng.integers(env.action_spaces[a].n)) for a in obs}
        obs, rewards, terms, truncs, infos = env.step(actions)
        steps.append(infos)
        episode.add_env_step(
            observations=obs,
            actions=actions,
            rewards=rewards,
            infos=infos,
            terminateds=terms,
            truncateds=truncs,
        )
        callbacks.on_episode_step(episode=episode, env_index=0, metrics_logger=logger)
        if truncs["__all__"]:
            break
        if cut_every and len(steps) % cut_every == 0:
            episode = episode.cut(len_lookback_buffer=1)
    callbacks.on_episode_end(episode=episode, env_index=0, metrics_logger=logger)
    return steps


def test_episode_sums_equal_the_env_infos_across_chunks(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    logger = MetricsLogger()
    try:
        steps = _run(env, logger, seed=3, cut_every=5)  # 12 steps in 3 chunks
    finally:
        env.close()
    assert len(steps) == 12 and steps[-1]["A0"]["truncated_reason"] == "time_limit"
    costs = sum(np.asarray(i["costs"], np.float64) for s in steps for i in s.values())
    vetoes = sum(int(i["vetoed"]) for s in steps for i in s.values())
    assert vetoes > 0  # random actions: some are vetoed, so the count is a real check
    logged = logger.peek(COSTS_KEY)
    assert sorted(logged) == sorted(COST_NAMES)
    np.testing.assert_allclose([logged[n] for n in COST_NAMES], costs, rtol=1e-6)
    assert logged["veto"] == vetoes
    weighted = sum(i["cost"] for s in steps for i in s.values())
    assert logger.peek(WEIGHTED_COST_KEY) == pytest.approx(weighted)
    assert logger.peek(VETOES_KEY) == vetoes and logger.peek(VETOES_LIFETIME_KEY) == vetoes
    assert logger.peek(DIED_KEY) == 0 and REASONS_KEY not in logger


def test_a_sumo_death_is_counted_once_with_its_reason(
    default_sc: Scenario, tmp_path, late_bad_route
) -> None:
    """Two episodes of one env: SUMO fails mid-run in the first, the second runs to its end."""
    env = TrafficSignalCore(
        EnvConfig(metrics=False), scenario=default_sc.replace(
            route_files=(*default_sc.route_files, late_bad_route(tmp_path)),
            extra_args=("--route-steps", "10"),  # SUMO loads the bad route mid-episode
        ),
    )
    logger = MetricsLogger()
    try:
        died = _run(env, logger, seed=0, cut_every=3)
        env.scenario = default_sc
        ended = _run(env, logger, seed=0)
    finally:
        env.close()
    assert died[-1]["A0"]["truncated_reason"].startswith("sumo_died: libsumo")
    assert ended[-1]["A0"]["truncated_reason"] == "time_limit"
    assert logger.peek(DIED_KEY) == 1
    (reason,) = logger.peek(REASONS_KEY)
    assert reason.startswith("sumo_died: libsumo") and "no_such_edge" in reason
    vetoes = sum(int(i["vetoed"]) for s in (*died, *ended) for i in s.values())
    assert logger.peek(VETOES_LIFETIME_KEY) == vetoes
    assert logger.peek(VETOES_KEY) == pytest.approx(vetoes / 2)  # mean of the two episodes


def test_sumo_died_reasons_is_always_a_list() -> None:
    """RLlib gives a one-item list of logged items as the item itself, none as [] or NaN."""
    one = "sumo_died: traci: connection closed"
    assert sumo_died_reasons({"env_runners": {REASONS_KEY: one}}) == [one]
    assert sumo_died_reasons({"env_runners": {REASONS_KEY: [one, "b"]}}) == [one, "b"]
    assert sumo_died_reasons({"env_runners": {REASONS_KEY: []}}) == []
    assert sumo_died_reasons({"env_runners": {REASONS_KEY: float("nan")}}) == []
    assert sumo_died_reasons({"env_runners": {}}) == [] == sumo_died_reasons({})


def test_callbacks_name_is_lazy(fresh_python) -> None:
    """``import tj_rl.rllib`` does not load Ray; ``tj_rl.rllib.TrafficCallbacks`` loads it on
    first use."""
    code = (
        "import sys\n"
        "import tj_rl.rllib\n"
        "before = 'ray' in sys.modules\n"
        "from tj_rl.rllib.callbacks import TrafficCallbacks\n"
        "assert tj_rl.rllib.TrafficCallbacks is TrafficCallbacks\n"
        "print(before, 'ray' in sys.modules)\n"
    )
    assert fresh_python(code, timeout=180) == "False True"
