"""DynamicBatchSize: backs off on a (simulated) CUDA OOM, shrinks under real memory pressure,
grows with hysteresis, and drives a DataLoader through DynamicBatchSampler."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, SequentialSampler

from tj_data import DynamicBatchSampler, DynamicBatchSize
from tj_monitor import tree_memory

MiB = 1 << 20


def test_oom_backs_off_and_caps_growth() -> None:
    ctl = DynamicBatchSize(
        64,
        min_size=4,
        max_size=256,
        memory_fn=lambda: 0,
        budget_bytes=1,
        check_every=1,
        patience=1,
        cooldown=0,
    )
    sizes: list[int] = []

    def step(bs: int) -> int:
        sizes.append(bs)
        if bs > 20:  # what a too-large batch does on the GPU
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return bs

    assert ctl.run_step(step) == 16 and sizes == [64, 32, 16]
    assert [e.reason for e in ctl.events] == ["oom", "oom"] and ctl.ceiling == 31
    for _ in range(20):  # no memory pressure: grows, but never back to the size that failed
        ctl.update()
    assert ctl.batch_size == 31
    tiny = DynamicBatchSize(2, min_size=2)
    with pytest.raises(torch.OutOfMemoryError):
        tiny.run_step(lambda bs: (_ for _ in ()).throw(torch.OutOfMemoryError("oom")))


def test_hysteresis() -> None:
    usage = [0.0]
    ctl = DynamicBatchSize(
        32, max_size=128, budget_bytes=100, memory_fn=lambda: int(usage[0] * 100),
        grow_below=0.5, shrink_above=0.8, patience=3, cooldown=2, check_every=1,
    )  # fmt: skip
    usage[0] = 0.6  # between the thresholds: never changes
    assert {ctl.update() for _ in range(10)} == {32}
    usage[0] = 0.4
    assert [ctl.update() for _ in range(3)] == [32, 32, 40]  # grows after 3 calm checks
    usage[0] = 0.9
    assert ctl.update() == 30  # shrinks at once
    usage[0] = 0.1
    assert [ctl.update() for _ in range(4)] == [30, 30, 30, 38]  # cooldown, then patience
    assert [e.reason for e in ctl.events] == ["grow", "shrink", "grow"]


def test_shrinks_under_real_memory_pressure() -> None:
    base = tree_memory().pss
    ctl = DynamicBatchSize(
        64, budget_bytes=base + 200 * MiB, shrink_above=0.95, check_every=1, patience=2
    )
    assert ctl.update() == 64 and ctl.last_usage < 0.95
    hog = np.ones(300 * MiB // 8)  # 300 MiB touched: the tree's PSS goes over the budget
    try:
        assert ctl.update() < 64 and ctl.events[-1].reason == "shrink"
        assert ctl.last_usage > 1.0
    finally:
        del hog


def test_dynamic_batch_sampler_feeds_a_loader() -> None:
    ctl = DynamicBatchSize(
        4, max_size=16, budget_bytes=1, memory_fn=lambda: 0, check_every=1, patience=1, cooldown=0
    )
    loader = DataLoader(
        list(range(100)), batch_sampler=DynamicBatchSampler(SequentialSampler(range(100)), ctl)
    )
    sizes = []
    for batch in loader:
        sizes.append(len(batch))
        ctl.update()
    assert sizes[:4] == [4, 5, 7, 9] and sum(sizes) == 100 and max(sizes) == 16
    state = ctl.state_dict()
    other = DynamicBatchSize(4, max_size=16)
    other.load_state_dict(state)
    assert other.batch_size == ctl.batch_size
