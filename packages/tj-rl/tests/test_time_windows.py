"""SUMO's time forms everywhere tj-rl reads a time, and episodes as windows inside a scenario's span
(real scenarios rarely begin at 0): a scenario that begins at 7:00:00 runs, windows outside the
span are refused with both named, and an env draws one window per episode (SUMO runs, no mocks)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from tj_rl.env import (
    EnvConfig,
    Scenario,
    ScenarioError,
    SyntheticSpec,
    TimeWindow,
    TrafficSignalCore,
    build_scenario,
    parse_time,
)
from tj_rl.env.runtime import sumo_home
from tj_rl.eval import evaluate
from tj_rl.traffic import read_departures

MORNING = 25200.0  # 7:00:00


@pytest.fixture(scope="module")
def morning(tmp_path_factory: pytest.TempPathFactory) -> Scenario:
    """A tiny one-light scenario whose time begins at 7:00:00 (clock form in its .sumocfg and in
    some departures): a built scenario with every departure shifted by seven hours."""
    out = tmp_path_factory.mktemp("morning")
    spec = SyntheticSpec(duration=600.0, rates=(900.0,), seed=4, name="morning")
    sc = build_scenario(spec, out)
    routes = sc.route_files[0]
    text = routes.read_text()

    def shift(m: re.Match[str]) -> str:
        t = float(m.group(1)) + MORNING
        h, rest = divmod(t, 3600)
        clock = f"{int(h)}:{int(rest // 60):02d}:{rest % 60:05.2f}"  # 7:03:05.50
        return f'depart="{clock if int(t) % 2 else f"{t:.2f}"}"'  # both forms in one file

    routes.write_text(re.sub(r'depart="([0-9.]+)"', shift, text))
    cfg = sc.sumocfg
    assert cfg is not None
    cfg.write_text(
        cfg.read_text()
        .replace('<begin value="0"/>', '<begin value="7:00:00"/>')
        .replace('<end value="600"/>', '<end value="7:10:00"/>')
    )
    return Scenario.from_sumocfg(cfg)


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("25200", 25200.0), ("7:00:00", 25200.0), ("7:0:0.5", 25200.5), ("1:07:00:00", 111600.0),
     (" 0.05 ", 0.05), (900, 900.0), (12.5, 12.5)],
)  # fmt: skip
def test_parse_time_reads_sumos_forms(value: object, seconds: float) -> None:
    assert parse_time(value) == seconds  # type: ignore[arg-type]


@pytest.mark.parametrize("value", ["7h", "", "1:2:3:4:5", "inf", "nan", "triggered", "a:b", True])
def test_parse_time_refuses_anything_else(value: object) -> None:
    with pytest.raises(ScenarioError, match=r"begin: unknown time format .*H:M:S"):
        parse_time(value, what="begin")  # type: ignore[arg-type]


def test_clock_time_sumocfg_from_the_wheel() -> None:
    """The Braunschweig demo shipped with SUMO: ``<begin value="15:0:0"/>``, 0.05 s steps."""
    sc = Scenario.from_sumocfg(sumo_home() / "tools/game/fokr_bs_demo.sumocfg")
    assert (sc.begin, sc.end, sc.step_length) == (54000.0, 57600.0, 0.05)
    args = sc.sumo_args()
    assert args[args.index("--begin") + 1] == "54000" and args[args.index("--end") + 1] == "57600"


def test_bad_time_in_a_sumocfg_names_file_and_option(tmp_path: Path, morning: Scenario) -> None:
    assert morning.sumocfg is not None
    bad = tmp_path / "bad.sumocfg"
    bad.write_text(morning.sumocfg.read_text().replace("7:00:00", "seven"))
    (tmp_path / "morning.net.xml").write_bytes(morning.net_file.read_bytes())
    (tmp_path / "morning.rou.xml").write_bytes(morning.route_files[0].read_bytes())
    with pytest.raises(ScenarioError, match=r"bad.sumocfg: <begin>: unknown time format 'seven'"):
        Scenario.from_sumocfg(bad)


def test_route_file_departures_in_clock_form(morning: Scenario) -> None:
    departs = [d.depart for d in read_departures(morning.route_files[0])]
    assert departs and min(departs) >= MORNING and max(departs) < MORNING + 600
    assert "7:0" in morning.route_files[0].read_text()  # some are in clock form indeed


def test_route_file_with_a_bad_departure_names_it(tmp_path: Path) -> None:
    path = tmp_path / "r.rou.xml"
    path.write_text('<routes><trip id="a" depart="triggered"/><trip id="b" depart="7h"/></routes>')
    with pytest.raises(ValueError, match=r"r.rou.xml: vehicle 'b' depart: unknown time format"):
        read_departures(path)
    path.write_text('<routes><trip id="a" depart="triggered"/></routes>')
    assert math.isnan(read_departures(path)[0].depart)  # SUMO's words are no time


def test_windows_inside_the_span_and_one_message_outside(morning: Scenario) -> None:
    assert (morning.begin, morning.end) == (MORNING, MORNING + 600)
    one = morning.windowed(300.0)  # default: one window at begin
    assert (one.begin, one.end, one.windows) == (MORNING, MORNING + 300, ())
    assert morning.window("7:05:00", 300).begin == MORNING + 300
    tiled = morning.windowed(200.0, "auto")
    assert [w.start for w in tiled.windows] == [MORNING, MORNING + 200, MORNING + 400]
    assert (tiled.begin, tiled.end) == (MORNING, MORNING + 600)
    assert [s.begin for s in tiled.each_window()] == [MORNING, MORNING + 200, MORNING + 400]
    assert "[25200, 25400) s (07:00:00-07:03:20)" in tiled.describe_windows()
    picked = morning.windowed(100.0, ["7:01:00", 25500])
    assert (picked.begin, picked.end, len(picked.windows)) == (MORNING + 60, MORNING + 400, 2)
    outside = (r"window \[25500, 26100\) s \(07:05:00-07:15:00\) lies outside the scenario's "
               r"time span \[25200, 25800\) s \(07:00:00-07:10:00\)")  # fmt: skip
    with pytest.raises(ScenarioError, match=outside):
        morning.windowed(600.0, ["7:05:00"])
    with pytest.raises(ScenarioError, match="lies outside"):
        morning.windowed(900.0)  # longer than the span
    with pytest.raises(ScenarioError, match="lies outside"):
        morning.window(0, 60)  # the old absolute reading: a window at 0 s
    with pytest.raises(ScenarioError, match="lies outside"):
        morning.replace(windows=(TimeWindow(start=MORNING + 500, seconds=200),))
    with pytest.raises(ScenarioError, match="unknown time format"):
        morning.windowed(100.0, ["noon"])
    with pytest.raises(ScenarioError, match="need start >= 0 and seconds > 0"):
        TimeWindow(start=0, seconds=0)


def test_an_episode_runs_in_a_clock_time_window(morning: Scenario) -> None:
    row = evaluate(morning.window("7:02:00", 120), "max-pressure", seeds=[1]).rows[0]
    assert row["status"] == "time_limit" and row["throughput"] > 5 and row["avg_delay"] >= 0


def test_the_env_draws_one_window_per_episode(morning: Scenario) -> None:
    sc = morning.windowed(60.0, ["7:00:00", "7:03:00"])
    env = TrafficSignalCore(EnvConfig(metrics=False, delta_time=10.0), scenario=sc)
    try:
        seen = []
        for ep in range(4):
            _obs, infos = env.reset(seed=ep)
            start = infos[env.possible_agents[0]]["window"]
            assert env.sim_time == start[0] and start[1] == start[0] + 60
            steps, trunc = 0, {"__all__": False}
            while not trunc["__all__"]:
                _, _, _, trunc, infos = env.step({})
                steps += 1
            assert steps == 6 and env.sim_time == start[1]  # ends at its window's end
            seen.append(start[0])
        assert sorted(seen[:2]) == sorted(seen[2:]) == [MORNING, MORNING + 180]  # each per cycle
    finally:
        env.close()
