"""The ``red_light`` cost: which scenarios allow red running, and the env's count on real SUMO, where
a vehicle type with ``jmDriveAfterRedTime`` runs a red a controller holds (> 0) and the default type
never does (exactly 0, with no loops and no per-step reads)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from tj_rl.env import COST_NAMES, EnvConfig, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.env.red_light import allows_red_running

_RED = COST_NAMES.index("red_light")
# west-east traffic of the embedded net: its links are red in green 0 (north-south)
_FLOWS = """<routes>
    <vType id="driver" {jm}/>
    <flow id="we" type="driver" begin="0" end="300" vehsPerHour="900" from="left0A0"
          to="A0right0" departLane="best" departSpeed="max"/>
    <flow id="ns" type="driver" begin="0" end="300" vehsPerHour="300" from="top0A0"
          to="A0bottom0" departLane="best" departSpeed="max"/>
</routes>
"""
_RUNS_RED = 'jmDriveAfterRedTime="300" jmDriveRedSpeed="10"'


def _routes(tmp_path: Path, jm: str, name: str = "r.rou.xml") -> Path:
    path = tmp_path / name
    path.write_text(_FLOWS.format(jm=jm))
    return path


def test_allows_red_running_reads_the_vtypes(tmp_path: Path, default_sc: Scenario) -> None:
    assert not allows_red_running(default_sc.route_files)
    assert allows_red_running([_routes(tmp_path, _RUNS_RED)])
    assert not allows_red_running([_routes(tmp_path, 'jmDriveAfterRedTime="-1"')])
    zipped = tmp_path / "z.rou.xml.gz"
    zipped.write_bytes(gzip.compress(_FLOWS.format(jm='jmDriveAfterRedTime="0"').encode()))
    assert allows_red_running([default_sc.route_files[0], zipped])


def _hold_north_south(sc: Scenario, backend: str) -> tuple[np.ndarray, list[bool]]:
    """An episode whose controller keeps green 0 whenever the shield lets it (west-east red):
    the summed costs and, per step, whether the session watched for red entries."""
    env = TrafficSignalCore(EnvConfig(backend=backend, metrics=False, max_green=60.0), scenario=sc)
    total, watched = np.zeros(len(COST_NAMES)), []
    try:
        obs, _ = env.reset(seed=3)
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            mask = obs["A0"]["action_mask"]
            act = 0 if mask[0] else int(np.flatnonzero(mask)[0])
            watched.append(env._session.red is not None)
            obs, _, _, trunc, infos = env.step({"A0": act})
            total += infos["A0"]["costs"]
    finally:
        env.close()
    return total, watched


@pytest.mark.parametrize("backend", ["libsumo", "traci"])
def test_red_runners_are_counted(tmp_path: Path, default_sc: Scenario, backend: str) -> None:
    sc = default_sc.replace(route_files=(_routes(tmp_path, _RUNS_RED),), end=240.0)
    total, watched = _hold_north_south(sc, backend)
    assert all(watched)
    assert total[_RED] > 0


def test_default_drivers_never_run_red(tmp_path: Path, default_sc: Scenario) -> None:
    sc = default_sc.replace(route_files=(_routes(tmp_path, ""),), end=240.0)
    total, watched = _hold_north_south(sc, "libsumo")
    assert not any(watched)  # no loops, one SUMO call per decision
    assert total[_RED] == 0


def test_stepping_per_step_changes_nothing_else(
    tmp_path: Path, default_sc: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same red-running episode watched (per-step) and unwatched (one SUMO call per decision):
    every other cost is the same."""
    sc = default_sc.replace(route_files=(_routes(tmp_path, _RUNS_RED),), end=240.0)
    watched, _ = _hold_north_south(sc, "libsumo")
    monkeypatch.setattr("tj_rl.env.session.allows_red_running", lambda files: False)
    plain, flags = _hold_north_south(sc, "libsumo")
    assert not any(flags) and plain[_RED] == 0
    np.testing.assert_array_equal(np.delete(watched, _RED), np.delete(plain, _RED))


def test_an_unreadable_vtype_is_a_scenario_error(tmp_path: Path) -> None:
    bad = _routes(tmp_path, 'jmDriveAfterRedTime="soon"')
    with pytest.raises(ScenarioError, match="jmDriveAfterRedTime"):
        allows_red_running([bad])
