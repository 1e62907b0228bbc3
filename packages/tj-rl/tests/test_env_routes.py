"""Demand drawn per episode: ``EnvConfig(route_files=...)`` runs each episode with one file of a
demand pool (``pick_route(files, episode, route_stream)``), so training sees many traffic
patterns, deterministically per stream."""

from __future__ import annotations

from pathlib import Path

import pytest

from tj_rl.env import EnvConfig, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.traffic import DemandPool
from tj_rl.traffic.routes import pick_route


def _vehicles(env: TrafficSignalCore, steps: int = 12) -> tuple[str, int]:
    obs, infos = env.reset()
    routes = next(iter(infos.values()))["routes"]
    seen = 0
    for _ in range(steps):
        obs, _, _, _, infos = env.step({a: 0 for a in obs})
        seen = max(seen, sum(i["num_vehicles"] for i in infos.values()))
    return routes, seen


def test_each_episode_draws_its_traffic_from_the_pool(tmp_path: Path, default_sc: Scenario) -> None:
    sc = default_sc.replace(end=120.0)
    pool = DemandPool.for_scenario(sc, tmp_path / "pool", seeds=(1, 2), rates=(300, 1800))
    files = tuple(str(p) for p in pool.files)
    env = TrafficSignalCore(EnvConfig(metrics=False, route_files=files, route_stream=3),
                            scenario=sc)  # fmt: skip
    try:
        episodes = [_vehicles(env) for _ in range(4)]
    finally:
        env.close()
    names = [r for r, _ in episodes]
    assert names == [pick_route(files, e, 3).name for e in range(4)]
    assert sorted(names) == sorted(Path(f).name for f in files)  # one cycle uses every file once
    by_file = dict(episodes)  # 300 and 1800 veh/h: the traffic really differs between files
    assert len(set(by_file.values())) > 1, by_file


def test_a_missing_route_file_is_a_scenario_error(tmp_path: Path, default_sc: Scenario) -> None:
    env = TrafficSignalCore(
        EnvConfig(metrics=False, route_files=(str(tmp_path / "gone.rou.xml"),)),
        scenario=default_sc.replace(end=60.0),
    )
    try:
        with pytest.raises(ScenarioError, match=r"gone\.rou\.xml does not exist"):
            env.reset()
    finally:
        env.close()
    with pytest.raises(ValueError, match="route_stream"):
        EnvConfig(route_stream=-1)


def test_reward_scale_multiplies_every_reward(default_sc: Scenario) -> None:
    sc = default_sc.replace(end=100.0)
    runs = []
    for scale in (1.0, 0.1):
        env = TrafficSignalCore(EnvConfig(metrics=False, reward="queue", reward_scale=scale),
                                scenario=sc)  # fmt: skip
        try:
            obs, _ = env.reset(seed=5)
            total = 0.0
            for _ in range(8):
                obs, rewards, _, _, _ = env.step({a: 0 for a in obs})
                total += sum(rewards.values())
        finally:
            env.close()
        runs.append(total)
    assert runs[0] < 0 and runs[1] == pytest.approx(0.1 * runs[0])
    with pytest.raises(ValueError, match="reward_scale"):
        EnvConfig(reward_scale=0)


def test_each_rllib_env_runner_draws_its_own_route_order(default_sc: Scenario) -> None:
    from ray.rllib.env.env_context import EnvContext

    from tj_rl.rllib import TrafficSignalEnv

    base = {"scenario": default_sc, "metrics": False, "route_files": ("a.rou.xml", "b.rou.xml")}
    streams = []
    for worker in (1, 2):
        env = TrafficSignalEnv(EnvContext(base, worker_index=worker, vector_index=0))
        streams.append(env.config.route_stream)
        env.close()
    assert streams == [1000, 2000]
    env = TrafficSignalEnv(EnvContext({**base, "route_stream": 7}, worker_index=3))
    assert env.config.route_stream == 7  # an explicit stream wins
    env.close()
