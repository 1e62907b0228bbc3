"""--compare's rule: flagged only outside the old spread by more than the threshold, in the
direction that is worse; facts and unmeasured figures are never flagged."""

from __future__ import annotations

import math

import pytest

from tj_bench import Figure, SuiteResult, compare, render_comparison


def results(make_results, **figures: tuple[str | None, list[float]]) -> object:
    figs = [Figure(name=n, unit="u", better=b, values=v) for n, (b, v) in figures.items()]
    return make_results(SuiteResult(suite="s", figures=figs))


def test_flags_follow_direction_spread_and_threshold(make_results) -> None:
    def run(**figures):
        return results(make_results, **figures)

    old = run(t=("lower", [10, 11, 12]), speed=("higher", [100, 110, 120]), size=(None, [5]),
              cost=("lower", [-2, -1]), gone=("lower", [1.0]))  # fmt: skip
    new = run(t=("lower", [13.5]), speed=("higher", [89]), size=(None, [50]),
              cost=("lower", [-0.5]), gone=("lower", [math.nan]))  # fmt: skip
    rows = {r.figure: r for r in compare(new, old, threshold=0.10)}
    assert rows["t"].regressed and rows["t"].ratio == pytest.approx(13.5 / 11)  # > 12 * 1.1
    assert rows["speed"].regressed  # < 100 * 0.9
    assert not rows["size"].regressed and not rows["size"].improved  # a fact
    assert rows["cost"].regressed  # -0.5 > -1 + 0.1: worse for a lower-is-better figure
    assert not rows["gone"].regressed
    # inside the margin: not flagged either way
    near = run(t=("lower", [13.1]), speed=("higher", [91]), size=(None, [5]),
               cost=("lower", [-0.95]), gone=("lower", [1.0]))  # fmt: skip
    assert not any(r.regressed for r in compare(near, old, threshold=0.10))
    better = run(t=("lower", [8]), speed=("higher", [140]), size=(None, [5]),
                 cost=("lower", [-3]), gone=("lower", [1.0]))  # fmt: skip
    rows = {r.figure: r for r in compare(better, old)}
    assert rows["t"].improved and rows["speed"].improved and rows["cost"].improved
    assert "**regressed**" in render_comparison(compare(new, old))


def test_failed_or_missing_suites_are_not_compared(make_results) -> None:
    old = results(make_results, t=("lower", [1.0]))
    failed = make_results(SuiteResult(suite="s", status="failed", error="boom"))
    assert compare(failed, old) == [] and compare(old, failed) == []
    with pytest.raises(ValueError, match="threshold"):
        compare(old, old, threshold=1.5)
