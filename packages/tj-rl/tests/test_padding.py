"""Observation additions for the graph policy (``movement``, ``time_in_phase``, ``lane_mask``) and
padding of the per-light arrays to common widths (``EnvConfig`` ``pad_to_scenario`` /
``max_phases`` / ``max_lanes``): values agree with the env's own state and with an unpadded run of
the same episode, padded actions are vetoed, nothing is cut without being counted."""

from __future__ import annotations

import numpy as np
import pytest

from tj_rl.env import COST_NAMES, EnvConfig, Scenario, TrafficSignalCore, build_graph


def _episode(config: EnvConfig, scenario: Scenario, steps: int) -> list[tuple[dict, dict]]:
    """(obs, infos) of the reset and ``steps`` steps, always requesting the first green."""
    env = TrafficSignalCore(config, scenario=scenario)
    try:
        obs, infos = env.reset(seed=3)
        out = [(obs, infos)]
        for _ in range(steps):
            obs, _, _, _, infos = env.step(dict.fromkeys(obs, 0))
            out.append((obs, infos))
        return out
    finally:
        env.close()


def test_movement_and_time_in_phase_match_the_env_state(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc)
    light = env.lights["A0"]
    n_lanes = light.n_in + light.n_out
    try:
        obs, _ = env.reset(seed=1)
        seen_vehicles = 0
        for k in range(8):
            o = obs["A0"]
            assert env.observation_spaces["A0"].contains(o)
            g = build_graph(env.last_frames["A0"], light.centre, env.config.graph, max_nodes=64)
            n = g.num_nodes
            seen_vehicles += n
            assert o["node_mask"].sum() == n
            np.testing.assert_array_equal(o["movement"][:n], g.movement)  # same node order
            assert not o["movement"][n:].any()  # padding nodes: 0
            tip = env.shields["A0"].time_in_green(env.sim_time)
            assert o["time_in_phase"].dtype == np.float32 and o["time_in_phase"].tolist() == [tip]
            assert o["phase"][-2] == pytest.approx(min(tip / env.config.max_green, 1.0))
            assert o["lane_mask"].tolist() == [1] * n_lanes  # unpadded: every row is real
            obs, _, _, _, _ = env.step({"A0": 2 if k == 2 else 0})
        assert seen_vehicles > 0
        assert obs["A0"]["time_in_phase"][0] > 0.0
    finally:
        env.close()


def test_padded_actions_are_masked_and_vetoed(default_sc: Scenario) -> None:
    """The default light has 4 greens: with max_phases=6 actions 4 and 5 exist, are always masked
    0 and, requested anyway, are vetoed (the shield's safe action applies, the veto is counted)."""
    env = TrafficSignalCore(EnvConfig(max_phases=6, metrics=False), scenario=default_sc)
    try:
        assert env.action_spaces["A0"].n == 6
        assert env.observation_spaces["A0"]["phase"].shape == (9,)
        obs, _ = env.reset(seed=0)
        for t in range(6):
            o = obs["A0"]
            assert o["action_mask"][4:].tolist() == [0, 0]
            assert o["phase"][4:6].tolist() == [0.0, 0.0] and o["phase"][:4].sum() == 1.0
            obs, _, _, _, info = env.step({"A0": 4 + t % 2})
            i = info["A0"]
            assert i["vetoed"] and i["veto_reason"] == "padding" and i["requested_action"] >= 4
            assert i["applied_action"] == 0 and i["vetoes_total"] == t + 1
            assert i["costs"][COST_NAMES.index("veto")] == 1.0
    finally:
        env.close()


def test_padding_matches_an_unpadded_run(default_sc: Scenario) -> None:
    """Same seed and actions with and without padding: every unpadded array is the real part of
    its padded twin, padded rows are zero, and the graph keys are identical. max_lanes=2 cuts
    the lanes: the overflow is counted and vehicles on cut rows are observed as movement -1."""
    plain = _episode(EnvConfig(metrics=False), default_sc, steps=6)
    padded = _episode(EnvConfig(max_phases=5, max_lanes=30, metrics=False), default_sc, steps=6)
    cut = _episode(EnvConfig(max_lanes=2, metrics=False), default_sc, steps=6)
    n_lanes = plain[0][0]["A0"]["lanes"].shape[0]
    assert 2 < n_lanes <= 30
    moved_to_cut_rows = 0
    for (o, _), (p, j), (c, k) in zip(plain, padded, cut, strict=True):
        o, p, c = o["A0"], p["A0"], c["A0"]
        for key in ("nodes", "node_mask", "movement", "edge_index", "edge_attr", "edge_mask"):
            np.testing.assert_array_equal(p[key], o[key])
        np.testing.assert_array_equal(p["phase"][:4], o["phase"][:4])
        np.testing.assert_array_equal(p["phase"][-3:], o["phase"][-3:])
        assert p["phase"][4] == 0.0 and p["action_mask"].tolist() == [*o["action_mask"], 0]
        np.testing.assert_array_equal(p["lanes"][:n_lanes], o["lanes"])
        assert not p["lanes"][n_lanes:].any()
        assert p["lane_mask"].tolist() == [1] * n_lanes + [0] * (30 - n_lanes)
        np.testing.assert_array_equal(p["time_in_phase"], o["time_in_phase"])
        # cut to 2 lane rows
        np.testing.assert_array_equal(c["lanes"], o["lanes"][:2])
        assert c["lane_mask"].tolist() == [1, 1]
        real = o["node_mask"].astype(bool)
        want = np.where(o["movement"] >= 2, -1, o["movement"])
        np.testing.assert_array_equal(c["movement"][real], want[real])
        moved_to_cut_rows += int((c["movement"][real] == -1).sum())
        if "overflow_lanes" in j["A0"]:  # step infos (the reset's info has no counts)
            assert j["A0"]["overflow_lanes"] == 0 and k["A0"]["overflow_lanes"] == n_lanes - 2
    assert moved_to_cut_rows > 0


def test_max_phases_below_a_lights_greens_is_an_error(default_sc: Scenario) -> None:
    with pytest.raises(ValueError, match=r"max_phases=3: traffic light 'A0' has 4 green phases"):
        TrafficSignalCore(EnvConfig(max_phases=3), scenario=default_sc)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_phases": 0}, r"EnvConfig\.max_phases: 0"),
        ({"max_lanes": 2.5}, r"EnvConfig\.max_lanes: 2\.5"),
        ({"max_lanes": True}, r"EnvConfig\.max_lanes: True"),
        ({"pad_to_scenario": "yes"}, r"EnvConfig\.pad_to_scenario: 'yes'"),
    ],
)
def test_bad_padding_config(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        EnvConfig(**kwargs)


def test_padding_switch() -> None:
    assert not EnvConfig().padded
    assert EnvConfig(pad_to_scenario=True).padded
    assert EnvConfig(max_lanes=8).padded and EnvConfig(max_phases=8).padded
