"""Yellow and all-red from approach speed (ITE 2020): the per-light values from the net, and the
light states SUMO itself shows when the shield enforces them."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import sumolib

from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.env.clearance import ite_intervals
from tj_rl.env.topology import read_topology


def _by_hand(net_file: Path, links) -> tuple[float, float]:
    net = sumolib.net.readNet(str(net_file), withInternal=True)
    v = max(net.getLane(a).getSpeed() for a, _, _ in links if a)
    width = max(net.getLane(c).getLength() for _, _, c in links if c)
    return 1.0 + v / (2 * 3.05), (width + 6.0) / v


def test_ite_intervals_on_the_embedded_net(default_sc: Scenario) -> None:
    """The kinematic formulas, rounded up to the 1 s step (never shorter than the formula)."""
    topo = read_topology(default_sc, yellow_time="ite", all_red_time="ite", reach=150)
    net = sumolib.net.readNet(str(default_sc.net_file), withInternal=True)
    for light in topo.lights:
        yellow, all_red = _by_hand(default_sc.net_file, light.links)
        step = default_sc.step_length
        assert light.program.yellow_time == math.ceil(yellow / step) * step
        assert light.program.all_red_time == math.ceil(all_red / step) * step
        assert (light.program.yellow_time, light.program.all_red_time) == ite_intervals(
            net, light.links, step=step
        )
        assert light.program.yellow_time >= yellow and light.program.all_red_time >= all_red


def test_ite_mixes_with_fixed_seconds(default_sc: Scenario) -> None:
    topo = read_topology(default_sc, yellow_time="ite", all_red_time=1.0, reach=150)
    assert all(lt.program.all_red_time == 1.0 for lt in topo.lights)
    assert all(lt.program.yellow_time > 3.0 for lt in topo.lights)  # 50 km/h: 3.28 s -> 4 s


@pytest.mark.parametrize("bad", ["ITE", "auto", -1.0])
def test_bad_clearance_is_rejected(bad) -> None:
    with pytest.raises(ValueError, match=r"EnvConfig\.yellow_time"):
        EnvConfig(yellow_time=bad)


def _runs(states: list[str], link: int) -> list[tuple[str, int]]:
    """(signal, length) of the consecutive runs of one link's signal."""
    out: list[tuple[str, int]] = []
    for s in states:
        if out and out[-1][0] == s[link]:
            out[-1] = (s[link], out[-1][1] + 1)
        else:
            out.append((s[link], 1))
    return out


@pytest.mark.parametrize("name", ["grid_sc", "arterial_sc"])
def test_sumo_shows_the_per_light_intervals(
    name: str, request: pytest.FixtureRequest, tmp_path: Path, check_safe
) -> None:
    """SUMO's own per-second states (SaveTLSStates) of every light of the grid and of the arterial
    (70 and 60 km/h main road, 50 km/h side streets, red-running drivers): each yellow lasts exactly
    the light's ITE yellow, and a link that turns green after a yellow waits at least the light's
    ITE all-red; no green is cut short."""
    sc: Scenario = request.getfixturevalue(name)
    add = ET.Element("additional")
    lights = read_topology(sc, yellow_time=3.0, all_red_time=2.0, reach=150).lights
    for tls in (lt.tls_id for lt in lights):
        dest = str(tmp_path / f"tls-{tls}.xml")
        ET.SubElement(add, "timedEvent", type="SaveTLSStates", source=tls, dest=dest)
    ET.ElementTree(add).write(tmp_path / "tls.add.xml")
    sc = sc.replace(end=90.0, additional_files=(tmp_path / "tls.add.xml",))
    cfg = EnvConfig(
        metrics=False, delta_time=5.0, min_green=10.0, max_green=25.0,
        yellow_time="ite", all_red_time="ite",
    )  # fmt: skip
    env = TrafficSignalCore(cfg, scenario=sc)
    try:
        env.reset(seed=1)
        k, trunc = 0, {"__all__": False}
        while not trunc["__all__"]:  # switch every light every 15 s
            _, _, _, trunc, _ = env.step(dict.fromkeys(env.agents, (k // 3) % 2))
            k += 1
    finally:
        env.close()
    for tls, shield in env.shields.items():
        prog = shield.program
        yellow, all_red = round(prog.yellow_time), round(prog.all_red_time)
        saved = ET.parse(tmp_path / f"tls-{tls}.xml").getroot().iter("tlsState")
        states = [e.attrib["state"] for e in saved]
        assert len(states) == 90
        check_safe(states, prog.greens, yellow=yellow, all_red=all_red, min_green=10)
        yellows = 0
        for link in range(prog.n_links):
            runs = _runs(states, link)
            for n, (signal, length) in enumerate(runs):
                if signal == "y" and n + 1 < len(runs):  # a complete yellow
                    assert length == yellow, f"{tls} link {link}: yellow {length} s"
                    yellows += 1
        assert yellows > 0
    if name == "arterial_sc":  # the yellow follows each light's approach speed
        assert {s.program.yellow_time for s in env.shields.values()} == {4.0, 5.0}
