"""The trainer's traffic: which demand trains (``phase2.demand.source``), where held-out episodes
run (time never trained on when the span has it), and the bad inputs the preflight refuses in
one line with exit 2 before anything starts (real SUMO files, real duarouter)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tj_hybrid.config import load_config
from tj_hybrid.data_paths import scenario_data_dir
from tj_hybrid.preflight import check_demand
from tj_hybrid.traffic import (
    build_traffic,
    demand_source,
    episode_windows,
    scenario_span,
    split_windows,
)
from tj_rl.env import Scenario, ScenarioError
from tj_rl.traffic import ORIGINAL, VariationPool

REPO = Path(__file__).resolve().parents[3]
DEFAULT = REPO / "configs/scenarios/default/default.sumocfg"  # 0-1800 s, randomTrips demand


def _config(*overrides: str):
    return load_config(profile="smoke", overrides=list(overrides)).config


@pytest.fixture
def no_vehicles(tmp_path: Path) -> Path:
    """The default net with a route file that holds only a vehicle type."""
    for f in DEFAULT.parent.iterdir():
        shutil.copy(f, tmp_path / f.name)
    (tmp_path / "default.rou.xml").write_text('<routes><vType id="car"/></routes>')
    return tmp_path / "default.sumocfg"


def test_auto_source_is_the_scenarios_own_demand_when_it_has_vehicles(no_vehicles: Path) -> None:
    span = Scenario.from_sumocfg(DEFAULT)
    assert demand_source(_config(), span) == "scenario"
    assert demand_source(_config("phase2.demand.source=random"), span) == "random"
    empty = Scenario.from_sumocfg(no_vehicles)
    assert demand_source(_config(), empty) == "random"
    with pytest.raises(ScenarioError, match="hold no vehicle departing in its span"):
        demand_source(_config("phase2.demand.source=scenario"), empty)


@pytest.mark.parametrize(
    ("seconds", "windows", "train", "held"),
    [
        (900.0, None, [(0.0, 900.0)], (900.0, 1800.0)),  # the next window of the span
        (600.0, "auto", [(0.0, 600.0), (600.0, 1200.0)], (1200.0, 1800.0)),  # the last auto one
        (1800.0, None, [(0.0, 1800.0)], (0.0, 1800.0)),  # no time left: the training window
    ],
)
def test_held_out_runs_in_time_never_trained_on(seconds: float, windows: object,
                                                 train: list, held: tuple) -> None:  # fmt: skip
    span = Scenario.from_sumocfg(DEFAULT)
    kept, out = split_windows(span, episode_windows(span, seconds, windows), windows, "scenario")
    assert [(sc.begin, sc.end) for sc in kept.each_window()] == train
    assert (out.begin, out.end, out.windows) == (*held, ())
    same = episode_windows(span, seconds, windows)
    assert split_windows(span, same, windows, "random") == (same, same)  # randomTrips: as before


def test_build_traffic_from_the_scenario_and_from_random_trips(tmp_path: Path) -> None:
    span = Scenario.from_sumocfg(DEFAULT)
    train = episode_windows(span, 900.0, None)
    cfg = _config("phase2.demand.train_seeds=2", "phase2.demand.scales=[1.0]",
                  "phase2.demand.heldout_seeds=[9]")  # fmt: skip
    own = build_traffic(cfg, span, train, tmp_path, "scenario")
    assert own.source == "scenario" and len(own.pool_files) == 2
    assert own.held_out.describe().startswith("the scenario's own demand; seed 9")
    assert all(p.parent.name.startswith("own-") for p in own.pool_files)
    rnd = build_traffic(_config("phase2.demand.train_seeds=1", "phase2.demand.rates=[600]"),
                        span, train, tmp_path, "random")  # fmt: skip
    assert rnd.source == "random" and len(rnd.pool_files) == 1
    assert rnd.held_out.describe().startswith("randomTrips, route seeds [10001, 10002]")


def test_cli_refuses_bad_demand_in_one_line(refused: Callable[..., str], no_vehicles: Path,
                                            tmp_path: Path) -> None:  # fmt: skip
    line = refused(f"scenario.path={no_vehicles}", "phase2.demand.source=scenario")
    assert "phase2.demand: phase2.demand.source is scenario, but default's route files hold no " \
        "vehicle departing in its span" in line  # fmt: skip
    bad = no_vehicles.parent / "default.rou.xml"
    bad.write_text('<routes><vehicle id="v" depart="1"><route edges="nowhere"/></vehicle>'
                   "</routes>")  # fmt: skip
    line = refused(f"scenario.path={no_vehicles}")
    assert line.startswith("tj-hybrid: phase2.demand: Scenario default: its demand does not "
                           "route on its net: Error:") and "nowhere" in line  # fmt: skip
    assert not (tmp_path / "data").exists()  # the check's cache folders went with the refusal


def test_the_demand_is_routed_once(tmp_path: Path) -> None:
    # --phase all checks at each phase's preflight; the pool's cached file makes later checks free
    from tj_hybrid import preflight

    cfg = _config(f"run.data_root={tmp_path}", "phase2.demand.train_seeds=1",
                  "phase2.demand.scales=[1.0]", "phase2.demand.heldout_seeds=[9]")  # fmt: skip
    span = scenario_span(cfg)
    own = VariationPool(span, scenario_data_dir(cfg) / "demand", seeds=(1,)).path_for(ORIGINAL)
    preflight._ROUTED.discard(own)
    check_demand(cfg)
    assert own in preflight._ROUTED and not own.exists()  # a preflight writes nothing
    preflight._ROUTED.discard(own)
    build_traffic(cfg, span, episode_windows(span, 900.0, None), scenario_data_dir(cfg),
                  "scenario")  # fmt: skip
    assert own.is_file()
    check_demand(cfg)  # the pool holds it: not routed again
    assert own not in preflight._ROUTED


@pytest.mark.parametrize(("windows", "begin"), [("training", 0.0), ("held-out", 900.0)])
def test_validation_runs_in_the_windows_asked_for(tmp_path: Path, windows: str,
                                                  begin: float) -> None:  # fmt: skip
    """``phase2.validation.windows``: every choice (the teacher, checkpoints, phase 3's limit and
    export) is scored in the training windows or in the held-out ones, on the validation seeds;
    the episodes really run there (their rows carry the window)."""
    from tj_hybrid.evaluation import evaluate_validation
    from tj_hybrid.rl_setup import prepare_rl

    cfg = _config(f"run.data_root={tmp_path}", "phase2.demand.train_seeds=1",
                  "phase2.demand.scales=[1.0]", "phase2.demand.heldout_seeds=[9]",
                  "phase2.validation.route_seeds=[5001]", "phase2.validation.sumo_seeds=[80001]",
                  "phase2.eval.baselines=[fixed-time]", "phase2.eval.reuse_rows=false",
                  f"phase2.validation.windows={windows}")  # fmt: skip
    setup = prepare_rl(cfg, agent_dir=None, data_dir=tmp_path / "data")
    assert (setup.scenario.begin, setup.heldout_scenario.begin) == (0.0, 900.0)
    assert setup.validation_scenario.begin == begin
    scored = evaluate_validation(cfg, setup, {}, cost_weights={"dilemma_zone": 1.0})
    assert [r["window"] for r in scored["rows"]] == [[begin, begin + 900.0]]


def test_phase3s_lagrangian_reads_its_limit_in_the_training_windows(tmp_path: Path) -> None:
    """With validation in the held-out windows, ``cost_limit: auto`` is set there, and the
    Lagrangian (which reads training episodes' costs) gets the same share of phase 2's cost in
    the training windows; both points are kept, so a resumed run simulates nothing again."""
    import dataclasses
    import json

    import torch

    from tj_hybrid.phase3.limit import PHASE2, auto_cost_limit
    from tj_hybrid.rl_setup import prepare_rl
    from tj_models import TrafficAgent, TrafficAgentConfig

    cfg = _config(f"run.data_root={tmp_path}", "phase2.demand.train_seeds=1",
                  "phase2.demand.scales=[1.0]", "phase2.demand.heldout_seeds=[9]",
                  "phase2.validation.route_seeds=[5001]", "phase2.validation.sumo_seeds=[80001]",
                  "phase2.eval.baselines=[fixed-time]", "phase2.eval.reuse_rows=false",
                  "phase2.validation.windows=held-out")  # fmt: skip
    torch.manual_seed(0)
    agent = TrafficAgent(TrafficAgentConfig.preset("tiny", max_actions=4)).save(tmp_path / "a")
    setup = prepare_rl(cfg, agent_dir=agent, data_dir=tmp_path / "data")
    (tmp_path / "p3").mkdir()
    limit = auto_cost_limit(cfg, setup, agent, tmp_path / "p3")
    kept = json.loads((tmp_path / "p3" / "limit.json").read_text())
    held, train = kept["points"][PHASE2][1], kept["phase2_training_windows"][1]
    assert held > 0 and train > 0 and held != train  # a switching random policy: zone exposures
    assert limit.training == pytest.approx(limit.value * train / held)
    assert limit.lagrangian == limit.training and "PPO-Lagrangian" in limit.line
    # resumed: the kept points are read (a setup without validation traffic would raise)
    again = auto_cost_limit(cfg, dataclasses.replace(setup, validation=None), agent,
                            tmp_path / "p3")  # fmt: skip
    assert again == limit
    # in the training windows there is one limit
    cfg_t = _config(f"run.data_root={tmp_path}", "phase2.demand.train_seeds=1",
                    "phase2.demand.scales=[1.0]", "phase2.demand.heldout_seeds=[9]",
                    "phase2.validation.route_seeds=[5001]",
                    "phase2.validation.sumo_seeds=[80001]", "phase2.eval.baselines=[fixed-time]",
                    "phase2.eval.reuse_rows=false")  # fmt: skip
    setup_t = prepare_rl(cfg_t, agent_dir=agent, data_dir=tmp_path / "data")
    (tmp_path / "p3t").mkdir()
    one = auto_cost_limit(cfg_t, setup_t, agent, tmp_path / "p3t")
    assert one.training is None and one.lagrangian == one.value
    assert "phase2_training_windows" not in json.loads((tmp_path / "p3t" / "limit.json").read_text())
