"""Phase 2's quality and cost: held-out average delay of the trained policy against fixed-time,
max-pressure and greedy, per policy variant, over training seeds; plus the sampling-time split.

Phase 1 runs once per scenario (the phase1 suite's run when it ran in this benchmark run on the
same scenario); then each variant x seed runs ``apps/hybrid --phase 2 --resume`` on a copy of it,
so all of them share one phase-1 encoder, demand pool, held-out traffic and SUMO seeds. Variants:
``graph`` (the product: phase-1 GNN frozen), ``gnn-random`` / ``gnn-finetune`` (the ablation),
``lane-mlp`` (an MLP on lane features, no graph: the baseline the graph must match).

The sampling measurement (bare env, module forward, RLlib's own share per decision) runs after
the trainings, with the phase-1 agent, in a child process: ``ctx.runs`` rounds of
``sampling_decisions`` decisions (0 turns it off).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._phase_app import AppArgs, record_setup, split_sets
from tj_bench.suites._phase_chain import VARIANTS, phase1_base, phase2_args, run_phase2
from tj_bench.suites._phase_read import phase2_readings
from tj_bench.suites._phase_sampling import sampling_rounds
from tj_hybrid import phase_dir, read_evaluation, read_metrics, read_result

__all__ = ["SUITE"]


def _sampling(ctx: SuiteContext, base: Path, args: AppArgs) -> None:
    decisions = ctx.option("sampling_decisions", 60 if ctx.quick else 720)
    ctx.param("sampling_decisions", decisions)
    if decisions <= 0:
        ctx.unavailable("sampling", "turned off (sampling_decisions=0)")
        return
    agent = phase_dir(base, "1").agent
    rows = sampling_rounds(args.profile, args.sets, agent if agent.is_dir() else None,
                           ctx.workdir / "sampling", decisions, ctx.runs)  # fmt: skip
    units = {"bare_env": "ms", "forward": "ms", "rllib": "ms", "rllib_share": "%"}
    for row in rows:
        for key, unit in units.items():
            ctx.record(f"sampling/{key}", row[key], unit=unit, better="lower")


def run(ctx: SuiteContext) -> None:
    variants = ctx.choices("variants", "graph" if ctx.quick else "graph,lane-mlp", tuple(VARIANTS))
    seeds = parse_counts(ctx.option("seeds", "0" if ctx.quick else "0,1,2"), "phase2.seeds", 0)
    scenario = ctx.option("scenario", "default")
    sets = split_sets(ctx.option("sets", ""))
    parallel = ctx.option("parallel", 1)
    kept = ctx.option("root", "")
    root = Path(kept).resolve() if kept else ctx.shared_dir / "phase2"
    root.mkdir(parents=True, exist_ok=True)
    base, made = phase1_base(ctx.shared, root, scenario, quick=ctx.quick, sets=sets)
    jobs = [(v, s) for s in seeds for v in variants]  # seed by seed: every variant per seed

    def one(job: tuple[str, int]) -> tuple[str, Path, float]:
        variant, seed = job
        return variant, *run_phase2(base, made, root, variant, seed, quick=ctx.quick, sets=sets)

    ctx.param("variants", ",".join(variants))
    ctx.param("seeds", ",".join(map(str, seeds)))
    record_setup(ctx, made.scenario, made.profile, sets, root if kept else None, parallel=parallel)
    ctx.note("The repetitions of the training figures are training seeds (one value per seed: "
             "median, min and max are over seeds), not --runs; --runs sets the sampling rounds. "
             "The baselines are deterministic on the held-out traffic (baseline/ figures from "
             f"the {variants[0]} runs).")  # fmt: skip
    graph_runs = []
    with ThreadPoolExecutor(max(1, parallel)) as pool:
        for variant, run_dir, wall in ctx.progress(pool.map(one, jobs), "phase-2 runs", len(jobs)):
            rows = read_metrics(run_dir, "2")
            for r in phase2_readings(read_result(run_dir, "2"), read_evaluation(run_dir, "2"), wall,
                                     baselines=variant == variants[0], rows=rows):  # fmt: skip
                name = r.name if r.name.startswith("baseline/") else f"{variant}/{r.name}"
                ctx.record(name, r.value, unit=r.unit, better=r.better)
            if variant == "graph":
                graph_runs.append(run_dir)
    if graph_runs:
        ctx.shared["phase2_runs"] = graph_runs
    _sampling(ctx, base, phase2_args(made, "graph", None, quick=ctx.quick, sets=sets))


SUITE = Suite(
    name="phase2",
    summary="apps/hybrid --phase 2: held-out delay vs the baselines per variant over training "
            "seeds, training time, memory; sampling-time split",
    run=run,
    options={
        "variants": f"comma-separated, of {', '.join(VARIANTS)} (default graph,lane-mlp)",
        "seeds": "training seeds, comma-separated (default 0,1,2; quick 0)",
        "scenario": "default, grid (a generated 2x2 grid) or a .sumocfg path",
        "sets": "extra --set values for apps/hybrid, ';'-separated",
        "root": "keep the runs in this folder; a finished phase-1 run in ROOT/base is reused",
        "parallel": "phase-2 runs at a time (default 1; each trainer already uses every core: "
                    "two at once on 2 cores ran >10x slower than one after the other)",
        "sampling_decisions": "decisions per sampling round (default 720, quick 60; 0: off)",
    },
)  # fmt: skip
