"""TrafficSignalEnv: RLlib / Gymnasium / PettingZoo contracts, the shield inside SUMO, vetoes,
overflow counting, rewards and bad input."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tj_rl.env import (
    COST_NAMES,
    REWARDS,
    EnvConfig,
    ParallelTrafficEnv,
    Scenario,
    SingleAgentTrafficEnv,
)
from tj_rl.rllib import TrafficSignalEnv


def _random_feasible(obs: dict, rng: np.random.Generator) -> dict[str, int]:
    return {a: int(rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}


def test_rllib_multiagent_contract(grid_sc: Scenario) -> None:
    from ray.rllib.env.multi_agent_env import MultiAgentEnv
    from ray.rllib.utils.pre_checks.env import check_multiagent_environments

    env = TrafficSignalEnv(EnvConfig(metrics=False), scenario=grid_sc)
    try:
        assert isinstance(env, MultiAgentEnv)
        assert env.possible_agents == ["A0", "A1", "B0", "B1"] == env.agents
        assert set(env.observation_spaces) == set(env.action_spaces) == set(env.agents)
        check_multiagent_environments(env)
        obs, infos = env.reset(seed=3)
        assert set(obs) == set(infos) == set(env.agents)
        obs, rew, term, trunc, infos = env.step(_random_feasible(obs, np.random.default_rng(0)))
        assert term["__all__"] is False and trunc["__all__"] is False
        for a in env.agents:
            assert env.get_observation_space(a).contains(obs[a])
            assert isinstance(rew[a], float)
            assert infos[a]["costs"].shape == (len(COST_NAMES),)
    finally:
        env.close()


def test_gymnasium_single_agent_view(default_sc: Scenario) -> None:
    from gymnasium.utils.env_checker import check_env

    env = SingleAgentTrafficEnv(TrafficSignalEnv(EnvConfig(metrics=False), scenario=default_sc))
    try:
        check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=1)
        done, steps = False, 0
        while not done:
            obs, _, term, trunc, _ = env.step(int(np.flatnonzero(obs["action_mask"])[-1]))
            done, steps = term or trunc, steps + 1
        assert steps == 12  # 120 s / 10 s decisions
    finally:
        env.close()


def test_single_agent_view_needs_one_light(grid_sc: Scenario) -> None:
    env = TrafficSignalEnv(EnvConfig(metrics=False), scenario=grid_sc)
    with pytest.raises(ValueError, match="one controlled light, got 4"):
        SingleAgentTrafficEnv(env)
    env.close()


def test_pettingzoo_parallel_api(grid_sc: Scenario) -> None:
    from pettingzoo.test import parallel_api_test

    env = ParallelTrafficEnv(
        TrafficSignalEnv(EnvConfig(metrics=False), scenario=grid_sc.replace(end=60.0))
    )
    try:
        parallel_api_test(env, num_cycles=100)
    finally:
        env.close()


def test_env_config_dict_as_rllib_passes_it(default_sc: Scenario) -> None:
    env = TrafficSignalEnv(
        {
            "scenario": str(default_sc.sumocfg),
            "delta_time": 5.0,
            "reward": "queue",
            "metrics": False,
        }
    )
    try:
        assert env.config.delta_time == 5.0 and env.scenario.sumocfg == default_sc.sumocfg
        env.reset(seed=0)
        env.step({"A0": 0})
        assert env.sim_time == pytest.approx(5.0)
    finally:
        env.close()
    with pytest.raises(ValueError, match=r"env_config: unknown key\(s\) \['delta'\]"):
        TrafficSignalEnv({"scenario": str(default_sc.sumocfg), "delta": 5.0})


def test_bad_actions(default_sc: Scenario) -> None:
    env = TrafficSignalEnv(EnvConfig(metrics=False), scenario=default_sc)
    try:
        env.reset(seed=0)
        with pytest.raises(
            ValueError, match=r"agent 'A0': action 4 outside its action space Discrete\(4\)"
        ):
            env.step({"A0": 4})
        with pytest.raises(ValueError, match="agent 'A0': action -1 outside"):
            env.step({"A0": -1})
        with pytest.raises(ValueError, match=r"agent 'A0': action 1\.5"):
            env.step({"A0": 1.5})
        with pytest.raises(ValueError, match="agent 'A0': action 'x' is not an integer"):
            env.step({"A0": "x"})
        with pytest.raises(ValueError, match="unknown agent 'B7'"):
            env.step({"B7": 0})
        env.step({"A0": np.int64(0)})  # numpy scalars are fine
    finally:
        env.close()
    with pytest.raises(RuntimeError, match=r"before reset\(\)"):
        env.step({"A0": 0})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_nodes": 0}, "EnvConfig.max_nodes: 0, padding size"),
        ({"max_edges": 0}, "EnvConfig.max_edges: 0, padding size"),
        ({"min_green": 30.0, "max_green": 20.0}, "EnvConfig.max_green: 20.0 must exceed"),
        ({"delta_time": 0.0}, "EnvConfig.delta_time: 0.0"),
        ({"backend": "sumo-gui"}, "EnvConfig.backend: 'sumo-gui'"),
        ({"cost_weights": {"crash": 1.0}}, r"unknown cost\(s\) \['crash'\]"),
    ],
)
def test_bad_config(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kwargs)


def test_timing_must_fit_step_length(default_sc: Scenario) -> None:
    with pytest.raises(ValueError, match=r"EnvConfig.yellow_time: 2.5 s is not a multiple"):
        TrafficSignalEnv(EnvConfig(yellow_time=2.5), scenario=default_sc)


def test_unknown_reward(default_sc: Scenario) -> None:
    with pytest.raises(ValueError, match="reward 'speed' unknown"):
        TrafficSignalEnv(EnvConfig(reward="speed"), scenario=default_sc)


def test_vetoes_counted_in_info_costs_and_metrics(default_sc: Scenario) -> None:
    cfg = EnvConfig(cost_weights={"veto": 2.0}, metrics=True)
    env = TrafficSignalEnv(cfg, scenario=default_sc)
    try:
        obs, _ = env.reset(seed=5)
        assert obs["A0"]["action_mask"].tolist() == [1, 0, 0, 0]  # min green at the start
        _, _, _, _, info = env.step({"A0": 2})
        i = info["A0"]
        assert i["vetoed"] and i["veto_reason"] == "min_green" and i["applied_action"] == 0
        assert i["costs"][COST_NAMES.index("veto")] == 1.0 and i["cost"] >= 2.0
        _, _, _, _, info = env.step({"A0": 2})  # t=10: feasible, switches (clearance to t=15)
        assert not info["A0"]["vetoed"] and info["A0"]["applied_action"] == 2
        obs, _, _, _, info = env.step({"A0": 0})  # t=20: 5 s of green only
        assert info["A0"]["vetoed"] and info["A0"]["vetoes_total"] == 2
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            obs, _, _, trunc, info = env.step({"A0": 1})
        assert info["A0"]["episode"]["vetoes"] == env.shields["A0"].vetoes >= 2
        assert info["A0"]["truncated_reason"] == "time_limit"
    finally:
        env.close()


def test_overflow_counted(default_sc: Scenario) -> None:
    env = TrafficSignalEnv(EnvConfig(max_nodes=3, max_edges=2, metrics=False), scenario=default_sc)
    try:
        obs, _ = env.reset(seed=0)
        seen_nodes = seen_edges = 0
        for _ in range(12):
            obs, _, _, trunc, info = env.step({"A0": 0})
            i = info["A0"]
            assert obs["A0"]["node_mask"].sum() == min(3, i["num_vehicles"])
            assert i["overflow_nodes"] == max(0, i["num_vehicles"] - 3)
            seen_nodes += i["overflow_nodes"]
            seen_edges += i["overflow_edges"]
            if trunc["__all__"]:
                break
        assert seen_nodes > 0 and seen_edges > 0
    finally:
        env.close()


@pytest.mark.parametrize("reward", sorted(REWARDS))
def test_rewards_by_name(default_sc: Scenario, reward: str) -> None:
    env = TrafficSignalEnv(
        EnvConfig(reward=reward, metrics=False), scenario=default_sc.replace(end=60.0)
    )
    try:
        env.reset(seed=0)
        values = [env.step({"A0": 0})[1]["A0"] for _ in range(6)]
        assert all(np.isfinite(values))
        if reward in ("queue", "delay"):
            assert all(v <= 0 for v in values) and min(values) < 0  # red approaches queue up
    finally:
        env.close()


# ---------------------------------------------------------------- the shield inside SUMO
@pytest.fixture(scope="module", params=["libsumo", "traci"])
def tls_logged_env(grid_sc: Scenario, tmp_path_factory: pytest.TempPathFactory, request):
    """A grid env whose SUMO writes every light's state every second (SUMO's own SaveTLSStates)."""
    d = tmp_path_factory.mktemp("tls")
    ids = ["A0", "A1", "B0", "B1"]
    events = "".join(
        f'<timedEvent type="SaveTLSStates" source="{t}" dest="tls-{t}.xml"/>' for t in ids
    )
    (d / "tls.add.xml").write_text(f"<additional>{events}</additional>")
    sc = grid_sc.replace(end=90.0, additional_files=(d / "tls.add.xml",))
    cfg = EnvConfig(
        backend=request.param, metrics=False, delta_time=5.0, min_green=10.0, max_green=25.0
    )
    env = TrafficSignalEnv(cfg, scenario=sc)
    yield env, d
    env.close()


@settings(max_examples=10, deadline=None)
@given(
    actions=st.lists(st.lists(st.integers(0, 1), min_size=4, max_size=4), min_size=18, max_size=18)
)
def test_shield_in_sumo_property(tls_logged_env, check_safe, actions: list[list[int]]) -> None:
    """Random (often infeasible) action sequences on a 2x2 grid: SUMO's own per-second light states
    never go green -> conflicting green without yellow and all-red, and never cut a green short."""
    env, d = tls_logged_env
    env.reset(seed=1)
    vetoes = 0
    for row in actions:
        _, _, _, trunc, info = env.step(dict(zip(env.agents, row, strict=True)))
        vetoes += sum(i["vetoed"] for i in info.values())
        if trunc["__all__"]:
            break
    assert trunc["__all__"]  # SUMO closed: its outputs are complete
    assert vetoes == sum(s.vetoes for s in env.shields.values())
    for tls, shield in env.shields.items():
        text = (d / f"tls-{tls}.xml").read_text()
        states = re.findall(
            r'<tlsState time="[0-9.]+" id="[^"]+" programID="[^"]+" phase="\d+" state="([^"]+)"',
            text,
        )
        assert len(states) == 90
        check_safe(states, shield.program.greens, yellow=3, all_red=2, min_green=10)


@pytest.mark.parametrize("backend", ["libsumo", "traci"])
def test_next_episode_starts_fresh(default_sc: Scenario, backend: str) -> None:
    """libsumo keeps the last simulation's subscription results until the next step: a new
    episode must not see the old episode's vehicles or time."""
    env = TrafficSignalEnv(
        EnvConfig(backend=backend, metrics=False), scenario=default_sc.replace(end=60.0)
    )
    try:
        runs = []
        for _ in range(2):
            obs, _ = env.reset(seed=4)
            assert env.sim_time == 0.0 and obs["A0"]["node_mask"].sum() == 0
            trace, trunc = [], {"__all__": False}
            while not trunc["__all__"]:
                obs, rew, _, trunc, _ = env.step({"A0": 0})
                trace.append((env.sim_time, rew["A0"], int(obs["A0"]["node_mask"].sum())))
            runs.append(trace)
        assert runs[0] == runs[1] and runs[0][-1][0] == 60.0 and runs[0][-1][2] > 0
    finally:
        env.close()


def test_counters_agree_across_backends(default_sc: Scenario) -> None:
    """traci delivers two of SUMO's counters with the step (keyed-parameter subscriptions) and libsumo
    polls them: with teleports forced early, both report the same per-interval counts and costs."""
    sc = default_sc.replace(end=300.0, extra_args=("--time-to-teleport", "15"))
    traces = {}
    for backend in ("libsumo", "traci"):
        env = TrafficSignalEnv(EnvConfig(backend=backend), scenario=sc)
        try:
            env.reset(seed=1)
            trace, trunc = [], {"__all__": False}
            while not trunc["__all__"]:  # hold the first green: the other approaches jam
                _, _, _, trunc, info = env.step({"A0": 0})
                trace.append((info["A0"]["system"], info["A0"]["costs"].tolist()))
            traces[backend] = trace
        finally:
            env.close()
    assert traces["libsumo"] == traces["traci"]
    assert sum(s["teleports"] for s, _ in traces["traci"]) > 0


def test_metrics_switch() -> None:
    assert EnvConfig().metrics is None  # off in the env (training), on in evaluate()
    with pytest.raises(ValueError, match=r"EnvConfig\.metrics"):
        EnvConfig(metrics="yes")


def test_env_process_imports_neither_torch_nor_ray(fresh_python):
    """An env or recording process stays small: the env, eval and recording rooms
    must not import torch (~350 MiB PSS) or Ray; only ``TrafficSignalEnv`` loads RLlib. numba
    (~120 MiB) is loaded only by an env that chooses ``kernel="numba"``."""
    code = (
        "import sys\n"
        "from tj_rl.env import EnvConfig, TrafficSignalCore, default_scenario\n"
        "from tj_rl.eval import evaluate\n"
        "from tj_rl.recording import record_dataset\n"
        "TrafficSignalCore(EnvConfig(), scenario=default_scenario())\n"
        "bad = sorted(m for m in ('torch', 'ray', 'numba') if m in sys.modules)\n"
        "print(bad)\n"
    )
    assert fresh_python(code, timeout=120) == "[]"
