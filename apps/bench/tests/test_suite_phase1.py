"""The phase1 suite: a quick run records phase 1's figures; the trainer runner and the run
arguments it hands on."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tj_bench.suites._phase_app import AppArgs, run_app, split_sets
from tj_bench.suites._phase_read import phase1_readings
from tj_bench.suites._phase_scenario import QUICK_PHASE1, QUICK_PROFILE, base_args
from tj_hybrid import Phase1Summary, WorldModelErrors

FIGURES = ("wall", "recording", "training", "error/world_model", "error/constant_velocity",
           "improvement", "data_wait", "peak_tree_pss", "budget")  # fmt: skip


def test_phase1_quick_run(quick) -> None:
    r = quick.suite("phase1")
    fig = {name: r.figure(name).median for name in FIGURES}
    assert all(math.isfinite(v) for v in fig.values()), fig
    assert 0 < fig["recording"] + fig["training"] <= fig["wall"]
    model, cv = fig["error/world_model"], fig["error/constant_velocity"]
    assert model > 0 and cv > 0
    assert fig["improvement"] == pytest.approx(100 * (1 - model / cv), abs=0.5)  # rounded errors
    assert 0 <= fig["data_wait"] <= 100
    assert 0.1 < fig["peak_tree_pss"] < fig["budget"]  # GiB: ranks + torch, under the budget
    assert r.params["profile"] == QUICK_PROFILE and r.params["device"]


def test_phase1_readings_from_summary() -> None:
    errors = WorldModelErrors(vehicles=100, model_mae=6.0, model_rmse=7.0, cv_mae=10.0,
                              cv_rmse=11.0, improvement=0.4)  # fmt: skip
    summary = Phase1Summary(eval=errors, wall_s={"data": 5.0, "train": 40.0, "total": 46.0},
                            data_wait_fraction=0.07, windows_per_s=50.0, steps=40,
                            peak_tree_pss=2 * 2**30, budget_bytes=14 * 2**30)  # fmt: skip
    got = {r.name: r for r in phase1_readings(summary, 60.0)}
    assert set(got) == set(FIGURES)
    assert got["improvement"].value == pytest.approx(40.0) and got["improvement"].better == "higher"
    assert got["data_wait"].value == pytest.approx(7.0) and got["data_wait"].unit == "%"
    assert got["peak_tree_pss"].value == 2.0 and got["budget"].better is None


def test_app_args_round_trip_and_argv(tmp_path: Path) -> None:
    args = AppArgs(scenario="grid", profile="smoke", sets=("a.b=1",)).plus("c=2", seed=3)
    assert args.argv() == ["--profile", "smoke", "--set", "a.b=1", "--set", "c=2",
                           "--set", "run.seed=3"]  # fmt: skip
    args.save(tmp_path)
    assert AppArgs.load(tmp_path) == args
    assert AppArgs.load(tmp_path / "none") is None
    assert AppArgs().argv() == []  # the trainer picks the profile
    assert split_sets(" a=1 ;; b.c=[1,2] ") == ("a=1", "b.c=[1,2]")


def test_base_args_put_the_data_under_the_folder(tmp_path: Path) -> None:
    quick = base_args("default", tmp_path, quick=True, sets=("x=1",))
    assert quick.profile == QUICK_PROFILE and quick.scenario == "default"
    assert quick.sets[0] == f"phase1.data.path={tmp_path / 'data' / 'phase1'}"
    assert quick.sets[1:] == (*QUICK_PHASE1, "x=1")  # the user's values come last (they win)
    assert base_args("default", tmp_path, quick=False).profile is None
    with pytest.raises(ValueError, match="sumocfg"):
        base_args(str(tmp_path / "missing.sumocfg"), tmp_path, quick=False)


def test_run_app_failure_names_the_log(tmp_path: Path) -> None:
    log = tmp_path / "bad.log"
    with pytest.raises(RuntimeError, match=r"bad\.log") as err:
        run_app(["--set", "no.such.key=1", "--print-config"], log)
    assert "no.such" in str(err.value)  # the end of the log: the trainer's config error
