"""Quantisation in numpy: `QuantParams` (what the manifest records), fit affine int8/uint8/int16
or float16 parameters per feature column, encode and decode numpy arrays (vectorised).

Affine: ``stored = clip(round(value / scale + zero_point))``, ``value = (stored - zero_point) *
scale``, one (scale, zero_point) per column, fitted on [lo, hi] = the column's min/max or chosen
percentiles (outliers then saturate). When lo < 0 < hi the zero point is an integer and the
scale is widened by at most one step so that 0.0 is stored exactly; the error of a value inside
[lo, hi] is at most scale / 2. float16 is a cast (checked against its +-65504 range).

Torch-free by construction (the schema, writer, statistics and `quantize_store` use it in
processes that never import torch); the tensor decoder is `tj_data.quant_torch`. The kernels take
any field with `name`, `dtype`, `shape` and `quant` (a `FieldSpec`), so this module does not import
the schema: the schema imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np

from tj_data.errors import QuantizationError, SchemaMismatchError

if TYPE_CHECKING:
    from tj_data.statistics import FieldStatistics

__all__ = [
    "INT_RANGES",
    "QuantParams",
    "QuantizedField",
    "dequantize_array",
    "fit_quant_params",
    "quantize_array",
]

INT_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}
FLOAT16_MAX = 65504.0


@dataclass(kw_only=True, frozen=True)
class QuantParams:
    """How a stored field decodes to its source dtype: ``value = (stored - zero_point) * scale``.

    kind "affine" (integer storage, or float16 storage with a folded normalisation; per-column
    or scalar scale/zero point) or "float16" (a cast, no parameters). Recorded in the manifest
    (`FieldSpec.quant`); decoded by `dequantize_array` or, on a device, `GraphBatch.dequantize`.
    """

    kind: Literal["affine", "float16"]
    source_dtype: str = "float32"
    scale: tuple[float, ...] = ()
    zero_point: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in ("affine", "float16"):
            raise SchemaMismatchError(
                f"QuantParams.kind={self.kind!r}: expected 'affine' or 'float16'"
            )
        if self.kind == "affine":
            if not self.scale or len(self.scale) != len(self.zero_point):
                raise SchemaMismatchError(
                    "QuantParams(kind='affine') needs scale and zero_point of equal, non-zero length; "
                    f"got {len(self.scale)} and {len(self.zero_point)}"
                )
            if any(not (s > 0 and np.isfinite(s)) for s in self.scale):
                raise SchemaMismatchError(
                    f"QuantParams.scale must be finite and > 0, got {self.scale}"
                )

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "source_dtype": self.source_dtype,
            "scale": list(self.scale),
            "zero_point": list(self.zero_point),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> QuantParams:
        return cls(
            kind=d["kind"],
            source_dtype=d.get("source_dtype", "float32"),
            scale=tuple(float(v) for v in d.get("scale", ())),
            zero_point=tuple(float(v) for v in d.get("zero_point", ())),
        )


class QuantizedField(Protocol):
    """What the kernels read of a field (`tj_data.schema.FieldSpec` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> tuple[int, ...]: ...
    @property
    def quant(self) -> QuantParams | None: ...


def _param_arrays(params: QuantParams, spec: QuantizedField) -> tuple[np.ndarray, np.ndarray]:
    """scale and zero point shaped to broadcast against [rows, *spec.shape]."""
    scale = np.asarray(params.scale, np.float64)
    zp = np.asarray(params.zero_point, np.float64)
    if len(scale) > 1:
        scale, zp = scale.reshape(spec.shape), zp.reshape(spec.shape)
    return scale, zp


def fit_quant_params(
    stats: FieldStatistics,
    kind: str,
    *,
    percentiles: tuple[float, float] | None = None,
    ranges: Sequence[tuple[float, float]] | Mapping[str, tuple[float, float]] | None = None,
) -> QuantParams:
    """Parameters for storing the field summarised by `stats` as `kind` ("int8", "uint8",
    "int16" or "float16"). Range per column: the percentiles (lo_q, hi_q) when given (they must
    be in the statistics), else min/max; `ranges` overrides them (one (lo, hi) per column, or
    {column name: (lo, hi)} for some). A zero-width range is an error naming the column."""
    field = stats.field
    if kind == "float16":
        big = np.maximum(np.abs(stats.min), np.abs(stats.max))
        bad = np.flatnonzero(~(big <= FLOAT16_MAX))
        if len(bad):
            c = stats.columns[int(bad[0])]
            raise QuantizationError(
                f"field {field!r} column {c!r}: values up to {float(big[bad[0]]):g} exceed "
                f"float16's range (+-{FLOAT16_MAX:g}); use int8/int16 affine quantisation"
            )
        return QuantParams(kind="float16", source_dtype="float32")
    if kind not in INT_RANGES:
        raise QuantizationError(
            f"field {field!r}: quantisation kind {kind!r} not in {[*INT_RANGES, 'float16']}"
        )
    if percentiles is not None:
        lo, hi = stats.percentile(percentiles[0]), stats.percentile(percentiles[1])
    else:
        lo, hi = stats.min, stats.max
    lo, hi = np.array(lo, np.float64), np.array(hi, np.float64)
    if isinstance(ranges, Mapping):  # column name -> (lo, hi): overrides for some columns
        for col, (a, b) in ranges.items():
            if col not in stats.columns:
                raise QuantizationError(
                    f"field {field!r}: ranges names column {col!r}, not in {list(stats.columns)}"
                )
            j = stats.columns.index(col)
            lo[j], hi[j] = float(a), float(b)
    elif ranges is not None:
        r = np.asarray(ranges, np.float64).reshape(-1, 2)
        if len(r) != len(stats.columns):
            raise QuantizationError(
                f"field {field!r}: {len(r)} ranges given for {len(stats.columns)} columns"
            )
        lo, hi = r[:, 0], r[:, 1]
    qmin, qmax = INT_RANGES[kind]
    scales, zps = [], []
    for j, col in enumerate(stats.columns):
        a, b = float(lo[j]), float(hi[j])
        if not (np.isfinite(a) and np.isfinite(b)):
            raise QuantizationError(
                f"field {field!r} column {col!r}: range [{a}, {b}] is not finite (no data?)"
            )
        if not b > a:
            raise QuantizationError(
                f"field {field!r} column {col!r}: quantisation range of zero width ([{a:g}, "
                f"{b:g}]); the column is constant over the statistics: give ranges=, use "
                "float16, or leave the field unquantised"
            )
        scale = (b - a) / (qmax - qmin)
        if a < 0.0 < b:  # integer zero point: 0.0 stored exactly
            zp = float(round(qmin - a / scale))
            zp = min(max(zp, qmin + 1), qmax - 1)
            scale = max(a / (qmin - zp), b / (qmax - zp))
        else:
            zp = qmin - a / scale
        scales.append(scale)
        zps.append(zp)
    return QuantParams(
        kind="affine", source_dtype="float32", scale=tuple(scales), zero_point=tuple(zps)
    )


def quantize_array(values: np.ndarray, spec: QuantizedField, *, where: str = "") -> np.ndarray:
    """Encode float `values` [rows, *spec.shape] into `spec.dtype` with `spec.quant`."""
    q = spec.quant
    if q is None:
        raise QuantizationError(f"{where}field {spec.name!r} has no quantisation parameters")
    x = np.asarray(values)
    if q.kind == "float16":
        big = np.abs(x[np.isfinite(x)]).max(initial=0.0)
        if big > FLOAT16_MAX:
            raise QuantizationError(
                f"{where}field {spec.name!r}: value {big:g} overflows float16 (+-{FLOAT16_MAX:g})"
            )
        return x.astype(np.float16)
    if not np.isfinite(x).all():
        raise QuantizationError(
            f"{where}field {spec.name!r}: NaN/inf values cannot be stored as {spec.dtype}"
        )
    scale, zp = _param_arrays(q, spec)
    qmin, qmax = INT_RANGES[spec.dtype]
    out = np.rint(x / scale + zp)
    np.clip(out, qmin, qmax, out=out)
    return out.astype(spec.dtype)


def dequantize_array(
    stored: np.ndarray, spec: QuantizedField, *, out: np.ndarray | None = None
) -> np.ndarray:
    """Decode `stored` rows of a quantised field to float32 (into `out` when given)."""
    q = spec.quant
    if q is None:
        return np.asarray(stored)
    if out is None:
        out = np.empty(np.shape(stored), np.float32)
    out[...] = stored
    if q.kind == "affine":
        scale, zp = _param_arrays(q, spec)
        out -= zp.astype(np.float32)
        out *= scale.astype(np.float32)
    return out
