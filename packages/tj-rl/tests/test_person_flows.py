"""Pedestrian flows a late begin loses: which flows (a hand-written file), SUMO's own behaviour on
Braunschweig's demo (so the warning's claim fails here when SUMO changes it), and the env's
warning, once per file and begin."""

from __future__ import annotations

import gzip
import logging
import os
from pathlib import Path

import pytest

from tj_rl.env import EnvConfig, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.env.person_flows import late_person_flows
from tj_rl.env.runtime import sumo_home

ROUTES = """<routes>
    <vType id="ped" vClass="pedestrian"/>
    <personFlow id="spans" begin="100" end="500" period="20" type="ped">
        <walk from="a" to="b"/>
    </personFlow>
    <personFlow id="later" begin="300" end="400" period="20" type="ped"><walk from="a" to="b"/></personFlow>
    <personFlow id="counted" begin="50" number="2" period="10" type="ped"><walk from="a" to="b"/></personFlow>
    <personFlow id="endless" begin="0:0:10" period="30" type="ped"><walk from="a" to="b"/></personFlow>
    <personFlow id="hourly" begin="100" number="2" personsPerHour="360" type="ped"><walk from="a" to="b"/></personFlow>
    <flow id="cars" begin="0" end="900" period="5" from="a" to="b"/>
</routes>
"""


def test_the_flows_that_begin_before_and_end_after_the_begin_are_late(tmp_path: Path) -> None:
    plain = tmp_path / "peds.rou.xml"
    plain.write_text(ROUTES)
    packed = tmp_path / "peds.rou.xml.gz"
    packed.write_bytes(gzip.compress(ROUTES.encode()))
    none = tmp_path / "cars.rou.xml"
    none.write_text('<routes><flow id="cars" begin="0" end="900" period="5" from="a" to="b"/></routes>')
    found = late_person_flows([plain, packed, none], begin=200.0)
    # "counted" stopped at 70 s, "later" starts after 200 s; vehicle flows are not persons
    assert found == {plain: ["spans", "endless"], packed: ["spans", "endless"]}
    assert late_person_flows([plain], begin=0.0) == {}
    assert late_person_flows([plain], begin=600.0) == {plain: ["endless"]}
    # "hourly" sends 2 persons 10 s apart from 100 s (personsPerHour, no period): over by 120 s
    assert late_person_flows([plain], begin=110.0) == {plain: ["spans", "endless", "hourly"]}


def test_a_changed_file_is_read_again_and_a_broken_one_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "peds.rou.xml"
    path.write_text(ROUTES)
    assert late_person_flows([path], begin=200.0) == {path: ["spans", "endless"]}
    path.write_text(ROUTES.replace('begin="100" end="500"', 'begin="250" end="500"'))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert late_person_flows([path], begin=200.0) == {path: ["endless"]}
    path.write_text(ROUTES.replace('begin="300"', 'begin="soon"'))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 2 * 10**9))
    with pytest.raises(ScenarioError, match="personFlow"):
        late_person_flows([path], begin=200.0)


@pytest.fixture(scope="module")
def fokr() -> Scenario:
    return Scenario.from_sumocfg(sumo_home() / "tools/game/fokr_bs_demo.sumocfg")


def _persons_seen(fokr: Scenario, begin: float, seconds: float) -> int:
    import libsumo

    home = fokr.net_file.parent
    libsumo.start(["sumo", "-n", str(fokr.net_file), "-r", str(home / "15_16_ped.trips.xml"),
                   "-a", str(home / "vtypes_default.add.xml"), "--begin", str(begin),
                   "--end", str(begin + seconds), "--no-step-log", "--no-warnings"])  # fmt: skip
    try:
        seen: set[str] = set()
        while libsumo.simulation.getTime() < begin + seconds:
            libsumo.simulationStep()
            seen.update(libsumo.person.getIDList())
        return len(seen)
    finally:
        libsumo.close()


def test_sumo_inserts_no_person_of_a_flow_begun_before_the_run(fokr: Scenario) -> None:
    """The demo's 10 personFlows begin between 15:02:19 and 15:08:44 (54139.4-54523.9 s) and run
    to 17:13:20. Begun at 54100 s, SUMO walks their persons; begun at 15:15, none."""
    assert _persons_seen(fokr, 54100.0, 300.0) > 10
    assert _persons_seen(fokr, 54900.0, 300.0) == 0
    peds = fokr.net_file.parent / "15_16_ped.trips.xml"
    assert len(late_person_flows([peds], begin=54900.0)[peds]) == 10
    assert late_person_flows([peds], begin=54100.0) == {}


def test_the_env_warns_once_per_file_and_begin(
    fokr: Scenario, caplog: pytest.LogCaptureFixture
) -> None:
    env = TrafficSignalCore(EnvConfig(delta_time=5.0), scenario=fokr.window("15:15:00", 10.0))
    try:
        with caplog.at_level(logging.WARNING, logger="tj_rl.env.person_flows"):
            env.reset(seed=1)
            env.reset(seed=2)
    finally:
        env.close()
    lines = [r.getMessage() for r in caplog.records if "personFlow" in r.getMessage()]
    assert len(lines) == 1
    assert "15_16_ped.trips.xml: 10 personFlow(s)" in lines[0] and "15:15:00" in lines[0]
