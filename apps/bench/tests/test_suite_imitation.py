"""The imitation suite: a quick run records the teacher, its clone, the teacher with second-best
choices and the baselines on both held-out sets; the flips option and the second-best wrapper."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tj_bench.suites._imitation_child import SecondBest
from tj_bench.suites.imitation import parse_flips

SETS = ("held_out", "held_out_heavy")


def test_imitation_quick_run(quick) -> None:
    r = quick.suite("imitation")
    assert r.params["seeds"] == "0" and r.params["flips"] == "0.08"
    assert "look-ahead" in r.params["teacher_label"]
    assert r.figure("demonstrations").median > 0
    assert 0 < r.figure("clone/accuracy").median <= 100
    assert len(r.figure("dagger_agreement").values) == 1  # one DAgger round
    assert 0 <= r.figure("dagger_agreement").median <= 100
    for s in SETS:
        baselines = [f for f in r.figures if f.name.startswith(f"baseline/delay/{s}/")]
        assert len(baselines) >= 4  # fixed-time, max-pressure, greedy, max-occupancy, ...
        best = r.figure(f"best_baseline/delay/{s}").median
        assert best == min(f.median for f in baselines)
        for name in ("teacher", "clone", "second-best-0.08"):
            value = r.figure(f"{name}/delay/{s}").median
            assert math.isfinite(value) and 0 < value < 300  # s per vehicle
        assert len(r.figure(f"clone/delay/{s}").values) == 1  # one clone seed


def test_parse_flips() -> None:
    assert parse_flips("0.04, 0.08") == [0.04, 0.08]
    assert parse_flips("") == []
    for bad in ("0", "1", "0.1,0.1", "x", "-0.2"):
        with pytest.raises(ValueError):
            parse_flips(bad)


class _Ranked:
    """A teacher whose look-ahead values are fixed: light a ranks greens 2 < 0 < 1 (3 infeasible),
    light b has one feasible green."""

    def __init__(self) -> None:
        self.last_values: dict[str, np.ndarray] = {}

    def reset(self, env) -> None:
        pass

    def compute_actions(self, obs, infos) -> dict[str, int]:
        self.last_values = {"a": np.array([5.0, 9.0, 1.0, np.nan]), "b": np.array([np.nan, 3.0])}
        return {"a": 2, "b": 1}


def test_second_best_takes_the_second_green_at_its_rate() -> None:
    always = SecondBest(_Ranked(), 0.999999)
    assert always.compute_actions({}, {}) == {"a": 0, "b": 1}  # b has no second green
    assert always.flipped == 1
    rate, n = 0.25, 4000
    policy = SecondBest(_Ranked(), rate, seed=3)
    taken = [policy.compute_actions({}, {})["a"] for _ in range(n)]
    assert set(taken) == {0, 2}  # never the worst or an infeasible green
    assert abs(taken.count(0) / n - rate) < 0.03
    policy.reset(None)  # the draws start again: a reset episode repeats
    assert [policy.compute_actions({}, {})["a"] for _ in range(50)] == taken[:50]
    with pytest.raises(ValueError):
        SecondBest(_Ranked(), 0.0)
