"""`wrap_ddp`: DistributedDataParallel with the project's defaults and the known traps refused.

Defaults: 25 MB buckets, `gradient_as_bucket_view=True` (gradients live in the all-reduce buckets,
saving one gradient-sized copy), no static graph, no unused-parameter search (it costs a graph
traversal every step). Optional fp16/bf16 gradient compression halves all-reduce traffic.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel

__all__ = ["COMM_HOOKS", "STATIC_GRAPH_ACCUMULATION_ERROR", "unwrap_model", "wrap_ddp"]

log = logging.getLogger(__name__)

COMM_HOOKS = {
    "fp16": default_hooks.fp16_compress_hook,
    "bf16": default_hooks.bf16_compress_hook,
}

STATIC_GRAPH_ACCUMULATION_ERROR = (
    "static_graph=True cannot be combined with gradient accumulation > 1: DDP's static-graph "
    "bookkeeping counts backward calls, so under no_sync() it either fails an internal assert or "
    "silently stops all-reducing gradients after the first step (pytorch/pytorch#187732, "
    "huggingface/accelerate#3679). Use static_graph=False with accumulation."
)


def unwrap_model(model: nn.Module) -> nn.Module:
    """The module inside a DDP wrapper (or the model itself): what to save and to freeze."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def wrap_ddp(
    model: nn.Module,
    *,
    bucket_cap_mb: float = 25,
    gradient_as_bucket_view: bool = True,
    static_graph: bool = False,
    find_unused_parameters: bool = False,
    comm_hook: str | None = None,
    accumulation_steps: int = 1,
    device: torch.device | None = None,
) -> nn.Module:
    """Wrap `model` (already on its device) in DDP; without a process group return it unchanged.

    comm_hook: None, "fp16" or "bf16" (compress gradients for the all-reduce; bf16 needs NCCL
    later than 2.9.6 on GPU). accumulation_steps is only used to refuse static_graph with accumulation.
    device: the rank's device (default: the model's parameters' device).
    """
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps} must be >= 1")
    if static_graph and accumulation_steps > 1:
        raise ValueError(STATIC_GRAPH_ACCUMULATION_ERROR)
    if comm_hook is not None and comm_hook not in COMM_HOOKS:
        raise ValueError(f"comm_hook={comm_hook!r} is unknown; use None, 'fp16' or 'bf16'")
    if bucket_cap_mb <= 0:
        raise ValueError(f"bucket_cap_mb={bucket_cap_mb} must be > 0")
    if isinstance(model, DistributedDataParallel):
        raise ValueError("model is already wrapped in DistributedDataParallel")
    if not (dist.is_available() and dist.is_initialized()):
        log.info("no process group: wrap_ddp returns the model unwrapped (single process)")
        return model
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    ddp = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        output_device=device.index if device.type == "cuda" else None,
        bucket_cap_mb=bucket_cap_mb,
        gradient_as_bucket_view=gradient_as_bucket_view,
        static_graph=static_graph,
        find_unused_parameters=find_unused_parameters,
    )
    if comm_hook is not None:
        ddp.register_comm_hook(state=None, hook=COMM_HOOKS[comm_hook])
    log.info(
        "DDP: bucket_cap_mb=%s gradient_as_bucket_view=%s static_graph=%s comm_hook=%s",
        bucket_cap_mb,
        gradient_as_bucket_view,
        static_graph,
        comm_hook,
    )
    return ddp
