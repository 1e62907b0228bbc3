"""`quantize_store`: copy a finished float store into a new store with chosen fields quantised.

int8 parameters need statistics first (`compute_statistics`), and recorders write float32, so
quantisation is a pass over a finished store: each shard is read, the chosen fields encoded
(`tj_data.quant`), and the result written through `GraphStoreWriter` (crash-safe: the new
manifest is written last), episode boundaries, metadata and statistics kept. The schema of the
new store records each field's `QuantParams`; every reader decodes them transparently. The
returned `QuantizeReport` gives stored bytes and the max / mean absolute error per column.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tj_data.backends import HDF5Options
from tj_data.errors import QuantizationError
from tj_data.moments import as_rows
from tj_data.progress import progress_iter
from tj_data.quant import dequantize_array, fit_quant_params, quantize_array
from tj_data.schema import EDGE_INDEX, FieldSpec, Schema
from tj_data.statistics import FieldStatistics, load_statistics
from tj_data.store import store_of
from tj_data.writer import GraphStoreWriter

__all__ = ["FieldQuantReport", "QuantizeReport", "quantize_store"]


@dataclass(kw_only=True)
class FieldQuantReport:
    field: str
    kind: str
    columns: tuple[str, ...]
    source_bytes: int  # bytes of the field as float32
    stored_bytes: int
    max_abs_error: np.ndarray
    mean_abs_error: np.ndarray
    clipped: np.ndarray  # values outside the fitted range (saturated)
    _sum: np.ndarray | None = None
    _rows: int = 0

    @property
    def ratio(self) -> float:
        return self.stored_bytes / self.source_bytes if self.source_bytes else 0.0


@dataclass(kw_only=True)
class QuantizeReport:
    path: Path
    fields: dict[str, FieldQuantReport]
    store_bytes_before: int
    store_bytes_after: int

    def markdown(self) -> str:
        rows = [
            "| field | column | kind | bytes ratio | max abs error | mean abs error | clipped |",
            "|---|---|---|---:|---:|---:|---:|",
        ]
        for f in self.fields.values():
            for j, c in enumerate(f.columns):
                rows.append(
                    f"| {f.field} | {c} | {f.kind} | {f.ratio:.3f} | {f.max_abs_error[j]:.4g} | "
                    f"{f.mean_abs_error[j]:.4g} | {int(f.clipped[j])} |"
                )
        return "\n".join(rows)


def _spans(lo: int, hi: int, ends: np.ndarray) -> list[tuple[int, int, bool]]:
    """Split [lo, hi) at episode ends: (start, stop, ends_an_episode)."""
    cuts = [int(e) for e in ends if lo < e <= hi]
    out, a = [], lo
    for c in cuts:
        out.append((a, c, True))
        a = c
    if a < hi:
        out.append((a, hi, False))
    return out


def quantize_store(
    src: Any,
    dst: str | os.PathLike[str],
    fields: Mapping[str, str],
    *,
    statistics: Mapping[str, FieldStatistics] | None = None,
    percentiles: tuple[float, float] | None = None,
    ranges: Mapping[str, Any] | None = None,
    shard_size: int | None = None,
    backend: str | None = None,
    overwrite: bool = False,
    hdf5: HDF5Options | None = None,
    progress: bool = False,
) -> QuantizeReport:
    """Write `dst`: the store `src` with `fields` ({"x": "int8", "edge_attr": "float16", ...})
    quantised. int8/uint8/int16 parameters are fitted per column from `statistics` (default: the
    manifest's) on min/max, or on `percentiles` (lo, hi) to ignore outliers; `ranges` gives
    explicit ranges per field ({"x": {"length": (0, 20)}} or one (lo, hi) per column), e.g. for
    a column that is constant in the statistics. Other fields are copied unchanged."""
    st = store_of(src)
    schema = st.schema
    for name, kind in fields.items():
        if name not in schema:
            raise QuantizationError(f"quantize_store: field {name!r} not in {list(schema.names)}")
        spec = schema[name]
        if spec.quant is not None or np.dtype(spec.dtype).kind != "f":
            raise QuantizationError(
                f"quantize_store: field {name!r} is {spec.dtype}"
                f"{' (already quantised)' if spec.quant else ''}; only float fields can be quantised"
            )
        if kind not in ("int8", "uint8", "int16", "float16"):
            raise QuantizationError(f"quantize_store: field {name!r}: kind {kind!r} not supported")
    needs = [n for n, k in fields.items() if k != "float16" or statistics is not None]
    table = dict(statistics) if statistics is not None else load_statistics(st, needs)
    new_specs: dict[str, FieldSpec] = {}
    for name, kind in fields.items():
        stats = table.get(name)
        if stats is None and kind == "float16":  # a cast needs no statistics; checked per value
            params = fit_quant_params(_unbounded(schema[name]), "float16")
        elif stats is None:
            raise QuantizationError(f"quantize_store: no statistics for field {name!r}")
        else:
            params = fit_quant_params(
                stats, kind, percentiles=percentiles, ranges=(ranges or {}).get(name)
            )
        new_specs[name] = replace(schema[name], dtype=kind, quant=params)
    new_schema = Schema(fields=tuple(new_specs.get(f.name, f) for f in schema.fields))
    reports = {
        n: FieldQuantReport(
            field=n,
            kind=k,
            columns=_columns(schema[n]),
            source_bytes=0,
            stored_bytes=0,
            max_abs_error=np.zeros(len(_columns(schema[n]))),
            mean_abs_error=np.zeros(len(_columns(schema[n]))),
            clipped=np.zeros(len(_columns(schema[n])), np.int64),
            _sum=np.zeros(len(_columns(schema[n]))),
        )
        for n, k in fields.items()
    }
    size = shard_size or max((s.num_samples for s in st.manifest.shards), default=4096)
    meta = {
        **st.manifest.metadata,
        "quantized_from": {"path": str(st.path), "fields": dict(fields)},
    }
    ends = st.episode_ends
    with GraphStoreWriter(
        dst, new_schema, shard_size=max(size, 1), backend=backend or st.backend,  # type: ignore[arg-type]
        metadata=meta, overwrite=overwrite, hdf5=hdf5,
    ) as w:  # fmt: skip
        for k in progress_iter(range(st.num_shards), "quantize", enabled=progress):
            arrays = st.read_shard(k)
            for name, spec in new_specs.items():
                arrays[name] = _encode(arrays[name], spec, reports[name])
            off = int(st.shard_offsets[k])
            nn = np.diff(arrays["node_ptr"])
            ne = np.diff(arrays["edge_ptr"])
            for a, b, end in _spans(off, off + len(nn), ends):
                w.append_block(
                    _slice(arrays, new_schema, a - off, b - off),
                    nn[a - off : b - off],
                    ne[a - off : b - off],
                )
                if end:
                    w.end_episode()
    out = store_of(dst)
    if st.manifest.statistics:
        out.update_manifest(statistics=st.manifest.statistics)
    for r in reports.values():
        r.mean_abs_error = r._sum / max(r._rows, 1) if r._sum is not None else r.mean_abs_error
    return QuantizeReport(
        path=Path(dst), fields=reports, store_bytes_before=st.manifest.nbytes,
        store_bytes_after=out.manifest.nbytes,
    )  # fmt: skip


def _columns(spec: FieldSpec) -> tuple[str, ...]:
    from tj_data.statistics import column_names

    return column_names(spec)


def _unbounded(spec: FieldSpec) -> FieldStatistics:
    c = len(_columns(spec))
    z = np.zeros(c)
    return FieldStatistics(
        field=spec.name, columns=_columns(spec), method="none", count=z.astype(np.int64),
        mean=z, std=z, min=z, max=z, nonfinite=z.astype(np.int64),
    )  # fmt: skip


def _encode(values: np.ndarray, spec: FieldSpec, rep: FieldQuantReport) -> np.ndarray:
    stored = quantize_array(values, spec, where="quantize_store: ")
    x = as_rows(values)
    back = as_rows(dequantize_array(stored, spec))
    err = np.abs(back - x)
    if len(x):
        rep.max_abs_error = np.maximum(rep.max_abs_error, err.max(axis=0))
        rep._sum = (rep._sum if rep._sum is not None else 0) + err.sum(axis=0)
        if spec.quant is not None and spec.quant.kind == "affine":
            scale = np.broadcast_to(np.asarray(spec.quant.scale), (x.shape[1],))
            rep.clipped += (err > scale / 2 * 1.0001).sum(axis=0)
    rep._rows += len(x)
    rep.source_bytes += values.size * 4
    rep.stored_bytes += stored.nbytes
    return stored


def _slice(arrays: dict[str, np.ndarray], schema: Schema, a: int, b: int) -> dict[str, np.ndarray]:
    np_, ep = arrays["node_ptr"], arrays["edge_ptr"]
    n0, n1, e0, e1 = int(np_[a]), int(np_[b]), int(ep[a]), int(ep[b])
    out = {EDGE_INDEX: arrays[EDGE_INDEX][:, e0:e1]}
    for f in schema.fields:
        lo, hi = {"node": (n0, n1), "edge": (e0, e1), "sample": (a, b)}[f.level]
        out[f.name] = arrays[f.name][lo:hi]
    return out
