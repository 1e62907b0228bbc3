"""compute_statistics: exact (Welford/Chan + histogram percentiles) vs numpy, sampled vs exact on a
known distribution, saved into the manifest; missing statistics are named."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tj_data import (
    GraphStore,
    GraphStoreWriter,
    RunningMoments,
    Schema,
    StatisticsError,
    compute_statistics,
    load_statistics,
)
from tj_data.moments import HistogramQuantiles


def test_running_moments_merge_matches_numpy() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(1e4, 3, (5000, 3)), rng.exponential(2, (7000, 3))])
    x[100, 1] = np.nan
    parts = [RunningMoments(3) for _ in range(3)]
    for i, block in enumerate(np.array_split(x, 13)):
        parts[i % 3].update(block)
    m = parts[0]
    m.merge(parts[1])
    m.merge(parts[2])
    finite = np.where(np.isfinite(x), x, np.nan)
    np.testing.assert_allclose(m.mean, np.nanmean(finite, 0), rtol=1e-12)
    np.testing.assert_allclose(m.std, np.nanstd(finite, 0), rtol=1e-9)
    assert m.nonfinite.tolist() == [0, 1, 0] and m.count.tolist() == [12000, 11999, 12000]
    h = HistogramQuantiles(m.count, m.min, m.max, [0.1, 50, 99.9])
    for block in np.array_split(x, 5):
        h.coarse(block)
    h.prepare()
    for block in np.array_split(x, 5):
        h.fine(block)
    for q, v in h.result().items():
        np.testing.assert_allclose(v, np.nanpercentile(finite, q, axis=0), rtol=0, atol=1e-6 * 1e4)


def _normal_store(path: Path, n: int = 3000) -> np.ndarray:
    rng = np.random.default_rng(1)
    schema = Schema.graph(node_features=["a", "b"], edge_features=1, sample_fields={"t": "float32"})
    rows = []
    with GraphStoreWriter(path, schema, shard_size=256) as w:
        for i in range(n):
            k = int(rng.integers(1, 9))
            x = np.column_stack([rng.normal(5.0, 2.0, k), rng.uniform(-1, 1, k)]).astype(np.float32)
            x[rng.random(k) < 0.3, 1] = 0.0  # many duplicates
            rows.append(x)
            w.append(
                {
                    "x": x,
                    "edge_index": np.zeros((2, 0), int),
                    "edge_attr": np.zeros((0, 1)),
                    "t": float(i),
                }
            )
    return np.concatenate(rows).astype(np.float64)


def test_exact_and_sampled_agree_and_are_saved(tmp_path: Path) -> None:
    x = _normal_store(tmp_path / "s")
    exact = compute_statistics(tmp_path / "s", method="exact", percentiles=(1, 50, 99))
    fx = exact["x"]
    assert fx.columns == ("a", "b") and fx.count.tolist() == [len(x)] * 2 and fx.samples == 3000
    np.testing.assert_allclose(fx.mean, x.mean(0), rtol=1e-6)
    np.testing.assert_allclose(fx.std, x.std(0), rtol=1e-6)
    np.testing.assert_array_equal(fx.min, x.min(0))
    np.testing.assert_array_equal(fx.max, x.max(0))
    for q in (1, 50, 99):
        np.testing.assert_allclose(fx.percentile(q), np.percentile(x, q, axis=0), atol=1e-5)
    assert fx.percentile(50)[1] == 0.0 or abs(np.percentile(x[:, 1], 50)) > 0  # duplicates exact
    sampled = compute_statistics(tmp_path / "s", method="sampled", max_samples=1000, seed=3)
    fs = sampled["x"]
    assert fs.samples == 1000 and fs.method == "sampled"
    # known distribution: a ~ N(5, 2) -> mean within ~4 standard errors of the sample
    se = 2.0 / np.sqrt(fs.count[0])
    assert abs(fs.mean[0] - 5.0) < 4 * se + 0.01 and abs(fs.mean[0] - fx.mean[0]) < 4 * se
    assert (
        abs(fs.std[0] - fx.std[0]) < 0.1 and abs(fs.percentile(99)[0] - fx.percentile(99)[0]) < 0.4
    )
    # saved: the last call (sampled) is in the manifest, and other fields are kept
    st = GraphStore.open(tmp_path / "s")
    saved = load_statistics(st)
    assert set(saved) == {"x", "edge_attr", "t"} and saved["x"].method == "sampled"
    np.testing.assert_allclose(saved["x"].mean, fs.mean)
    assert exact["t"].max[0] == 2999.0 and saved["t"].max[0] <= 2999.0


def test_missing_statistics_are_named(tmp_path: Path) -> None:
    _normal_store(tmp_path / "s", n=50)
    with pytest.raises(
        StatisticsError, match=r"no statistics for fields \['x'\].*compute_statistics"
    ):
        load_statistics(tmp_path / "s", ["x"])
    with pytest.raises(StatisticsError, match=r"fields \['nope'\] not in the schema"):
        compute_statistics(tmp_path / "s", fields=["nope"])
    stats = compute_statistics(tmp_path / "s", fields=["x"], percentiles=(50,))
    with pytest.raises(StatisticsError, match=r"percentile 99 not in the statistics"):
        stats["x"].percentile(99)
    with pytest.raises(ValueError, match="method"):
        compute_statistics(tmp_path / "s", method="fast")  # type: ignore[arg-type]
