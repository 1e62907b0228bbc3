"""Phase 1 end to end, timed: ``apps/hybrid --phase 1`` records its dataset with SUMO, trains the
world model on DDP ranks, evaluates it on held-out episodes against constant-velocity
extrapolation and writes its report; the figures come from the run's phase-1 summary.

Every repetition is a new run with a new recording (nothing reused). With ``fresh_clone`` each
repetition clones the committed files and runs ``uv run apps/hybrid`` there, so the wall time
includes uv creating the virtual environment (the "fresh clone" target). The last repetition's run
folder is handed on to phase2 (``ctx.shared["phase1_run"]``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any

from tj_bench.suite import Suite, SuiteContext
from tj_bench.suites._phase_app import hybrid_app, record_setup, split_sets
from tj_bench.suites._phase_chain import run_phase1
from tj_bench.suites._phase_read import phase1_readings
from tj_bench.suites._phase_scenario import QUICK_PROFILE, base_args, scenario_key
from tj_hybrid import read_phase1_summary

__all__ = ["SUITE"]


def _clone(ctx: SuiteContext, rep: int) -> dict[str, Any]:
    """``run_app`` keywords that run the trainer from a fresh clone of the committed files."""
    uv = shutil.which("uv")
    if uv is None:
        raise RuntimeError("fresh_clone: uv is not on PATH")
    clone = ctx.workdir / f"clone-{rep}"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", str(hybrid_app().parents[1]), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    return {"command": [uv, "run", "apps/hybrid"], "cwd": clone, "env": env}


def run(ctx: SuiteContext) -> None:
    scenario = ctx.option("scenario", "default")
    sets = split_sets(ctx.option("sets", ""))
    fresh = ctx.option("fresh_clone", False)
    root = ctx.shared_dir / "phase1"
    record_setup(ctx, scenario_key(scenario), QUICK_PROFILE if ctx.quick else None, sets,
                 fresh_clone=fresh)  # fmt: skip
    how = ("`uv run apps/hybrid --phase 1` in a fresh clone of the committed files, from start "
           "to exit: uv creating the virtual environment included, the clone itself not"
           if fresh else "the trainer's process from start to exit, its virtual environment "
           "already there (`fresh_clone=true` adds its creation, as the old fresh-clone figure did)")  # fmt: skip
    ctx.note(f"Each repetition is a new phase-1 run with a new SUMO recording; `wall` is {how}.")
    for rep in ctx.repetitions("phase-1 runs"):
        folder = root / f"rep-{rep}"
        args = base_args(scenario, folder, quick=ctx.quick, sets=sets)
        app = _clone(ctx, rep) if fresh else {}
        run_dir, wall = run_phase1(args, folder, "run", **app)
        if fresh:
            shutil.rmtree(app["cwd"], ignore_errors=True)
        for r in phase1_readings(read_phase1_summary(run_dir), wall):
            ctx.record(r.name, r.value, unit=r.unit, better=r.better)
        ctx.shared["phase1_run"] = run_dir


SUITE = Suite(
    name="phase1",
    summary="apps/hybrid --phase 1: time, world model vs constant velocity, data wait, peak PSS",
    run=run,
    options={
        "scenario": "default, grid (a generated 2x2 grid) or a .sumocfg path",
        "sets": "extra --set values for apps/hybrid, ';'-separated",
        "fresh_clone": "true: run `uv run apps/hybrid` in a fresh clone of the committed files "
                       "(wall includes creating the virtual environment)",
    },
)  # fmt: skip
