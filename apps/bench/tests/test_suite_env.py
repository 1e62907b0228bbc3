"""The env suite: its quick run records sane figures and the PNG; its plan and options are pure
functions with their own tests."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from tj_bench.suite import SuiteContext, parse_list
from tj_bench.suites._env_driver import check_sumo_rl
from tj_bench.suites._env_plan import (
    SUMO_RL,
    Cell,
    episode_figures,
    paired_figures,
    plan_cells,
    runs_on,
)
from tj_bench.suites.env import settings_from

CELLS = ("default/libsumo/outputs-off/numpy", "default/traci/outputs-off/numpy")


def test_quick_run_measures_both_backends_on_the_embedded_scenario(quick) -> None:
    r = quick.suite("env")
    for cell in CELLS:
        speed = r.figure(f"{cell}/sim_s_per_s")
        assert speed.unit == "sim-s/s" and speed.better == "higher"
        assert len(speed.values) == 1 and 0 < speed.median < math.inf
        assert 0 < r.figure(f"{cell}/sim_s_per_cpu_s").median < math.inf
        assert 0 < r.figure(f"{cell}/startup_s").median < 60
        # the env process alone (python, numpy, tj-rl; SUMO too for traci): tens of MiB, not GiB
        assert 20 < r.figure(f"{cell}/pss_mib").median < 2048
        # 300 s episode, a decision every 10 s: 30 steps, so steps/s is sim-s/s over 10
        steps = r.figure(f"{cell}/steps_per_s").median
        assert steps == pytest.approx(speed.median / 10, rel=1e-6)
    # the CPU split exists on libsumo only, and its parts add up
    lib = "default/libsumo/outputs-off/numpy"
    cpu, sumo, rest = (r.figure(f"{lib}/{k}").median for k in ("cpu_s", "sumo_cpu_s", "rest_cpu_s"))
    assert 0 < sumo < cpu and rest == pytest.approx(cpu - sumo)
    assert not any(
        f.name.startswith("default/traci/") and f.name.endswith("sumo_cpu_s") for f in r.figures
    )
    assert "sumo-rl" in r.unavailable  # no interpreter given: the rest still ran
    assert r.params["episode_s"] == 300.0 and r.params["variants"] == "numpy"
    assert r.artifacts == ["env_speed.png"]
    png = quick.out / "env_speed.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_parse_list_checks_names_and_duplicates() -> None:
    assert parse_list(" numpy, numba+native ", ("numpy", "numba+native"), "v") == (
        "numpy",
        "numba+native",
    )
    with pytest.raises(ValueError, match="unknown"):
        parse_list("numpy,cuda", ("numpy",), "v")
    with pytest.raises(ValueError, match="twice"):
        parse_list("numpy,numpy", ("numpy",), "v")
    with pytest.raises(ValueError, match="at least one"):
        parse_list(" , ", ("numpy",), "v")


def test_plan_runs_native_on_libsumo_only_and_sumo_rl_after_the_variants() -> None:
    assert runs_on("numba+native", "libsumo") and not runs_on("numba+native", "traci")
    assert runs_on(SUMO_RL, "traci")
    cells = plan_cells(
        ["default"], ["libsumo", "traci"], ["off"], ["numpy", "numba+native"], sumo_rl=True
    )
    assert [c.name for c in cells] == [
        "default/libsumo/outputs-off/numpy",
        "default/libsumo/outputs-off/numba+native",
        "default/libsumo/outputs-off/sumo-rl",
        "default/traci/outputs-off/numpy",
        "default/traci/outputs-off/sumo-rl",
    ]
    assert cells[0].baseline == cells[2] and cells[2].is_sumo_rl
    assert (
        len(plan_cells(["default", "grid"], ["libsumo"], ["off", "on"], ["numpy"], sumo_rl=False))
        == 4
    )


def test_episode_and_paired_figures() -> None:
    tj = {
        "sim_s": 1800.0,
        "wall_s": 0.1,
        "cpu_s": 0.12,
        "steps": 180,
        "startup_s": 0.5,
        "pss_mib": 130.0,
        "sumo_cpu_s": 0.08,
    }
    base = {**tj, "wall_s": 0.2, "cpu_s": 0.3, "sumo_cpu_s": None}
    f = episode_figures(tj)
    assert f["sim_s_per_s"] == (18000.0, "sim-s/s", "higher")
    assert f["steps_per_s"][0] == pytest.approx(1800.0)
    assert f["rest_cpu_s"][0] == pytest.approx(0.04)
    assert "cpu_s" not in episode_figures(base)  # traci: no split
    p = paired_figures(tj, base)
    assert p["speedup_wall"] == (pytest.approx(2.0), "x", "higher")
    assert p["speedup_cpu"][0] == pytest.approx(2.5)


def _ctx(tmp_path: Path, quick: bool, **options: str) -> SuiteContext:
    return SuiteContext(
        suite="env", quick=quick, runs=1, workdir=tmp_path, out_dir=tmp_path, options=options
    )


def test_settings_default_to_the_old_script_and_quick_is_small(tmp_path: Path) -> None:
    full = settings_from(_ctx(tmp_path, False))
    assert full.variants == ("numpy", "numba", "numba+native")
    assert full.scenarios == ("default", "grid", "grid-heavy")
    assert full.backends == ("libsumo", "traci") and full.outputs == ("off", "on")
    assert (full.seconds, full.delta, full.yellow, full.all_red, full.seed) == (1800, 10, 3, 0, 7)
    assert (full.grid, full.grid_rate, full.grid_heavy_rate) == (3, 1200, 4800)
    small = settings_from(_ctx(tmp_path, True))
    assert small.variants == ("numpy",) and small.scenarios == ("default",)
    assert small.outputs == ("off",) and small.seconds < full.seconds
    assert settings_from(_ctx(tmp_path, True, seconds="60", all_red="2")).all_red == 2.0


def test_settings_reject_bad_options_before_running(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown"):
        settings_from(_ctx(tmp_path, True, variants="numpy,torch"))
    with pytest.raises(ValueError, match="two decisions"):
        settings_from(_ctx(tmp_path, True, seconds="15"))
    with pytest.raises(ValueError, match="EnvConfig"):  # tj-rl's own check of the timings
        settings_from(_ctx(tmp_path, True, yellow="-1"))


def test_cell_names_are_stable() -> None:
    c = Cell(scenario="grid-heavy", backend="libsumo", outputs="on", impl="numba-free-reads")
    assert c.name == "grid-heavy/libsumo/outputs-on/numba-free-reads"


def test_an_interpreter_without_sumo_rl_is_refused_with_the_reason(tmp_path: Path) -> None:
    version, why = check_sumo_rl(sys.executable)  # the workspace's: no sumo-rl
    assert version is None and "sumo_rl" in why
    version, why = check_sumo_rl(str(tmp_path / "no-python"))
    assert version is None and "cannot run" in why
