"""Advanced-MP (``advanced-mp``): hand-built observations on the embedded net's light that a wrong
rule fails (efficient pressure with the outgoing road's mean queue, not its sum; the current green
kept only while its moving vehicles within reach are at least the best pressure; masked greens,
padded rows and padding nodes never count), and a real SUMO episode."""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import pytest

from tj_rl.control import AdvancedMaxPressurePolicy, describe_policy, make_policy
from tj_rl.control.advanced_mp import efficient_pressure_weights
from tj_rl.env import NODE_FEATURES, EnvConfig, Scenario, TrafficSignalCore
from tj_rl.eval import evaluate

_SPEED, _DIST = NODE_FEATURES.index("speed"), NODE_FEATURES.index("dist_to_stop_line")
# the embedded light's greens: 0 north-south (left turns permissive), 1 north-south left turns,
# 2 east-west (left turns permissive), 3 east-west left turns
NS, NS_LEFT, EW, EW_LEFT = range(4)


@pytest.fixture(scope="module")
def env(default_sc: Scenario) -> Iterator[TrafficSignalCore]:
    core = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=30.0))
    yield core
    core.close()


@pytest.fixture
def blank(env: TrafficSignalCore) -> dict[str, np.ndarray]:
    """The light's first observation, emptied: nobody observed, every green feasible, green 0."""
    obs, _ = env.reset(seed=0)
    env.close()  # the policy reads only the static topology: libsumo is free for the next test
    o = {k: np.array(v, copy=True) for k, v in obs["A0"].items()}
    assert int(np.argmax(o["phase"][:4])) == NS
    o["lanes"][:] = 0.0
    o["node_mask"][:] = 0
    o["action_mask"][:] = 1
    return o


def _lane(env: TrafficSignalCore, lane: str) -> int:
    """The ``lanes`` row of an incoming lane (``road_i``) or of an outgoing one."""
    lt = env.lights["A0"]
    return lt.in_lanes.index(lane) if lane in lt.in_lanes else lt.n_in + lt.out_lanes.index(lane)


def _act(env: TrafficSignalCore, o: dict[str, np.ndarray], **kwargs: float) -> int:
    pol = make_policy("advanced-mp", **kwargs)
    pol.reset(env)
    return pol.compute_actions({"A0": o}, {})["A0"]


def _vehicles(env, o, lane: str, n: int, *, dist: float = 20.0, speed: float = 8.0) -> None:
    """Add ``n`` observed vehicles on ``lane`` at ``dist`` m before its stop line."""
    free = np.flatnonzero(o["node_mask"] == 0)[:n]
    o["node_mask"][free] = 1
    o["movement"][free] = _lane(env, lane)
    o["nodes"][free, _SPEED] = speed
    o["nodes"][free, _DIST] = dist


def test_weights_subtract_the_mean_of_the_road_fed(env: TrafficSignalCore) -> None:
    lt = env.lights["A0"]
    w_in, w_out = efficient_pressure_weights(lt)
    np.testing.assert_array_equal(w_in, lt.phase_movements().any(axis=2))
    # every lane a green serves subtracts one road mean
    np.testing.assert_allclose(w_out.sum(axis=1), w_in.sum(axis=1))
    # the north-south left turns: north's feeds the east road, south's the west road (2 lanes each)
    expected = np.zeros(lt.n_out)
    for lane in ("A0right0_0", "A0right0_1", "A0left0_0", "A0left0_1"):
        expected[lt.out_lanes.index(lane)] = 0.5
    np.testing.assert_allclose(w_out[NS_LEFT], expected)


def test_switches_to_the_most_efficient_pressure(env, blank) -> None:
    """East's left lane has 3 halting vehicles and feeds the south road, whose lanes hold 2 and 0:
    efficient pressure 3 - mean 1 = 2 for the east-west left turns (3 - 2 = 1 with the road's
    sum), 3 - 1.5 x 1 = 1.5 for east-west (west's shared through-right lane feeds half to it), against
    1.6 for the north-south left turns (south's left lane, its road empty)."""
    o = blank
    o["lanes"][_lane(env, "right0A0.100.00_2"), 0] = 3.0
    o["lanes"][_lane(env, "A0bottom0_0"), 0] = 2.0
    o["lanes"][_lane(env, "bottom0A0.100.00_2"), 0] = 1.6
    assert _act(env, o) == EW_LEFT
    o["action_mask"][EW_LEFT] = 0
    assert _act(env, o) == NS_LEFT  # never a masked green
    o["action_mask"][:] = 0
    o["action_mask"][NS] = 1
    assert _act(env, o) == NS  # min green / clearance: only the current one


def test_keeps_the_green_while_its_running_vehicles_outweigh(env, blank) -> None:
    """East-west has efficient pressure 3 (east's through lane: 3 halting, roads fed empty);
    the current north-south green keeps it while 3 vehicles move towards its stop lines within
    reach (13.9 m/s x 10 s), not with 2: those halting, beyond reach, past the stop line, on an
    outgoing lane or padding nodes do not count."""
    o = blank
    o["lanes"][_lane(env, "right0A0.100.00_1"), 0] = 3.0
    _vehicles(env, o, "top0A0.100.00_1", 2)
    assert _act(env, o) == EW
    ignored = {"speed": 0.0}, {"dist": 200.0}, {"dist": -2.0}
    for kwargs in ignored:
        _vehicles(env, o, "bottom0A0.100.00_0", 1, **kwargs)
    _vehicles(env, o, "A0bottom0_0", 1)
    pad = np.flatnonzero(o["node_mask"] == 0)[:3]
    o["nodes"][pad, _SPEED], o["nodes"][pad, _DIST] = 8.0, 20.0  # padding: node_mask 0
    assert _act(env, o) == EW
    assert _act(env, o, weight=1.5) == NS  # the reference's W: 1.5 x 2 >= 3
    _vehicles(env, o, "bottom0A0.100.00_0", 1, dist=50.0)
    assert _act(env, o) == NS  # 3 >= 3: keep (ties keep the green)
    assert _act(env, o, horizon=2.0) == EW  # reach 27.8 m: the one at 50 m does not count


def test_padded_rows_and_actions_are_ignored(env, blank) -> None:
    o = blank
    o["lanes"][_lane(env, "right0A0.100.00_1"), 0] = 3.0
    plain = _act(env, o)
    padded = dict(o)
    padded["lanes"] = np.vstack([o["lanes"], np.full((10, o["lanes"].shape[1]), 50.0, np.float32)])
    padded["action_mask"] = np.concatenate([o["action_mask"], [0, 0]]).astype(np.int8)
    padded["phase"] = np.concatenate([o["phase"][:4], [0.0, 0.0], o["phase"][-3:]])
    assert _act(env, padded) == plain == EW
    cut = dict(o)
    cut["lanes"] = o["lanes"][:15]  # max_lanes below the light's rows: the rest count 0
    assert _act(env, cut) == EW


def test_padding_changes_no_decision_in_an_episode(default_sc: Scenario) -> None:
    sc = default_sc.replace(end=300.0)
    plain = evaluate(sc, "advanced-mp", episodes=1, seeds=[4])
    padded = evaluate(sc, "advanced-mp", episodes=1, seeds=[4],
                      config=EnvConfig(metrics=True, max_phases=6, max_lanes=30))  # fmt: skip
    assert plain.rows[0] == padded.rows[0]


def test_bad_options() -> None:
    bad = {"horizon": (0.0, math.inf), "weight": (-1.0, math.nan)}
    for name, values in bad.items():
        for value in values:
            with pytest.raises(ValueError, match=f"{name} must be a finite number"):
                AdvancedMaxPressurePolicy(**{name: value})
    assert "Advanced-MP" in describe_policy("advanced-mp")


def test_an_episode_beats_fixed_time_without_a_veto(default_sc: Scenario) -> None:
    sc = default_sc.replace(end=600.0)
    adv, fixed = (
        evaluate(sc, n, episodes=1, seeds=[1]).rows[0] for n in ("advanced-mp", "fixed-time")
    )
    assert adv["status"] == "time_limit" and adv["vetoes"] == 0  # never a masked green
    assert math.isfinite(adv["avg_delay"]) and adv["throughput"] > 0
    assert adv["avg_delay"] < fixed["avg_delay"]
