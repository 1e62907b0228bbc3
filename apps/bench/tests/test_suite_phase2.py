"""The phase2 suite: a quick run records the graph policy's held-out delays, the baselines, time,
memory and the sampling split, and hands its runs on; option parsing, readings and which phase-1
run phase 2 starts from."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tj_bench.suite import parse_counts, parse_list
from tj_bench.suites._phase_app import AppArgs
from tj_bench.suites._phase_chain import VARIANTS, phase1_base
from tj_bench.suites._phase_read import BASELINES, phase2_readings
from tj_hybrid import Evaluation, HeldOutSet, PhaseResult, Spread

SETS = ("held_out", "held_out_heavy")


def test_phase2_quick_run(quick) -> None:
    r = quick.suite("phase2")
    assert r.params["variants"] == "graph" and r.params["seeds"] == "0"
    for s in SETS:
        policy = r.figure(f"graph/delay/{s}/policy")
        assert len(policy.values) == 1 and 0 < policy.median < 300  # one seed; s per vehicle
        for name in BASELINES:
            assert 0 < r.figure(f"baseline/delay/{s}/{name}").median < 300
        assert r.figure(f"graph/low_ttc/{s}/policy").median >= 0
    assert 0 < r.figure("graph/train_wall").median <= r.figure("graph/wall").median
    assert r.figure("graph/peak_tree_pss").median > 100  # MiB: trainer, Ray, SUMO
    assert math.isfinite(r.figure("graph/uss_left").median)
    for name in ("bare_env", "forward", "rllib"):
        assert r.figure(f"sampling/{name}").median > 0
    assert r.figure("sampling/rllib_share").median < 100


def test_parse_options() -> None:  # seeds (from 0) and variants
    assert parse_counts("0, 1,2", "seeds", 0) == [0, 1, 2]
    assert parse_list("graph,lane-mlp", tuple(VARIANTS), "variants") == ("graph", "lane-mlp")
    for bad in ("", "1,1", "x", "-1"):
        with pytest.raises(ValueError):
            parse_counts(bad, "seeds", 0)
    for bad in ("", "graph,graph", "gnn"):
        with pytest.raises(ValueError):
            parse_list(bad, tuple(VARIANTS), "variants")


def _summary(delay: float) -> HeldOutSet:
    spreads = {p: {"avg_delay": delay + i, "cost_low_ttc": 10.0 * i}
               for i, p in enumerate(("phase2", *BASELINES, "clone"))}  # fmt: skip
    return HeldOutSet(rows=[], summary={p: {k: Spread(mean=v, std=0.0, min=v, max=v, n=1)
                                            for k, v in m.items()} for p, m in spreads.items()})  # fmt: skip


def test_phase2_readings(tmp_path: Path) -> None:
    result = PhaseResult(name="2", agent=tmp_path, report=tmp_path, headline="",
                         metrics={"train_wall_s": 500.0, "peak_tree_pss": 1536 * 2**20,
                                  "tree_uss_before": 900 * 2**20, "tree_uss_after": 906 * 2**20})  # fmt: skip
    evaluation = Evaluation(held_out=_summary(9.0), held_out_heavy=_summary(10.0))
    got = {r.name: r for r in phase2_readings(result, evaluation, 600.0, baselines=True)}
    assert (
        got["delay/held_out/policy"].value == 9.0 and got["delay/held_out/policy"].better == "lower"
    )
    assert got["delay/held_out_heavy/policy"].value == 10.0
    assert got["baseline/delay/held_out/greedy"].value == 12.0
    assert got["baseline/delay/held_out/greedy"].better is None
    assert got["low_ttc/held_out/policy"].value == 0.0
    # the teacher's clone PPO started from: read beside the policy, not scored
    assert got["delay/held_out/clone"].value == 9.0 + 1 + len(BASELINES)
    assert got["delay/held_out/clone"].better is None
    assert got["uss_left"].value == pytest.approx(6.0) and got["peak_tree_pss"].value == 1536
    bare = {r.name for r in phase2_readings(result, evaluation, 600.0, baselines=False)}
    assert not any(n.startswith("baseline/") for n in bare)
    assert "env_steps_per_s" not in got  # no metrics rows given
    rows = [{"env_steps_per_s": 100.0, "time/iteration_s": 10.0},  # 1,000 steps in 10 s
            {"env_steps_per_s": 300.0, "time/iteration_s": 5.0},  # 1,500 steps in 5 s
            {"validation/avg_delay": 7.0}]  # a row without timing is skipped
    speed = {r.name: r for r in phase2_readings(result, evaluation, 600.0, baselines=False,
                                                rows=rows)}["env_steps_per_s"]  # fmt: skip
    assert speed.value == pytest.approx(2500 / 15) and speed.better == "higher"


def _done(run: Path, scenario: str) -> Path:
    (run / "phase1").mkdir(parents=True)
    (run / "phase1" / "result.json").write_text("{}")
    AppArgs(scenario=scenario, sets=("s=1",)).save(run)
    return run


def test_phase1_base_reuses_a_finished_run(tmp_path: Path) -> None:
    shared = {"phase1_run": _done(tmp_path / "suite1", "default")}
    root = tmp_path / "root"
    assert phase1_base(shared, root, "default", quick=True) == (shared["phase1_run"],
                                                                AppArgs(sets=("s=1",)))  # fmt: skip
    kept = _done(root / "base", "grid")  # an earlier run kept in ROOT wins
    assert phase1_base(shared, root, "default", quick=True)[0] == kept


def test_phase1_base_runs_phase1_for_another_scenario(tmp_path: Path, monkeypatch) -> None:
    from tj_bench.suites import _phase_chain

    calls = []
    monkeypatch.setattr(_phase_chain, "run_phase1",
                        lambda args, root, name: calls.append(args) or (root / name, 1.0))  # fmt: skip
    shared = {"phase1_run": _done(tmp_path / "suite1", "grid")}
    base, made = phase1_base(shared, tmp_path / "root", "default", quick=False)
    assert base == tmp_path / "root" / "base" and calls == [made] and made.scenario == "default"
