"""`collate_graphs`: a list of samples -> one `GraphBatch`, vectorised like PyG's `collate`.

One `np.concatenate` per field, edge-index offsets from the node counts in one `np.repeat`,
`ptr` from a cumsum and `batch` from one `np.repeat`; every result is a fresh array handed to
torch with `torch.from_numpy` (zero-copy). The output equals `Batch.from_data_list` field for
field (see `tj_data.pyg.sample_to_pyg` for the matching Data layout).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from tj_data.batch import GraphBatch
from tj_data.errors import SchemaMismatchError
from tj_data.schema import EDGE_INDEX, Schema

__all__ = ["BatchTransform", "GraphCollator", "collate_graphs"]

BatchTransform = Callable[[GraphBatch], GraphBatch]
_DEFAULT_LEVELS = {"x": "node", "pos": "node", "edge_attr": "edge"}


def _levels(sample: Mapping[str, Any], schema: Schema | None) -> dict[str, str]:
    keys = [k for k in sample if k not in (EDGE_INDEX, "num_nodes")]
    if schema is not None:
        return {k: schema.level_of(k) for k in keys}
    unknown = [k for k in keys if k not in _DEFAULT_LEVELS]
    if unknown:
        raise SchemaMismatchError(
            f"collate_graphs: pass schema= to give the level of fields {unknown}"
        )
    return {k: _DEFAULT_LEVELS[k] for k in keys}


def collate_graphs(
    samples: Sequence[Mapping[str, Any]], *, schema: Schema | None = None
) -> GraphBatch:
    """Batch graphs given as mappings of arrays (`edge_index` [2, e] local ids; node, edge and
    sample fields by the schema's levels). Without a schema only x/pos/edge_attr are known."""
    if len(samples) == 0:
        raise ValueError("collate_graphs: empty list of samples")
    first = samples[0]
    levels = _levels(first, schema)
    node_key = next((k for k, lv in levels.items() if lv == "node"), None)
    b = len(samples)
    if node_key is not None:
        nn = np.fromiter((len(s[node_key]) for s in samples), np.int64, b)
    else:
        nn = np.fromiter((int(s["num_nodes"]) for s in samples), np.int64, b)
    eis = [s[EDGE_INDEX] for s in samples]
    ne = np.fromiter((e.shape[1] for e in eis), np.int64, b)
    ptr = np.zeros(b + 1, np.int64)
    np.cumsum(nn, out=ptr[1:])
    edge_ptr = np.zeros(b + 1, np.int64)
    np.cumsum(ne, out=edge_ptr[1:])
    edge_index = np.concatenate(eis, axis=1).astype(np.int64)
    edge_index += np.repeat(ptr[:-1], ne)
    fields: dict[str, torch.Tensor] = {}
    for name, level in levels.items():
        parts = [s[name] for s in samples]
        arr = np.stack(parts) if level == "sample" else np.concatenate(parts)
        fields[name] = torch.from_numpy(arr)
    return GraphBatch(
        edge_index=torch.from_numpy(edge_index),
        batch=torch.from_numpy(np.repeat(np.arange(b, dtype=np.int64), nn)),
        ptr=torch.from_numpy(ptr),
        edge_ptr=torch.from_numpy(edge_ptr),
        fields=fields,
        levels=levels,
    )


class GraphCollator:
    """Picklable `collate_fn`: `collate_graphs` with a schema, then optional batch transforms.

    The transforms are the hook for dequantisation, normalisation and augmentation (tj-data part
    2): each takes and returns a `GraphBatch`; they run in the worker that collates. Transforms
    that should run on the device are applied by the caller after `batch.to(device)`."""

    def __init__(
        self, schema: Schema | None = None, transforms: Sequence[BatchTransform] = ()
    ) -> None:
        self.schema = schema
        self.transforms = tuple(transforms)
        quant = {f.name: f.quant for f in schema.fields if f.quant is not None} if schema else {}
        self._meta = {"quant": quant} if quant else {}

    def __call__(self, samples: Sequence[Mapping[str, Any]]) -> GraphBatch:
        batch = collate_graphs(samples, schema=self.schema)
        if self._meta:
            batch.meta.update(self._meta)
        for t in self.transforms:
            batch = t(batch)
        return batch
