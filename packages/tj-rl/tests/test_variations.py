"""Variations of a scenario's own demand: SUMO's duarouter expands and resamples the real route
files (trips, flows, a redefined default type distribution, persons, bicycles, ``.gz``), the
result is seeded, sorted, cached and runs in SUMO with the scenario's own options (real SUMO
scenarios from the wheel, no mocks)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tj_rl.env import Scenario, ScenarioError
from tj_rl.env.runtime import child_env, sumo_binary, sumo_home
from tj_rl.traffic import ORIGINAL, Variation, VariationPool, read_departures, write_variation

GAME = sumo_home() / "tools/game"


@pytest.fixture(scope="module")
def fkk() -> Scenario:
    """Ingolstadt (3 minutes): flows from/to, DEFAULT_VEHTYPE redefined as a car/bicycle/bus mix."""
    return Scenario.from_sumocfg(GAME / "fkk_in.sumocfg")


@pytest.fixture(scope="module")
def fokr() -> Scenario:
    """Braunschweig, 15:00-16:00: gz trips, bicycles, pedestrian flows, types in an additional."""
    return Scenario.from_sumocfg(GAME / "fokr_bs_demo.sumocfg")


def _sumo_runs(scenario: Scenario, routes: Path, seconds: float) -> str:
    """Run SUMO's binary on the scenario with ``routes``; its stdout (raises on any error)."""
    sc = scenario.with_routes(routes).replace(end=scenario.begin + seconds)
    out = subprocess.run([sumo_binary("sumo"), *sc.sumo_args(), "--no-step-log",
                          "--duration-log.statistics"], capture_output=True, text=True,
                         env=child_env(), check=False)  # fmt: skip
    assert out.returncode == 0 and "Error" not in out.stderr, out.stderr[-2000:]
    return out.stdout


def _departs(path: Path) -> dict[str, float]:
    return {d.id: d.depart for d in read_departures(path)}


def test_variation_is_seeded_and_runs_in_sumo(tmp_path: Path, fkk: Scenario) -> None:
    v = Variation(seed=3, scale=1.0, jitter=20.0)
    a = write_variation(fkk, v, tmp_path / "a.rou.xml")
    b = write_variation(fkk, v, tmp_path / "b.rou.xml")
    c = write_variation(fkk, v.replace(seed=4), tmp_path / "c.rou.xml")
    assert a.read_bytes() == b.read_bytes() and a.read_bytes() != c.read_bytes()
    departs = list(_departs(a).values())
    assert departs == sorted(departs) and min(departs) >= 0
    text = a.read_text()
    # the redefined default mix survives (bicycles included) and its vehicles are trips SUMO
    # routes for the type it draws: the routes duarouter found for a car fail a bicycle
    assert '<vTypeDistribution id="DEFAULT_VEHTYPE">' in text and 'vClass="bicycle"' in text
    assert "<trip " in text and "<vehicle " not in text
    assert "Inserted" in _sumo_runs(fkk, a, 180.0)


def test_jitter_and_scale_move_and_resample_the_real_departures(tmp_path: Path,
                                                                fkk: Scenario) -> None:  # fmt: skip
    still = _departs(write_variation(fkk, Variation(seed=5), tmp_path / "still.rou.xml"))
    moved = _departs(write_variation(fkk, Variation(seed=5, jitter=30.0), tmp_path / "m.rou.xml"))
    assert moved.keys() == still.keys()
    shifts = [moved[k] - still[k] for k in still]
    assert max(abs(s) for s in shifts) <= 30.0 + 0.01 and any(abs(s) > 1 for s in shifts)
    more = read_departures(write_variation(fkk, Variation(seed=5, scale=1.5), tmp_path / "x.xml"))
    assert 1.3 < len(more) / len(still) < 1.7


def test_the_original_keeps_the_scenarios_own_demand(tmp_path: Path, fokr: Scenario) -> None:
    own = write_variation(fokr, ORIGINAL, tmp_path / "own.rou.xml")
    text = own.read_text()
    assert "<person " in text and 'type="bike_bicycle"' in text  # not controlled, but present
    assert '<vType id="veh_car"' not in text  # the additional file defines it: once is SUMO's rule
    departs = [d.depart for d in read_departures(own)]
    assert min(departs) >= fokr.begin - 1e-6 and max(departs) < fokr.end  # the span, 15:00-16:00
    assert "Inserted" in _sumo_runs(fokr, own, 300.0)


def test_route_distributions_and_several_files(tmp_path: Path, default_sc: Scenario) -> None:
    dist = tmp_path / "dist.rou.xml"
    dist.write_text(
        '<routes><routeDistribution id="west">'
        '<route id="wl" edges="right0A0 right0A0.100.00 A0left0" probability="3"/>'
        '<route id="wt" edges="right0A0 right0A0.100.00 A0top0" probability="1"/>'
        '</routeDistribution>'
        '<flow id="f" route="west" begin="0" end="100" number="20"/></routes>')  # fmt: skip
    trips = tmp_path / "trips.rou.xml"
    trips.write_text('<routes><trip id="t" depart="5" from="bottom0A0" to="A0right0"/></routes>')
    sc = default_sc.with_routes(dist, trips)
    out = write_variation(sc, Variation(seed=1), tmp_path / "v.rou.xml")
    edges = [d.edges for d in read_departures(out)]
    assert len(edges) == 21 and {e.split()[-1] for e in edges} == {"A0left0", "A0top0",
                                                                   "A0right0"}  # fmt: skip
    assert "Inserted: 21" in _sumo_runs(sc, out, 120.0)


def test_pool_caches_and_regenerates_a_damaged_file(tmp_path: Path, fkk: Scenario,
                                                    counting_runner: Any) -> None:  # fmt: skip
    runner = counting_runner
    pool = VariationPool(fkk, tmp_path, seeds=(1, 2), scales=(0.8, 1.2), jitter=10.0,
                         runner=runner)  # fmt: skip
    files = pool.build()
    assert len(files) == 4 and len(set(files)) == 4 and runner.calls == 4
    again = VariationPool(fkk, tmp_path, seeds=(1, 2), scales=(0.8, 1.2), jitter=10.0,
                          runner=runner)  # fmt: skip
    assert again.build() == files and runner.calls == 4
    files[0].write_text(files[0].read_text()[:200])  # a writer killed mid-file
    assert again.build() == files and runner.calls == 5
    assert read_departures(files[0])
    assert again.route_for(0, seed=1) in files


def test_held_out_is_the_own_demand_and_unseen_seeds(tmp_path: Path, fkk: Scenario) -> None:
    pool = VariationPool(fkk, tmp_path, seeds=(1, 2), scales=(1.0,), jitter=10.0)
    normal, heavy = pool.held_out((7,), heavy_factor=1.5)
    assert normal.variations[0] == ORIGINAL and normal.seeds == (7,) == heavy.seeds
    assert not set(normal.files) & set(pool.files)
    assert len(read_departures(heavy.files[0])) > len(read_departures(normal.files[0]))
    assert "own demand" in normal.describe() and "seed 7" in normal.describe()
    with pytest.raises(ValueError, match="training seeds"):
        pool.held_out((2,))
    with pytest.raises(ValueError, match="heavy_factor"):
        pool.held_out((7,), heavy_factor=1.0)
    val = pool.validation((5,))  # to choose by: unseen seeds, never the own demand unmodified
    assert val.seeds == (5,) and all(not v.own for v in val.variations)
    assert not set(val.files) & (set(normal.files) | set(pool.files))
    with pytest.raises(ValueError, match="training seeds"):
        pool.validation((1,))


def test_a_route_over_a_missing_edge_is_one_clear_error(tmp_path: Path, fkk: Scenario) -> None:
    bad = tmp_path / "bad.rou.xml"
    bad.write_text('<routes><vehicle id="v" depart="1"><route edges="no-such-edge"/></vehicle>'
                   "</routes>")  # fmt: skip
    with pytest.raises(ScenarioError, match=r"does not route on its net: Error: .*no-such-edge"):
        write_variation(fkk.with_routes(bad), ORIGINAL, tmp_path / "out.rou.xml")
    assert not (tmp_path / "out.rou.xml").exists()  # nothing half-written
    with pytest.raises(ScenarioError, match="no route files"):
        write_variation(fkk.replace(route_files=(), sumocfg=None), ORIGINAL, tmp_path / "o.xml")


@pytest.mark.parametrize("bad", [dict(seed=-1), dict(seed=True), dict(seed=1, scale=0),
                                 dict(seed=1, jitter=-1.0)])  # fmt: skip
def test_variation_refuses_bad_values(bad: dict) -> None:
    with pytest.raises(ValueError):
        Variation(**bad)
