"""The phase3 suite: a quick run continues phase 2's run and records phase 3 against phase 2; the
readings (changes, cache speed-up) from a run's files."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tj_bench.suites._phase_read import cache_speedup, phase3_readings
from tj_hybrid import Evaluation, HeldOutSet, PhaseResult, Spread

POLICIES = ("phase3", "phase2", "fixed-time", "max-pressure", "greedy")


def test_phase3_quick_run(quick) -> None:
    r = quick.suite("phase3")
    assert r.params["runs"] == "graph-s0 (seed 0)"  # phase 2's run of the same benchmark run
    fig = {f.name: f for f in r.figures}
    assert all(len(f.values) == 1 for f in fig.values())  # one training seed
    for p in POLICIES:
        assert 0 < fig[f"delay/{p}"].median < 300 and fig[f"cost/{p}"].median >= 0
    c3, c2 = fig["cost/phase3"].median, fig["cost/phase2"].median
    if c2 > 0:
        assert fig["cost_change"].median == pytest.approx(100 * (c3 / c2 - 1))
    # auto: from the baselines' frontier on validation, set before training; 0 is a valid limit
    # (on the default net dz-protected is as fast as any and costs 0); test_phase_all_e2e checks
    # it against phase3/limit.json
    assert math.isfinite(fig["cost_limit"].median) and fig["cost_limit"].median >= 0
    assert fig["lambda"].median >= 0 and 0 <= fig["data_wait"].median <= 100
    assert fig["cache_speedup"].median > 0
    assert 0 < fig["train_wall"].median <= fig["wall"].median
    assert fig["peak_tree_pss"].median > 100  # MiB: ranks, collectors, SUMO
    if any(s.suite == "phase2" for s in quick.results.suites):
        # it continued the phase2 suite's run: the same phase-2 policy on the same held-out traffic
        p2 = quick.suite("phase2").figure("graph/delay/held_out/policy").median
        assert fig["delay/phase2"].median == pytest.approx(p2)


def test_cache_speedup() -> None:
    rows = [{"time/epoch_first_s": 1.2, "time/epoch_later_s": 1.0},
            {"time/epoch_first_s": 1.5, "time/epoch_later_s": 1.0}, {"step": 3}]  # fmt: skip
    assert cache_speedup(rows) == pytest.approx(1.35)
    assert math.isnan(cache_speedup([{"step": 1}]))


def _held(summary: dict[str, dict[str, float]]) -> HeldOutSet:
    return HeldOutSet(rows=[], summary={p: {k: Spread(mean=v, std=0.0, min=v, max=v, n=1)
                                            for k, v in m.items()} for p, m in summary.items()})  # fmt: skip


def test_phase3_readings(tmp_path: Path) -> None:
    delay = {"phase3": 9.0, "phase2": 10.0, "fixed-time": 27.0, "greedy-m2": 12.0}
    cost = {"phase3": 45.0, "phase2": 50.0, "greedy-m2": 78.0}
    metrics = {"cost_limit": None, "lambda": 2.9,
               "data_wait_fraction": 0.37, "train_wall_s": 97.0, "peak_tree_pss": 3 * 2**30,
               "tree_uss_before": 10 * 2**20, "tree_uss_after": 16 * 2**20}  # fmt: skip
    result = PhaseResult(name="3", agent=tmp_path, report=tmp_path, headline="", metrics=metrics)

    def evaluation() -> Evaluation:
        held = {p: {"avg_delay": d, **({"cost": cost[p]} if p in cost else {})}
                for p, d in delay.items()}  # fmt: skip
        heavy = {p: {"avg_delay": 11.0, "cost": 100.0} for p in POLICIES}
        return Evaluation(held_out=_held(held), held_out_heavy=_held(heavy))

    rows = [{"time/epoch_first_s": 2.0, "time/epoch_later_s": 1.0}]
    got = {r.name: r for r in phase3_readings(result, evaluation(), rows, 150.0)}
    assert got["cost_change"].value == pytest.approx(-10.0)
    assert got["delay_change"].value == pytest.approx(-10.0)
    assert got["delay/fixed-time"].better is None and "delay/greedy" not in got
    assert got["delay/greedy-m2"].value == 12.0 and got["cost/greedy-m2"].better is None
    assert math.isnan(got["cost_limit"].value)  # not calibrated: no episode ended
    assert got["heavy/cost/phase3"].value == 100.0 and got["cache_speedup"].value == 2.0
    assert got["data_wait"].value == pytest.approx(37.0) and got["uss_left"].value == 6.0
    cost["phase2"] = 0.0
    got = {r.name: r for r in phase3_readings(result, evaluation(), rows, 150.0)}
    assert math.isnan(got["cost_change"].value)
