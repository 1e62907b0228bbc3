"""Timer and StepTimer: statistics, decorator use, data-wait split."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tj_monitor import StepTimer, Timer


def test_timer_statistics_from_known_durations() -> None:
    t = Timer("x", window=1000)
    values = np.linspace(0.001, 0.1, 100)
    for v in values:
        t.add(float(v))
    s = t.stats()
    assert s.count == 100 and s.total == pytest.approx(values.sum())
    assert s.mean == pytest.approx(values.mean()) and s.max == pytest.approx(0.1)
    assert s.p50 == pytest.approx(np.percentile(values, 50))
    assert s.p95 == pytest.approx(np.percentile(values, 95))
    t.reset()
    assert t.stats().count == 0 and t.stats().p95 == 0.0


def test_timer_window_bounds_percentiles_but_not_totals() -> None:
    t = Timer("w", window=10)
    for _ in range(90):
        t.add(1.0)
    for _ in range(10):
        t.add(0.0)
    s = t.stats()
    assert s.count == 100 and s.total == 90.0 and s.max == 1.0
    assert s.p95 == 0.0  # the last 10 durations only


def test_timer_context_decorator_reentrant_and_threads() -> None:
    t = Timer("f")

    @t
    def fib(n: int) -> int:
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(6) == 8
    assert t.stats().count == 25  # every (nested) call timed
    inner = Timer("ctx")
    with inner, inner:
        pass
    assert inner.stats().count == 2
    th = Timer("threads")

    def work() -> None:
        for _ in range(200):
            with th:
                pass

    threads = [threading.Thread(target=work) for _ in range(4)]
    for x in threads:
        x.start()
    for x in threads:
        x.join()
    assert th.stats().count == 800
    assert "n=800" in repr(th)


def test_timer_cuda_modes_fall_back_without_cuda() -> None:
    import torch

    with pytest.raises(ValueError, match="cuda"):
        Timer(cuda="yes")  # type: ignore[arg-type]
    t = Timer("gpu", cuda="events")
    expected = "events" if torch.cuda.is_available() else "off"
    assert t.cuda == expected
    with t:
        torch.ones(16).sum()
    assert t.stats().count == 1


def test_step_timer_manual_record_is_exact() -> None:
    st = StepTimer()
    st.record(0.2, 0.8, items=32)
    st.record(0.0, 1.0, items=32)
    s = st.stats()
    assert s.steps == 2 and s.data_wait_fraction == pytest.approx(0.1)
    assert s.throughput == pytest.approx(32.0) and s.items == 64
    m = s.as_metrics()
    assert m["time/data_wait_fraction"] == pytest.approx(0.1) and m["time/throughput"] == 32.0
    st.reset()
    assert st.stats().steps == 0 and st.stats().throughput is None


def _slow_loader(n: int, delay: float):
    for i in range(n):
        time.sleep(delay)
        yield [i] * 4


def test_step_timer_iterate_separates_waiting_from_computing() -> None:
    starving = StepTimer()
    for _batch in starving.iterate(_slow_loader(5, 0.03), size=len):
        pass  # no compute: the loader is the bottleneck
    s = starving.stats()
    assert s.steps == 5 and s.items == 20 and s.data_wait_fraction > 0.8

    busy = StepTimer()
    for _batch in busy.iterate(_slow_loader(5, 0.0)):
        time.sleep(0.03)  # compute-bound
    assert busy.stats().data_wait_fraction < 0.2

    broken = StepTimer()
    for i, _batch in enumerate(broken.iterate(_slow_loader(10, 0.0))):
        if i == 2:
            break
    assert broken.stats().steps == 3  # the step that broke out is still recorded


def test_step_timer_manual_phases() -> None:
    st = StepTimer()
    for _ in range(3):
        with st.waiting():
            time.sleep(0.02)
        with st.computing():
            pass
        st.end_step(items=8)
    s = st.stats()
    assert s.steps == 3 and s.items == 24 and s.data_wait_fraction > 0.8
