"""`GraphBatch`: a batch of graphs as tensors with PyG names and meaning (DESIGN §4.2).

`edge_index` holds batch-global node ids, `batch` maps nodes to graphs, `ptr` [B+1] and
`edge_ptr` [B+1] are node/edge offsets. Every stored field lives in `fields` with its level in
`levels` and is also reachable as an attribute (`batch.x`, `batch.vehicle_id`). `meta` carries
small non-tensor facts (e.g. quantisation params) for transforms that run after `.to(device)`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from tj_data.quant_torch import dequantize_tensor

__all__ = ["GraphBatch"]


@dataclass(kw_only=True)
class GraphBatch:
    edge_index: torch.Tensor
    batch: torch.Tensor
    ptr: torch.Tensor
    edge_ptr: torch.Tensor
    fields: dict[str, torch.Tensor] = field(default_factory=dict)
    levels: dict[str, str] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        fields = self.__dict__.get("fields")
        if fields is not None and name in fields:
            return fields[name]
        if name in ("x", "edge_attr"):
            return None  # PyG convention: absent features read as None
        raise AttributeError(f"GraphBatch has no field {name!r} (fields: {sorted(fields or ())})")

    @property
    def num_graphs(self) -> int:
        return int(self.ptr.numel()) - 1

    @property
    def num_nodes(self) -> int:
        return int(self.batch.numel())

    @property
    def num_edges(self) -> int:
        return int(self.edge_index.shape[1])

    @property
    def nbytes(self) -> int:
        """Bytes of this batch's tensors (what a host->device copy moves)."""
        return sum(t.numel() * t.element_size() for t in self.tensors().values())

    def dequantize(self) -> GraphBatch:
        """Decode the quantised fields listed in `meta["quant"]` to float32 where the tensors
        are (after `.to(device)`: int8 crossed the bus, the decode runs on the device). A
        no-op for fields the collator already decoded on the host."""
        quant = self.meta.get("quant")
        if not quant:
            return self
        fields = dict(self.fields)
        for name, params in quant.items():
            t = fields.get(name)
            if t is not None:
                fields[name] = dequantize_tensor(t, params, t.shape[1:])
        return replace(self, fields=fields, meta={**self.meta, "quant": {}})

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor by name (bookkeeping tensors first, then the fields)."""
        core = {
            "edge_index": self.edge_index,
            "batch": self.batch,
            "ptr": self.ptr,
            "edge_ptr": self.edge_ptr,
        }
        return {**core, **self.fields}

    def apply(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> GraphBatch:
        """A new batch with `fn` applied to every tensor (device moves, pinning, casts)."""
        return replace(
            self,
            edge_index=fn(self.edge_index),
            batch=fn(self.batch),
            ptr=fn(self.ptr),
            edge_ptr=fn(self.edge_ptr),
            fields={k: fn(v) for k, v in self.fields.items()},
            levels=dict(self.levels),
            meta=dict(self.meta),
        )

    def _shared_storage(self) -> torch.UntypedStorage | None:
        """The one storage every tensor views (as `collate_graphs` builds it), else None."""
        tensors = list(self.tensors().values())
        storage = tensors[0].untyped_storage()
        ptr = storage.data_ptr()
        if all(t.untyped_storage().data_ptr() == ptr for t in tensors[1:]):
            return storage
        return None

    def apply_storage(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> GraphBatch:
        """A new batch whose tensors view `fn(buffer)`, where buffer is the uint8 tensor over the
        shared storage: one pin / one host->device copy per batch instead of one per tensor.
        Falls back to `apply` per tensor when the tensors do not share one storage."""
        storage = self._shared_storage()
        if storage is None:
            return self.apply(fn)
        buf = torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)
        new = fn(buf).untyped_storage()

        def view(t: torch.Tensor) -> torch.Tensor:
            out = torch.empty(0, dtype=t.dtype, device=new.device)
            return out.set_(new, t.storage_offset(), t.shape, t.stride())

        return self.apply(view)

    def to(self, device: torch.device | str, non_blocking: bool = False) -> GraphBatch:
        """Move every tensor (with non_blocking=True from pinned memory: an async copy); a batch
        from `collate_graphs` moves as one buffer."""
        if torch.device(device) == self.edge_index.device:
            return self
        return self.apply_storage(lambda t: t.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> GraphBatch:
        """Page-locked copy for fast async host->device copies (DataLoader(pin_memory=True) calls
        this in its pinning thread). Without an accelerator, returns self unchanged."""
        if not torch.cuda.is_available():
            return self
        return self.apply_storage(lambda t: t.pin_memory())

    def is_pinned(self) -> bool:
        return all(t.is_pinned() for t in self.tensors().values())

    def to_pyg(self) -> Any:
        """This batch as a `torch_geometric.data.Batch` (shares tensors; supports to_data_list)."""
        from tj_data.pyg import batch_to_pyg

        return batch_to_pyg(self)

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}={list(v.shape)}" for k, v in self.fields.items())
        return (
            f"GraphBatch(num_graphs={self.num_graphs}, num_nodes={self.num_nodes}, "
            f"num_edges={self.num_edges}, {shapes})"
        )
