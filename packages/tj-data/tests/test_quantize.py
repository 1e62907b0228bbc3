"""Quantisation: error bounds, zero-width and overflow errors, quantize_store (bytes, errors,
episodes), write-time quantisation, and transparent host / device dequantisation in every reader."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tjdata_traffic import traffic_schema, write_traffic

from tj_data import (
    ChunkedGraphDataset,
    FieldSpec,
    GraphStore,
    GraphStoreWriter,
    HDF5GraphDataset,
    MmapGraphDataset,
    QuantizationError,
    QuantizeReport,
    Schema,
    StreamingGraphDataset,
    WindowDataset,
    compute_statistics,
    dequantize_array,
    fit_quant_params,
    quantize_array,
    quantize_store,
)
from tj_data.statistics import FieldStatistics

RANGES = {"x": {"length": (0.0, 20.0)}, "y_next": {"length": (0.0, 20.0)}}


def _stats(lo: list[float], hi: list[float]) -> FieldStatistics:
    z = np.zeros(len(lo))
    return FieldStatistics(
        field="f", columns=tuple("abc"[: len(lo)]), method="exact", count=z.astype(np.int64),
        mean=z, std=z, min=np.array(lo), max=np.array(hi), nonfinite=z.astype(np.int64),
        percentiles={"1": np.array(lo) / 2, "99": np.array(hi) / 2},
    )  # fmt: skip


def test_int8_error_bound_and_exact_zero() -> None:
    st = _stats([-3.0, 0.0, 10.0], [5.0, 7.0, 11.0])
    q = fit_quant_params(st, "int8")
    spec = FieldSpec(name="f", level="node", dtype="int8", shape=(3,), quant=q)
    rng = np.random.default_rng(0)
    x = rng.uniform([-3, 0, 10], [5, 7, 11], (5000, 3)).astype(np.float32)
    x[:10] = [0.0, 0.0, 10.0]
    back = dequantize_array(quantize_array(x, spec), spec)
    err = np.abs(back - x)
    assert (err <= np.array(q.scale) / 2 + 1e-6).all()  # half a step inside the range
    assert back[0, 0] == 0.0 and back[0, 1] == 0.0 and abs(back[0, 2] - 10.0) < 1e-5
    assert np.array(q.scale)[1] == pytest.approx(7.0 / 255)
    # percentiles: outliers saturate at the fitted range
    qp = fit_quant_params(st, "int8", percentiles=(1, 99))
    sp = FieldSpec(name="f", level="node", dtype="int8", shape=(3,), quant=qp)
    assert dequantize_array(quantize_array(np.array([[5.0, 7.0, 11.0]]), sp), sp)[0, 0] <= 2.6


def test_bad_quantisation_inputs() -> None:
    with pytest.raises(QuantizationError, match=r"column 'b': quantisation range of zero width"):
        fit_quant_params(_stats([0.0, 2.0], [1.0, 2.0]), "int8")
    with pytest.raises(QuantizationError, match=r"column 'a'.*exceed float16's range"):
        fit_quant_params(_stats([0.0], [1e6]), "float16")
    with pytest.raises(QuantizationError, match="kind 'int4'"):
        fit_quant_params(_stats([0.0], [1.0]), "int4")
    q = fit_quant_params(_stats([0.0], [1.0]), "int8")
    spec = FieldSpec(name="f", level="node", dtype="int8", shape=(1,), quant=q)
    with pytest.raises(QuantizationError, match="NaN/inf"):
        quantize_array(np.array([[np.nan]]), spec)
    with pytest.raises(QuantizationError, match="needs dtype in"):
        FieldSpec(name="f", level="node", dtype="float32", shape=(1,), quant=q)
    with pytest.raises(QuantizationError, match="2 scales for 3 columns"):
        FieldSpec(
            name="f", level="node", dtype="int8", shape=(3,),
            quant=fit_quant_params(_stats([0.0, 0.0], [1.0, 1.0]), "int8"),
        )  # fmt: skip


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, QuantizeReport]:
    root = tmp_path_factory.mktemp("q")
    src = write_traffic(root / "float", episodes=2, steps=30)
    compute_statistics(src, fields=["x", "edge_attr", "y_next"], method="exact")
    q = root / "quant"
    rep = quantize_store(
        src, q, {"x": "int8", "edge_attr": "float16", "y_next": "int8"}, ranges=RANGES
    )
    h5 = root / "quant-h5"
    quantize_store(src, h5, {"x": "int8"}, ranges=RANGES, backend="hdf5")
    return src, q, h5, rep


def test_quantize_store_bytes_errors_and_episodes(stores: tuple) -> None:
    src, q, _, rep = stores
    assert rep.fields["x"].ratio <= 0.3 and rep.fields["y_next"].ratio <= 0.3
    assert rep.fields["edge_attr"].ratio <= 0.5
    a, b = GraphStore.open(src), GraphStore.open(q, verify=True)
    assert b.schema["x"].dtype == "int8" and b.schema["x"].quant is not None
    assert b.schema["edge_attr"].quant.kind == "float16"  # type: ignore[union-attr]
    assert b.episode_ends.tolist() == a.episode_ends.tolist() and len(a) == len(b)
    assert b.manifest.statistics == a.manifest.statistics
    scale = np.array(b.schema["x"].quant.scale)  # type: ignore[union-attr]
    assert (rep.fields["x"].max_abs_error <= scale / 2 + 1e-5).all()  # exact stats: no clipping
    assert rep.fields["x"].clipped.sum() == 0 and "| x | rel_x | int8 |" in rep.markdown()
    with pytest.raises(QuantizationError, match="only float fields"):
        quantize_store(q, q.parent / "again", {"x": "int8"})


def test_readers_dequantise_host_and_device(stores: tuple) -> None:
    src, q, h5, _ = stores
    ref = MmapGraphDataset(src)
    idx = list(range(0, 40, 3))
    want = ref.collate_fn(ref.__getitems__(idx))
    tol = np.array(GraphStore.open(q).schema["x"].quant.scale).max()  # type: ignore[union-attr]
    for ds in (MmapGraphDataset(q), ChunkedGraphDataset(q), HDF5GraphDataset(h5)):
        got = ds.collate_fn(ds.__getitems__(idx))
        assert got.x.dtype == torch.float32 and torch.allclose(got.x, want.x, atol=tol)
        assert "quant" not in got.meta
    dev = MmapGraphDataset(q, dequantize="device")
    raw = dev.collate_fn(dev.__getitems__(idx))
    host = MmapGraphDataset(q).collate_fn(MmapGraphDataset(q).__getitems__(idx))
    assert raw.x.dtype == torch.int8 and raw.edge_attr.dtype == torch.float16
    assert raw.nbytes < 0.6 * host.nbytes  # what crosses the bus
    decoded = raw.to("cpu").dequantize()
    assert torch.equal(decoded.x, host.x) and torch.equal(decoded.edge_attr, host.edge_attr)
    if torch.cuda.is_available():
        on_gpu = raw.pin_memory().to("cuda", non_blocking=True).dequantize()
        assert torch.allclose(on_gpu.x.cpu(), host.x)
    stream = StreamingGraphDataset(q, batch_size=8, shuffle=False)
    first = next(iter(stream))
    assert first.x.dtype == torch.float32
    win = WindowDataset(MmapGraphDataset(q), window=3, stream_key="intersection")
    steps = win.collate_fn(win.__getitems__([0, 1]))
    assert all(s.x.dtype == torch.float32 for s in steps)


def test_quantisation_at_write_time(tmp_path: Path) -> None:
    q = fit_quant_params(_stats([0.0, -1.0], [10.0, 1.0]), "int8")
    schema = Schema(fields=(FieldSpec(name="x", level="node", dtype="int8", shape=(2,), quant=q),))
    x = np.array([[0.0, -1.0], [10.0, 1.0], [5.0, 0.0]], np.float32)
    with GraphStoreWriter(tmp_path / "s", schema) as w:
        w.append({"x": x, "edge_index": np.zeros((2, 0), int)})
    st = GraphStore.open(tmp_path / "s")
    assert st.shard_arrays(0)["x"].dtype == np.int8
    got = MmapGraphDataset(st).collate_fn([st[0]]).x.numpy()
    np.testing.assert_allclose(got, x, atol=max(q.scale) / 2 + 1e-6)
    assert traffic_schema()["x"].quant is None
