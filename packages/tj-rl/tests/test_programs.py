"""The baselines users deploy: the scenario's own programs and SUMO's actuated control, run by SUMO
and measured through the same evaluation protocol as every policy (SUMO and netconvert run, no
mocks)."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import pytest

from tj_rl.control import (
    POLICIES,
    ActuatedSpec,
    ScenarioProgramPolicy,
    SumoActuatedPolicy,
    actuated_net,
    describe_policy,
    make_policy,
    tls_types,
)
from tj_rl.control.actuated_net import without_programs
from tj_rl.env import EnvConfig, Scenario, TrafficSignalCore
from tj_rl.eval import evaluate
from tj_rl.eval.heldout import HELDOUT_METRICS, evaluate_heldout
from tj_rl.traffic.demand import run_command

PROGRAMS = ("scenario-program", "sumo-actuated")


@pytest.fixture
def nets(tmp_path: Path) -> Path:
    return tmp_path / "nets"


def test_both_are_named_baselines_with_a_label() -> None:
    assert set(PROGRAMS) <= set(POLICIES)
    assert isinstance(make_policy("scenario-program"), ScenarioProgramPolicy)
    assert isinstance(make_policy("sumo-actuated", min_dur=4), SumoActuatedPolicy)
    assert "own signal programs" in describe_policy("scenario-program")
    label = describe_policy(SumoActuatedPolicy(min_dur=4, max_dur=40))
    assert "--tls.default-type actuated" in label and "--tls.min-dur 4 --tls.max-dur 40" in label
    assert "programmed duration" in describe_policy("fixed-time")
    assert "scores 2 more" in describe_policy(make_policy("greedy", margin=2))
    with pytest.raises(ValueError, match="base 'sumo-actuated' must be one of"):
        make_policy("mixed", base="sumo-actuated")
    with pytest.raises(ValueError, match="min_dur 9 > max_dur 8"):
        ActuatedSpec(min_dur=9, max_dur=8)


@pytest.mark.parametrize("name", PROGRAMS)
def test_a_whole_episode_through_evaluate_gives_finite_metrics(
    default_sc: Scenario, name: str
) -> None:
    row = evaluate(default_sc.replace(end=300.0), name, seeds=[2]).rows[0]
    assert row["status"] == "time_limit" and row["vetoes"] == 0 and row["cost_veto"] == 0
    for key in HELDOUT_METRICS:
        assert math.isfinite(row[key]), key
    assert row["throughput"] > 10


def test_actuated_changes_the_program_type_and_the_delays(default_sc: Scenario, nets: Path) -> None:
    sc = default_sc.replace(end=600.0)
    actuated = SumoActuatedPolicy(cache_dir=nets)
    converted = actuated.scenario_for(sc)
    assert tls_types(sc.net_file) == {"A0": "static"}
    assert tls_types(converted.net_file) == {"A0": "actuated"}
    assert converted.net_file.parent == nets and converted.route_files == sc.route_files
    delay = {n: evaluate(sc, p, seeds=[3]).rows[0]["avg_delay"]
             for n, p in (("program", ScenarioProgramPolicy()), ("actuated", actuated))}  # fmt: skip
    assert delay["program"] != delay["actuated"]


def test_sumo_runs_its_own_program_and_the_env_applies_nothing(default_sc: Scenario) -> None:
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=default_sc.replace(end=200.0))
    try:
        pol = ScenarioProgramPolicy()
        env.reset(seed=0, options=pol.reset_options)
        states, trunc = set(), {"__all__": False}
        while not trunc["__all__"]:
            _, _, _, trunc, infos = env.step({"A0": 1})  # ignored: SUMO runs the lights
            assert infos["A0"]["applied_action"] == -1 and not infos["A0"]["vetoed"]
            conn = env.backend.conn
            if conn is not None:
                assert conn.trafficlight.getProgram("A0") == "0"  # the net's own, never ours
                states.add(conn.trafficlight.getRedYellowGreenState("A0"))
        assert len(states) >= 3  # SUMO cycles its program (greens and yellows)
        _obs, infos = env.reset(seed=0)  # the next episode is the agents' again
        _, _, _, _, infos = env.step({"A0": 0})
        assert infos["A0"]["applied_action"] == 0
        with pytest.raises(ValueError, match="reset option signals='sumo': one of"):
            env.reset(options={"signals": "sumo"})
    finally:
        env.close()


def test_converted_nets_are_cached_per_net_and_options(
    default_sc: Scenario, nets: Path, tmp_path: Path
) -> None:
    ran: list[Sequence[str]] = []  # netconvert's runs (the real runner, counted)

    def runner(cmd: Sequence[str], cwd: Path) -> None:
        ran.append(cmd)
        run_command(cmd, cwd)

    a = actuated_net(default_sc.net_file, cache_dir=nets, runner=runner)
    assert len(ran) == 1 and actuated_net(default_sc.net_file, cache_dir=nets, runner=runner) == a
    assert len(ran) == 1  # reused
    b = actuated_net(default_sc.net_file, spec=ActuatedSpec(max_dur=40), cache_dir=nets,
                     runner=runner)  # fmt: skip
    assert len(ran) == 2 and b != a and 'maxDur="40"' in b.read_text()
    a.write_text(a.read_text()[:1000])  # a damaged cache entry is converted again
    assert actuated_net(default_sc.net_file, cache_dir=nets, runner=runner) == a
    assert len(ran) == 3 and tls_types(a) == {"A0": "actuated"}
    assert sorted(p.name for p in nets.iterdir()) == sorted([a.name, b.name])  # no temp files
    copy = tmp_path / "copy.net.xml"
    copy.write_text(default_sc.net_file.read_text().replace("<net ", "<net  ", 1))
    assert actuated_net(copy, cache_dir=nets, runner=runner) != a  # another net: another file
    assert len(ran) == 4


def test_the_scenarios_own_program_files_are_left_out(tmp_path: Path, nets: Path) -> None:
    only = tmp_path / "plans.add.xml"
    only.write_text('<additional><tlLogic id="A0" programID="x" type="static">'
                    '<phase duration="9" state="GGrr"/></tlLogic></additional>')  # fmt: skip
    mixed = tmp_path / "mixed.add.xml"
    mixed.write_text('<additional><vType id="car"/><tlLogic id="A0" programID="y" type="static">'
                     '<phase duration="9" state="GGrr"/></tlLogic></additional>')  # fmt: skip
    plain = tmp_path / "types.add.xml"
    plain.write_text('<additional><vType id="bus"/></additional>')
    kept = without_programs([only, mixed, plain], nets)
    assert kept[1] == plain and len(kept) == 2
    assert "vType" in kept[0].read_text() and "tlLogic" not in kept[0].read_text()
    assert kept[0].parent == nets
    (empty,) = without_programs([only], nets, keep_one=True)
    assert empty.read_text().strip() == "<additional/>"
    assert without_programs([only], nets) == ()
    # a lone <tlLogic> as the file's root (SUMO's Braunschweig demo, signalPlan.add.xml)
    bare = tmp_path / "signalPlan.add.xml"
    bare.write_text('<tlLogic id="A0" programID="z" type="static"><phase duration="9" '
                    'state="GGrr"/></tlLogic>')  # fmt: skip
    assert without_programs([bare, plain], nets) == (plain,)


def test_held_out_table_holds_both_with_their_labels(default_sc: Scenario, nets: Path) -> None:
    sc = default_sc.replace(end=120.0)
    policies = {"fixed-time": "fixed-time", "scenario-program": "scenario-program",
                "sumo-actuated": SumoActuatedPolicy(cache_dir=nets)}  # fmt: skip
    table = evaluate_heldout(sc, policies, sc.route_files, seeds=[7, 8])
    assert table.policies == ("fixed-time", "scenario-program", "sumo-actuated")
    assert len(table.rows) == 6 and all(r["window"] == [0.0, 120.0] for r in table.rows)
    summary = table.summary()
    assert summary["sumo-actuated"]["avg_delay"].n == 2
    legend = table.legend()
    assert "Time windows: [0, 120) s (00:00:00-00:02:00)." in legend
    assert "- `sumo-actuated`: SUMO's gap-based actuated control" in legend
    assert "- `scenario-program`: the scenario's own signal programs" in legend
    alone = evaluate(sc, SumoActuatedPolicy(cache_dir=nets), seeds=[8]).rows[0]
    actuated = [r for r in table.rows if r["policy"] == "sumo-actuated"]
    assert {k: alone[k] for k in HELDOUT_METRICS} == {k: actuated[1][k] for k in HELDOUT_METRICS}


def test_cache_dir_defaults_under_xdg_cache_home(
    default_sc: Scenario, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(os.environ, "XDG_CACHE_HOME", str(tmp_path / "xdg"))
    net = make_policy("sumo-actuated").scenario_for(default_sc).net_file
    assert net.parent == tmp_path / "xdg" / "tj-rl" / "nets"


def _phase_states(net: Path) -> dict[str, list[str]]:
    import xml.etree.ElementTree as ET

    return {tl.get("id", ""): [p.get("state", "") for p in tl.iter("phase")]
            for tl in ET.parse(net).getroot().iter("tlLogic")}  # fmt: skip


def test_rebuilt_static_plans_are_what_the_env_switches(nets: Path) -> None:
    """SUMO's A10KW game scenario gives each approach its own green; netconvert's rebuilt plans
    (static) pair opposite approaches: the env on ``rebuilt_plans`` runs those, ``scenario-program``
    with ``source`` still runs the scenario's own on the same routes and window."""
    from tj_rl.control import rebuilt_plans
    from tj_rl.control.baselines import MaxPressurePolicy
    from tj_rl.env.runtime import sumo_home

    own = Scenario.from_sumocfg(sumo_home() / "tools/game/A10KW.sumocfg").window(900.0, 120.0)
    rebuilt = rebuilt_plans(own, spec=ActuatedSpec(tls_type="static"), cache_dir=nets)
    assert set(tls_types(rebuilt.net_file).values()) == {"static"}
    assert rebuilt.net_file.parent == nets and "-static-" in rebuilt.net_file.name
    assert (rebuilt.route_files, rebuilt.begin, rebuilt.end) == (own.route_files, own.begin, own.end)
    plans = _phase_states(rebuilt.net_file)
    assert plans != _phase_states(own.net_file)
    with pytest.raises(ValueError, match="tls_type: 'gap', one of actuated, static"):
        ActuatedSpec(tls_type="gap")  # type: ignore[arg-type]
    env = TrafficSignalCore(EnvConfig(metrics=False), scenario=rebuilt)
    seen: dict[str, set[str]] = {tl: set() for tl in plans}
    try:
        pol = MaxPressurePolicy()
        obs, infos = env.reset(seed=1)
        pol.reset(env)
        trunc = {"__all__": False}
        while not trunc["__all__"]:
            obs, _, _, trunc, infos = env.step(pol.compute_actions(obs, infos))
            conn = env.backend.conn  # None once the episode's last step closed SUMO
            for tl in plans if conn is not None else ():
                seen[tl].add(conn.trafficlight.getRedYellowGreenState(tl))
    finally:
        env.close()
    for tl, states in seen.items():  # every green shown is one of the rebuilt plan's greens
        greens = {s for s in states if "G" in s or "g" in s}
        assert greens and greens <= set(plans[tl]), (tl, greens - set(plans[tl]))
    back = ScenarioProgramPolicy(source=own).scenario_for(rebuilt)
    assert (back.net_file, back.additional_files) == (own.net_file, own.additional_files)
    assert (back.route_files, back.begin, back.end) == (rebuilt.route_files, own.begin, own.end)
