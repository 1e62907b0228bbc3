"""Episodes as time windows inside the scenario's span: the config takes SUMO's time forms, the
preflight refuses an unknown time format or a window outside the span in one line with exit 2
before anything starts, and the embedded default scenario keeps its episodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tj_hybrid.config import ConfigError, load_config
from tj_hybrid.phase1.data import record_scenario
from tj_hybrid.preflight import check_controllable_lights, check_scenario
from tj_hybrid.rl_setup import episode_scenario
from tj_rl.env import Scenario, SyntheticSpec, build_scenario
from tj_rl.env.runtime import sumo_home

FOKR = sumo_home() / "tools/game/fokr_bs_demo.sumocfg"  # Braunschweig: begin 15:0:0, end 16:0:0


@pytest.fixture(scope="module")
def morning(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny one-light scenario whose .sumocfg begins at 7:00:00 and ends at 7:10:00."""
    out = tmp_path_factory.mktemp("morning")
    sc = build_scenario(SyntheticSpec(duration=600.0, seed=2, name="morning"), out)
    assert sc.sumocfg is not None
    text = sc.sumocfg.read_text()
    sc.sumocfg.write_text(text.replace('<begin value="0"/>', '<begin value="7:00:00"/>')
                          .replace('<end value="600"/>', '<end value="7:10:00"/>'))  # fmt: skip
    return sc.sumocfg


def _config(path: Path, *overrides: str):
    return load_config(profile="smoke", overrides=[f"scenario.path={path}", *overrides]).config


def test_config_takes_sumo_time_forms_and_refuses_others() -> None:
    cfg = load_config(profile="smoke", overrides=["phase2.windows=[25200, '7:15:00']",
                                                  "phase1.record.windows=auto"]).config  # fmt: skip
    assert cfg.phase2.windows == [25200.0, "7:15:00"] and cfg.phase1.record.windows == "auto"
    assert load_config(profile="smoke").config.phase2.windows is None
    with pytest.raises(ConfigError, match=r"phase2: windows: unknown time format '7h'"):
        load_config(profile="smoke", overrides=["phase2.windows=['7h']"])
    with pytest.raises(ConfigError, match=r"phase1.record: windows: give one or more starts"):
        load_config(profile="smoke", overrides=["phase1.record.windows=[]"])


def test_the_default_scenario_keeps_its_episodes() -> None:
    cfg = load_config(profile="smoke").config
    before = Scenario.from_sumocfg(cfg.scenario.path, end=cfg.phase2.episode_seconds)
    assert episode_scenario(cfg) == before  # what phases 2 and 3 ran before windows existed
    assert record_scenario(cfg) == Scenario.from_sumocfg(
        cfg.scenario.path, end=cfg.phase1.record.episode_seconds
    )


def test_clock_time_scenario_windows(morning: Path) -> None:
    cfg = _config(morning, "phase1.record.episode_seconds=300", "phase2.episode_seconds=200",
                  "phase2.windows=auto")  # fmt: skip
    check_scenario(cfg)
    sc = episode_scenario(cfg)
    assert [w.start for w in sc.windows] == [25200.0, 25400.0, 25600.0]
    assert (record_scenario(cfg).begin, record_scenario(cfg).end) == (25200.0, 25500.0)
    cfg = _config(morning, "phase1.record.episode_seconds=300", "phase2.windows=['6:55:00']",
                  "phase2.episode_seconds=60")  # fmt: skip
    with pytest.raises(ConfigError, match=r"^phase2.windows: .* lies outside the scenario's time"):
        check_scenario(cfg)


def test_cli_refuses_an_unknown_time_format(refused: Callable[..., str], morning: Path) -> None:
    bad = morning.parent / "bad-time.sumocfg"
    bad.write_text(morning.read_text().replace("7:00:00", "7h00"))
    line = refused(f"scenario.path={bad}")
    assert line == (f"tj-hybrid: scenario.path: sumocfg file {bad}: <begin>: unknown time format "
                    "'7h00' (SUMO's forms: seconds like 25200 or 0.5, H:M:S like 7:00:00, "
                    "D:H:M:S like 1:07:00:00)")  # fmt: skip


def test_cli_refuses_a_window_outside_the_span(refused: Callable[..., str], morning: Path) -> None:
    # explicit windows must fit; the default single window shrinks to a shorter span (below)
    line = refused(f"scenario.path={morning}", "phase1.record.episode_seconds=300",
                    "phase2.episode_seconds=120", "phase2.windows=['7:00:00', '7:09:00']")  # fmt: skip
    assert line.startswith("tj-hybrid: phase2.windows: Scenario morning: window [25740, 25860)")


def test_sumos_braunschweig_demo_with_its_clock_time(refused: Callable[..., str]) -> None:
    cfg = _config(FOKR, "phase2.windows=['15:15:00', '15:30:00']")
    check_scenario(cfg)
    check_controllable_lights(cfg)
    sc = episode_scenario(cfg)
    assert (sc.begin, sc.end) == (54900.0, 56700.0) and len(sc.windows) == 2  # 15:15-15:45
    line = refused(f"scenario.path={FOKR}", "phase1.record.windows=['15:50:00']")
    assert "window [57000, 57900) s (15:50:00-16:05:00) lies outside the scenario's time span " \
        "[54000, 57600) s (15:00:00-16:00:00)" in line  # fmt: skip


def test_a_span_shorter_than_an_episode_is_one_episode(morning: Path) -> None:
    # 900 s from 7:00:00 would overrun 7:10:00: a game-length scenario runs its whole span
    cfg = _config(morning)
    check_scenario(cfg)
    sc = episode_scenario(cfg)
    assert (sc.begin, sc.end, sc.windows) == (25200.0, 25800.0, ())
    assert (record_scenario(cfg).begin, record_scenario(cfg).end) == (25200.0, 25800.0)
