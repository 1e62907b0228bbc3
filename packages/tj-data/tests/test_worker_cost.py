"""The measured cost of a DataLoader worker belongs to the caller, not to a module-level memo:
a second store is measured, not answered with the first store's number; a plan carries its
measurement and re-estimates with it. The default budget is half of tj-monitor's limit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tjdata_traffic import write_traffic

import tj_data
import tj_monitor
from tj_data import (
    MmapGraphDataset,
    WorkerCost,
    default_budget,
    estimate_plan,
    plan_loader,
    worker_baseline,
)

MiB = 1 << 20


class BallastCollate:
    """The dataset's collate, plus `mib` MiB of written pages held by the process that runs it
    (a DataLoader worker): a dataset whose workers cost that much more."""

    def __init__(self, collate, mib: int) -> None:
        self.collate, self.mib = collate, mib
        self.held: np.ndarray | None = None

    def __call__(self, samples):
        if self.held is None:
            self.held = np.ones(self.mib * MiB, np.uint8)  # every page written: resident
        return self.collate(samples)


def test_second_store_of_the_same_class_is_measured_not_remembered(tmp_path: Path) -> None:
    lean = MmapGraphDataset(write_traffic(tmp_path / "lean", episodes=1, steps=16))
    heavy = MmapGraphDataset(write_traffic(tmp_path / "heavy", episodes=1, steps=16))
    first = worker_baseline(lean, lean.collate_fn, batch_size=4, batches=2)
    second = worker_baseline(heavy, BallastCollate(heavy.collate_fn, 160), batch_size=4, batches=2)
    # a memo keyed by the dataset class returned `first` again here
    assert second.each >= first.each + 120 * MiB, (first, second)
    assert second.first >= first.first + 120 * MiB, (first, second)


def test_plan_carries_its_worker_cost_and_reestimates_with_it(tmp_path: Path) -> None:
    ds = MmapGraphDataset(write_traffic(tmp_path / "s", episodes=1, steps=16))
    budget = tj_monitor.tree_memory().pss + 4096 * MiB
    given = WorkerCost(first=300 * MiB, each=100 * MiB)
    plan = plan_loader(ds, budget_bytes=budget, batch_size=8, num_workers=2, worker_cost=given)
    assert plan.worker_cost is given
    assert plan.estimate.terms["worker_baseline"] == 400 * MiB  # first + one more
    wider = plan.with_(ds, num_workers=3)
    assert wider.worker_cost is given and wider.estimate.terms["worker_baseline"] == 500 * MiB
    assert estimate_plan(ds, plan).terms["worker_baseline"] == 400 * MiB
    other = WorkerCost(first=10 * MiB, each=1 * MiB)
    assert estimate_plan(ds, plan, worker_cost=other).terms["worker_baseline"] == 11 * MiB
    # without one, plan_loader measures a real worker once and the plan keeps it
    measured = plan_loader(ds, budget_bytes=budget, batch_size=8, num_workers=1)
    cost = measured.worker_cost
    assert cost is not None and cost.first >= cost.each > 0
    assert measured.with_(ds, prefetch_factor=1).worker_cost is cost


def test_default_budget_is_half_of_tj_monitors_limit() -> None:
    assert not hasattr(tj_data, "memory_limit")  # one limit, in tj-monitor only
    assert default_budget() == int(0.5 * tj_monitor.memory_limit())
    assert default_budget(0.25, limit=8 << 30) == 2 << 30
    with pytest.raises(ValueError, match="fraction"):
        default_budget(0.0)
