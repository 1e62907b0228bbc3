"""Streaming accumulators against numpy on the full data; merging; state protocol."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tj_monitor import MAE, MSE, Mean


def test_streaming_equals_full_batch() -> None:
    rng = np.random.default_rng(0)
    pred, target = rng.normal(size=(10, 37)), rng.normal(size=(10, 37))
    mse, mae, mean = MSE(), MAE(), Mean()
    for p, t in zip(pred, target, strict=True):
        mse.update(p, t)
        mae.update(p, t)
        mean.update(p)
    assert mse.compute() == pytest.approx(np.mean((pred - target) ** 2), rel=1e-12)
    assert mae.compute() == pytest.approx(np.mean(np.abs(pred - target)), rel=1e-12)
    assert mean.compute() == pytest.approx(pred.mean(), rel=1e-12)


def test_torch_tensors_and_float16_do_not_overflow() -> None:
    import torch

    p = torch.full((1000,), 300.0, dtype=torch.float16)  # 300**2 overflows float16
    t = torch.zeros(1000, dtype=torch.float16)
    mse = MSE()
    mse.update(p, t)
    assert mse.compute() == pytest.approx(90000.0)
    m = Mean()
    m.update(torch.tensor([1.0, 2.0, 3.0]), weights=torch.tensor([1.0, 0.0, 1.0]))
    assert m.compute() == pytest.approx(2.0)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=1, max_size=60),
    st.integers(0, 60),
)
def test_merge_of_splits_equals_whole(values: list[float], cut: int) -> None:
    cut = min(cut, len(values))
    a, b, whole = MAE(), MAE(), MAE()
    zeros = np.zeros(len(values))
    a.update(values[:cut], zeros[:cut])
    b.update(values[cut:], zeros[cut:])
    whole.update(values, zeros)
    merged = a.merge(b)
    assert merged.weight == whole.weight
    assert merged.compute() == pytest.approx(whole.compute(), rel=1e-9, abs=1e-9)


def test_state_protocol_and_errors() -> None:
    m = MSE()
    assert math.isnan(m.compute())
    m.update([1.0, 3.0], [0.0, 0.0])
    other = MSE()
    other.load_state_dict(m.state_dict())
    assert other.compute() == 5.0
    m.reset()
    assert m.weight == 0
    with pytest.raises(KeyError, match="total"):
        other.load_state_dict({"weight": 1.0})
    with pytest.raises(ValueError, match="shape"):
        other.update([1.0, 2.0], [1.0])
    with pytest.raises(TypeError, match="merge"):
        other.merge(MAE())  # type: ignore[arg-type]
    # without a process group, all_reduce is a copy
    assert other.all_reduce().compute() == other.compute()
