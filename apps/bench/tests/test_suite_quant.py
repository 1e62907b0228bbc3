"""The quant suite: its quick run records every figure with values that must hold (byte ratios of
int8 and float16, errors within a quantisation step, fewer bytes per batch with device-side
decoding). Its generated store is tj_data.synthetic's, tested there."""

from __future__ import annotations

import math

import pytest

from tj_bench.suites.quant import BATCH_SIZES, COLUMN_UNITS, FIELDS, MODES

INT8 = [f for f, kind in FIELDS.items() if kind == "int8"]


def _value(r, name: str) -> float:
    f = r.figure(name)
    assert f.measured and all(math.isfinite(v) for v in f.measured), (name, f.values)
    return f.median


def test_bytes_and_ratios(quick) -> None:
    r = quick.suite("quant")
    assert r.params["samples"] >= max(BATCH_SIZES)
    for name, kind in FIELDS.items():
        before, after = _value(r, f"bytes/{name}/float32"), _value(r, f"bytes/{name}/stored")
        ratio = _value(r, f"ratio/{name}")
        assert ratio == pytest.approx(after / before)
        # itemsize 1 or 2 of 4, plus each shard's small .npy header
        assert ratio == pytest.approx({"int8": 0.25, "float16": 0.5}[kind], abs=0.01)
    whole = _value(r, "bytes/store/quantised") / _value(r, "bytes/store/float32")
    assert _value(r, "ratio/store") == pytest.approx(whole) and 0.25 < whole < 1.0
    assert _value(r, "stats/exact_s") > 0


def test_errors_per_column(quick) -> None:
    r = quick.suite("quant")
    for name in FIELDS:
        for col in ("rel_x", "speed", "heading_sin") if name != "edge_attr" else ("dx", "inv_ttc"):
            base = f"error/{name}/{col}"
            assert r.figure(f"{base}/max_abs").unit == COLUMN_UNITS[col]
            assert 0 <= _value(r, f"{base}/mean_abs") <= _value(r, f"{base}/max_abs")
            assert _value(r, f"{base}/clipped") == 0  # a min/max fit saturates nothing
    # heading_sin spans [-1, 1]: the min/max int8 error stays within one step of 2/255
    assert _value(r, "error/x/heading_sin/max_abs") <= 2 / 255
    for name in INT8:  # the percentile fit: outliers saturate, the typical error shrinks
        assert _value(r, f"error/{name}/rel_x/pct/clipped") > 0
        assert _value(r, f"error/{name}/rel_x/pct/mean_abs") < _value(
            r, f"error/{name}/rel_x/mean_abs"
        )
    with pytest.raises(KeyError):  # float16 has no fit: no percentile rows
        r.figure("error/edge_attr/dx/pct/max_abs")


def test_batches_host_vs_device(quick) -> None:
    r = quick.suite("quant")
    for bs in BATCH_SIZES:
        host, device = _value(r, f"batch/{bs}/host/bytes"), _value(r, f"batch/{bs}/device/bytes")
        assert 0 < device < host
        assert _value(r, f"batch/{bs}/device_vs_host_bytes") == pytest.approx(device / host)
        for m in MODES:
            assert _value(r, f"batch/{bs}/{m}/collate_us") > 0
    assert _value(r, "batch/256/host/bytes") > _value(r, "batch/32/host/bytes")
    if "batch/*/to_device_us" not in r.unavailable:
        assert _value(r, "batch/32/device/to_device_us") > 0

