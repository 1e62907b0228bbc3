"""Gridlock (``tj_rl.env.gridlock``): the detector's rules on hand-made step sequences, and on real
SUMO a starved 2x2 grid that gridlocks (terminated, ``info["failure"]``, penalised, metrics still
out) where max-occupancy on the same traffic does not; terminated travels through the child-process
env and the parallel vector env; evaluation stops on it; GAE does not bootstrap through it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sumolib

from tj_rl.control.baselines import make_policy
from tj_rl.env.builder import SyntheticSpec, build_scenario
from tj_rl.env.config import EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.gridlock import GRIDLOCK, GridlockConfig, GridlockDetector
from tj_rl.env.scenario import Scenario
from tj_rl.eval.episodes import evaluate, run_episode
from tj_rl.rollout.advantages import gae

# ------------------------------------------------------------------ the detector on hand-made steps


def _counters(arrived: float = 0.0, teleports: float = 0.0) -> dict[str, float]:
    return {"inserted": 100.0 + arrived, "running": 100.0, "teleports": teleports}


def _feed(config: GridlockConfig | None, steps: list[tuple[float, float, float]],
          teleports: list[float] | None = None) -> list[bool]:  # fmt: skip
    """Decision steps every 10 s of (queue, cumulative arrivals, reward); what update said."""
    det = GridlockDetector(config, delta_time=10.0)
    det.reset(0.0, _counters())
    tele = teleports or [0.0] * len(steps)
    return [
        det.update(10.0 * (k + 1), q, _counters(a, tele[k]), {"A": r, "B": 2 * r})
        for k, (q, a, r) in enumerate(steps)
    ]


def test_a_queue_that_does_not_fall_and_no_outflow_is_stuck_after_the_window() -> None:
    cfg = GridlockConfig(window_s=60.0, min_queue=5.0, teleports=None)
    fired = _feed(cfg, [(10.0 + k, 0.0, -1.0) for k in range(10)])
    # rows from t=10 on; the window [t-60, t] is covered from t=70 (row 7)
    assert fired == [False] * 6 + [True] * 4


def test_outflow_falling_queues_small_queues_and_no_config_are_not_stuck() -> None:
    cfg = GridlockConfig(window_s=60.0, min_queue=5.0, teleports=None)
    flowing = [(20.0, 3.0 * k, -1.0) for k in range(10)]  # 18 arrivals a window > 0.1 x 20
    assert not any(_feed(cfg, flowing))
    draining = [(40.0 - 2.0 * k, 0.0, -1.0) for k in range(12)]  # falls 30% in every window
    assert not any(_feed(cfg, draining))
    small = [(4.0, 0.0, -1.0)] * 10  # below min_queue: nothing to be stuck
    assert not any(_feed(cfg, small))
    assert not any(_feed(None, [(50.0, 0.0, -1.0)] * 30, [float(k) for k in range(30)]))
    # a 10% dip is within queue_drop, 1 arrival within outflow_ratio x 18; 2 are not
    assert _feed(cfg, [(20.0 - 2.0 * (k == 3), 1.0 * (k > 4), -1.0) for k in range(8)])[-1]
    assert not _feed(cfg, [(20.0 - 2.0 * (k == 3), 2.0 * (k > 4), -1.0) for k in range(8)])[-1]


def test_teleports_within_the_window_fire_at_once() -> None:
    cfg = GridlockConfig(window_s=60.0, teleports=2)
    steps = [(0.0, 5.0 * k, 0.0) for k in range(12)]
    # teleports in (30, 40] and (80, 90]: both inside the window [30, 90] (the row of t=30 holds
    # the count until 30); at t=100 the first one has left the window
    assert (
        _feed(cfg, steps, [0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2, 2])
        == [False] * 8 + [True] + [False] * 3
    )
    # two teleports more than window_s apart (t=20, t=90) are not a gridlock
    assert not any(_feed(cfg, steps, [0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2]))


def test_held_penalty_is_the_worst_reward_of_the_window_for_every_decision_left() -> None:
    det = GridlockDetector(GridlockConfig(window_s=30.0, teleports=1), delta_time=10.0)
    det.reset(0.0, _counters())
    for k, r in enumerate([-50.0, -3.0, -5.0, -4.0, 2.0]):
        fired = det.update(10.0 * (k + 1), 0.0, _counters(teleports=float(k == 4)),
                           {"A": r, "B": -r})  # fmt: skip
    assert fired and det.detail == {"rule": "teleports", "since": 20.0, "queue": 0.0,
                                    "arrivals": 0.0, "teleports": 1.0}  # fmt: skip
    # window rows t=20..50: A's worst -5, B's worst -2 (its -50 fell out); 95 s left: 10 decisions
    got = det.penalise({"A": 2.0, "B": -2.0}, seconds_left=95.0, reward_scale=0.5)
    assert got == {"A": 2.0 - 50.0, "B": -2.0 - 20.0}
    fixed = GridlockDetector(GridlockConfig(teleports=1, penalty=-40.0), delta_time=10.0)
    fixed.reset(0.0, _counters())
    assert fixed.update(10.0, 0.0, _counters(teleports=1.0), {"A": -1.0})
    assert fixed.penalise({"A": -1.0}, seconds_left=500.0, reward_scale=0.5) == {"A": -21.0}


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"window_s": 0.0}, "window_s"), ({"min_queue": 0.5}, "min_queue"),
     ({"queue_drop": 1.0}, "queue_drop"), ({"outflow_ratio": -0.1}, "outflow_ratio"),
     ({"teleports": 0}, "teleports"), ({"teleports": True}, "teleports"),
     ({"penalty": "queue"}, "penalty"), ({"penalty": math.nan}, "penalty")],
)  # fmt: skip
def test_bad_configs_are_rejected(kwargs, match) -> None:
    with pytest.raises(ValueError, match=match):
        GridlockConfig(**kwargs)


def test_env_config_types_a_mapping_and_is_off_by_default() -> None:
    assert EnvConfig().gridlock is None
    assert EnvConfig(gridlock={"window_s": 120.0}).gridlock == GridlockConfig(window_s=120.0)
    with pytest.raises(ValueError, match="gridlock"):
        EnvConfig(gridlock=3)


# ------------------------------------------------------------------ real SUMO: a starved 2x2 grid


@pytest.fixture(scope="module")
def starved_grid(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """A 2x2 grid (one lane, 2 greens per light) with 5 minutes of dense demand; SUMO teleports
    after 90 s in front of a junction (300 s by default: the same rule, sooner)."""
    spec = SyntheticSpec(kind="grid", rows=2, cols=2, lanes=1, turn_lanes=0, edge_length=150.0,
                         attach_length=100.0, duration=300.0, rates=(1500.0,), seed=3,
                         name="grid")  # fmt: skip
    sc = build_scenario(spec, tmp_path_factory.mktemp("starved"))
    return sc.replace(end=300.0, extra_args=("--time-to-teleport", "90"))


class HoldFirstGreen:
    """Requests green 0 at every light, always: with a long max green the cross street starves."""

    def reset(self, env) -> None:
        pass

    def compute_actions(self, obs, infos) -> dict[str, int]:
        return dict.fromkeys(obs, 0)


_STARVE = {"max_green": 1000.0, "reward": "queue", "metrics": True}


def _episode(sc: Scenario, policy, gridlock) -> tuple[list, dict, dict, dict]:
    """Rewards per step, and the last step's terminateds, truncateds and one info."""
    env = TrafficSignalCore(EnvConfig(**_STARVE, gridlock=gridlock), scenario=sc)
    try:
        obs, infos = env.reset(seed=1)
        policy.reset(env)
        rewards = []
        while True:
            obs, rew, term, trunc, infos = env.step(policy.compute_actions(obs, infos))
            rewards.append(rew)
            if term["__all__"] or trunc["__all__"]:
                return rewards, term, trunc, next(iter(infos.values()))
    finally:
        env.close()


def test_a_starved_grid_ends_as_a_penalised_terminal_failure(starved_grid: Scenario) -> None:
    unpenalised, term, trunc, info = _episode(starved_grid, HoldFirstGreen(),
                                              GridlockConfig(penalty=0.0))  # fmt: skip
    assert term == dict.fromkeys(term, True) and trunc == dict.fromkeys(trunc, False)
    assert info["failure"] == GRIDLOCK and "truncated_reason" not in info
    assert info[GRIDLOCK]["rule"] == "teleports" and info[GRIDLOCK]["teleports"] >= 1
    t_end = info["sim_time"]
    assert t_end < starved_grid.end
    assert info["episode"]["throughput"] > 0  # SUMO's metrics of the cut episode still come out
    held, *_ = _episode(starved_grid, HoldFirstGreen(), GridlockConfig())
    assert held[:-1] == unpenalised[:-1]
    left = math.ceil((starved_grid.end - t_end) / 10.0)  # decisions the episode had left
    for light, r in held[-1].items():  # all steps are inside the 180 s window
        worst = min(step[light] for step in unpenalised)
        assert r == pytest.approx(unpenalised[-1][light] + min(worst, 0.0) * left)
        assert r < unpenalised[-1][light]


def test_max_occupancy_on_the_same_traffic_does_not_gridlock(starved_grid: Scenario) -> None:
    _, term, trunc, info = _episode(starved_grid, make_policy("max-occupancy"), GridlockConfig())
    assert not term["__all__"] and trunc["__all__"]
    assert info["truncated_reason"] == "time_limit" and "failure" not in info


def test_closed_exits_lock_the_grid_and_the_stuck_rule_fires(starved_grid: Scenario) -> None:
    """Every exit edge crawls at 0.05 m/s (a closure downstream): queues spill back over the
    junctions and nothing leaves, whatever the lights do. Teleports are off for this run."""
    sc = starved_grid.replace(extra_args=("--time-to-teleport", "-1"))
    net = sumolib.net.readNet(str(sc.net_file))
    exits = [e.getID() for e in net.getEdges() if not e.getOutgoing()]
    env = TrafficSignalCore(EnvConfig(gridlock=GridlockConfig(), metrics=False), scenario=sc)
    pol = make_policy("max-occupancy")
    try:
        obs, infos = env.reset(seed=1)
        for edge in exits:
            env._session.backend.conn.edge.setMaxSpeed(edge, 0.05)  # the test's road closure
        pol.reset(env)
        while True:
            obs, _, term, trunc, infos = env.step(pol.compute_actions(obs, infos))
            if term["__all__"] or trunc["__all__"]:
                break
    finally:
        env.close()
    detail = next(iter(infos.values()))[GRIDLOCK]
    assert term["__all__"] and detail["rule"] == "stuck" and detail["arrivals"] == 0
    assert detail["queue"] >= 10 and env.sim_time < sc.end


def test_run_episode_stops_on_terminated_and_evaluate_runs_to_the_end(
    starved_grid: Scenario,
) -> None:
    env = TrafficSignalCore(EnvConfig(**_STARVE, gridlock=GridlockConfig()), scenario=starved_grid)
    try:
        row = run_episode(env, HoldFirstGreen(), 0, 1)
    finally:
        env.close()
    assert row["status"] == GRIDLOCK and math.isfinite(row["avg_delay"])
    # evaluate() runs every episode to its end: a gridlock's delay is the result, not a cut
    config = EnvConfig(**_STARVE, gridlock=GridlockConfig())
    (full,) = evaluate(starved_grid, HoldFirstGreen(), 1, seeds=[1], config=config).rows
    assert full["status"] == "time_limit" and full["avg_delay"] > row["avg_delay"]


def test_gae_does_not_bootstrap_through_the_gridlock(starved_grid: Scenario) -> None:
    rewards, *_ = _episode(starved_grid, HoldFirstGreen(), GridlockConfig())
    r = np.array([[step[a] for a in sorted(step)] for step in rewards])
    end = np.zeros(r.shape, bool)
    end[-1] = True
    values = np.full(r.shape, -3.0)
    big = np.full(r.shape, 1e4)  # a bootstrap would show: the terminal's next value is huge
    _, ret = gae(r, values, big, terminated=end, episode_end=end, gamma=0.9, lam=0.95)
    np.testing.assert_allclose(ret[-1], r[-1], rtol=1e-6)  # the penalised reward, no future
    _, ret_trunc = gae(r, values, big, terminated=np.zeros_like(end), episode_end=end,
                       gamma=0.9, lam=0.95)  # fmt: skip
    np.testing.assert_allclose(ret_trunc[-1], r[-1] + 0.9 * 1e4, rtol=1e-6)


def test_terminated_travels_through_the_child_process_and_the_vector_env(
    starved_grid: Scenario,
) -> None:
    from gymnasium.wrappers import OrderEnforcing

    from tj_rl.rllib.env import ProcessTrafficSignalEnv
    from tj_rl.rllib.vector import ParallelVectorEnv

    cfg = {"scenario": starved_grid, **_STARVE, "metrics": False, "gridlock": {"window_s": 180.0}}
    vector = ParallelVectorEnv([OrderEnforcing(ProcessTrafficSignalEnv(cfg))], stream_base=0)
    try:
        obs, _ = vector.reset(seed=1)
        steps, terms, truncs = 0, [{"__all__": False}], [{"__all__": False}]
        while not (terms[0]["__all__"] or truncs[0]["__all__"]):
            obs, _, terms, truncs, infos = vector.step([dict.fromkeys(obs[0], 0)])
            steps += 1
        assert not truncs[0]["__all__"] and all(terms[0].values())
        assert infos[0]["A0"]["failure"] == GRIDLOCK and steps < 30  # before 300 s
        obs, _, terms, truncs, infos = vector.step([dict.fromkeys(obs[0], 0)])
        assert not terms[0]["__all__"] and infos[0]["A0"]["sim_time"] == 0.0  # auto-reset
    finally:
        vector.close()


def test_rllib_episode_is_terminated_and_the_callbacks_count_the_gridlock(
    starved_grid: Scenario,
) -> None:
    """RLlib's own episode object and ``TrafficCallbacks`` on the env's gridlocked episode: the
    episode is terminated (RLlib's GAE then uses no bootstrap value), counted in
    ``episodes_gridlock`` and not as a SUMO death."""
    from ray.rllib.env.multi_agent_episode import MultiAgentEpisode
    from ray.rllib.utils.metrics.metrics_logger import MetricsLogger

    from tj_rl.rllib.callbacks import DIED_KEY, GRIDLOCK_KEY, TrafficCallbacks

    env = TrafficSignalCore(EnvConfig(**_STARVE, gridlock=GridlockConfig()), scenario=starved_grid)
    callbacks, logger, episode = TrafficCallbacks(), MetricsLogger(), MultiAgentEpisode()
    try:
        obs, infos = env.reset(seed=1)
        episode.add_env_reset(observations=obs, infos=infos)
        callbacks.on_episode_start(episode=episode, env_index=0, metrics_logger=logger)
        while not episode.is_done:
            actions = dict.fromkeys(obs, 0)
            obs, rew, term, trunc, infos = env.step(actions)
            episode.add_env_step(observations=obs, actions=actions, rewards=rew, infos=infos,
                                 terminateds=term, truncateds=trunc)  # fmt: skip
            callbacks.on_episode_step(episode=episode, env_index=0, metrics_logger=logger)
        callbacks.on_episode_end(episode=episode, env_index=0, metrics_logger=logger)
    finally:
        env.close()
    assert episode.is_terminated and not episode.is_truncated
    assert all(episode.agent_episodes[a].is_terminated for a in env.possible_agents)
    assert logger.peek(GRIDLOCK_KEY) == 1 and logger.peek(DIED_KEY) == 0


def test_the_phase3_collector_ends_the_episode_at_the_gridlock_without_bootstrap(
    starved_grid: Scenario, tmp_path
) -> None:
    """A tiny random agent in ``RolloutCollector`` with a hair-trigger stuck rule (any queue that
    holds 30 s with few arrivals): the episode summary says gridlock, and the failing step's
    returns are its rewards (the next observation's value is not used)."""
    from dataclasses import replace

    import torch

    from tj_models import TrafficAgent, TrafficAgentConfig
    from tj_rl.rollout.collector import RolloutCollector

    hair = GridlockConfig(window_s=30.0, min_queue=1.0, queue_drop=0.99, outflow_ratio=0.99,
                          teleports=None)  # fmt: skip
    config = {"scenario": starved_grid, **_STARVE, "metrics": False, "pad_to_scenario": True,
              "gridlock": hair}  # fmt: skip
    env = TrafficSignalCore(config)
    space, lights = env.observation_spaces["A0"], len(env.possible_agents)
    env.close()
    base = TrafficAgentConfig.preset("tiny", max_actions=int(space["action_mask"].shape[0]))
    movements = int(space["movement"].high.max()) + 1
    torch.manual_seed(0)
    agent = TrafficAgent(replace(base, gnn=replace(base.gnn, num_movements=max(movements, 16))))
    collector = RolloutCollector(config, agent.save(tmp_path / "agent"), seed=1, fragment_steps=29)
    try:
        fragment = next(collector.fragments())
    finally:
        collector.close()
    (episode, *_) = fragment.episodes
    assert episode["gridlock"] and not episode["sumo_died"] and episode["length"] < 29
    last = fragment.samples[(episode["length"] - 1) * lights : episode["length"] * lights]
    for sample in last:
        assert float(sample["returns"]) == pytest.approx(float(sample["reward"]), rel=1e-5)
