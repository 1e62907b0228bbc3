"""`autotune_loader`: run candidate loader plans briefly, measure them, keep the fastest in budget.

The seeds' "safe / balanced / aggressive / extreme" table (4x2, 8x3, 12x4, 16x4 workers x
prefetch), capped to this machine's cores, plus `plan_loader`'s plan and a no-worker plan, each
run for `seconds_per_candidate` after a warm-up by `tj_data.measure.measure_loader`: samples/s and
the peak PSS of the whole process tree (a candidate is stopped as soon as it goes over the
budget; its workers are waited for before the next one starts).
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import psutil
import torch

from tj_data.errors import BudgetError
from tj_data.loader import build_loader
from tj_data.measure import measure_loader
from tj_data.plan import LoaderPlan, estimate_plan, plan_loader
from tj_monitor import tree_memory

__all__ = ["SEED_TABLE", "AutotuneResult", "CandidateResult", "autotune_loader", "hand_plans"]

log = logging.getLogger(__name__)

SEED_TABLE = {"safe": (4, 2), "balanced": (8, 3), "aggressive": (12, 4), "extreme": (16, 4)}


@dataclass(kw_only=True, frozen=True)
class CandidateResult:
    name: str
    plan: LoaderPlan
    samples_per_s: float
    batches: int
    peak_pss: int
    estimate: int
    over_budget: bool
    error: str | None = None

    def row(self, budget: int) -> str:
        status = "error" if self.error else ("over budget" if self.over_budget else "fits")
        return (
            f"| {self.name} | {self.plan.num_workers} | {self.plan.prefetch_factor or '-'} | "
            f"{self.plan.batch_size} | {self.samples_per_s:,.0f} | {self.peak_pss / 2**20:,.0f} | "
            f"{self.estimate / 2**20:,.0f} | {budget / 2**20:,.0f} | {status} |"
        )


@dataclass(kw_only=True, frozen=True)
class AutotuneResult:
    best: LoaderPlan
    best_name: str
    budget_bytes: int
    table: tuple[CandidateResult, ...]

    def markdown(self) -> str:
        head = (
            "| candidate | workers | prefetch | batch | samples/s | peak tree PSS MiB | "
            "estimate MiB | budget MiB | status |\n|---|---:|---:|---:|---:|---:|---:|---:|---|"
        )
        return "\n".join([head, *(r.row(self.budget_bytes) for r in self.table)])


def _cores() -> int:
    return len(psutil.Process().cpu_affinity() or []) or psutil.cpu_count() or 1


def hand_plans(base: LoaderPlan, cores: int | None = None) -> dict[str, LoaderPlan]:
    """The seed table's configurations (workers capped to `cores`), on top of `base`'s settings,
    plus "no workers"; duplicates after capping are dropped. Keyed by a label that starts with
    the seed-table name ("safe 4x2 (capped: 2x2)")."""
    cores = cores or _cores()
    out: dict[str, LoaderPlan] = {}
    seen: set[tuple[int, int | None]] = set()
    for name, (w, pf) in SEED_TABLE.items():
        wc = min(w, cores)
        if (wc, pf) in seen:
            continue
        seen.add((wc, pf))
        label = f"{name} {w}x{pf}" + (f" (capped: {wc}x{pf})" if wc != w else "")
        out[label] = replace(base, num_workers=wc, prefetch_factor=pf, persistent_workers=True)
    out["no workers"] = replace(base, num_workers=0, prefetch_factor=None, persistent_workers=False)
    return out


def _measure_candidate(
    dataset: Any,
    name: str,
    plan: LoaderPlan,
    estimate: int,
    budget: int,
    seconds: float,
    warmup: int,
    seed: int,
    interval: float,
    step_fn: Callable[[Any], Any] | None,
) -> CandidateResult:
    try:
        m = measure_loader(
            lambda: build_loader(dataset, plan, seed=seed), seconds=seconds, warmup=warmup,
            budget_bytes=budget, step_fn=step_fn, pss_interval=interval,
        )  # fmt: skip
    except (RuntimeError, OSError) as exc:  # a worker killed, shm exhausted, ...
        log.warning("autotune candidate %s failed: %s", name, exc)
        return CandidateResult(
            name=name, plan=plan, samples_per_s=0.0, batches=0, peak_pss=0, estimate=estimate,
            over_budget=False, error=f"{type(exc).__name__}: {exc}",
        )  # fmt: skip
    return CandidateResult(
        name=name, plan=plan, samples_per_s=m.samples_per_s, batches=m.batches,
        peak_pss=m.peak_pss, estimate=estimate, over_budget=m.over_budget,
    )  # fmt: skip


def _combine(results: list[CandidateResult]) -> CandidateResult:
    """One row per candidate: median samples/s over its rounds, the highest peak, any failure."""
    failed = next((r for r in results if r.over_budget or r.error), None)
    if failed is not None:
        return failed
    return replace(
        results[0],
        samples_per_s=statistics.median(r.samples_per_s for r in results),
        batches=sum(r.batches for r in results),
        peak_pss=max(r.peak_pss for r in results),
    )


def autotune_loader(
    dataset: Any,
    budget_bytes: int,
    candidates: Mapping[str, LoaderPlan] | None = None,
    *,
    seconds_per_candidate: float = 3.0,
    warmup_batches: int = 3,
    batch_size: int | None = None,
    device: str | torch.device = "cpu",
    cpu_count: int | None = None,
    seed: int = 0,
    pss_interval: float = 0.25,
    step_fn: Callable[[Any], Any] | None = None,
    rounds: int = 1,
) -> AutotuneResult:
    """Measure each candidate (default: `hand_plans` of `plan_loader`'s plan, plus that plan)
    on `dataset` and return the fastest that stayed within `budget_bytes`, with every row.

    `step_fn(batch)` runs after each batch (e.g. a training step, or its stand-in): workers
    pay off when the main process is busy, and a loader measured alone favours none. Without
    it, the loader's own throughput is compared. With `rounds` > 1 the candidates are measured
    in interleaved rounds and ranked by their median samples/s (a shared machine's noise).

    Raises BudgetError when no candidate stays within the budget."""
    if candidates is None:
        planned = plan_loader(
            dataset,
            budget_bytes=budget_bytes,
            batch_size=batch_size,
            device=device,
            cpu_count=cpu_count,
        )
        candidates = {"plan_loader": planned, **hand_plans(planned, cpu_count)}
    if rounds < 1:
        raise ValueError(f"rounds={rounds} must be >= 1")
    main = tree_memory().pss
    plans = {name: replace(plan, budget_bytes=budget_bytes) for name, plan in candidates.items()}
    estimates = {n: estimate_plan(dataset, p, main_bytes=main).total for n, p in plans.items()}
    runs: dict[str, list[CandidateResult]] = {name: [] for name in plans}
    for r in range(rounds):  # interleaved: a slow spell of a shared machine hits every candidate
        for name, plan in plans.items():
            if any(x.over_budget or x.error for x in runs[name]):
                continue  # over budget or failed once: not measured again
            runs[name].append(
                _measure_candidate(
                    dataset, name, plan, estimates[name], budget_bytes, seconds_per_candidate,
                    warmup_batches, seed, pss_interval, step_fn,
                )
            )  # fmt: skip
            log.info(
                "autotune %s (round %d/%d): %.0f samples/s, peak PSS %.0f MiB",
                name, r + 1, rounds, runs[name][-1].samples_per_s, runs[name][-1].peak_pss / 2**20,
            )  # fmt: skip
    rows = [_combine(results) for results in runs.values()]
    ok = [r for r in rows if not r.over_budget and r.error is None and r.batches > 0]
    if not ok:
        table = AutotuneResult(
            best=rows[0].plan, best_name="", budget_bytes=budget_bytes, table=tuple(rows)
        )
        raise BudgetError(f"no candidate stayed within the budget:\n{table.markdown()}")
    best = max(ok, key=lambda r: r.samples_per_s)
    return AutotuneResult(
        best=best.plan, best_name=best.name, budget_bytes=budget_bytes, table=tuple(rows)
    )
