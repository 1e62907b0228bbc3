"""Held-out evaluation: policies on the same unseen route files x SUMO seeds, one protocol, and a
table with mean and spread of every traffic metric and safety cost (SUMO runs, no mocks)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tj_rl.control import MaxPressurePolicy
from tj_rl.env import COST_NAMES, EnvConfig, Scenario
from tj_rl.env.metrics import Spread, spread
from tj_rl.eval import evaluate
from tj_rl.eval.heldout import HELDOUT_METRICS, PEDESTRIAN_METRICS, HeldOutTable, evaluate_heldout
from tj_rl.traffic.demand import DemandPool


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory, default_sc: Scenario) -> DemandPool:
    sc = default_sc.replace(end=120.0)
    return DemandPool.for_scenario(
        sc, tmp_path_factory.mktemp("pool"), seeds=(1, 2), rates=(600, 1200)
    )


def test_fixed_time_vs_max_pressure_on_held_out_traffic(
    pool: DemandPool, default_sc: Scenario
) -> None:
    sc = default_sc.replace(end=120.0)
    normal, _heavy = pool.held_out((10, 11))
    table = evaluate_heldout(
        sc, ["fixed-time", "max-pressure"], normal, seeds=[5], training_seeds=[0, 1]
    )
    assert table.name == "held-out" and table.policies == ("fixed-time", "max-pressure")
    assert len(table.rows) == 4
    # same protocol: both policies ran exactly the same (route file, SUMO seed) episodes
    runs = {p: sorted((r["routes"], r["seed"]) for r in table.rows if r["policy"] == p)
            for p in table.policies}  # fmt: skip
    assert runs["fixed-time"] == runs["max-pressure"] == sorted((f.name, 5) for f in normal.files)
    assert all(r["status"] == "time_limit" for r in table.rows)
    summary = table.summary()
    assert set(HELDOUT_METRICS) >= {"avg_delay", "throughput", *(f"cost_{c}" for c in COST_NAMES)}
    for pol in table.policies:
        assert list(summary[pol]) == list(HELDOUT_METRICS)  # every column, for every policy
        for name, s in summary[pol].items():
            assert s.n == 2 and s.min <= s.mean <= s.max and s.std >= 0, (pol, name, s)
    assert summary["fixed-time"]["throughput"].max > 0
    ft = [r for r in table.rows if r["policy"] == "fixed-time"]
    assert ft[0]["avg_delay"] != ft[1]["avg_delay"]  # the two route files are different traffic
    # each row is what evaluate() gives for that traffic and seed (fixed-time is deterministic)
    alone = evaluate(sc.with_routes(normal.files[0]), "fixed-time", seeds=[5]).rows[0]
    assert {k: alone[k] for k in HELDOUT_METRICS} == {k: ft[0][k] for k in HELDOUT_METRICS}
    md = table.to_markdown().splitlines()
    assert md[0] == "| policy | episodes | " + " | ".join(HELDOUT_METRICS) + " |"
    assert md[2].startswith("| fixed-time | 2 | ") and md[3].startswith("| max-pressure | 2 | ")
    assert all(line.count(" ± ") == len(HELDOUT_METRICS) for line in md[2:])
    assert not table.has_pedestrians  # the embedded net has none: no pedestrian columns


def test_pedestrian_columns_appear_when_the_traffic_has_pedestrians() -> None:
    """Rows are what ``evaluate`` gives; a table whose episodes had persons adds their columns,
    and rows written before the pedestrian metrics (no such keys) spread as NaN, not KeyError."""
    base = dict.fromkeys(HELDOUT_METRICS, 1.0)
    rows = [
        {"policy": "a", **base, "persons": 12, "avg_ped_waiting": 30.0},
        {"policy": "a", **base, "persons": 8, "avg_ped_waiting": 50.0},
        {"policy": "b", **base},  # an older row
    ]
    table = HeldOutTable(policies=("a", "b"), rows=rows)
    assert table.has_pedestrians
    head = table.to_markdown().splitlines()[0]
    assert head.endswith("| persons | avg_ped_waiting |")
    assert table.columns(("avg_delay", "persons")) == ("avg_delay", "persons", "avg_ped_waiting")
    summary = table.summary((*HELDOUT_METRICS, *PEDESTRIAN_METRICS))
    assert summary["a"]["avg_ped_waiting"] == Spread(40.0, 10.0, 30.0, 50.0, 2)
    assert summary["b"]["persons"].n == 0
    assert not HeldOutTable(policies=("b",), rows=rows[2:]).has_pedestrians


def test_policy_objects_and_named_mappings(pool: DemandPool, default_sc: Scenario) -> None:
    sc = default_sc.replace(end=60.0)
    files = pool.files[:1]
    by_name = evaluate_heldout(sc, "max-pressure", files, seeds=[3, 4])
    by_object = evaluate_heldout(sc, {"mp": MaxPressurePolicy()}, files, seeds=[3, 4])
    assert by_object.policies == ("mp",) and by_object.name == "held-out"
    for a, b in zip(by_name.rows, by_object.rows, strict=True):
        assert {k: a[k] for k in HELDOUT_METRICS} == {k: b[k] for k in HELDOUT_METRICS}
    assert by_object.summary()["mp"]["avg_delay"].n == 2


def test_refusals_before_any_sumo_run(pool: DemandPool, default_sc: Scenario) -> None:
    files = [Path("never-read.rou.xml")]
    with pytest.raises(ValueError, match=r"SUMO seed\(s\) \[1\] were used in training"):
        evaluate_heldout(default_sc, "fixed-time", files, seeds=[1, 2], training_seeds=range(2))
    with pytest.raises(ValueError, match="unknown"):
        evaluate_heldout(default_sc, ["fixed-time", "nope"], files, seeds=[7])
    with pytest.raises(ValueError, match="uniquely named"):
        evaluate_heldout(default_sc, ["greedy", "greedy"], files, seeds=[7])
    with pytest.raises(ValueError, match="each at most once"):
        evaluate_heldout(default_sc, ["greedy"], files, seeds=[7, 7])
    with pytest.raises(ValueError, match="metrics"):
        evaluate_heldout(default_sc, "greedy", files, [7], config=EnvConfig(metrics=False))


def test_spread_and_metrics_table_spread(default_sc: Scenario) -> None:
    assert spread([1.0, 3.0, math.nan]) == Spread(2.0, 1.0, 1.0, 3.0, 2)
    empty = spread([math.nan])
    assert empty.n == 0 and math.isnan(empty.mean)
    table = evaluate(default_sc.replace(end=60.0), "greedy", episodes=2, seeds=[0, 1])
    s = table.spread()
    assert set(s) == set(table.summary())
    for k, (mean, std) in table.summary().items():
        assert s[k].mean == pytest.approx(mean, nan_ok=True)
        assert s[k].std == pytest.approx(std, nan_ok=True) and s[k].min <= s[k].max


def test_worse_than_fixed_time_pairs_episodes_on_the_same_traffic() -> None:
    """Each episode is compared with fixed-time's on the same (window, route file, SUMO seed);
    a NaN delay (nothing finished: a gridlock) counts as worse; the legend says the counts."""
    from tj_rl.eval import HeldOutTable

    def row(policy: str, route: int, seed: int, delay: float) -> dict:
        return {"policy": policy, "route_index": route, "window_index": 0, "seed": seed,
                "avg_delay": delay}  # fmt: skip

    table = HeldOutTable(policies=("fixed-time", "agent", "other"), rows=[
        row("fixed-time", 0, 1, 20.0), row("fixed-time", 1, 1, 10.0),
        row("agent", 0, 1, 12.0), row("agent", 1, 1, 11.0),  # better on average, loses one
        row("other", 1, 1, math.nan), row("other", 0, 1, 19.0),  # order does not matter
    ])  # fmt: skip
    assert table.worse_than() == {"agent": (1, 2), "other": (1, 2)}
    assert table.worse_than("agent") == {"fixed-time": (1, 2), "other": (2, 2)}
    assert "`fixed-time` on the same traffic and SUMO seed: agent 1/2, other 1/2." in table.legend()
    assert "fixed-time" not in HeldOutTable(policies=("agent",), rows=[]).legend()
    unnamed = HeldOutTable(policies=("fixed-time", "agent"), rows=[  # rows without their seed
        {"policy": "fixed-time", "avg_delay": 9.0}, {"policy": "agent", "avg_delay": 12.0}])
    assert unnamed.worse_than() == {"agent": (0, 0)} and "same traffic" not in unnamed.legend()
