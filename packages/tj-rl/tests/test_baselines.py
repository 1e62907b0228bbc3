"""Baselines run with the agents' interface; fixed-time metrics are deterministic for a seed;
metrics come from SUMO's own outputs."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from tj_rl.control import POLICIES, make_policy
from tj_rl.env import METRIC_NAMES, EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.metrics import parse_episode_metrics
from tj_rl.env.runtime import sumo_home
from tj_rl.eval import evaluate


def test_fixed_time_deterministic_for_a_seed(default_sc: Scenario) -> None:
    sc = default_sc.replace(end=300.0)
    a = evaluate(sc, "fixed-time", episodes=2, seeds=[3, 3])
    b = evaluate(sc, "fixed-time", episodes=1, seeds=[3], config=EnvConfig(backend="traci"))
    r0, r1, r2 = a.rows[0], a.rows[1], b.rows[0]
    for k in (*METRIC_NAMES, "return"):
        assert r0[k] == r1[k] == r2[k], k  # same seed: same SUMO run, on either backend
    assert r0["throughput"] > 10 and r0["avg_delay"] > 0 and r0["vetoes"] == 0
    other = evaluate(sc, "fixed-time", episodes=1, seeds=[4]).rows[0]
    assert other["avg_delay"] != r0["avg_delay"]  # the seed reaches SUMO
    summary = a.summary()
    assert summary["throughput"] == (r0["throughput"], 0.0)
    assert "| avg_delay |" in a.to_markdown()


def test_fixed_time_follows_the_program(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=200.0))
    pol = make_policy("fixed-time")
    try:
        obs, infos = env.reset(seed=0)
        pol.reset(env)
        applied = []
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            obs, _, _, trunc, infos = env.step(pol.compute_actions(obs, infos))
            applied.append(infos["A0"]["applied_action"])
            assert not infos["A0"]["vetoed"]
        # programme: 33 s, 6 s, 33 s, 6 s greens; at 10 s decisions with 5 s of clearance a 33 s
        # green shows 35 s (the first one 40 s: it starts at t=0), a 6 s green 15 s
        assert applied[:13] == [0, 0, 0, 0, 1, 1, 2, 2, 2, 2, 3, 3, 0]
    finally:
        env.close()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_baseline_runs_on_a_grid(grid_sc: Scenario, name: str) -> None:
    table = evaluate(grid_sc.replace(end=80.0), name, episodes=1, seeds=[0])
    row = table.rows[0]
    assert row["status"] == "time_limit" and row["vetoes"] == 0
    assert set(METRIC_NAMES) <= set(row) and row["throughput"] >= 0


def test_adaptive_beats_random_on_queue(default_sc: Scenario) -> None:
    sc = default_sc.replace(end=600.0)
    queue = {
        n: evaluate(sc, n, episodes=1, seeds=[1]).rows[0]["mean_queue"]
        for n in ("max-pressure", "random")
    }
    assert queue["max-pressure"] < queue["random"]


def test_metrics_parse_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"tripinfo\.xml missing"):
        parse_episode_metrics(tmp_path, mean_queue=0.0, vetoes=0)
    (tmp_path / "tripinfo.xml").write_text(
        '<tripinfos><tripinfo id="a" arrival="20.00" duration="20.00" waitingTime="3.00" timeLoss="5.00"/>\n'
        '<tripinfo id="b" arrival="-1.00" duration="9.00" waitingTime="1.00" timeLoss="2.00"/></tripinfos>'
    )
    (tmp_path / "statistics.xml").write_text("<statistics><teleports total='1'/>")
    with pytest.raises(ValueError, match=r"statistics\.xml is malformed"):
        parse_episode_metrics(tmp_path, mean_queue=0.0, vetoes=0)
    (tmp_path / "statistics.xml").write_text(
        "<statistics><teleports total='1'/><safety collisions='0' emergencyStops='2' emergencyBraking='3'/></statistics>"
    )
    m = parse_episode_metrics(tmp_path, mean_queue=1.5, vetoes=4)
    assert (m.throughput, m.unfinished, m.teleports, m.emergency_brakes, m.vetoes) == (
        1,
        1,
        1,
        3,
        4,
    )
    assert m.avg_delay == pytest.approx(3.5) and m.avg_trip_time == pytest.approx(20.0)
    assert not math.isnan(m.avg_waiting_time) and np.isfinite(m.mean_queue)
    assert (m.persons, m.avg_ped_waiting) == (0, 0.0)


def test_pedestrian_waiting_counts_every_person_who_set_off(tmp_path: Path) -> None:
    """Finished and unfinished walkers count with their waiting time; a person of a flow that
    had not set off by the end (``depart="-1"``) does not. Vehicles' delay ignores them all."""
    (tmp_path / "tripinfo.xml").write_text(
        '<tripinfos><tripinfo id="a" arrival="20.00" duration="20.00" waitingTime="3.00" timeLoss="5.00"/>\n'
        '<personinfo id="p0" depart="1.00" waitingTime="10.00" timeLoss="12.00"><walk/></personinfo>\n'
        '<personinfo id="p1" depart="5.00" waitingTime="40.00" timeLoss="0.00"><walk arrival="-1"/></personinfo>\n'
        '<personinfo id="p2" depart="-1" waitingTime="0.00" timeLoss="0.00"/></tripinfos>'
    )  # fmt: skip
    (tmp_path / "statistics.xml").write_text(
        "<statistics><teleports total='0'/><safety collisions='0' emergencyStops='0' emergencyBraking='0'/></statistics>"
    )  # fmt: skip
    m = parse_episode_metrics(tmp_path, mean_queue=0.0, vetoes=0)
    assert (m.persons, m.avg_ped_waiting) == (2, pytest.approx(25.0))
    assert (m.throughput, m.avg_delay) == (1, pytest.approx(5.0))


def test_a_city_with_pedestrians_reports_their_waiting() -> None:
    """Braunschweig's demo, five minutes under fixed-time: SUMO's personinfo reaches the row."""
    sc = Scenario.from_sumocfg(sumo_home() / "tools/game/fokr_bs_demo.sumocfg").window(54000.0, 300.0)
    row = evaluate(sc, "fixed-time", episodes=1, seeds=[1], config=EnvConfig(delta_time=5.0)).rows[0]
    assert row["persons"] > 10 and 0 <= row["avg_ped_waiting"] < 300


def test_evaluate_bad_input(default_sc: Scenario) -> None:
    with pytest.raises(ValueError, match="2 seeds for 1 episodes"):
        evaluate(default_sc, "greedy", episodes=1, seeds=[1, 2])
    with pytest.raises(ValueError, match="policy 'smart' unknown"):
        evaluate(default_sc, "smart")
    with pytest.raises(ValueError, match="metrics=True"):
        evaluate(default_sc, "greedy", config=EnvConfig(metrics=False))


def test_mixed_policy_mixes_base_and_random_feasible(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=300.0))
    try:

        def actions(policy_name: str, **kwargs: object) -> list[int]:
            pol = make_policy(policy_name, **kwargs)
            obs, infos = env.reset(seed=1)
            pol.reset(env)
            out, trunc = [], {"__all__": False}
            while not trunc["__all__"]:
                act = pol.compute_actions(obs, infos)
                assert obs["A0"]["action_mask"][act["A0"]] == 1  # always feasible
                out.append(act["A0"])
                obs, _, _, trunc, infos = env.step(act)
                assert not infos["A0"]["vetoed"]
            return out

        fixed = actions("fixed-time")
        assert actions("mixed", switch_prob=0.0) == fixed  # no switches: the base policy
        mixed_a = actions("mixed", switch_prob=0.5, seed=1)
        assert mixed_a != fixed  # random feasible switches happen
        assert actions("mixed", switch_prob=0.5, seed=1) == mixed_a  # seeded
        assert actions("mixed", switch_prob=0.5, seed=2) != mixed_a
    finally:
        env.close()
    with pytest.raises(ValueError, match="base 'mixed'"):
        make_policy("mixed", base="mixed")
    with pytest.raises(ValueError, match="switch_prob"):
        make_policy("mixed", switch_prob=1.5)
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="margin must be a finite number >= 0"):
            make_policy("greedy", margin=bad)


@pytest.mark.parametrize("name", ["fixed-time", "max-pressure", "greedy", "max-occupancy"])
def test_baselines_act_the_same_on_padded_observations(default_sc: Scenario, name: str) -> None:
    """Padding to a scenario's maximum (one space for every light) changes no baseline's decision:
    the phase flags are read from the end and padded lanes / actions are ignored."""
    sc = default_sc.replace(end=300.0)
    plain = evaluate(sc, name, episodes=1, seeds=[4], config=EnvConfig(metrics=True))
    padded = evaluate(sc, name, episodes=1, seeds=[4],
                      config=EnvConfig(metrics=True, max_phases=6, max_lanes=30))  # fmt: skip
    assert plain.rows[0]["avg_delay"] == padded.rows[0]["avg_delay"]
    assert plain.rows[0] == padded.rows[0]


def test_max_occupancy_serves_approaching_vehicles_greedy_ignores(default_sc: Scenario) -> None:
    """Vehicles still moving towards the light count for max-occupancy, not for greedy: with no one
    halting, greedy keeps the current green (ties keep it) and max-occupancy switches to the green
    whose incoming lanes hold the approaching vehicles."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=100.0))
    try:
        obs, infos = env.reset(seed=0)
        occ, greedy = make_policy("max-occupancy"), make_policy("greedy")
        occ.reset(env)
        greedy.reset(env)
        o = {k: np.array(v, copy=True) for k, v in obs["A0"].items()}
        serves = env.lights["A0"].phase_movements().any(axis=2)  # [P, n_in]
        p = serves.shape[0]
        current = int(np.argmax(o["phase"][:p]))
        target = next(k for k in range(p) if k != current and not serves[k] @ serves[current])
        o["action_mask"][:p] = 1
        o["lanes"][:, 0] = 0.0  # nobody halting
        o["lanes"][:, 1] = 0.0
        lanes = np.flatnonzero(serves[target])
        o["lanes"][lanes, 1] = 3.0 / env.lane_capacity["A0"][lanes]  # three vehicles each
        assert occ.compute_actions({"A0": o}, infos)["A0"] == target
        assert greedy.compute_actions({"A0": o}, infos)["A0"] == current
        # hysteresis: the current green is kept until another has more than `margin` more
        # vehicles (here 3 per lane of the target green)
        more = 3.0 * len(lanes)
        for margin, expected in ((more, current), (more - 0.5, target)):
            held = make_policy("max-occupancy", margin=margin)
            held.reset(env)
            assert held.compute_actions({"A0": o}, infos)["A0"] == expected, margin
        o["lanes"][:, 1] = 0.0  # empty: keep the current green
        assert occ.compute_actions({"A0": o}, infos)["A0"] == current
    finally:
        env.close()
