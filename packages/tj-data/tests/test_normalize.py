"""Normalizer: strategies chosen by column name, inverse, missing statistics, state round trip,
collate-time use, and folding into device-side dequantisation."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from tjdata_traffic import NODE, write_traffic

from tj_data import (
    ColumnNorm,
    MmapGraphDataset,
    Normalizer,
    StatisticsError,
    compute_statistics,
    quantize_store,
)
from tj_data.statistics import FieldStatistics

RULES = {
    "rel_*": "zscore(p1,p99)",
    "heading_*": "identity",
    "speed": "minmax",
    "dist_to_stop_line": "clamp(p1,p99)",
    "x.accel": "zscore",
    "*": "zscore",
}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = write_traffic(tmp_path_factory.mktemp("n") / "s", episodes=2, steps=30)
    compute_statistics(path, fields=["x", "edge_attr", "y_next"], method="exact")
    return path


def test_strategies_by_name_and_inverse(store: Path) -> None:
    norm = Normalizer.from_statistics(
        store, RULES, fields=["x", "y_next"], stats_from={"y_next": "x"}
    )
    kinds = dict(zip(NODE, norm.fields["x"].kinds, strict=True))
    assert kinds["rel_x"] == "zscore" and kinds["heading_cos"] == "identity"
    assert kinds["speed"] == "minmax" and kinds["dist_to_stop_line"] == "clamp"
    assert (
        kinds["waiting_time"] == "zscore" and norm.fields["y_next"].kinds == norm.fields["x"].kinds
    )
    ds = MmapGraphDataset(store)
    raw = ds.collate_fn(ds.__getitems__(list(range(60))))
    x0 = raw.x.clone()
    out = norm(raw)
    x = out.x
    assert float(x[:, 2].min()) >= 0.0 and float(x[:, 2].max()) <= 1.0  # minmax
    assert float(x[:, 6].min()) >= 0.0 and float(x[:, 6].max()) <= 1.0  # clamp to [p1, p99]
    assert torch.equal(x[:, 4:6], x0[:, 4:6])  # identity
    back = norm.inverse(out).x
    lo, hi = norm.fields["x"].lo, norm.fields["x"].hi
    inside = ((x0.numpy() >= lo) & (x0.numpy() <= hi)).all(axis=1)
    assert inside.sum() > 0.8 * len(inside)
    np.testing.assert_allclose(back.numpy()[inside], x0.numpy()[inside], rtol=1e-5, atol=1e-4)
    with pytest.raises(StatisticsError, match="already normalised"):
        norm(out)
    state = Normalizer.from_state_dict(norm.state_dict())
    assert torch.allclose(state.normalize_tensor("x", x0), x)


def test_cyclic_and_zero_width() -> None:
    z = np.zeros(2)
    st = FieldStatistics(
        field="f", columns=("angle", "const"), method="exact", count=np.array([5, 5]),
        mean=np.array([180.0, 3.0]), std=np.array([90.0, 0.0]), min=np.array([0.0, 3.0]),
        max=np.array([359.0, 3.0]), nonfinite=z.astype(np.int64),
    )  # fmt: skip
    norm = Normalizer.from_statistics({"f": st}, {"angle": "cyclic(360)", "const": "minmax"})
    t = torch.tensor([[90.0, 3.0], [350.0, 3.0], [0.0, 3.0]])
    y = norm.normalize_tensor("f", t)
    assert y.shape == (3, 3) and norm.output_columns("f") == ("angle", "const", "angle_cos")
    assert torch.allclose(y[:, 0], torch.sin(t[:, 0] * math.pi / 180)) and (y[:, 1] == 0).all()
    assert torch.allclose(norm.inverse_tensor("f", y), t, atol=1e-4)
    assert ColumnNorm.parse("clamp") == ColumnNorm(kind="clamp", lo="p1", hi="p99")
    with pytest.raises(ValueError, match="cyclic needs one period"):
        ColumnNorm.parse("cyclic")


def test_missing_statistics_named(store: Path) -> None:
    with pytest.raises(StatisticsError, match=r"no statistics for fields \['risk'\]"):
        Normalizer.from_statistics(store, {"*": "zscore"}, fields=["risk"])
    stats = compute_statistics(store, fields=["x"], save=False, percentiles=(50,))
    with pytest.raises(StatisticsError, match=r"no statistics for field 'x' \(used for 'y_next'\)"):
        Normalizer.from_statistics(
            {}, {"*": "zscore"}, fields=["y_next"], stats_from={"y_next": "x"}
        )
    with pytest.raises(StatisticsError, match=r"percentile 1 not in the statistics"):
        Normalizer.from_statistics(stats, {"rel_x": "clamp"})


def test_collate_transform_and_device_fold(store: Path, tmp_path: Path) -> None:
    norm = Normalizer.from_statistics(store, {"*": "zscore"}, fields=["x"])
    ds = MmapGraphDataset(store, transforms=[norm])
    b = ds.collate_fn(ds.__getitems__(list(range(100))))
    assert b.meta["normalized"] == ["x"] and abs(float(b.x[:, 0].mean())) < 0.3
    # a single shared buffer survives in-place normalisation (one shm segment per batch)
    assert b._shared_storage() is not None
    q = tmp_path / "q"
    quantize_store(store, q, {"x": "int8"}, ranges={"x": {"length": (0.0, 20.0)}})
    host = MmapGraphDataset(q, transforms=[norm])
    dev = MmapGraphDataset(q, transforms=[norm], dequantize="device")
    idx = list(range(50))
    want = host.collate_fn(host.__getitems__(idx)).x
    raw = dev.collate_fn(dev.__getitems__(idx))
    assert raw.x.dtype == torch.int8  # the normalisation was folded into the decode
    assert torch.allclose(raw.dequantize().x, want, atol=1e-4)
    clamp = Normalizer.from_statistics(store, {"rel_x": "clamp"}, fields=["x"])
    with pytest.raises(StatisticsError, match="cannot be folded"):
        MmapGraphDataset(q, transforms=[clamp], dequantize="device").collate_fn(
            dev.__getitems__(idx)
        )
