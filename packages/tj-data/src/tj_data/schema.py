"""Schema of a graph store: every field's level (node / edge / sample), dtype, shape and names.

`edge_index` is built in (int32 [2, e], local node ids) and is not listed in `Schema.fields`.
`FieldSpec.quant` carries quantisation parameters (`tj_data.quant.QuantParams`, re-exported
here; recorded in the manifest), so a stored int8/float16 field knows how to decode itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from tj_data.errors import QuantizationError, SchemaMismatchError
from tj_data.quant import QuantParams, quantize_array

__all__ = [
    "EDGE_INDEX",
    "LEVELS",
    "SUPPORTED_DTYPES",
    "FieldSpec",
    "QuantParams",
    "Schema",
]

EDGE_INDEX = "edge_index"
LEVELS = ("node", "edge", "sample")
SUPPORTED_DTYPES = (
    "bool",
    "int8",
    "uint8",
    "int16",
    "int32",
    "int64",
    "float16",
    "float32",
    "float64",
)
# names the batch uses for its own bookkeeping; a field may not take them
RESERVED = frozenset(
    {EDGE_INDEX, "batch", "ptr", "edge_ptr", "node_ptr", "num_nodes", "num_graphs"}
)
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
Level = Literal["node", "edge", "sample"]


@dataclass(kw_only=True, frozen=True)
class FieldSpec:
    """One stored field: rows are nodes, edges or samples; `shape` is the trailing shape."""

    name: str
    level: Level
    dtype: str = "float32"
    shape: tuple[int, ...] = ()
    columns: tuple[str, ...] | None = None
    quant: QuantParams | None = None
    description: str = ""

    def __post_init__(self) -> None:
        if not _NAME.match(self.name) or self.name in RESERVED:
            raise SchemaMismatchError(
                f"field name {self.name!r}: expected an identifier not in {sorted(RESERVED)}"
            )
        if self.level not in LEVELS:
            raise SchemaMismatchError(f"field {self.name!r}: level {self.level!r} not in {LEVELS}")
        dt = np.dtype(self.dtype).name
        if dt not in SUPPORTED_DTYPES:
            raise SchemaMismatchError(
                f"field {self.name!r}: dtype {self.dtype!r} not in {SUPPORTED_DTYPES}"
            )
        object.__setattr__(self, "dtype", dt)
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        if any(s < 0 for s in self.shape):
            raise SchemaMismatchError(f"field {self.name!r}: negative shape {self.shape}")
        if self.columns is not None:
            cols = tuple(self.columns)
            object.__setattr__(self, "columns", cols)
            if len(self.shape) != 1 or len(cols) != self.shape[0]:
                raise SchemaMismatchError(
                    f"field {self.name!r}: {len(cols)} column names need shape ({len(cols)},), "
                    f"got shape {self.shape}"
                )
        if self.quant is not None:
            self._check_quant(self.quant)

    def _check_quant(self, q: QuantParams) -> None:
        ints = ("int8", "uint8", "int16")
        if q.kind == "float16" and self.dtype != "float16":
            raise QuantizationError(
                f"field {self.name!r}: QuantParams(kind='float16') needs dtype float16, "
                f"got {self.dtype}"
            )
        if q.kind == "affine":
            if self.dtype not in ints:
                raise QuantizationError(
                    f"field {self.name!r}: affine quantisation needs dtype in {ints}, "
                    f"got {self.dtype}"
                )
            width = int(np.prod(self.shape, dtype=np.int64))
            if len(q.scale) not in (1, width):
                raise QuantizationError(
                    f"field {self.name!r}: {len(q.scale)} scales for {width} columns "
                    "(expected 1 or one per column)"
                )

    @property
    def row_nbytes(self) -> int:
        """Bytes of one row (one node, edge or sample) of this field."""
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def describe(self) -> str:
        lead = {"node": "n", "edge": "e", "sample": "1"}[self.level]
        return f"{self.name} ({self.level}, {self.dtype}, [{', '.join([lead, *map(str, self.shape)])}])"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "level": self.level,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "columns": list(self.columns) if self.columns is not None else None,
            "quant": self.quant.to_json() if self.quant is not None else None,
            "description": self.description,
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> FieldSpec:
        return cls(
            name=d["name"],
            level=d["level"],
            dtype=d["dtype"],
            shape=tuple(d.get("shape", ())),
            columns=tuple(d["columns"]) if d.get("columns") is not None else None,
            quant=QuantParams.from_json(d["quant"]) if d.get("quant") else None,
            description=d.get("description", ""),
        )


def cast_field(arr: np.ndarray, spec: FieldSpec, where: str) -> np.ndarray:
    target = np.dtype(spec.dtype)
    if arr.dtype == target:
        return arr
    if spec.quant is not None and arr.dtype.kind == "f":  # quantise at write time
        return quantize_array(arr, spec, where=f"{where}: ")
    ok = np.can_cast(arr.dtype, target, casting="same_kind") and not (
        target.kind == "b" and arr.dtype.kind != "b"
    )
    if not ok:
        raise SchemaMismatchError(
            f"{where}: field {spec.name!r} has dtype {arr.dtype}, expected {target} "
            "(or a dtype of the same kind)"
        )
    if target.kind in "iu" and arr.dtype.kind in "iu" and arr.size:
        info = np.iinfo(target)
        lo, hi = arr.min(), arr.max()
        if lo < info.min or hi > info.max:
            raise SchemaMismatchError(
                f"{where}: field {spec.name!r} values [{lo}, {hi}] overflow {target}"
            )
    return arr.astype(target)


@dataclass(kw_only=True, frozen=True)
class Schema:
    """Ordered field specs of a store (edge_index is implicit)."""

    fields: tuple[FieldSpec, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        names = [f.name for f in self.fields]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise SchemaMismatchError(f"schema: duplicate field names {sorted(dup)}")

    # ----- construction -------------------------------------------------------------
    @classmethod
    def graph(
        cls,
        *,
        node_features: int | Sequence[str] | None = None,
        edge_features: int | Sequence[str] | None = None,
        dtype: str = "float32",
        node_fields: Mapping[str, str | tuple[str, tuple[int, ...]]] | None = None,
        edge_fields: Mapping[str, str | tuple[str, tuple[int, ...]]] | None = None,
        sample_fields: Mapping[str, str | tuple[str, tuple[int, ...]]] | None = None,
    ) -> Schema:
        """Build the usual schema: `x` [n, F], `edge_attr` [e, D] and extras ``name -> dtype``
        (or ``name -> (dtype, trailing_shape)``) per level. Features may be a count or names."""
        specs: list[FieldSpec] = []
        for name, level, feats in (
            ("x", "node", node_features),
            ("edge_attr", "edge", edge_features),
        ):
            if feats is None:
                continue
            if isinstance(feats, int):
                specs.append(FieldSpec(name=name, level=level, dtype=dtype, shape=(feats,)))
            else:
                cols = tuple(feats)
                specs.append(
                    FieldSpec(name=name, level=level, dtype=dtype, shape=(len(cols),), columns=cols)
                )
        for level, extra in (
            ("node", node_fields),
            ("edge", edge_fields),
            ("sample", sample_fields),
        ):
            for name, d in (extra or {}).items():
                dt, shp = (d, ()) if isinstance(d, str) else (d[0], tuple(d[1]))
                specs.append(FieldSpec(name=name, level=level, dtype=dt, shape=shp))
        return cls(fields=tuple(specs))

    # ----- queries --------------------------------------------------------------------
    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields)

    def __contains__(self, name: object) -> bool:
        return any(f.name == name for f in self.fields)

    def __getitem__(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"field {name!r} not in schema {list(self.names)}")

    def at_level(self, level: str) -> tuple[FieldSpec, ...]:
        return tuple(f for f in self.fields if f.level == level)

    def level_of(self, name: str) -> str:
        return "edge" if name == EDGE_INDEX else self[name].level

    def row_nbytes(self, level: str) -> int:
        """Bytes per node / edge / sample over all stored fields (edge_index: 2 x int32)."""
        extra = 8 if level == "edge" else (16 if level == "sample" else 0)  # ptr entries
        return sum(f.row_nbytes for f in self.at_level(level)) + extra

    def select(self, names: Sequence[str] | None) -> Schema:
        """Sub-schema with only `names` (in schema order); None keeps every field."""
        if names is None:
            return self
        unknown = set(names) - set(self.names) - {EDGE_INDEX}
        if unknown:
            raise SchemaMismatchError(f"fields {sorted(unknown)} not in schema {list(self.names)}")
        return Schema(fields=tuple(f for f in self.fields if f.name in set(names)))

    def check_same(self, other: Schema, where: str) -> None:
        """Raise SchemaMismatchError naming the first difference between two schemas."""
        if self == other:
            return
        mine, theirs = (
            {f.name: f for f in self.fields},
            {f.name: f for f in other.fields},
        )
        for name in sorted(set(mine) | set(theirs)):
            a, b = mine.get(name), theirs.get(name)
            if a != b:
                raise SchemaMismatchError(
                    f"{where}: field {name!r} differs: store has "
                    f"{a.describe() if a else 'nothing'}, given {b.describe() if b else 'nothing'}"
                )
        raise SchemaMismatchError(f"{where}: field order differs: {self.names} vs {other.names}")

    # ----- serialisation --------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {"edge_index": {"dtype": "int32"}, "fields": [f.to_json() for f in self.fields]}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Schema:
        return cls(fields=tuple(FieldSpec.from_json(f) for f in d["fields"]))

    # ----- validation -----------------------------------------------------------------
    def validate_sample(
        self, sample: Mapping[str, Any], *, where: str = "sample"
    ) -> tuple[dict[str, np.ndarray], int, int]:
        """Check one sample and cast it to the schema's dtypes; returns (arrays, n, e)."""
        keys = set(sample) - {"num_nodes"}
        expected = set(self.names) | {EDGE_INDEX}
        if keys != expected:
            missing, extra = sorted(expected - keys), sorted(keys - expected)
            raise SchemaMismatchError(
                f"{where}: fields do not match the schema (missing {missing}, unexpected {extra}); "
                f"schema: {[f.describe() for f in self.fields]} + edge_index (int32, [2, e])"
            )
        n = None
        for spec in self.at_level("node"):
            rows = np.shape(sample[spec.name])[0] if np.ndim(sample[spec.name]) else None
            if n is None:
                n = rows
            elif rows != n:
                raise SchemaMismatchError(
                    f"{where}: field {spec.name!r} has {rows} rows, other node fields have {n}"
                )
        if "num_nodes" in sample:
            given = int(sample["num_nodes"])
            if n is not None and given != n:
                raise SchemaMismatchError(
                    f"{where}: num_nodes={given} but node fields have {n} rows"
                )
            n = given
        if n is None:
            raise SchemaMismatchError(f"{where}: no node-level field and no 'num_nodes' given")
        ei = np.asarray(sample[EDGE_INDEX])
        if ei.ndim != 2 or ei.shape[0] != 2 or (ei.size and ei.dtype.kind not in "iu"):
            raise SchemaMismatchError(
                f"{where}: field 'edge_index' has shape {ei.shape} dtype {ei.dtype}, "
                "expected integers of shape [2, e]"
            )
        e = ei.shape[1]
        if e and (ei.min() < 0 or ei.max() >= n):
            raise SchemaMismatchError(
                f"{where}: field 'edge_index' has node ids in [{ei.min()}, {ei.max()}], "
                f"expected local ids in [0, {n})"
            )
        out = {EDGE_INDEX: ei.astype(np.int32, copy=False)}
        rows_of = {"node": (n,), "edge": (e,), "sample": ()}
        for spec in self.fields:
            arr = np.asarray(sample[spec.name])
            want = rows_of[spec.level] + spec.shape
            if arr.shape != want:
                raise SchemaMismatchError(
                    f"{where}: field {spec.name!r} has shape {list(arr.shape)}, expected "
                    f"{list(want)} for {spec.describe()}"
                )
            out[spec.name] = cast_field(arr, spec, where)
        return out, n, e
