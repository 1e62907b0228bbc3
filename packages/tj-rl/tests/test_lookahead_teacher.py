"""``lookahead``: the look-ahead teacher. Its forked simulation copies leave the running episode
untouched (same metrics, same SUMO output files), the copy of the base's own choice reproduces
the base, every light's other feasible greens are tried, and it refuses what it cannot fork."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from tj_rl.control import LookaheadPolicy, lookahead_unsupported, make_policy
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.config import COST_NAMES
from tj_rl.eval import evaluate
from tj_rl.eval.heldout import evaluate_heldout


class _LookButFollow:
    """Runs the look-ahead at every decision, then drives as the base would: any trace the copies
    leave on the parent (its simulation, its metrics files) shows up against the base alone."""

    def __init__(self, **kwargs) -> None:
        self.teacher = LookaheadPolicy(**kwargs)

    def reset(self, env) -> None:
        self.teacher.reset(env)

    def compute_actions(self, obs, infos):
        self.teacher.compute_actions(obs, infos)
        return self.teacher.base.compute_actions(obs, infos)


@pytest.mark.parametrize("sees", ["all", "observed"])
def test_copies_leave_the_episode_and_its_outputs_untouched(grid_sc: Scenario, sees: str) -> None:
    sc = grid_sc.replace(end=300.0)
    cfg = EnvConfig(metrics=True)
    looked = _LookButFollow(horizon_s=20.0, sees=sees)
    a = evaluate(sc, "max-occupancy", 1, seeds=[3], config=cfg).rows[0]
    b = evaluate(sc, looked, 1, seeds=[3], config=cfg).rows[0]
    assert looked.teacher.copies > 0  # the copies ran (and wrote nothing the parent reads)
    for key in ("avg_delay", "avg_trip_time", "throughput", "unfinished", "return", "cost_low_ttc"):
        assert a[key] == b[key], key


@pytest.mark.parametrize("sees", ["all", "observed"])
def test_the_base_copy_repeats_and_every_alternative_is_tried(grid_sc: Scenario, sees: str) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=grid_sc.replace(end=300.0))
    pol = LookaheadPolicy(horizon_s=15.0, workers=3, sees=sees)
    try:
        obs, infos = env.reset(seed=1)
        pol.reset(env)
        for _ in range(6):  # past min green: some lights have a choice
            obs, _, _, _, infos = env.step(pol.base.compute_actions(obs, infos))
        base = {a: int(v) for a, v in pol.base.compute_actions(obs, infos).items()}
        first, second = pol._values([base, base], steps=3)
        assert first == second  # seeded SUMO: the copy of the same choice repeats exactly
        before = pol.copies
        out = pol.compute_actions(obs, infos)
        alternatives = sum(int(np.count_nonzero(o["action_mask"])) - 1 for o in obs.values())
        assert alternatives > 0
        assert pol.copies - before == 1 + alternatives
        assert all(obs[a]["action_mask"][g] for a, g in out.items())
        # the parent is where it was: stepping on still works and the time moved by one step
        t = env.sim_time
        env.step(out)
        assert env.sim_time == pytest.approx(t + env.config.delta_time)
    finally:
        env.close()


def test_weighted_costs_join_the_look_ahead_queue(grid_sc: Scenario) -> None:
    """With ``cost_weights`` a copy's value is its halting vehicles plus the weighted costs of
    every light over the look-ahead: the same numbers the parent gets stepping the same actions."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=grid_sc.replace(end=300.0))
    weights = {"low_ttc": 3.0, "dilemma_zone": 50.0}
    plain, weighted = LookaheadPolicy(horizon_s=30.0), LookaheadPolicy(horizon_s=30.0,
                                                                       cost_weights=weights)  # fmt: skip
    w = np.array([weights.get(n, 0.0) for n in COST_NAMES])
    try:
        obs, infos = env.reset(seed=4)
        plain.reset(env)
        weighted.reset(env)
        for _ in range(6):
            obs, _, _, _, infos = env.step(plain.base.compute_actions(obs, infos))
        act = {a: int(v) for a, v in plain.base.compute_actions(obs, infos).items()}
        (queue,), (value,) = plain._values([act], steps=6), weighted._values([act], steps=6)
        seen_queue, seen_cost = 0.0, 0.0
        for _ in range(6):  # the parent plays out what the copies did
            obs, _, _, _, infos = env.step(act)
            seen_queue += float(next(iter(infos.values()))["system"]["queue"])
            seen_cost += sum(float(i["costs"] @ w) for i in infos.values())
            act = plain.base.compute_actions(obs, infos)
        assert seen_cost > 0  # the case tests something: the look-ahead met a weighted cost
        assert queue == pytest.approx(seen_queue)
        assert value == pytest.approx(seen_queue + seen_cost)
        assert "50 x dilemma_zone" in weighted.describe() and "x" not in plain.describe().split(
            "scored by")[1]  # fmt: skip
    finally:
        env.close()


def test_no_look_ahead_at_the_last_decision(default_sc: Scenario) -> None:
    """A copy never reaches the episode's end (which would close SUMO's outputs): the last
    decision is the base's without a copy."""
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=30.0))
    pol = LookaheadPolicy(horizon_s=100.0)
    try:
        obs, infos = env.reset(seed=1)
        pol.reset(env)
        while env.sim_time < 25.0 - 1e-6:
            obs, _, _, _, infos = env.step(pol.compute_actions(obs, infos))
        before = pol.copies
        assert pol.compute_actions(obs, infos) == {
            a: int(v) for a, v in pol.base.compute_actions(obs, infos).items()
        }
        assert pol.copies == before
    finally:
        env.close()


def test_a_reset_teacher_travels_without_its_env(default_sc: Scenario) -> None:
    """Held-out evaluation sends policies to worker processes: a teacher that has run pickles
    without the running SUMO, and the copy, reset on its own env, decides as the original."""
    sc = default_sc.replace(end=120.0)
    pol = LookaheadPolicy(horizon_s=20.0)
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=sc)
    try:
        obs, infos = env.reset(seed=2)
        pol.reset(env)
        for _ in range(4):
            obs, _, _, _, infos = env.step(pol.compute_actions(obs, infos))
        copy = pickle.loads(pickle.dumps(pol))
        assert copy.env is None and copy.copies == pol.copies and pol.env is env
        want = pol.compute_actions(obs, infos)
    finally:
        env.close()
    with pytest.raises(AssertionError, match="reset"):
        copy.compute_actions(obs, infos)
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=sc)
    try:
        obs2, infos2 = env.reset(seed=2)
        copy.reset(env)
        for _ in range(4):
            obs2, _, _, _, infos2 = env.step(copy.compute_actions(obs2, infos2))
        assert copy.compute_actions(obs2, infos2) == want
    finally:
        env.close()


def test_held_out_workers_run_a_teacher_that_has_run(
    default_sc: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    """After a serial evaluation the teacher still holds its (closed) env; a second evaluation with
    workers sends it to them anyway, and they give the serial rows."""
    sc = default_sc.replace(end=60.0)
    routes = [sc.route_files[0]]
    teacher = LookaheadPolicy(horizon_s=20.0)
    serial = evaluate_heldout(sc, {"teacher": teacher}, routes, seeds=[5, 6])
    assert teacher.env is not None and teacher.copies > 0
    parallel = evaluate_heldout(sc, {"teacher": teacher}, routes, seeds=[5, 6], workers=2)
    assert "cannot be sent" not in caplog.text  # they ran in the workers
    assert parallel.rows == serial.rows


def test_refuses_traci_and_bad_settings(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False, backend="traci"), scenario=default_sc)
    try:
        with pytest.raises(ValueError, match=r"libsumo.*but backend=traci"):
            make_policy("lookahead").reset(env)
    finally:
        env.close()
    with pytest.raises(ValueError, match="base"):
        LookaheadPolicy(base="sumo-actuated")
    with pytest.raises(ValueError, match="horizon_s"):
        LookaheadPolicy(horizon_s=0.0)
    with pytest.raises(ValueError, match="workers"):
        LookaheadPolicy(workers=0)
    with pytest.raises(ValueError, match="sees"):
        LookaheadPolicy(sees="future")
    with pytest.raises(ValueError, match="unknown cost"):
        LookaheadPolicy(cost_weights={"near_miss": 1.0})
    with pytest.raises(ValueError, match="finite and >= 0"):
        LookaheadPolicy(cost_weights={"dilemma_zone": -1.0})


def test_unsupported_names_the_reason() -> None:
    # the one check the policy and the app's preflight share (this suite runs on Linux)
    assert lookahead_unsupported("libsumo") is None
    assert lookahead_unsupported("traci") == "backend=traci"
