"""The delay-cost frontier (``tj_hybrid.evaluation.frontier``) and phase 3's ``cost_limit: auto``
rule (``tj_hybrid.phase3.limit.frontier_limit``) on small hand-made cases: a dominated point,
ties, the step between frontier points, no frontier point fast enough; each branch of the rule."""

from __future__ import annotations

import math

import pytest

from tj_hybrid.config import ConfigError, load_config
from tj_hybrid.evaluation import Frontier, correlation, dominated_by, frontier_points, pareto_front
from tj_hybrid.phase3.limit import frontier_limit, lagrangian_limit

# fast-but-unsafe to slow-but-safe, and one that is worse than "mid" on both
POINTS = {"fast": (8.0, 20.0), "mid": (10.0, 5.0), "slow": (20.0, 0.0), "bad": (12.0, 9.0)}


def test_a_dominated_point_is_off_the_frontier_and_says_by_whom() -> None:
    assert pareto_front(POINTS) == ["fast", "mid", "slow"]  # by delay
    assert dominated_by(POINTS["bad"], POINTS) == ["mid"]
    assert dominated_by(POINTS["mid"], POINTS) == []


def test_ties() -> None:
    # equal points are both on it; equal delay: the costlier one is dominated; equal cost: the
    # slower one is
    assert pareto_front({"a": (5.0, 3.0), "b": (5.0, 3.0)}) == ["a", "b"]
    assert pareto_front({"a": (5.0, 3.0), "b": (5.0, 4.0)}) == ["a"]
    assert pareto_front({"a": (5.0, 3.0), "b": (6.0, 3.0)}) == ["a"]
    assert pareto_front({"a": (5.0, math.nan), "b": (6.0, 3.0)}) == ["b"]  # NaN: on nothing
    assert pareto_front({}) == []


def test_cost_at_is_a_step_between_frontier_points() -> None:
    f = Frontier.of(POINTS)
    assert f.names == ("fast", "mid", "slow")
    assert f.cost_at(8.0) == ("fast", 20.0)  # at a point: its cost
    assert f.cost_at(9.99) == ("fast", 20.0)  # between two: the left one's, not a line
    assert f.cost_at(10.0) == ("mid", 5.0)
    assert f.cost_at(19.0) == ("mid", 5.0)  # "bad" (12 s, 9) is not on it and changes nothing
    assert f.cost_at(100.0) == ("slow", 0.0)
    assert f.describe() == "fast (8.00 s, 20.0), mid (10.00 s, 5.0), slow (20.00 s, 0.0)"


def test_no_frontier_point_at_or_below_the_delay() -> None:
    assert Frontier.of(POINTS).cost_at(7.99) is None
    assert Frontier.of({}).cost_at(10.0) is None
    assert Frontier.of({}).describe() == "none"


def test_correlation_is_pearsons_r() -> None:
    assert correlation({"a": (1.0, 2.0), "b": (2.0, 4.0), "c": (3.0, 6.0)}) == pytest.approx(1.0)
    assert correlation({"a": (1.0, 6.0), "b": (2.0, 4.0), "c": (3.0, 2.0)}) == pytest.approx(-1.0)
    # by hand: delays 8, 10, 20, 12 and costs 20, 5, 0, 9
    d, c = [8.0, 10.0, 20.0, 12.0], [20.0, 5.0, 0.0, 9.0]
    md, mc = sum(d) / 4, sum(c) / 4
    cov = sum((x - md) * (y - mc) for x, y in zip(d, c, strict=True))
    r = cov / math.sqrt(sum((x - md) ** 2 for x in d) * sum((y - mc) ** 2 for y in c))
    assert correlation(POINTS) == pytest.approx(r)
    assert math.isnan(correlation({"a": (1.0, 2.0)}))  # one point
    assert math.isnan(correlation({"a": (1.0, 2.0), "b": (2.0, 2.0)}))  # no spread in cost


def test_frontier_points_read_an_evaluated_set() -> None:
    def spread(mean: float) -> dict[str, float]:
        return {"mean": mean, "std": 0.0, "min": mean, "max": mean, "n": 2}

    summary = {"a": {"avg_delay": spread(9.0), "cost": spread(3.0)},
               "b": {"avg_delay": spread(7.0), "cost": spread(4.0)},
               "no-cost": {"avg_delay": spread(5.0)}}  # fmt: skip
    assert frontier_points(summary) == {"a": (9.0, 3.0), "b": (7.0, 4.0)}
    assert frontier_points(summary, names=["b", "no-cost"]) == {"b": (7.0, 4.0)}


# ---------------------------------------------------------------------- the cost_limit: auto rule
def test_limit_is_the_frontier_cost_at_phase2_delay_plus_slack() -> None:
    # phase 2 at 9.6 s: (1 + 0.05) x 9.6 = 10.08 s reaches "mid" (10 s, 5); cap 0.6 x 30 = 18
    limit = frontier_limit(POINTS, (9.6, 30.0), slack=0.05, fraction=0.6)
    assert (limit.rule, limit.value) == ("frontier", 5.0)
    assert limit.line.startswith("cost limit 5.00 = the frontier's cost (mid) at 10.08 s")
    # without the slack "mid" is out of reach: the step stays at "fast" (20), above the cap
    assert frontier_limit(POINTS, (9.6, 30.0), slack=0.0, fraction=0.6).rule == "cap"


def test_limit_is_capped_at_the_fraction_of_phase2_cost() -> None:
    limit = frontier_limit(POINTS, (9.0, 30.0), slack=0.05, fraction=0.6)  # step: fast, 20
    assert (limit.rule, limit.value) == ("cap", pytest.approx(18.0))
    assert "below the frontier's 20.00 (fast)" in limit.line


def test_limit_falls_back_when_no_baseline_is_that_fast() -> None:
    limit = frontier_limit(POINTS, (7.0, 30.0), slack=0.05, fraction=0.5)  # 7.35 s < 8 s
    assert (limit.rule, limit.value) == ("fallback", 15.0)
    assert "no baseline on the frontier is at most 7.35 s" in limit.line
    assert frontier_limit({}, (7.0, 30.0), slack=0.05, fraction=0.5).rule == "fallback"


# ---------------------------------------------------------------------- config
def test_the_lagrangian_reads_the_same_share_of_phase2s_cost_where_it_trains() -> None:
    """Validation in the held-out windows: fokr_bs_demo's numbers (phase 2 52.75 there, 4.5 in
    the training windows; limit 31.65 = 0.6 x 52.75)."""
    limit = frontier_limit({}, (69.17, 52.75), slack=0.05, fraction=0.6)
    assert limit.training is None and limit.lagrangian == limit.value == pytest.approx(31.65)
    moved = lagrangian_limit(limit, 52.75, 4.5)
    assert moved.value == limit.value and moved.lagrangian == pytest.approx(0.6 * 4.5)
    assert "4.50" in moved.line and moved.rule == limit.rule
    # phase 2 at no cost where validation runs: the limit (0) is what the Lagrangian reads
    zero = frontier_limit({}, (9.0, 0.0), slack=0.05, fraction=0.6)
    assert lagrangian_limit(zero, 0.0, 3.0).lagrangian == 0.0


@pytest.mark.parametrize("value", ["-0.01", "1", "nan", "inf"])
def test_delay_slack_outside_0_1_is_rejected_naming_it(value: str) -> None:
    with pytest.raises(ConfigError, match=r"phase3: delay_slack: a fraction of phase 2's delay"):
        load_config(profile="smoke", overrides=[f"phase3.delay_slack={value}"])


def test_delay_slack_defaults_and_arrives_typed() -> None:
    assert load_config(profile="smoke").config.phase3.delay_slack == 0.05
    p3 = load_config(profile="smoke", overrides=["phase3.delay_slack=0"]).config.phase3
    assert p3.delay_slack == 0.0 and isinstance(p3.delay_slack, float)
