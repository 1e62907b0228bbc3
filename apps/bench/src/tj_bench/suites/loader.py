"""Suite ``loader``: DataLoader settings under a RAM budget, and the budget held over epochs.

A synthetic npy store several times the budget (generated in a child process, so this process
holds what a trainer would). 1. The seeds' safe / balanced / aggressive / extreme table, each
setting run seed style (plain ``DataLoader(shuffle=True)``) and through ``build_loader``, plus
``plan_loader``'s plan and ``autotune_loader``'s pick: samples/s and peak process-tree PSS,
settings interleaved in each repetition; ``loader_sweep.png`` plots them against the budget.
2. Budget adherence: ``plan_loader``'s plan with persistent workers over full epochs.
"""

from __future__ import annotations

import functools
import gc
import math
import statistics
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tj_bench.measure import MIB, timed
from tj_bench.suite import SizedOptions, Suite, SuiteContext, sized_help
from tj_bench.suites._loader_plot import SweepPoint, plot_sweep
from tj_bench.suites._loader_table import Setting, hand_settings, planned_setting
from tj_monitor import run_in_child

if TYPE_CHECKING:
    from tj_data import LoaderMeasurement

__all__ = ["SUITE", "run"]

GIB = 1 << 30

OPTIONS: SizedOptions = {
    "size_gb": (4.0, 0.01, "size of the generated npy store (GB of stored arrays)"),
    "budget_gb": (1.0, 1.0, "RAM budget: peak PSS of the whole process tree (GiB)"),
    "batch_size": (32, 32, "samples per batch"),
    "shard_size": (8192, 512, "samples per shard"),
    "seconds": (8.0, 0.5, "measured seconds per table row and repetition"),
    "tune_seconds": (3.0, 0.3, "autotune's seconds per candidate"),
    "tune_rounds": (3, 1, "autotune's interleaved rounds"),
    "step_ms": (0.0, 0.0, "CPU work per batch in the main process (a training-step stand-in)"),
    "table": (True, True, "run the table and autotune (false: budget epochs only)"),
    "epochs": (3, 1, "budget-adherence epochs (0: none)"),
    "epoch_batches": (0, 0, "cap on batches per budget epoch (0: full epochs)"),
    "pss_interval": (0.25, 0.1, "PSS polling interval (s)"),
}


def _plan(ds: Any, budget: int, batch_size: int) -> Any:
    from tj_data import BudgetError, plan_loader

    try:
        return plan_loader(ds, budget_bytes=budget, batch_size=batch_size)
    except BudgetError as exc:
        raise ValueError(f"{exc} (raise --set loader.budget_gb)") from exc


def _record_row(ctx: SuiteContext, s: Setting, m: LoaderMeasurement) -> None:
    ctx.record(f"table/{s.key}/samples_per_s", m.samples_per_s, unit="samples/s", better="higher")
    ctx.record(f"table/{s.key}/peak_pss", m.peak_pss / MIB, unit="MiB", better="lower")


def _compare(ctx: SuiteContext, rows: dict[Setting, LoaderMeasurement], budget: int) -> None:
    """One repetition's verdicts: autotune against the fastest hand row within the budget, and
    how many hand rows of each kind went over it."""
    fits = [m.samples_per_s for s, m in rows.items() if s.hand and m.peak_pss <= budget]
    auto = next(m for s, m in rows.items() if s.kind == "autotune")
    if fits:
        ctx.record("autotune/x_fastest_hand", auto.samples_per_s / max(fits), unit="x",
                   better="higher")  # fmt: skip
    else:
        ctx.record("autotune/x_fastest_hand", math.nan, unit="x", better="higher",
                   note="NaN: no hand setting stayed within the budget")  # fmt: skip
    for kind in ("seed_style", "tj"):
        over = sum(1 for s, m in rows.items() if s.kind == kind and m.peak_pss > budget)
        ctx.record(f"table/{kind}_over_budget", over, unit="rows", better="lower")


def _table(ctx: SuiteContext, o: dict[str, Any], store: Path, budget: int) -> None:
    from tj_data import MmapGraphDataset, autotune_loader, busy_step, measure_loader

    planned = _plan(MmapGraphDataset(store), budget, o["batch_size"])
    ctx.record("plan/workers", planned.num_workers, unit="workers")
    ctx.record("plan/prefetch", planned.prefetch_factor or 0, unit="batches")
    ctx.record("plan/estimate", planned.required_bytes / MIB, unit="MiB",
               note="main process + the loader terms with the planner's headroom")  # fmt: skip
    terms = ", ".join(f"{k} {v / MIB:,.1f}" for k, v in planned.estimate.terms.items())
    ctx.note(f"plan_loader: {planned.describe()}; estimate by term (MiB): {terms}")
    step = busy_step(o["step_ms"])
    tuned, tune_s = timed(
        lambda: autotune_loader(
            MmapGraphDataset(store),
            budget,
            batch_size=o["batch_size"],
            step_fn=step,
            seconds_per_candidate=o["tune_seconds"],
            rounds=o["tune_rounds"],
        )
    )
    ctx.record("autotune/search_s", tune_s, unit="s", better="lower")
    ctx.record("autotune/workers", tuned.best.num_workers, unit="workers")
    ctx.record("autotune/prefetch", tuned.best.prefetch_factor or 0, unit="batches")
    ctx.note(f"autotune_loader picked {tuned.best_name!r}: {tuned.best.describe()}")
    settings = hand_settings(store, planned)
    settings += [
        planned_setting(store, planned, "plan"),
        planned_setting(store, tuned.best, "autotune"),
    ]
    for s in settings:
        ctx.param(f"table/{s.key}", f"{s.workers}x{s.prefetch or 0}")
    runs: dict[Setting, list[LoaderMeasurement]] = {s: [] for s in settings}
    for _ in ctx.repetitions("loader table"):
        rows = {}
        for s in settings:  # interleaved: a slow spell of the machine hits every row alike
            rows[s] = measure_loader(s.make, seconds=o["seconds"], step_fn=step,
                                     pss_interval=o["pss_interval"])  # fmt: skip
            runs[s].append(rows[s])
            _record_row(ctx, s, rows[s])
        _compare(ctx, rows, budget)
    _plot(ctx, runs, budget, o)


def _plot(
    ctx: SuiteContext, runs: dict[Setting, list[LoaderMeasurement]], budget: int, o: dict[str, Any]
) -> None:
    points = [
        SweepPoint(label=s.label, kind=s.kind,
                   batches_per_s=statistics.median(m.batches_per_s for m in ms),
                   peak_pss_mib=max(m.peak_pss for m in ms) / MIB)
        for s, ms in runs.items()
    ]  # fmt: skip
    ctx.out_dir.mkdir(parents=True, exist_ok=True)
    title = (f"loader settings, {o['size_gb']} GB store, batch {o['batch_size']}, "
             f"step {o['step_ms']} ms; median of {ctx.runs}, highest peak")  # fmt: skip
    ctx.artifact(plot_sweep(ctx.out_dir / "loader_sweep.png", points, budget / MIB, title))


def _epochs(ctx: SuiteContext, o: dict[str, Any], store: Path, budget: int) -> None:
    from tj_data import MmapGraphDataset, build_loader, measure_epoch

    ds = MmapGraphDataset(store)
    plan = _plan(ds, budget, o["batch_size"])
    loader = build_loader(ds, plan)
    peaks = []
    for e in ctx.progress(range(1, o["epochs"] + 1), "budget epochs"):
        m = measure_epoch(loader, max_batches=o["epoch_batches"], pss_interval=o["pss_interval"])
        peaks.append(m.peak_pss)
        ctx.record(f"epochs/{e}/samples", m.samples, unit="samples")
        ctx.record(f"epochs/{e}/samples_per_s", m.samples_per_s, unit="samples/s", better="higher")
        ctx.record(f"epochs/{e}/peak_pss", m.peak_pss / MIB, unit="MiB", better="lower")
    del loader
    gc.collect()
    ctx.record("epochs/over_budget", sum(p > budget for p in peaks), unit="epochs", better="lower")
    ctx.note(f"budget epochs (one run, persistent workers): {plan.describe()}")


def run(ctx: SuiteContext) -> None:
    from tj_data import MmapGraphDataset
    from tj_data.synthetic import write_synthetic
    from tj_monitor import tree_memory

    o = ctx.sized_options(OPTIONS)
    store = ctx.workdir / "store"
    run_in_child(functools.partial(write_synthetic, {"npy": store}, size_gb=o["size_gb"],
                                   shard_size=o["shard_size"]), name="the store's generation")  # fmt: skip
    ds = MmapGraphDataset(store)
    budget = int(o["budget_gb"] * GIB)
    ctx.record("store/size", ds.store.manifest.nbytes / 1e9, unit="GB")
    ctx.record("store/samples", len(ds), unit="samples")
    ctx.record("budget", budget / MIB, unit="MiB")
    ctx.record("main_pss", tree_memory().pss / MIB, unit="MiB")
    del ds
    if o["table"]:
        _table(ctx, o, store, budget)
    if o["epochs"] > 0:
        _epochs(ctx, o, store, budget)


SUITE = Suite(
    name="loader",
    summary="DataLoader settings under a RAM budget: the seeds' table, plan_loader, "
    "autotune_loader vs the best hand setting, budget held over epochs",
    run=run,
    options=sized_help(OPTIONS),
)
