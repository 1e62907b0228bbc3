"""The trained policy against the best baseline (``tj_hybrid.evaluation.verdict``), on
hand-made held-out rows: which baseline is best, the paired count, the worst episode, NaN rows."""

from __future__ import annotations

import math

import pytest

from tj_hybrid.evaluation import verdict, verdict_lines


def _rows(policy: str, delays: list[float]) -> list[dict[str, object]]:
    # one episode per SUMO seed, the same traffic for every policy
    return [{"policy": policy, "window_index": 0, "route_index": 0, "seed": 100 + i,
             "avg_delay": d} for i, d in enumerate(delays)]  # fmt: skip


ROWS = [
    *_rows("phase2", [9.0, 8.0, 10.0]),
    *_rows("clone", [5.0, 5.0, 5.0]),  # trained: never the best baseline
    *_rows("max-pressure", [10.0, 10.0, 10.0]),
    *_rows("max-occupancy", [8.5, 9.0, 9.5]),
]


def test_the_best_baseline_is_the_lowest_mean_of_the_untrained_rows() -> None:
    v = verdict(ROWS, "phase2")
    assert v is not None and v.best == "max-occupancy"
    assert (v.delay, v.best_delay) == (9.0, 9.0) and v.change == pytest.approx(0.0)
    # paired by (window, route file, SUMO seed): 9.0 > 8.5, 8.0 <= 9.0, 10.0 > 9.5
    assert (v.not_worse, v.paired) == (1, 3)
    assert (v.worst, v.best_worst) == (10.0, 9.5)
    assert "phase2 9.00 s against the best baseline, max-occupancy, 9.00 s (+0.0%)" in v.line()
    assert "not slower in 1 of 3 episodes; worst episode 10.00 s (max-occupancy: 9.50 s)" in v.line()


def test_an_episode_without_a_delay_is_the_worst_and_a_loss() -> None:
    rows = [*_rows("phase3", [7.0, math.nan, 7.0]), *_rows("fixed-time", [20.0, 20.0, 20.0])]
    v = verdict(rows, "phase3")
    assert v is not None and v.delay == 7.0  # the mean over episodes with one, as the tables
    assert (v.not_worse, v.paired) == (2, 3) and v.worst == math.inf
    assert "worst episode no trip finished (fixed-time: 20.00 s)" in v.line()
    assert v.change == pytest.approx(7.0 / 20.0 - 1.0)


def test_no_verdict_without_the_policy_or_a_baseline() -> None:
    assert verdict(ROWS, "phase3") is None
    assert verdict(_rows("phase2", [1.0]) + _rows("clone", [2.0]), "phase2") is None
    assert verdict(_rows("phase2", [math.nan]) + _rows("greedy", [2.0]), "phase2") is None


def test_lines_per_set_and_policy_in_order() -> None:
    heavy = [{**r, "avg_delay": float(r["avg_delay"]) * 2} for r in ROWS]  # type: ignore[arg-type]
    lines = verdict_lines({"held_out": {"rows": ROWS}, "held_out_heavy": {"rows": heavy}},
                          ("phase2", "clone", "phase3"))  # fmt: skip
    assert [ln.split(" s against")[0] for ln in lines] == [
        "- held-out: phase2 9.00", "- held-out: clone 5.00",
        "- ~30% heavier: phase2 18.00", "- ~30% heavier: clone 10.00"]  # fmt: skip
    assert verdict_lines({}, ("phase2",)) == []
