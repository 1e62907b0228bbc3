"""`compute_statistics`: per-column count / mean / std / min / max / percentiles of store fields,
saved into the manifest's `statistics` section (the input of normalisation and quantisation).

method="sampled" reads `max_samples` uniformly chosen samples (sorted, coalesced reads; the seeds'
`compute_statistics_sampled`) and summarises their rows exactly. method="exact" streams every
row of every shard in bounded blocks: moments by Welford/Chan merges (`RunningMoments`),
percentiles by two histogram passes (`HistogramQuantiles`, exact to (max-min)/8.4e6). Quantised
fields are summarised in their decoded (float) units. Standard deviations are population (ddof=0).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tj_data.errors import StatisticsError
from tj_data.gather import gather_samples
from tj_data.moments import HistogramQuantiles, RunningMoments, as_rows
from tj_data.progress import progress_iter
from tj_data.quant import dequantize_array
from tj_data.schema import FieldSpec
from tj_data.store import GraphStore, store_of

__all__ = [
    "DEFAULT_PERCENTILES",
    "FieldStatistics",
    "compute_statistics",
    "load_statistics",
    "percentile_key",
]

DEFAULT_PERCENTILES = (0.1, 1.0, 5.0, 25.0, 50.0, 75.0, 95.0, 99.0, 99.9)
_BLOCK_ROWS = 1 << 18


def percentile_key(q: float) -> str:
    """The manifest key of percentile q (e.g. 99.9 -> "99.9", 1.0 -> "1")."""
    return format(float(q), "g")


def column_names(spec: FieldSpec) -> tuple[str, ...]:
    if spec.columns is not None:
        return spec.columns
    width = int(np.prod(spec.shape, dtype=np.int64))
    return (spec.name,) if spec.shape == () else tuple(str(i) for i in range(width))


@dataclass(kw_only=True)
class FieldStatistics:
    """Statistics of one field, one entry per column (arrays of float64; count int64)."""

    field: str
    columns: tuple[str, ...]
    method: str
    count: np.ndarray
    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    nonfinite: np.ndarray
    percentiles: dict[str, np.ndarray] = field(default_factory=dict)
    samples: int = 0  # samples (graphs) read
    extra: dict[str, Any] = field(default_factory=dict)

    def column(self, name: str) -> int:
        try:
            return self.columns.index(name)
        except ValueError:
            raise StatisticsError(
                f"field {self.field!r} has no column {name!r} (columns: {list(self.columns)})"
            ) from None

    def percentile(self, q: float | str) -> np.ndarray:
        key = q if isinstance(q, str) else percentile_key(q)
        key = key.removeprefix("p")
        if key not in self.percentiles:
            raise StatisticsError(
                f"field {self.field!r}: percentile {key} not in the statistics (have "
                f"{sorted(self.percentiles, key=float)}); recompute with percentiles=[..., {key}]"
            )
        return self.percentiles[key]

    def to_json(self) -> dict[str, Any]:
        def lst(a: np.ndarray) -> list[Any]:
            return [None if not np.isfinite(v) else float(v) for v in np.asarray(a, float)]

        return {
            "method": self.method,
            "samples": self.samples,
            "columns": list(self.columns),
            "count": [int(v) for v in self.count],
            "mean": lst(self.mean),
            "std": lst(self.std),
            "min": lst(self.min),
            "max": lst(self.max),
            "nonfinite": [int(v) for v in self.nonfinite],
            "percentiles": {k: lst(v) for k, v in self.percentiles.items()},
            **self.extra,
        }

    @classmethod
    def from_json(cls, name: str, d: Mapping[str, Any]) -> FieldStatistics:
        def arr(v: Any) -> np.ndarray:
            return np.array([np.nan if x is None else x for x in v], np.float64)

        known = {"method", "samples", "columns", "count", "mean", "std", "min", "max"}
        known |= {"nonfinite", "percentiles"}
        try:
            return cls(
                field=name,
                columns=tuple(d["columns"]),
                method=str(d["method"]),
                count=np.asarray(d["count"], np.int64),
                mean=arr(d["mean"]),
                std=arr(d["std"]),
                min=arr(d["min"]),
                max=arr(d["max"]),
                nonfinite=np.asarray(d.get("nonfinite", [0] * len(d["columns"])), np.int64),
                percentiles={k: arr(v) for k, v in d.get("percentiles", {}).items()},
                samples=int(d.get("samples", 0)),
                extra={k: v for k, v in d.items() if k not in known},
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StatisticsError(f"statistics of field {name!r} are malformed ({exc})") from exc


def load_statistics(store: Any, fields: Sequence[str] | None = None) -> dict[str, FieldStatistics]:
    """Statistics saved in a store's manifest (all fields, or `fields`, each required)."""
    st = store_of(store)
    raw = st.manifest.statistics
    names = list(raw) if fields is None else list(fields)
    missing = [n for n in names if n not in raw]
    if missing:
        raise StatisticsError(
            f"{st.path}: no statistics for fields {missing} in the manifest (have {sorted(raw)}); "
            f"run tj_data.compute_statistics(store, fields={missing})"
        )
    return {n: FieldStatistics.from_json(n, raw[n]) for n in names if isinstance(raw[n], dict)}


def _rows(arr: Any, spec: FieldSpec) -> np.ndarray:
    a = np.asarray(arr)
    if spec.quant is not None:
        a = dequantize_array(a, spec)
    return as_rows(a)


def _blocks(
    store: GraphStore, specs: Sequence[FieldSpec], progress: bool, what: str
) -> Iterator[tuple[str, np.ndarray]]:
    for k in progress_iter(range(store.num_shards), what, enabled=progress):
        arrays = store.shard_arrays(k)
        for spec in specs:
            a = arrays[spec.name]
            for lo in range(0, a.shape[0], _BLOCK_ROWS):
                yield spec.name, _rows(a[lo : lo + _BLOCK_ROWS], spec)


def _exact(
    store: GraphStore, specs: Sequence[FieldSpec], percentiles: Sequence[float], progress: bool
) -> dict[str, tuple[RunningMoments, dict[float, np.ndarray]]]:
    mom = {s.name: RunningMoments(len(column_names(s))) for s in specs}
    for name, rows in _blocks(store, specs, progress, "statistics: moments"):
        mom[name].update(rows)
    if not percentiles:
        return {n: (m, {}) for n, m in mom.items()}
    hq = {n: HistogramQuantiles(m.count, m.min, m.max, percentiles) for n, m in mom.items()}
    for name, rows in _blocks(store, specs, progress, "statistics: histogram"):
        hq[name].coarse(rows)
    for h in hq.values():
        h.prepare()
    for name, rows in _blocks(store, specs, progress, "statistics: percentiles"):
        hq[name].fine(rows)
    return {n: (mom[n], hq[n].result()) for n in mom}


def _sampled(
    store: GraphStore,
    specs: Sequence[FieldSpec],
    percentiles: Sequence[float],
    max_samples: int,
    seed: int,
    progress: bool,
) -> tuple[dict[str, tuple[RunningMoments, dict[float, np.ndarray]]], int]:
    n = len(store)
    k = min(max_samples, n)
    idx = np.sort(np.random.default_rng(seed).choice(n, size=k, replace=False))
    parts: dict[str, list[np.ndarray]] = {s.name: [] for s in specs}
    sub = store.schema.select([s.name for s in specs])
    for lo in progress_iter(range(0, k, 4096), "statistics: sample", enabled=progress):
        for sample in gather_samples(store, idx[lo : lo + 4096], sub):
            for s in specs:
                v = np.asarray(sample[s.name])
                parts[s.name].append(v[None] if s.level == "sample" else v)
    out = {}
    for s in specs:
        width = len(column_names(s))
        rows = _rows(np.concatenate(parts[s.name]), s) if parts[s.name] else np.zeros((0, width))
        m = RunningMoments(width)
        m.update(rows)
        pct: dict[float, np.ndarray] = {}
        if len(percentiles) and rows.shape[0]:
            with np.errstate(all="ignore"):
                vals = np.nanpercentile(
                    np.where(np.isfinite(rows), rows, np.nan), list(percentiles), axis=0
                )
            pct = {float(q): vals[i] for i, q in enumerate(percentiles)}
        elif len(percentiles):
            pct = {float(q): np.full(width, np.nan) for q in percentiles}
        out[s.name] = (m, pct)
    return out, k


def compute_statistics(
    store: GraphStore | str | os.PathLike[str] | Any,
    fields: Sequence[str] | None = None,
    *,
    max_samples: int = 10_000,
    method: Literal["sampled", "exact"] = "sampled",
    percentiles: Sequence[float] = DEFAULT_PERCENTILES,
    seed: int = 0,
    save: bool = True,
    progress: bool = False,
) -> dict[str, FieldStatistics]:
    """Per-column statistics of `fields` (default: every float or quantised field).

    Args:
        store: a GraphStore, a path or a tj-data dataset.
        max_samples: samples read by method="sampled" (all when the store is smaller).
        percentiles: in [0, 100]; saved under keys like "1", "99.9" (see `percentile_key`).
        save: merge the result into the manifest's `statistics` (atomic rewrite).
    """
    st = store_of(store)
    if method not in ("sampled", "exact"):
        raise ValueError(f"method={method!r}: expected 'sampled' or 'exact'")
    if max_samples < 1:
        raise ValueError(f"max_samples={max_samples}: expected >= 1")
    if any(not 0.0 <= float(q) <= 100.0 for q in percentiles):
        raise ValueError(f"percentiles={list(percentiles)}: expected values in [0, 100]")
    schema = st.schema
    if fields is None:
        specs = [f for f in schema.fields if np.dtype(f.dtype).kind == "f" or f.quant is not None]
    else:
        unknown = [f for f in fields if f not in schema]
        if unknown:
            raise StatisticsError(
                f"{st.path}: fields {unknown} not in the schema {list(schema.names)}"
            )
        specs = [schema[f] for f in fields]
    if len(st) == 0:
        raise StatisticsError(f"{st.path}: the store has no samples to summarise")
    if method == "exact":
        res, used = _exact(st, specs, percentiles, progress), len(st)
    else:
        res, used = _sampled(st, specs, percentiles, max_samples, seed, progress)
    out: dict[str, FieldStatistics] = {}
    for s in specs:
        m, pct = res[s.name]
        out[s.name] = FieldStatistics(
            field=s.name,
            columns=column_names(s),
            method=method,
            count=m.count.copy(),
            mean=np.where(m.count > 0, m.mean, np.nan),
            std=m.std,
            min=np.where(m.count > 0, m.min, np.nan),
            max=np.where(m.count > 0, m.max, np.nan),
            nonfinite=m.nonfinite.copy(),
            percentiles={percentile_key(q): np.asarray(v, np.float64) for q, v in pct.items()},
            samples=used,
            extra={"seed": seed} if method == "sampled" else {},
        )
    if save:
        merged = dict(st.manifest.statistics)
        merged.update({name: fs.to_json() for name, fs in out.items()})
        st.update_manifest(statistics=merged)
    return out
