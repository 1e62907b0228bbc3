"""The embedded arterial (configs/scenarios/arterial): four lights whose episodes have the hazards
the safety costs measure, which the embedded single intersection does not (issue 29)."""

from __future__ import annotations

from tj_rl.env import EnvConfig, Scenario
from tj_rl.eval import evaluate


def test_drivers_run_reds_and_brake_hard(arterial_sc: Scenario) -> None:
    """Ten minutes under max-occupancy with ITE clearance: hasty drivers run reds, vehicles brake
    harder than 4.5 m/s^2, and greens end with vehicles in the dilemma zone."""
    cfg = EnvConfig(yellow_time="ite", all_red_time="ite")
    row = evaluate(arterial_sc.replace(end=600.0), "max-occupancy", seeds=[1], config=cfg).rows[0]
    assert row["cost_red_light"] > 0 and row["cost_hard_braking"] > 0
    assert row["cost_dilemma_zone"] > 0
    assert row["teleports"] == 0 and row["collisions"] == 0
