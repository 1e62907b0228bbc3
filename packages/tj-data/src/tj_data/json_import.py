"""Import of the seed documents' JSON chunk layout into a graph store.

Accepted layout (SRC):  `metadata.json` and `statistics.json` (optional, any JSON object; kept
in the manifest metadata under "import"), and `phase*/chunks/chunk_NNN.json` (or `chunks/`
directly under SRC). A chunk is a JSON list of records (or {"samples": [...]}); a record is:

    {"nodes": [[f0, ..., fF-1], ...]                   # or [{"features": [...], "id": 7, ...}]
     "edges": [[src, dst], ...]                        # or [{"source": 0, "target": 1, "features": [...]}]
     "edge_features": [[d0, ..., dD-1], ...],          # optional, parallel to pair-style edges
     "<name>": number, ...}                            # per-sample scalars (e.g. "intersection")

Node objects may carry numeric scalars (e.g. "id") that become per-node fields; edge objects
likewise. Node features go to `x`, edge features to `edge_attr`. Without a schema one is inferred
from the first record (numbers: int -> int64, float -> float32; non-numeric keys are not stored,
and are logged and listed in the manifest). Phases are imported in name order; each phase
boundary and each change of `episode_key` ends an episode. A malformed record raises
`JsonImportError` naming the file, the record index and the field.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tj_data.backends import HDF5Options
from tj_data.errors import JsonImportError, SchemaMismatchError
from tj_data.progress import progress_iter
from tj_data.schema import FieldSpec, Schema
from tj_data.writer import GraphStoreWriter

__all__ = ["find_chunks", "import_json_chunks", "infer_schema", "record_to_sample"]

log = logging.getLogger(__name__)
_STRUCT = {"nodes", "edges", "edge_features"}


def find_chunks(src: Path) -> list[tuple[str, list[Path]]]:
    """[(phase name, sorted chunk files)] under `src`."""
    phases = sorted(p for p in src.glob("phase*") if (p / "chunks").is_dir())
    if not phases and (src / "chunks").is_dir():
        phases = [src]
    out = [
        (p.name if p != src else "", sorted((p / "chunks").glob("chunk_*.json"))) for p in phases
    ]
    if not any(files for _, files in out):
        raise JsonImportError(
            f"{src}: no phase*/chunks/chunk_*.json (or chunks/chunk_*.json) files"
        )
    return out


def _is_num(v: Any) -> bool:
    return isinstance(v, int | float)  # bool is an int: stored as a bool field


def _dtype(v: Any) -> str:
    return "bool" if isinstance(v, bool) else ("int64" if isinstance(v, int) else "float32")


def infer_schema(record: Mapping[str, Any]) -> tuple[Schema, list[str]]:
    """Schema from one record, and the keys that cannot be stored (non-numeric)."""
    fields: list[FieldSpec] = []
    ignored: list[str] = []
    nodes, edges = record.get("nodes") or [], record.get("edges") or []
    if nodes:
        n0 = nodes[0]
        feats = n0.get("features", []) if isinstance(n0, Mapping) else n0
        fields.append(FieldSpec(name="x", level="node", dtype="float32", shape=(len(feats),)))
        if isinstance(n0, Mapping):
            for k, v in n0.items():
                if k != "features":
                    (
                        fields.append(FieldSpec(name=k, level="node", dtype=_dtype(v)))
                        if _is_num(v)
                        else ignored.append(f"nodes[].{k}")
                    )
    ef = None
    if edges and isinstance(edges[0], Mapping):
        ef = edges[0].get("features")
        for k, v in edges[0].items():
            if k not in ("source", "target", "features"):
                (
                    fields.append(FieldSpec(name=k, level="edge", dtype=_dtype(v)))
                    if _is_num(v)
                    else ignored.append(f"edges[].{k}")
                )
    elif record.get("edge_features"):
        ef = record["edge_features"][0]
    if ef is not None:
        fields.append(FieldSpec(name="edge_attr", level="edge", dtype="float32", shape=(len(ef),)))
    for k, v in record.items():
        if k not in _STRUCT:
            (
                fields.append(FieldSpec(name=k, level="sample", dtype=_dtype(v)))
                if _is_num(v)
                else ignored.append(k)
            )
    if not nodes:
        raise SchemaMismatchError("cannot infer a schema from a record without nodes; pass schema=")
    return Schema(fields=tuple(fields)), ignored


def record_to_sample(record: Any, schema: Schema, where: str) -> dict[str, Any]:
    """One JSON record -> a sample mapping for `GraphStoreWriter.append` (checked field by field)."""

    def fail(field: str, msg: str) -> JsonImportError:
        return JsonImportError(f"{where} field {field!r}: {msg}")

    if not isinstance(record, Mapping):
        raise JsonImportError(f"{where}: expected a JSON object, got {type(record).__name__}")
    nodes, edges = record.get("nodes"), record.get("edges", [])
    if not isinstance(nodes, list):
        raise fail("nodes", "missing or not a list")
    if not isinstance(edges, list):
        raise fail("edges", "not a list")
    sample: dict[str, Any] = {"num_nodes": len(nodes)}
    node_objs = bool(nodes) and isinstance(nodes[0], Mapping)
    edge_objs = bool(edges) and isinstance(edges[0], Mapping)
    try:
        pairs = [[e["source"], e["target"]] for e in edges] if edge_objs else edges
        ei = (
            np.asarray(pairs, dtype=np.int64).reshape(-1, 2).T
            if pairs
            else np.zeros((2, 0), np.int64)
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise fail(
            "edges", f"expected [src, dst] pairs or {{source, target}} objects ({exc})"
        ) from exc
    if ei.size and (ei.min() < 0 or ei.max() >= len(nodes)):
        raise fail("edges", f"node ids in [{ei.min()}, {ei.max()}], expected [0, {len(nodes)})")
    sample["edge_index"] = ei
    for spec in schema.fields:
        try:
            if spec.level == "node":
                if spec.name == "x":
                    rows = [n["features"] for n in nodes] if node_objs else nodes
                else:
                    rows = [n[spec.name] for n in nodes]
                val = np.asarray(rows, dtype=spec.dtype).reshape((len(nodes), *spec.shape))
            elif spec.level == "edge":
                if not edges:
                    rows = []
                elif spec.name == "edge_attr":
                    rows = [e["features"] for e in edges] if edge_objs else record["edge_features"]
                else:
                    rows = [e[spec.name] for e in edges]
                val = np.asarray(rows, dtype=spec.dtype).reshape((len(edges), *spec.shape))
            else:
                val = np.asarray(record[spec.name], dtype=spec.dtype).reshape(spec.shape)
        except KeyError as exc:
            raise fail(spec.name, f"missing key {exc}") from exc
        except (TypeError, ValueError) as exc:
            raise fail(spec.name, f"expected {spec.describe()} ({exc})") from exc
        sample[spec.name] = val
    return sample


def _load_chunk(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise JsonImportError(f"{path}: not valid JSON ({exc})") from exc
    if isinstance(data, Mapping):
        data = data.get("samples")
    if not isinstance(data, list):
        raise JsonImportError(f"{path}: expected a JSON list of records (or {{'samples': [...]}})")
    return data


def _read_optional(path: Path) -> Any:
    if not path.exists():
        return None
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError) as exc:
        raise JsonImportError(f"{path}: not valid JSON ({exc})") from exc


def import_json_chunks(
    src: str | os.PathLike[str],
    dst: str | os.PathLike[str],
    *,
    schema: Schema | None = None,
    backend: Literal["npy", "hdf5"] = "npy",
    shard_size: int = 4096,
    episode_key: str | None = "episode",
    overwrite: bool = False,
    hdf5: HDF5Options | None = None,
    progress: bool = True,
) -> Path:
    """Convert SRC's JSON chunks into a graph store at DST; returns DST."""
    src, dst = Path(src), Path(dst)
    phases = find_chunks(src)
    ignored: list[str] = []
    if schema is None:
        first = next(f for _, files in phases for f in files)
        records = _load_chunk(first)
        if not records:
            raise JsonImportError(f"{first}: empty chunk, cannot infer a schema; pass schema=")
        schema, ignored = infer_schema(records[0])
        if ignored:
            log.warning("not stored (non-numeric): %s", ", ".join(ignored))
    meta = {
        "import": {
            "source": src.name,
            "metadata": _read_optional(src / "metadata.json"),
            "statistics": _read_optional(src / "statistics.json"),
            "ignored_fields": ignored,
            "phases": {},
        }
    }
    files = [(ph, f) for ph, fs in phases for f in fs]
    with GraphStoreWriter(
        dst,
        schema,
        shard_size=shard_size,
        backend=backend,
        metadata=meta,
        overwrite=overwrite,
        hdf5=hdf5,
    ) as w:
        current_phase, phase_start, last_ep = None, 0, None
        for phase, path in progress_iter(files, f"import {src.name}", enabled=progress):
            if phase != current_phase:
                if current_phase is not None:
                    w.end_episode()
                    w.metadata["import"]["phases"][current_phase] = [phase_start, w.num_samples]
                current_phase, phase_start, last_ep = phase, w.num_samples, None
            for i, rec in enumerate(_load_chunk(path)):
                where = f"{path.relative_to(src)} record {i}"
                if episode_key and isinstance(rec, Mapping) and episode_key in rec:
                    if last_ep is not None and rec[episode_key] != last_ep:
                        w.end_episode()
                    last_ep = rec[episode_key]
                sample = record_to_sample(rec, schema, where)
                try:
                    w.append(sample)
                except SchemaMismatchError as exc:
                    raise JsonImportError(f"{where}: {exc}") from exc
        if current_phase is not None:
            w.metadata["import"]["phases"][current_phase] = [phase_start, w.num_samples]
    return dst
