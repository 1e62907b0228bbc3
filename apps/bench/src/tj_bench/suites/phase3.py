"""Phase 3's quality and cost: held-out safety cost and delay of the phase-3 policy against the
phase-2 policy it started from (and the baselines), over training seeds, plus its data path.

Each training seed needs a finished phase-2 graph run: the ``runs`` option, else the phase2
suite's graph runs of this benchmark run, else this suite runs phase 1 and a phase 2 per seed
itself. Phase 3 runs on a copy of each (``apps/hybrid --phase 3 --resume``), one at a time, with
the arguments the phase-2 run was made with. Per seed: held-out delay and episode cost of both
policies and the baselines, their change, the cost limit, the final lambda, the data-wait
fraction, the GNN-embedding cache's speed-up per epoch (epoch 1 computes the frozen GNN, later
epochs read the cache: same work otherwise), time, peak tree PSS and the tree USS left behind.
"""

from __future__ import annotations

from pathlib import Path

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._phase_app import AppArgs, record_setup, split_sets
from tj_bench.suites._phase_chain import phase1_base, run_phase2, run_phase3
from tj_bench.suites._phase_read import phase3_readings
from tj_hybrid import phase_dir, read_evaluation, read_metrics, read_result

__all__ = ["SUITE"]


def _phase2_runs(ctx: SuiteContext, root: Path) -> list[Path]:
    """The phase-2 runs to continue: given, handed on by phase2, or made here."""
    given = ctx.option("runs", "")
    seeds = parse_counts(ctx.option("seeds", "0" if ctx.quick else "0,1,2"), "phase3.seeds", 0)
    scenario = ctx.option("scenario", "default")
    if given:
        runs = [Path(p.strip()).resolve() for p in given.split(",") if p.strip()]
    elif ctx.shared.get("phase2_runs"):
        runs = list(ctx.shared["phase2_runs"])
    else:
        base, made = phase1_base(ctx.shared, root, scenario, quick=ctx.quick)
        todo = ctx.progress(seeds, "phase-2 runs (phase 3 starts from them)")
        runs = [run_phase2(base, made, root, "graph", seed, quick=ctx.quick)[0] for seed in todo]
        ctx.note(
            f"No phase-2 runs were given: this suite trained phase 2 (graph) for seeds {seeds}."
        )
    missing = [str(r) for r in runs if not phase_dir(r, "2").finished]
    if missing:
        raise ValueError(f"runs: no finished phase 2 in {', '.join(missing)}")
    return runs


def run(ctx: SuiteContext) -> None:
    sets = split_sets(ctx.option("sets", ""))
    kept = ctx.option("root", "")
    root = Path(kept).resolve() if kept else ctx.workdir / "phase3"
    root.mkdir(parents=True, exist_ok=True)
    runs = _phase2_runs(ctx, root)
    made_all = []
    for index, src in enumerate(ctx.progress(runs, "phase-3 runs")):
        made = AppArgs.load(src) or AppArgs()
        seed = made.seed if made.seed is not None else index
        made_all.append((src.name, seed, made))
        run_dir, wall = run_phase3(src, made, root, seed, quick=ctx.quick, sets=sets)
        for r in phase3_readings(read_result(run_dir, "3"), read_evaluation(run_dir, "3"),
                                 read_metrics(run_dir, "3"), wall):  # fmt: skip
            ctx.record(r.name, r.value, unit=r.unit, better=r.better)
    first = made_all[0][2]
    ctx.param("runs", ", ".join(f"{name} (seed {seed})" for name, seed, _ in made_all))
    record_setup(ctx, first.scenario, first.profile, sets, root if kept else None)
    ctx.note("The repetitions are training seeds (one phase-3 run per phase-2 run: median, min "
             "and max are over seeds), not --runs. cache_speedup: median first-epoch time over "
             "median later-epoch time across the run's iterations.")  # fmt: skip


SUITE = Suite(
    name="phase3",
    summary="apps/hybrid --phase 3: held-out cost and delay vs phase 2 over training seeds, "
            "cost limit, lambda, data wait, embedding cache, memory",
    run=run,
    options={
        "runs": "phase-2 run folders to continue, comma-separated (default: the phase2 suite's "
                "graph runs of this benchmark run, else phase 1 + phase 2 run here)",
        "seeds": "training seeds when this suite runs phase 2 itself (default 0,1,2; quick 0)",
        "scenario": "when this suite runs phases 1-2 itself: default, grid or a .sumocfg path",
        "sets": "extra --set values for apps/hybrid's phase 3, ';'-separated",
        "root": "keep the runs in this folder",
    },
)  # fmt: skip
