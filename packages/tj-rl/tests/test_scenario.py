"""Scenario loading, the synthetic builder and bad-input errors (file names and ids in messages)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tj_rl.env import (
    EnvConfig,
    Scenario,
    ScenarioError,
    SyntheticSpec,
    build_scenario,
    sumocfg_stem,
)
from tj_rl.env.runtime import sumo_home
from tj_rl.env.topology import read_topology
from tj_rl.rllib import TrafficSignalEnv


def _departs(route_file: Path) -> list[float]:
    return [
        float(x) for x in re.findall(r'<vehicle [^>]*depart="([0-9.]+)"', route_file.read_text())
    ]


def test_default_scenario_files(default_sc: Scenario) -> None:
    assert default_sc.sumocfg is not None and default_sc.net_file.name == "default.net.xml"
    assert default_sc.seed == 42 and default_sc.end == 120.0
    args = default_sc.sumo_args(seed=7)
    assert args[:2] == ["-c", str(default_sc.sumocfg)]
    assert args[args.index("--seed") + 1] == "7" and args[args.index("--end") + 1] == "120"
    topo = read_topology(default_sc, yellow_time=3, all_red_time=2, reach=150)
    (light,) = topo.lights
    assert light.program.n_greens == 4 and light.n_in == 12 and light.n_out == 8
    assert {c for g in light.program.greens for c in g} == {"G", "g", "r"}


def test_builder_grid_seeded_time_varying(tmp_path: Path) -> None:
    spec = SyntheticSpec(
        kind="grid",
        rows=2,
        cols=3,
        turn_lanes=0,
        duration=600.0,
        rates=(300.0, 1500.0),
        seed=5,
        name="g",
    )
    sc = build_scenario(spec, tmp_path / "a")
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        "g.net.xml",
        "g.rou.xml",
        "g.sumocfg",
    ]
    topo = read_topology(sc, yellow_time=3, all_red_time=2, reach=150)
    assert len(topo.lights) == 6
    departs = _departs(sc.route_files[0])
    first = sum(d < 300 for d in departs)
    second = len(departs) - first
    assert second > 3 * first  # 5x the insertion rate in the second half
    same = build_scenario(spec, tmp_path / "b")
    assert _departs(same.route_files[0]) == departs  # seeded: reproducible
    other = build_scenario(SyntheticSpec(**{**spec.__dict__, "seed": 6}), tmp_path / "c")
    assert _departs(other.route_files[0]) != departs


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("rows", 0),
        ("lanes", 0),
        ("rates", ()),
        ("rates", (-1.0,)),
        ("kind", "ring"),
        ("duration", 0.0),
        ("name", "a b"),
    ],
)
def test_builder_spec_errors(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SyntheticSpec.{field}"):
        SyntheticSpec(**{field: value})


def test_real_city_network_from_wheel() -> None:
    """A real OSM city net shipped with SUMO: many lights, heterogeneous programs (G/g/r mixes,
    2..10 green phases, multi-lane approaches), some lights without a program (left uncontrolled,
    with the reason recorded)."""
    cfg = sumo_home() / "tools/game/DRT.sumocfg"
    sc = Scenario.from_sumocfg(cfg, end=40.0, extra_args=("--tls.all-off", "false"))
    assert sc.step_length == pytest.approx(0.2)
    env = TrafficSignalEnv(EnvConfig(metrics=False), scenario=sc)
    try:
        lights = env.topology.lights
        assert len(lights) >= 10
        assert len({lt.program.n_greens for lt in lights}) >= 4
        assert any("g" in g for lt in lights for g in lt.program.greens)
        assert any(lt.n_in > 4 for lt in lights)
        assert (
            all("no program" in why for why in env.topology.skipped.values())
            and env.topology.skipped
        )
        obs, _ = env.reset(seed=0)
        for _ in range(3):
            acts = {a: int(o["action_mask"].argmax()) for a, o in obs.items()}
            obs, _, _, trunc, _ = env.step(acts)
        assert trunc["__all__"] is False
        assert all(env.observation_spaces[a].contains(o) for a, o in obs.items())
    finally:
        env.close()


# ---------------------------------------------------------------- bad input
def test_missing_files(tmp_path: Path, default_sc: Scenario) -> None:
    with pytest.raises(ScenarioError, match=r"net file not found: .*nope.net.xml"):
        Scenario(net_file=tmp_path / "nope.net.xml")
    with pytest.raises(ScenarioError, match=r"route file not found: .*nope.rou.xml"):
        Scenario(net_file=default_sc.net_file, route_files=(tmp_path / "nope.rou.xml",))
    with pytest.raises(ScenarioError, match=r"sumocfg file not found: .*x.sumocfg"):
        Scenario.from_sumocfg(tmp_path / "x.sumocfg")


def test_malformed_files(tmp_path: Path, default_sc: Scenario) -> None:
    bad = tmp_path / "bad.net.xml"
    bad.write_text("<net><edge id='a'")
    with pytest.raises(ScenarioError, match=r"net file .*bad.net.xml: malformed XML"):
        Scenario(net_file=bad)
    wrong = tmp_path / "wrong.net.xml"
    wrong.write_text("<routes/>")
    with pytest.raises(
        ScenarioError, match=r"wrong.net.xml: root element <routes>, expected <net>"
    ):
        Scenario(net_file=wrong)
    cfg = tmp_path / "c.sumocfg"
    cfg.write_text("<configuration><input><route-files value='r.xml'/></input></configuration>")
    with pytest.raises(ScenarioError, match=r"c.sumocfg: no <net-file>"):
        Scenario.from_sumocfg(cfg)
    # truncated net (a half-written download): caught by the full parse, with the line
    text = default_sc.net_file.read_text()
    cut = tmp_path / "cut.net.xml"
    cut.write_text(text[: len(text) // 2])
    with pytest.raises(ScenarioError, match=r"net file .*cut.net.xml: malformed XML .*line"):
        Scenario(net_file=cut)


def test_bad_scenario_values(default_sc: Scenario) -> None:
    with pytest.raises(ScenarioError, match="end > begin"):
        default_sc.replace(begin=100.0, end=50.0)
    with pytest.raises(ScenarioError, match="tls_ids"):
        default_sc.replace(tls_ids="A0")


def test_unknown_light_id(default_sc: Scenario) -> None:
    with pytest.raises(
        ScenarioError, match=r"traffic light id\(s\) \['nope'\] not in net file .*default.net.xml"
    ):
        TrafficSignalEnv(scenario=default_sc.replace(tls_ids=("nope",)))


def test_light_without_green(tmp_path: Path, default_sc: Scenario) -> None:
    net = tmp_path / "nogreen.net.xml"
    text = default_sc.net_file.read_text()
    net.write_text(
        re.sub(
            r'state="([^"]*)"', lambda m: 'state="' + re.sub("[Gg]", "r", m.group(1)) + '"', text
        )
    )
    shutil.copy(default_sc.route_files[0], tmp_path / "r.rou.xml")
    sc = Scenario(net_file=net, route_files=(tmp_path / "r.rou.xml",), tls_ids=("A0",))
    with pytest.raises(ScenarioError, match=r"traffic light 'A0': its program has no green phase"):
        TrafficSignalEnv(scenario=sc)


def test_sumo_refusal_includes_stderr(tmp_path: Path, default_sc: Scenario) -> None:
    from tj_rl.env import SumoStartError

    routes = tmp_path / "bad.rou.xml"
    routes.write_text(
        '<routes><vehicle id="v0" depart="0"><route edges="no_such_edge"/></vehicle></routes>'
    )
    sc = Scenario(net_file=default_sc.net_file, route_files=(routes,), end=60.0)
    for backend in ("traci", "libsumo"):
        env = TrafficSignalEnv(EnvConfig(backend=backend), scenario=sc)
        with pytest.raises(SumoStartError, match="no_such_edge"):
            env.reset()
        env.close()


@pytest.mark.parametrize(("name", "stem"), [
    ("city.sumocfg", "city"), ("run.sumo.cfg", "run"), ("old.cfg", "old"),
    ("a.b.sumocfg", "a.b"), ("notes.txt", "notes.txt"),
])
def test_sumocfg_stem(name: str, stem: str) -> None:
    assert sumocfg_stem(Path("some/folder") / name) == stem


def test_sumocfg_option_synonyms(tmp_path: Path, default_sc: Scenario) -> None:
    # SUMO's own examples (the RiLSA ones: run.sumo.cfg) write <c><net value=...>: options at
    # the top, under synonyms of <net-file>, <route-files>, <begin>, <end>
    cfg = tmp_path / "run.sumo.cfg"
    cfg.write_text(f'<c><net value="{default_sc.net_file}"/>'
                   f'<routes value="{default_sc.route_files[0]}"/>'
                   '<b value="60"/><e value="120"/></c>')  # fmt: skip
    sc = Scenario.from_sumocfg(cfg)
    assert (sc.net_file, sc.route_files, sc.begin, sc.end, sc.name) == (
        default_sc.net_file, default_sc.route_files, 60.0, 120.0, "run")
    sections = tmp_path / "old.sumocfg"
    sections.write_text(f'<configuration><input><net value="{default_sc.net_file}"/></input>'
                        "</configuration>")  # fmt: skip
    assert Scenario.from_sumocfg(sections).net_file == default_sc.net_file
