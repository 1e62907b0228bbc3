"""Training's teleport rule fitted to the scenario (``phase2.gridlock_teleports``): raised above
the best baseline's teleports on validation traffic where good controllers teleport, unchanged
where they do not (real SUMO episodes on the default net; ``--time-to-teleport 5`` makes the
baselines teleport there)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tj_hybrid.config import load_config
from tj_hybrid.gridlock_rule import FittedRule, fit_teleport_rule, teleport_rule
from tj_hybrid.rl_setup import prepare_rl
from tj_rl.env.metrics import spread


def _summary(**policies: tuple[list[float], list[float]]) -> dict:
    return {p: {"avg_delay": spread(d), "teleports": spread(t)}
            for p, (d, t) in policies.items()}  # fmt: skip


def test_the_rule_sits_above_the_best_baselines_worst_episode() -> None:
    summary = _summary(good=([40.0, 50.0], [21.0, 36.0]), bad=([90.0, 99.0], [47.0, 49.0]))
    rule = teleport_rule(summary, configured=1, window_s=180.0)
    assert rule.teleports == 37  # good's worst episode + 1; bad's 49 does not count
    assert "good" in rule.line and "raised" in rule.line


def test_the_rule_never_drops_below_the_configured_count() -> None:
    summary = _summary(good=([40.0], [0.0]), other=([45.0], [3.0]))
    assert teleport_rule(summary, configured=1, window_s=180.0).teleports == 1
    assert teleport_rule(_summary(good=([40.0], [2.0])), configured=5,
                         window_s=180.0).teleports == 5  # fmt: skip


def test_a_policy_without_a_delay_is_not_the_best() -> None:
    summary = _summary(broken=([math.nan], [0.0]), good=([40.0], [9.0]))
    assert teleport_rule(summary, configured=1, window_s=180.0).teleports == 10
    assert teleport_rule(_summary(broken=([math.nan], [0.0])), configured=2,
                         window_s=180.0).teleports == 2  # fmt: skip


def _setup(tmp_path: Path, *overrides: str):
    cfg = load_config(profile="smoke", overrides=[
        f"run.data_root={tmp_path}", "phase2.demand.train_seeds=1", "phase2.demand.scales=[1.0]",
        "phase2.demand.heldout_seeds=[9]", "phase2.validation.route_seeds=[5001]",
        "phase2.validation.sumo_seeds=[80001]", "phase2.eval.reuse_rows=false",
        "phase2.imitation.candidates=[fixed-time,max-pressure]", *overrides]).config  # fmt: skip
    return cfg, prepare_rl(cfg, agent_dir=None, data_dir=tmp_path / "data")


def test_a_scenario_where_good_controllers_teleport_gets_a_higher_rule(tmp_path: Path) -> None:
    cfg, setup = _setup(tmp_path, 'scenario.env.sumo_args=["--time-to-teleport","5"]')
    out = fit_teleport_rule(cfg, setup)
    fitted, line = out.setup, out.line
    assert fitted.env.gridlock is not None and fitted.env.gridlock.teleports > 1
    assert line is not None and "raised" in line and f"{fitted.env.gridlock.teleports} " in line
    # only the count moves; the rest of the env and the stuck rule are as configured
    assert fitted.env.gridlock.window_s == setup.env.gridlock.window_s
    assert fitted.env.route_files == setup.env.route_files
    assert fitted.env_config()["gridlock"].teleports == fitted.env.gridlock.teleports


def test_a_scenario_without_teleports_keeps_the_rule(tmp_path: Path) -> None:
    cfg, setup = _setup(tmp_path)
    out = fit_teleport_rule(cfg, setup)
    assert out.setup is setup and out.line is not None and "as configured" in out.line
    # the candidates' validation delays it ran, for the teacher choice: every candidate, finite
    assert set(out.delays) == {"fixed-time", "max-pressure"}
    assert all(math.isfinite(m) and w >= m for m, w in out.delays.values())


@pytest.mark.parametrize("override", ["phase2.gridlock_teleports=config", "phase2.gridlock=null"])
def test_nothing_is_fitted_when_the_config_says_so(tmp_path: Path, override: str) -> None:
    cfg, setup = _setup(tmp_path, 'scenario.env.sumo_args=["--time-to-teleport","5"]', override)
    assert fit_teleport_rule(cfg, setup) == FittedRule(setup=setup)


def test_the_teacher_choice_takes_the_delays_the_rule_ran(tmp_path: Path) -> None:
    """Delays given are not run again (made-up numbers come back as given, and choose); a
    candidate without one is run (a real, finite delay)."""
    from tj_hybrid.phase2.imitation import _pick_teacher

    cfg, setup = _setup(tmp_path)
    given = {"fixed-time": (1.0, 2.0), "max-pressure": (3.0, 4.0)}
    assert _pick_teacher(cfg, setup, given) == ("fixed-time", given)
    teacher, scores = _pick_teacher(cfg, setup, {"max-pressure": (0.5, 0.5), "other": (0.1, 0.1)})
    assert list(scores) == ["fixed-time", "max-pressure"]  # the candidates only, in their order
    assert scores["max-pressure"] == (0.5, 0.5) and teacher == "max-pressure"
    assert math.isfinite(scores["fixed-time"][0]) and scores["fixed-time"][0] > 1.0
