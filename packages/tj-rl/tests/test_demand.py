"""Demand pools: seeded route files from randomTrips, cached and checked, held-out sets disjoint
from training, and scenarios that really run the new traffic (SUMO runs, no mocks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tj_rl.env import EnvConfig, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.eval import evaluate
from tj_rl.traffic.demand import DemandPool, DemandSpec, generate_demand
from tj_rl.traffic.routes import pick_route, read_departures


def _departs(path: Path) -> list[float]:
    return [d.depart for d in read_departures(path)]


def test_generation_is_deterministic_per_seed_and_differs_between_seeds(
    tmp_path: Path, default_sc: Scenario
) -> None:
    spec = DemandSpec(rates=(900.0,), end=300.0, seeds=(1, 2))
    a1, a2 = generate_demand(default_sc, spec, tmp_path / "a")
    (b1,) = generate_demand(default_sc.net_file, spec.replace(seeds=(1,)), tmp_path / "b")
    assert [p.name for p in (a1, a2)] == ["routes-s1.rou.xml", "routes-s2.rou.xml"]
    assert b1.name == a1.name
    assert read_departures(a1) == read_departures(b1)  # ids, departures and routes
    assert _departs(a1) != _departs(a2)
    assert [d.edges for d in read_departures(a1)] != [d.edges for d in read_departures(a2)]
    for p in (a1, a2):
        d = _departs(p)
        assert 60 <= len(d) <= 90 and min(d) >= 0 and max(d) < 300  # 900 veh/h over 300 s
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [a1.name, a2.name]  # no leftovers


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"rates": (), "period": ()}, "exactly one"),
        ({"rates": (600.0,), "period": (2.0,)}, "exactly one"),
        ({"rates": (600.0, 0.0)}, "> 0"),
        ({"begin": 100.0, "end": 100.0}, "end > begin"),
        ({"seeds": ()}, "seeds"),
        ({"seeds": (1, 1)}, "duplicates"),
        ({"seeds": (-1,)}, "seeds"),
        ({"vehicle_class": "spaceship"}, "vClass"),
        ({"fringe_factor": 0.0}, "fringe_factor"),
        ({"min_distance": -1.0}, "min_distance"),
    ],
)
def test_demand_spec_is_validated(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        DemandSpec(**{"rates": (600.0,), **changes})


def test_spec_rates_and_period_describe_the_same_load() -> None:
    by_period = DemandSpec(period=(2.0, 4.0))
    assert by_period.vehicles_per_hour == (1800.0, 900.0) and by_period.load == 1350.0
    heavy = by_period.scaled(1.3)
    assert heavy.period == () and heavy.load == pytest.approx(1.3 * 1350.0)


def test_pool_cache_is_reused_and_a_truncated_file_regenerated(
    tmp_path: Path, default_sc: Scenario, counting_runner: Any
) -> None:
    runner = counting_runner
    sc = default_sc.replace(end=60.0)
    pool = DemandPool.for_scenario(sc, tmp_path, seeds=(1, 2), rates=(600, 1200), runner=runner)
    files = pool.build()
    assert runner.calls == 4 and len(set(files)) == 4
    assert all(p.parent.name == f"net-{pool.net_sha256[:16]}" for p in files)
    before = [read_departures(p) for p in files]

    again = DemandPool.for_scenario(sc, tmp_path, seeds=(1, 2), rates=(600, 1200), runner=runner)
    assert again.build() == files and runner.calls == 4  # all four reused: randomTrips not run

    data = files[1].read_bytes()
    files[1].write_bytes(data[: len(data) // 2])  # a truncated cache entry
    files[3].write_bytes(b"")  # and an empty one
    assert again.build() == files and runner.calls == 6  # exactly those two regenerated
    assert [read_departures(p) for p in files] == before  # same seed: same traffic again

    other = DemandPool.for_scenario(sc, tmp_path, seeds=(1,), rates=(601,), runner=runner)
    assert other.build()[0] not in files and runner.calls == 7  # another rate: another key


def test_route_for_is_deterministic_and_uses_every_file_per_cycle(
    tmp_path: Path, default_sc: Scenario
) -> None:
    sc = default_sc.replace(end=30.0)
    pool = DemandPool.for_scenario(sc, tmp_path, seeds=(1, 2), rates=(600, 1200))
    files = pool.build()
    other = DemandPool.for_scenario(sc, tmp_path, seeds=(1, 2), rates=(600, 1200))
    for seed in (0, 1):
        seq = [pool.route_for(e, seed) for e in range(12)]
        assert seq == [other.route_for(e, seed) for e in range(12)]
        for c in range(3):
            assert sorted(seq[4 * c : 4 * c + 4]) == sorted(files)
    assert [pool.route_for(e, 0) for e in range(12)] != [pool.route_for(e, 1) for e in range(12)]
    as_text = [str(p) for p in files]  # what an env process may get: just the file list
    assert [pick_route(as_text, e, 1) for e in range(12)] == [
        pool.route_for(e, 1) for e in range(12)
    ]
    sc2 = pool.scenario_for(sc, 5, seed=1)
    assert sc2.route_files == (pool.route_for(5, 1),) and sc2.net_file == sc.net_file
    with pytest.raises(ValueError, match="episode"):
        pool.route_for(-1)


def test_held_out_refuses_training_seeds_and_rates_outside_the_range(
    tmp_path: Path, default_sc: Scenario, counting_runner: Any
) -> None:
    runner = counting_runner
    pool = DemandPool.for_scenario(
        default_sc, tmp_path, seeds=(1, 2), rates=(600, 1200), runner=runner
    )
    with pytest.raises(ValueError, match=r"route seed\(s\) \[2\] are training seeds"):
        pool.held_out((2, 3))
    with pytest.raises(ValueError, match="outside the training range"):
        pool.held_out((7,), rates=(1500,))
    with pytest.raises(ValueError, match="heavy_factor"):
        pool.held_out((7,), heavy_factor=1.0)
    assert runner.calls == 0  # refused before generating anything


def test_held_out_sets_in_range_and_heavier(tmp_path: Path, default_sc: Scenario) -> None:
    sc = default_sc.replace(end=300.0)
    pool = DemandPool.for_scenario(sc, tmp_path, seeds=(1,), rates=(600, 1200))
    normal, heavy = pool.held_out((7, 8))
    assert (normal.name, heavy.name) == ("held-out", "held-out-heavy")
    assert normal.seeds == heavy.seeds == (7, 8) and not set(normal.seeds) & set(pool.seeds)
    assert normal.loads == (900.0,) and heavy.loads == pytest.approx((1170.0,))
    assert len(normal.files) == len(heavy.files) == 2 and not set(normal.files) & set(heavy.files)
    n = np.array([len(read_departures(p)) for p in normal.files])
    h = np.array([len(read_departures(p)) for p in heavy.files])
    assert np.all(h > n) and 1.15 < h.sum() / n.sum() < 1.45  # ~30% more vehicles
    explicit, _ = pool.held_out((7,), rates=(600,))  # the range's ends are inside
    assert explicit.loads == (600.0,)
    val = pool.validation((5,))  # to choose by: held-out's levels, its own seeds
    assert val.name == "validation" and val.seeds == (5,) and val.loads == (900.0,)
    assert not set(val.files) & (set(normal.files) | set(pool.files))
    with pytest.raises(ValueError, match="training seeds"):
        pool.validation((1,))


def _run_ids(scenario: Scenario) -> tuple[set[str], int]:
    """Vehicle ids observed over an episode and the vehicles SUMO inserted (from its outputs)."""
    env = TrafficSignalCore(EnvConfig(metrics=True), scenario=scenario)
    ids: set[str] = set()
    try:
        obs, _ = env.reset(seed=0)
        while True:
            obs, _, _, trunc, infos = env.step(dict.fromkeys(obs, 0))
            for frame in env.last_frames.values():
                ids.update(frame.ids)
            if trunc["__all__"]:
                break
        m = infos[next(iter(infos))]["episode"]
        return ids, m["throughput"] + m["unfinished"]
    finally:
        env.close()


def test_with_routes_replaces_the_scenarios_traffic(tmp_path: Path, default_sc: Scenario) -> None:
    sc = default_sc.replace(end=300.0)
    spec = DemandSpec(rates=(900.0,), end=300.0, seeds=(5,), prefix="hx")
    (routes,) = generate_demand(sc, spec, tmp_path)
    own = sum(d < 300.0 for d in _departs(sc.route_files[0]))
    new = sum(d < 300.0 for d in _departs(routes))
    assert own != new

    ids, inserted = _run_ids(sc)
    assert inserted == own and ids and not any(i.startswith("hx") for i in ids)
    other = sc.with_routes(routes)
    assert other.sumocfg == sc.sumocfg and other.route_files == (routes,)
    ids, inserted = _run_ids(other)
    # the sumocfg's own routes are replaced, not added: only the new vehicles run
    assert inserted == new and ids and all(i.startswith("hx") for i in ids)
    with pytest.raises(ScenarioError, match="route files"):
        sc.with_routes()


def test_a_builder_grid_works_with_a_pool(tmp_path: Path, grid_sc: Scenario) -> None:
    pool = DemandPool.for_scenario(grid_sc, tmp_path, seeds=(1, 2), rates=(900, 1500))
    files = pool.build()
    assert len(files) == 4
    sc = pool.scenario_for(grid_sc, episode=0, seed=0)
    table = evaluate(sc, "max-pressure", seeds=[0])
    row = table.rows[0]
    departs = [d for d in _departs(sc.route_files[0]) if d < grid_sc.end]
    assert row["status"] == "time_limit" and row["vetoes"] == 0
    assert row["throughput"] + row["unfinished"] == len(departs) > 0
    normal, heavy = pool.held_out((3,))
    assert normal.loads == (1200.0,) and len(heavy.files) == 1
