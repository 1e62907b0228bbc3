"""The dilemma-zone guard (``tj_rl.control.dz_guard``) and ``dz-protected`` (a baseline behind it:
green extension while the zone is occupied, never past max green, less dilemma-zone exposure
than its base on the embedded scenario): the guard's config, the zone count now and one
decision ahead on hand-made observations, the bound on green extensions in a real episode, the
``fewer-next`` rule, and pickling for evaluation workers (phase 3's collector behind the guard:
test_collector.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tj_rl.control import (
    DilemmaProtectedPolicy,
    DzGuard,
    DzGuardConfig,
    GuardedPolicy,
    make_policy,
    zone_count,
)
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.eval import evaluate

ZONE = {"zone": (2.5, 5.5), "min_speed": 5.0}


def _obs(speed, dist, movement, n_max: int = 8) -> dict[str, np.ndarray]:
    """One light's observation with vehicles at ``speed`` (m/s), ``dist`` (m) on ``movement``."""
    n = len(speed)
    nodes = np.zeros((n_max, 8), np.float32)
    nodes[:n, 2], nodes[:n, 6] = speed, dist
    mov = np.zeros(n_max, np.int64)
    mov[:n] = movement
    mask = np.zeros(n_max, np.int8)
    mask[:n] = 1
    return {"nodes": nodes, "movement": mov, "node_mask": mask}


@pytest.mark.parametrize("kwargs", [{"rule": "gap"}, {"max_extensions": 0},
                                    {"max_extensions": True}, {"max_extensions": 1.5}])  # fmt: skip
def test_bad_config_is_refused(kwargs) -> None:
    with pytest.raises(ValueError, match="DzGuardConfig"):
        DzGuardConfig(**kwargs)


def test_zone_count_now_and_one_decision_ahead() -> None:
    """15 m/s: the zone is 37.5-82.5 m now and 112.5-157.5 m for 5 s ahead; only the lanes asked
    for count, slow vehicles never, and a vehicle past the stop line by then is out."""
    obs = _obs(speed=[15, 15, 15, 15, 3, 15], dist=[40, 80, 120, 150, 40, 40],
               movement=[0, 0, 0, 1, 0, 2])  # fmt: skip
    lanes = np.array([True, False, False])
    assert zone_count(obs, lanes, **ZONE) == 2  # 40 m and 80 m on lane 0 (3 m/s: too slow)
    assert zone_count(obs, lanes, ahead_s=5.0, **ZONE) == 1  # 120 m on lane 0
    assert zone_count(obs, np.array([True, True, True]), ahead_s=5.0, **ZONE) == 2
    assert zone_count(_obs([15], [10], [0]), lanes, ahead_s=5.0, **ZONE) == 0  # past the line


class _Switch:
    """A base that asks for the next green whenever feasible (ends every green it can)."""

    def reset(self, env) -> None:
        self.n = {a: lt.program.n_greens for a, lt in env.lights.items()}

    def compute_actions(self, obs, infos):
        out = {}
        for a, o in obs.items():
            cur = int(np.argmax(o["phase"][: self.n[a]]))
            nxt = (cur + 1) % self.n[a]
            out[a] = nxt if o["action_mask"][nxt] else cur
        return out


def _longest_kept(scenario: Scenario, config: DzGuardConfig, seed: int = 2) -> int:
    """The most decisions in a row one light's green was kept against the base's wish."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=scenario)
    pol = GuardedPolicy(_Switch(), config)
    longest, run = 0, {}
    try:
        obs, infos = env.reset(seed=seed)
        pol.reset(env)
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            want = pol.policy.compute_actions(obs, infos)
            act = pol.compute_actions(obs, infos)
            for a in act:
                run[a] = run.get(a, 0) + 1 if act[a] != want[a] else 0
                longest = max(longest, run[a])
            obs, _, _, trunc, infos = env.step(act)
    finally:
        env.close()
    return longest


def test_max_extensions_bounds_the_greens_kept_in_a_row(arterial_sc: Scenario) -> None:
    """On the arterial (busy 60-70 km/h approaches) the unbounded guard keeps some greens several
    decisions in a row; with ``max_extensions=1`` never two in a row, and still some."""
    sc = arterial_sc.replace(end=600.0)
    assert _longest_kept(sc, DzGuardConfig()) >= 2
    assert _longest_kept(sc, DzGuardConfig(max_extensions=1)) == 1


def test_fewer_next_keeps_only_when_the_zone_empties() -> None:
    """``fewer-next`` keeps a green only while fewer vehicles are predicted in the zone one
    decision ahead; ``occupied`` keeps it whenever the zone is occupied."""

    class _Zone:  # the env's DilemmaZone for one light whose lane 0 loses green
        zone, min_speed = (2.5, 5.5), 5.0

        @staticmethod
        def lanes(k, i, j):
            return np.array([True])

    def keep(rule: str, speed, dist) -> bool:
        guard = DzGuard(DzGuardConfig(rule=rule))
        guard.dilemma, guard.delta_time, guard.index = _Zone(), 5.0, {"A0": 0}
        return guard.keep("A0", _obs(speed, dist, [0] * len(speed)), 0, 1)

    assert keep("occupied", [15], [40]) and keep("fewer-next", [15], [40])  # the zone empties
    assert keep("occupied", [15, 15], [40, 120])
    assert not keep("fewer-next", [15, 15], [40, 120])  # one now, one next: no better later
    assert not keep("occupied", [15], [120]) and not keep("fewer-next", [15], [120])


def test_dz_protected_takes_the_guard_settings_and_pickles_without_episode_state(
    default_sc: Scenario,
) -> None:
    pol = DilemmaProtectedPolicy(rule="fewer-next", max_extensions=2)
    assert pol.guard.config == DzGuardConfig(rule="fewer-next", max_extensions=2)
    assert "at most 2 decision interval" in pol.describe()
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=30.0))
    try:
        env.reset(seed=1)
        pol.reset(env)
        again = pickle.loads(pickle.dumps(pol))
        assert again.guard.config == pol.guard.config and not hasattr(again.guard, "dilemma")
        again.reset(env)  # usable once reset in the process it lands in
    finally:
        env.close()


# ---------------------------------------------------------------------- dz-protected
def test_extends_only_while_occupied_and_never_past_max_green(default_sc: Scenario) -> None:
    """With a base that always wants to switch: every kept green had a vehicle in the zone of the
    lanes it would release, every other decision is the base's, and no green lasts past max green
    (the shield's own clock)."""
    cfg = EnvConfig(metrics=False, min_green=10.0, max_green=30.0)
    env = TrafficSignalCore(cfg, scenario=default_sc.replace(end=900.0))
    pol = DilemmaProtectedPolicy()
    pol.policy, pol.base_name = _Switch(), "switch"
    kept = 0
    try:
        obs, infos = env.reset(seed=2)
        pol.reset(env)
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            want = pol.policy.compute_actions(obs, infos)["A0"]
            act = pol.compute_actions(obs, infos)["A0"]
            o, cur = obs["A0"], env.shields["A0"].current
            if act != want:
                assert act == cur and o["action_mask"][cur] and o["action_mask"][want]
                assert pol.guard.keep("A0", o, cur, want)
                kept += 1
            elif want != cur and o["action_mask"][cur]:
                assert not pol.guard.keep("A0", o, cur, want)
            obs, _, _, trunc, infos = env.step({"A0": act})
            assert not infos["A0"]["vetoed"]
            assert env.shields["A0"].time_in_green(env.sim_time) <= cfg.max_green + cfg.delta_time
            # a green running past max green is ended by the mask, not kept by the policy
            if env.shields["A0"].time_in_green(env.sim_time) >= cfg.max_green:
                assert obs["A0"]["action_mask"][env.shields["A0"].current] == 0
    finally:
        env.close()
    assert kept > 0 and pol.extensions == kept


def test_registered_with_a_base() -> None:
    pol = make_policy("dz-protected", base="greedy", margin=1.0)
    assert pol.base_name == "greedy" and pol.policy.margin == 1.0
    assert "dilemma zone" in pol.describe()
    with pytest.raises(ValueError, match="dz-protected: base"):
        make_policy("dz-protected", base="sumo-actuated")


def test_less_dilemma_exposure_than_its_base(default_sc: Scenario) -> None:
    """One seeded episode of the embedded scenario: fewer vehicles caught in the zone at green ends
    than the base baseline (behaviour, not timing)."""
    sc = default_sc.replace(end=900.0)
    cost = {
        n: evaluate(sc, n, episodes=1, seeds=[4]).rows[0]["cost_dilemma_zone"]
        for n in ("max-occupancy", "dz-protected")
    }
    assert cost["max-occupancy"] > 0 and cost["dz-protected"] < cost["max-occupancy"]
