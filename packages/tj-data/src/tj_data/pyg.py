"""Optional PyTorch Geometric interop (imported lazily: tj-data runs without PyG)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tj_data.schema import EDGE_INDEX, Schema

if TYPE_CHECKING:
    from tj_data.batch import GraphBatch

__all__ = ["batch_to_pyg", "require_pyg", "sample_to_pyg"]


def require_pyg() -> Any:
    """The `torch_geometric` module, or an ImportError that says how to get it."""
    try:
        import torch_geometric
    except ImportError as exc:
        raise ImportError(
            "this feature needs torch-geometric, an optional dependency of tj-data: "
            "install it with `pip install tj-data[pyg]` (or `uv add torch-geometric`)"
        ) from exc
    return torch_geometric


def sample_to_pyg(sample: Mapping[str, Any], schema: Schema) -> Any:
    """One stored sample as a PyG `Data`: per-sample fields get a leading axis of 1 (the PyG
    convention for graph-level attributes), so `Batch.from_data_list` stacks them to [B, ...]."""
    require_pyg()
    from torch_geometric.data import Data

    kw: dict[str, Any] = {
        EDGE_INDEX: torch.as_tensor(np.asarray(sample[EDGE_INDEX]), dtype=torch.long)
    }
    for f in schema.fields:
        t = torch.as_tensor(np.array(sample[f.name]))
        kw[f.name] = t.unsqueeze(0) if f.level == "sample" else t
    if not schema.at_level("node"):
        kw["num_nodes"] = int(sample["num_nodes"])
    return Data(**kw)


def batch_to_pyg(batch: GraphBatch) -> Any:
    """A `torch_geometric.data.Batch` sharing the batch's tensors, with the slice/increment
    bookkeeping that `Batch.to_data_list()` and `Batch.get_example()` need."""
    require_pyg()
    from torch_geometric.data import Batch

    out = Batch(edge_index=batch.edge_index, batch=batch.batch, ptr=batch.ptr, **batch.fields)
    b = batch.num_graphs
    slices = {"edge_index": batch.edge_ptr}
    incs = {"edge_index": batch.ptr[:-1]}
    graph_slices = torch.arange(b + 1)
    for name, level in batch.levels.items():
        slices[name] = {"node": batch.ptr, "edge": batch.edge_ptr, "sample": graph_slices}[level]
        incs[name] = torch.zeros(b, dtype=torch.long)
    out._num_graphs = b
    out._slice_dict = slices
    out._inc_dict = incs
    if "x" not in batch.fields:
        out.num_nodes = batch.num_nodes
    return out
