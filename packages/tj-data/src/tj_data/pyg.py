"""Optional PyTorch Geometric interop (imported lazily: tj-data runs without PyG)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from tj_data.schema import EDGE_INDEX, Schema

if TYPE_CHECKING:
    from tj_data.batch import GraphBatch
    from tj_data.store import GraphStore

__all__ = ["batch_to_pyg", "require_pyg", "sample_to_pyg", "store_to_pyg"]


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


def store_to_pyg(store: GraphStore) -> Any:
    """The whole store in RAM as a PyG ``InMemoryDataset``: each field's arrays concatenated over
    the shards, as stored (quantised fields stay quantised), sliced per sample; item ``i`` equals
    ``sample_to_pyg(store[i], store.schema)``. For comparing with, or feeding, PyG code."""
    require_pyg()
    from torch_geometric.data import Data, InMemoryDataset

    def cat(name: str, axis: int = 0) -> torch.Tensor:
        parts = [store.shard_arrays(k)[name] for k in range(store.num_shards)]
        return torch.from_numpy(np.concatenate(parts, axis=axis))

    sizes = store.size_index()
    ptr = {"node": torch.from_numpy(np.concatenate([[0], np.cumsum(sizes.nodes)])),
           "edge": torch.from_numpy(np.concatenate([[0], np.cumsum(sizes.edges)])),
           "sample": torch.arange(len(sizes) + 1)}  # fmt: skip
    data = {f.name: cat(f.name) for f in store.schema.fields}
    data[EDGE_INDEX] = cat(EDGE_INDEX, axis=1).long()  # per-sample node ids: no increments
    slices = {f.name: ptr[f.level] for f in store.schema.fields} | {EDGE_INDEX: ptr["edge"]}

    class _Store(InMemoryDataset):
        def __init__(self) -> None:
            super().__init__(root=None)
            self._data, self.slices = Data(**data), slices

    return _Store()
