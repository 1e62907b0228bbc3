"""`measure_loader` counts what it timed, on an injected clock (one tick per reading, so nothing
here depends on the machine's speed): warm-up batches are not counted, an epoch's end restarts
the loader, the step runs on every timed batch, and a budget stops the run. `measure_epoch`
counts one pass; `busy_step` spends at least what it is asked."""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace

import pytest

from tj_data import LoaderMeasurement, busy_step, measure_epoch, measure_loader


def _ticks():
    """A clock that advances by one second each time it is read."""
    return itertools.count(1.0).__next__


def _batch(n: int) -> SimpleNamespace:
    return SimpleNamespace(num_graphs=n)


def test_counts_the_timed_batches_on_the_clock() -> None:
    made, stepped = [], []

    def make():
        made.append(1)
        return [_batch(4), _batch(4), _batch(2)]  # one epoch: 10 samples

    m = measure_loader(make, seconds=5.0, warmup=2, step_fn=stepped.append, clock=_ticks())
    # warm-up takes 4 + 4; timed: 2, (epoch end: restart), 4, 4, 2; one tick per batch or restart
    assert (m.samples, m.batches, m.seconds) == (12, 4, 5.0)
    assert (m.samples_per_s, m.batches_per_s) == (2.4, 0.8)
    assert [b.num_graphs for b in stepped] == [2, 4, 4, 2] and len(made) == 1
    assert m.peak_pss > 0 and not m.over_budget


def test_a_window_batch_counts_its_graphs_and_a_list_its_length() -> None:
    windows = measure_loader(
        lambda: [[_batch(3), _batch(3)]], seconds=3.0, warmup=0, clock=_ticks()
    )
    assert (windows.samples, windows.batches) == (6, 2)
    plain = measure_loader(lambda: [[1, 2]], seconds=1.0, warmup=0, clock=_ticks())
    assert (plain.samples, plain.batches) == (2, 1)


def test_going_over_the_budget_stops_the_run() -> None:
    endless = itertools.repeat(_batch(1))  # on the fake clock, 1e12 s would never end by time
    m = measure_loader(
        lambda: endless, seconds=1e12, budget_bytes=1, pss_interval=0.01, clock=_ticks()
    )
    assert m.over_budget and m.batches >= 1 and m.peak_pss > 1


def test_bad_arguments_and_results_are_refused() -> None:
    with pytest.raises(ValueError, match="seconds=0"):
        measure_loader(list, seconds=0)
    with pytest.raises(ValueError, match="negative"):
        LoaderMeasurement(samples=-1, batches=0, seconds=1.0, peak_pss=0)
    assert LoaderMeasurement(samples=5, batches=1, seconds=0.0, peak_pss=0).samples_per_s == 0.0


def test_measure_epoch_counts_one_pass_or_its_first_batches() -> None:
    loader = [_batch(4), _batch(4), _batch(2)]
    m = measure_epoch(loader, clock=_ticks())
    assert (m.samples, m.batches, m.seconds) == (10, 3, 1.0) and m.peak_pss > 0
    again = measure_epoch(loader, max_batches=2, clock=_ticks())  # the same loader, next epoch
    assert (again.samples, again.batches) == (8, 2)
    with pytest.raises(ValueError, match="max_batches"):
        measure_epoch(loader, max_batches=-1)


def test_busy_step_spends_at_least_its_milliseconds() -> None:
    assert busy_step(0) is None
    step = busy_step(20)
    assert step is not None
    t0 = time.perf_counter()
    step(None)
    assert time.perf_counter() - t0 >= 0.02
