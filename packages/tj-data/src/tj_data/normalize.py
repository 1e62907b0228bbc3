"""`Normalizer`: per-column feature scaling chosen by column name, from manifest statistics.

Strategies (`ColumnNorm.parse` accepts these strings): "identity"; "minmax" -> [0, 1] over
[min, max]; "zscore" -> (v - mean) / std, optionally clipped first ("zscore(p1,p99)");
"clamp" -> clamp to [lo, hi] (default p1..p99, or values: "clamp(-50,50)") then scale to
[0, 1]; "cyclic(period)" -> the column becomes sin(2 pi v / period) and a `<name>_cos` column is
appended to the field. Each field is one fused clamp / subtract / multiply over all its columns
(torch, in place on the fresh batch, any device); used as a `GraphCollator` / `WindowCollator`
transform or called after `batch.to(device)`. `inverse` is exact for identity/minmax/zscore, for
clamp inside [lo, hi], and modulo the period for cyclic. On a quantised field whose decoding is
deferred to the device, an all-affine normalisation is folded into the decode parameters.
"""

from __future__ import annotations

import fnmatch
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

import numpy as np
import torch

from tj_data.batch import GraphBatch
from tj_data.errors import StatisticsError
from tj_data.quant import QuantParams
from tj_data.statistics import FieldStatistics, load_statistics

__all__ = ["ColumnNorm", "FieldNorm", "Normalizer"]

log = logging.getLogger(__name__)
Kind = Literal["identity", "minmax", "zscore", "clamp", "cyclic"]
_SPEC = re.compile(r"^\s*(\w+)\s*(?:\(([^)]*)\))?\s*$")


def _bound(v: str) -> float | str:
    v = v.strip()
    return v if v.startswith("p") else float(v)


@dataclass(kw_only=True, frozen=True)
class ColumnNorm:
    """How one column is scaled. lo/hi: a value or a percentile key ("p1", "p99.9")."""

    kind: Kind = "identity"
    lo: float | str | None = None
    hi: float | str | None = None
    period: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in ("identity", "minmax", "zscore", "clamp", "cyclic"):
            raise ValueError(
                f"ColumnNorm.kind={self.kind!r}: expected identity, minmax, zscore, clamp or cyclic"
            )
        if self.kind == "cyclic" and not (self.period and self.period > 0):
            raise ValueError(f"ColumnNorm(kind='cyclic') needs a period > 0, got {self.period}")
        if (self.lo is None) != (self.hi is None):
            raise ValueError("ColumnNorm: give both lo and hi, or neither")

    @classmethod
    def parse(cls, spec: str | ColumnNorm | Mapping[str, Any]) -> ColumnNorm:
        if isinstance(spec, ColumnNorm):
            return spec
        if isinstance(spec, Mapping):
            return cls(**spec)
        m = _SPEC.match(spec)
        if not m:
            raise ValueError(f"cannot parse normalisation {spec!r}")
        kind, args = m.group(1), [a for a in (m.group(2) or "").split(",") if a.strip()]
        if kind == "cyclic":
            if len(args) != 1:
                raise ValueError(f"{spec!r}: cyclic needs one period, e.g. 'cyclic(360)'")
            return cls(kind="cyclic", period=float(args[0]))
        if kind == "clamp" and not args:
            args = ["p1", "p99"]
        if args and len(args) != 2:
            raise ValueError(f"{spec!r}: expected two bounds, e.g. '{kind}(p1,p99)'")
        lo, hi = (_bound(args[0]), _bound(args[1])) if args else (None, None)
        return cls(kind=kind, lo=lo, hi=hi)  # type: ignore[arg-type]


@dataclass(kw_only=True)
class FieldNorm:
    """Resolved parameters of one field: y = (clamp(v, lo, hi) - shift) * scale per column,
    then sin/cos of the cyclic columns (`cyclic` = [(column, period)])."""

    field: str
    columns: tuple[str, ...]
    kinds: tuple[str, ...]
    lo: np.ndarray
    hi: np.ndarray
    shift: np.ndarray
    scale: np.ndarray
    cyclic: tuple[tuple[int, float], ...] = ()
    _cache: dict[Any, tuple[torch.Tensor, ...]] = field(default_factory=dict, repr=False)

    @property
    def clamps(self) -> bool:
        return bool(np.isfinite(self.lo).any() or np.isfinite(self.hi).any())

    @property
    def output_columns(self) -> tuple[str, ...]:
        return self.columns + tuple(f"{self.columns[c]}_cos" for c, _ in self.cyclic)

    def params(self, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """(lo, hi, shift, scale) as tensors broadcasting against `like` [rows, *shape]."""
        trail = tuple(like.shape[1:]) if len(self.columns) > 1 else ()
        key = (like.device, like.dtype, trail)
        if key not in self._cache:
            self._cache[key] = tuple(
                torch.as_tensor(a, dtype=like.dtype, device=like.device).reshape(trail or (-1,))
                for a in (self.lo, self.hi, self.shift, self.scale)
            )
        return self._cache[key]

    def state(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "kinds": list(self.kinds),
            **{k: getattr(self, k).tolist() for k in ("lo", "hi", "shift", "scale")},
            "cyclic": [list(c) for c in self.cyclic],
        }

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_cache": {}}


def _resolve(stats: FieldStatistics, j: int, norm: ColumnNorm) -> tuple[float, float, float, float]:
    """(lo, hi, shift, scale) of column j."""

    def val(b: float | str) -> float:
        return float(b) if not isinstance(b, str) else float(stats.percentile(b)[j])

    inf = math.inf
    col = stats.columns[j]
    if norm.kind in ("identity", "cyclic"):
        return -inf, inf, 0.0, 1.0
    lo, hi = (val(norm.lo), val(norm.hi)) if norm.lo is not None else (-inf, inf)
    if norm.kind == "zscore":
        mean, std = float(stats.mean[j]), float(stats.std[j])
        if not (np.isfinite(mean) and np.isfinite(std)):
            raise StatisticsError(f"field {stats.field!r} column {col!r}: no finite mean/std")
        if std == 0.0:
            log.warning("%s.%s: std is 0: zscore maps it to 0", stats.field, col)
        return lo, hi, mean, 1.0 / std if std > 0 else 1.0
    if norm.kind == "minmax" and norm.lo is None:
        lo_s, hi_s = float(stats.min[j]), float(stats.max[j])
        lo, hi = -inf, inf
    else:
        lo_s, hi_s = lo, hi
    if not (np.isfinite(lo_s) and np.isfinite(hi_s)):
        raise StatisticsError(f"field {stats.field!r} column {col!r}: range is not finite")
    if hi_s <= lo_s:
        log.warning("%s.%s: zero-width range [%g, %g]: maps it to 0", stats.field, col, lo_s, hi_s)
        return lo, hi, lo_s, 1.0
    return lo, hi, lo_s, 1.0 / (hi_s - lo_s)


def _match(rules: Mapping[str, ColumnNorm], fname: str, col: str) -> ColumnNorm | None:
    for pat, norm in rules.items():  # "field.column" patterns first, then "column" patterns
        if "." in pat and fnmatch.fnmatchcase(f"{fname}.{col}", pat):
            return norm
    for pat, norm in rules.items():
        if "." not in pat and fnmatch.fnmatchcase(col, pat):
            return norm
    return None


class Normalizer:
    """Batch transform normalising float fields (see the module docstring).

    Build with `Normalizer.from_statistics(store_or_stats, rules, fields=...)`."""

    def __init__(self, fields: Mapping[str, FieldNorm], *, inplace: bool = True) -> None:
        self.fields = dict(fields)
        self.inplace = inplace

    @classmethod
    def from_statistics(
        cls,
        statistics: Mapping[str, FieldStatistics] | Any,
        rules: Mapping[str, str | ColumnNorm | Mapping[str, Any]],
        *,
        fields: Sequence[str] | None = None,
        default: str | ColumnNorm = "identity",
        stats_from: Mapping[str, str] | None = None,
        inplace: bool = True,
    ) -> Normalizer:
        """Args:
        statistics: {field: FieldStatistics}, or a store / dataset / path (its manifest's).
        rules: pattern -> strategy; patterns are fnmatch globs on "field.column" or "column"
            (e.g. {"rel_*": "zscore(p1,p99)", "heading_*": "identity", "speed": "minmax"}).
        fields: fields to normalise (default: every field with statistics).
        default: strategy of columns no rule matches.
        stats_from: use another field's statistics (e.g. {"y_next": "x"}, so targets are
            scaled like the inputs).
        """
        stats_from = dict(stats_from or {})
        if isinstance(statistics, Mapping):
            table = dict(statistics)
        else:
            need = None if fields is None else sorted({stats_from.get(f, f) for f in fields})
            table = load_statistics(statistics, need)
        names = list(table) if fields is None else list(fields)
        parsed = {k: ColumnNorm.parse(v) for k, v in rules.items()}
        fallback = ColumnNorm.parse(default)
        out: dict[str, FieldNorm] = {}
        for name in names:
            src = stats_from.get(name, name)
            if src not in table:
                raise StatisticsError(
                    f"Normalizer: no statistics for field {src!r}"
                    f"{f' (used for {name!r})' if src != name else ''} (have {sorted(table)}); "
                    f"run tj_data.compute_statistics(store, fields=[{src!r}])"
                )
            st = table[src]
            norms = [_match(parsed, name, c) or fallback for c in st.columns]
            res = np.array([_resolve(st, j, n) for j, n in enumerate(norms)], np.float64)
            res = res.reshape(len(norms), 4)
            out[name] = FieldNorm(
                field=name,
                columns=st.columns,
                kinds=tuple(n.kind for n in norms),
                lo=res[:, 0],
                hi=res[:, 1],
                shift=res[:, 2],
                scale=res[:, 3],
                cyclic=tuple(
                    (j, float(n.period or 0)) for j, n in enumerate(norms) if n.kind == "cyclic"
                ),
            )
        return cls(out, inplace=inplace)

    # ----- state ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Resolved parameters (JSON-serialisable): save them with a model checkpoint."""
        return {"fields": {n: f.state() for n, f in self.fields.items()}}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any], *, inplace: bool = True) -> Normalizer:
        fields = {}
        for n, d in state["fields"].items():
            fields[n] = FieldNorm(
                field=n,
                columns=tuple(d["columns"]),
                kinds=tuple(d["kinds"]),
                cyclic=tuple((int(c), float(p)) for c, p in d["cyclic"]),
                **{k: np.asarray(d[k], np.float64) for k in ("lo", "hi", "shift", "scale")},
            )
        return cls(fields, inplace=inplace)

    def output_columns(self, field_name: str) -> tuple[str, ...]:
        return self.fields[field_name].output_columns

    # ----- apply ------------------------------------------------------------------------
    def normalize_tensor(
        self, name: str, t: torch.Tensor, *, inplace: bool = False
    ) -> torch.Tensor:
        fn = self.fields[name]
        if not t.is_floating_point():
            raise StatisticsError(
                f"Normalizer: field {name!r} is {t.dtype}: dequantise it first (dataset "
                "dequantize='host', or batch.dequantize() on the device)"
            )
        lo, hi, shift, scale = fn.params(t)
        y = t if inplace and not fn.cyclic else t.clone()
        if fn.clamps:
            torch.clamp(y, lo, hi, out=y)
        y.sub_(shift).mul_(scale)
        if fn.cyclic:
            idx = [c for c, _ in fn.cyclic]
            w = torch.tensor(
                [2 * math.pi / p for _, p in fn.cyclic], dtype=y.dtype, device=y.device
            )
            ang = y[..., idx] * w
            y[..., idx] = torch.sin(ang)
            y = torch.cat([y, torch.cos(ang)], dim=-1)
        return y

    def inverse_tensor(self, name: str, y: torch.Tensor) -> torch.Tensor:
        """Values in the field's original units (cyclic: the angle column back, modulo the
        period; clamped values stay at the clamp bounds)."""
        fn = self.fields[name]
        x = y.clone()
        if fn.cyclic:
            idx = [c for c, _ in fn.cyclic]
            n = len(fn.columns)
            sin, cos = x[..., idx], x[..., n : n + len(idx)]
            per = torch.tensor([p for _, p in fn.cyclic], dtype=x.dtype, device=x.device)
            x = x[..., :n].clone()
            x[..., idx] = torch.remainder(torch.atan2(sin, cos) / (2 * math.pi) * per, per)
        _, _, shift, scale = fn.params(x)
        return x / scale + shift

    def __call__(self, batch: GraphBatch) -> GraphBatch:
        done = list(batch.meta.get("normalized", ()))
        fields = dict(batch.fields)
        quant = dict(batch.meta.get("quant", {}))
        for name in self.fields:
            if name not in fields:
                continue
            if name in done:
                raise StatisticsError(
                    f"Normalizer: field {name!r} of this batch is already normalised"
                )
            t = fields[name]
            if name in quant and (not t.is_floating_point() or t.dtype == torch.float16):
                quant[name] = self._fold(name, quant[name])  # decoded later, on the device
            else:
                fields[name] = self.normalize_tensor(name, t, inplace=self.inplace)
            done.append(name)
        return replace(
            batch, fields=fields, meta={**batch.meta, "quant": quant, "normalized": done}
        )

    def _fold(self, name: str, q: QuantParams) -> QuantParams:
        """Normalisation folded into deferred dequantisation: (v - s) * k with
        v = (q - zp) * a  ->  (q - (zp + s / a)) * (a * k)."""
        fn = self.fields[name]
        if fn.cyclic or fn.clamps:
            raise StatisticsError(
                f"Normalizer: field {name!r} is dequantised on the device; clamp/cyclic columns "
                "cannot be folded into its decoding: use dequantize='host' or apply the "
                "normalizer after batch.dequantize()"
            )
        n = len(fn.columns)
        a = np.broadcast_to(np.asarray(q.scale or (1.0,), np.float64), (n,))
        zp = np.broadcast_to(np.asarray(q.zero_point or (0.0,), np.float64), (n,))
        return QuantParams(
            kind="affine",
            source_dtype=q.source_dtype,
            scale=tuple((a * fn.scale).tolist()),
            zero_point=tuple((zp + fn.shift / a).tolist()),
        )

    def inverse(self, batch: GraphBatch) -> GraphBatch:
        done = list(batch.meta.get("normalized", ()))
        fields = dict(batch.fields)
        for name in self.fields:
            if name in fields and name in done:
                fields[name] = self.inverse_tensor(name, fields[name])
                done.remove(name)
        return replace(batch, fields=fields, meta={**batch.meta, "normalized": done})

    def __repr__(self) -> str:
        parts = [
            f"{n}: {dict(zip(f.columns, f.kinds, strict=True))}" for n, f in self.fields.items()
        ]
        return f"Normalizer({'; '.join(parts)})"
