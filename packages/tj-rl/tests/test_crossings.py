"""Pedestrian clearance of signalled crossings: the shield's transitions (a pure automaton), the
crossing times read from a real net (Braunschweig's ``fokr_bs_demo``, shipped with SUMO), and the
states SUMO itself shows when the env switches that light."""

from __future__ import annotations

import itertools
import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sumolib

from tj_rl.env import EnvConfig, RuleShield, Scenario, ScenarioError, TrafficSignalCore
from tj_rl.env.runtime import sumo_home
from tj_rl.env.shield import PhaseProgram
from tj_rl.env.topology import read_topology

# links 0-1: vehicles; link 2: a crossing walked in 12 s; link 3: a crossing walked in 4 s
_GREENS = ("GGGr", "rrGG", "GrrG", "rGrr")


def _program(crossing_clear: tuple[float, ...] = (0.0, 0.0, 12.0, 4.0)) -> PhaseProgram:
    return PhaseProgram(
        tls_id="X", greens=_GREENS, durations=(30.0,) * 4, yellow_time=3.0, all_red_time=2.0,
        crossing_clear=crossing_clear,
    )  # fmt: skip


def test_a_crossing_losing_green_turns_red_and_the_next_green_waits_for_it() -> None:
    p = _program()
    # link 2 (12 s) loses its green: red at once (no yellow) while the vehicles' link 1 shows its
    # yellow and link 0 keeps its green; green 2 waits 12 s, not yellow + all-red's 5 s
    assert p.losing_crossings(0, 2) == [2]
    assert p.transition(0, 2) == ((0.0, "Gyrr"), (3.0, "Grrr"), (12.0, "GrrG"))
    # link 3 (4 s) is quicker than yellow + all-red: the vehicles' clearance decides
    assert p.losing_crossings(1, 0) == [3]
    assert p.transition(1, 0) == ((0.0, "rrGr"), (3.0, "rrGr"), (5.0, "GGGr"))
    # both crossings lose their green: the slower one decides
    assert p.losing_crossings(1, 3) == [2, 3] and p.clearance_time(1, 3) == 12.0
    # no link loses its green: no clearance at all
    assert p.transition(3, 0) == ((0.0, "GGGr"),) and p.clearance_time(3, 0) == 0.0


def test_without_crossing_times_the_transitions_are_the_vehicle_ones() -> None:
    p = _program(())
    assert p.transition(0, 2) == ((0.0, "Gyyr"), (3.0, "Grrr"), (5.0, "GrrG"))
    assert p.losing_crossings(0, 2) == []


def test_the_shield_holds_the_next_green_through_the_crossing_clearance() -> None:
    sh = RuleShield(_program(), min_green=5, max_green=60)
    sh.reset(0.0, initial=0)
    d = sh.decide(10.0, 2)
    assert (d.applied, d.vetoed) == (2, False)
    assert sh.green_since == 22.0 and sh.in_clearance(21.9) and not sh.in_clearance(22.0)
    assert sh.mask(15.0).tolist() == [0, 0, 1, 0]  # nothing else until green 2 shows
    assert [t for t, _ in sh.pop_events(100.0)] == [0.0, 10.0, 13.0, 22.0]


def test_crossing_times_must_cover_every_link() -> None:
    with pytest.raises(ScenarioError, match="3 crossing clearance times for 4 links"):
        _program((0.0, 0.0, 12.0))


@pytest.mark.parametrize("bad", [0.0, -1.2, math.nan])
def test_bad_crossing_speed_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=r"EnvConfig\.crossing_speed"):
        EnvConfig(crossing_speed=bad)


@pytest.fixture(scope="module")
def fokr() -> Scenario:
    return Scenario.from_sumocfg(sumo_home() / "tools/game/fokr_bs_demo.sumocfg")


def test_the_crossings_of_a_real_light_are_read_from_its_net(fokr: Scenario) -> None:
    """Braunschweig's light signals its 8 crossings on links 38-45; each clears in its length
    at the walking speed, rounded up to the 0.05 s step. The vehicle topology does not change."""
    with_peds = read_topology(
        fokr, yellow_time=3.0, all_red_time=2.0, reach=150, crossing_speed=1.2
    )
    plain = read_topology(fokr, yellow_time=3.0, all_red_time=2.0, reach=150)
    (light,) = with_peds.lights
    clear = light.program.crossing_clear
    assert [k for k, c in enumerate(clear) if c > 0] == list(range(38, 46))
    net = sumolib.net.readNet(str(fokr.net_file), withInternal=True)
    lengths = [e.getLane(0).getLength() for e in net.getEdges(withInternal=True)
               if e.getFunction() == "crossing"]  # fmt: skip
    assert sorted(clear[38:46]) == pytest.approx(
        sorted(math.ceil(x / 1.2 / 0.05 - 1e-9) * 0.05 for x in lengths)
    )
    assert all(
        c >= x / 1.2 - 1e-6 for c, x in zip(sorted(clear[38:46]), sorted(lengths), strict=True)
    )
    assert plain.lights[0].program.crossing_clear == ()
    assert (light.links, light.in_lanes, light.out_lanes) == (
        plain.lights[0].links, plain.lights[0].in_lanes, plain.lights[0].out_lanes,
    )  # fmt: skip
    assert light.program.greens == plain.lights[0].program.greens


def test_the_crossing_pass_is_made_once_per_net_file(fokr: Scenario, tmp_path: Path) -> None:
    """Every env of a process builds its topology; the extra pass over the net's connections is
    kept per file and made again when the file changes (a net rebuilt in place)."""
    import gzip
    import os

    from tj_rl.env import topology

    net = tmp_path / "fokr.net.xml"
    net.write_bytes(gzip.decompress(fokr.net_file.read_bytes()))
    sc = fokr.replace(net_file=net)
    topology._connections_to_crossings.cache_clear()
    first = read_topology(sc, yellow_time=3.0, all_red_time=2.0, reach=150, crossing_speed=1.2)
    read_topology(sc, yellow_time=3.0, all_red_time=2.0, reach=150, crossing_speed=1.2)
    info = topology._connections_to_crossings.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    # the same net with crossing link 38 no longer signalled: the cache must not answer
    text = net.read_text()
    signalled = 'to=":38_c0" fromLane="0" toLane="0" tl="38" linkIndex="38"'
    assert text.count(signalled) == 1
    net.write_text(text.replace(signalled, 'to=":38_c0" fromLane="0" toLane="0"'))
    os.utime(net, ns=(net.stat().st_atime_ns, net.stat().st_mtime_ns + 10**9))
    again = read_topology(sc, yellow_time=3.0, all_red_time=2.0, reach=150, crossing_speed=1.2)
    assert topology._connections_to_crossings.cache_info().misses == 2
    assert again.lights[0].program.crossing_clear[38] == 0.0
    assert first.lights[0].program.crossing_clear[38] > 0


def test_sumo_shows_the_crossing_clearance(fokr: Scenario, tmp_path: Path) -> None:
    """The env switches Braunschweig's light away from a green that shows crossings: SUMO's own
    states (SaveTLSStates, every 0.05 s) turn each such crossing red at the switch, and no link
    turns green before the longest of those crossings' clearance times has passed."""
    add = ET.Element("additional")
    ET.SubElement(add, "timedEvent", type="SaveTLSStates", source="38",
                  dest=str(tmp_path / "tls.xml"))  # fmt: skip
    ET.ElementTree(add).write(tmp_path / "tls.add.xml")
    sc = fokr.window(54000.0, 60.0).replace(
        additional_files=(*fokr.additional_files, tmp_path / "tls.add.xml")
    )
    cfg = EnvConfig(metrics=False, delta_time=5.0, min_green=5.0, max_green=60.0)
    env = TrafficSignalCore(cfg, scenario=sc)
    try:
        env.reset(seed=1)
        prog = env.shields["38"].program
        for action in (2, 2, 0, 0, 0, 0, 2, 2, 4, 4, 4, 4):
            env.step({"38": action})
    finally:
        env.close()
    # read on its own (not from the env's shield), so an env that ignored crossings would fail here
    clear = (
        read_topology(fokr, yellow_time=3.0, all_red_time=2.0, reach=150, crossing_speed=1.2)
        .lights[0]
        .program.crossing_clear
    )
    # green 2 shows crossings 40, 41, 44 and 45; green 0 keeps 40 and 44; green 4 shows none
    assert [k for k in range(38, 46) if clear[k] and prog.greens[2][k] == "G"] == [40, 41, 44, 45]
    saved = [(float(e.attrib["time"]), e.attrib["state"])
             for e in ET.parse(tmp_path / "tls.xml").getroot().iter("tlsState")]  # fmt: skip
    switches = 0
    for (_, a), (t, b) in itertools.pairwise(saved):
        if a not in prog.greens or b in prog.greens:
            continue  # not the end of a green
        losing = [k for k, c in enumerate(clear)
                  if c > 0 and a[k] in "Gg" and b[k] not in "Gg"]  # fmt: skip
        if not losing:
            continue
        switches += 1
        assert all(b[k] == "r" for k in losing), f"t={t}: a crossing did not turn red at once"
        need = max(clear[k] for k in losing)
        for u, state in saved:
            if t <= u < t + need - 1e-6:
                new = [k for k, c in enumerate(state) if c in "Gg" and a[k] not in "Gg"]
                assert not new, f"t={u}: links {new} green {u - t:.2f} s after the switch at {t}"
    assert switches >= 2
