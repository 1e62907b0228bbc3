"""Assemble and restore everything a bit-exact resume needs, as `weights_only`-loadable data.

State = model, optimizer, scheduler, AMP scaler, accumulator, any stateful sampler/loader, the RNG
states of python, numpy, torch and CUDA of *every* rank (gathered to rank 0), step and epoch. RNG
states are converted to tensors and plain types so `torch.load(weights_only=True)` accepts them.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from .ddp import unwrap_model

__all__ = [
    "Stateful",
    "capture_rng_state",
    "restore_rng_state",
    "restore_training_state",
    "training_state",
]

log = logging.getLogger(__name__)


class Stateful(Protocol):
    def state_dict(self) -> Mapping[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any], /) -> Any: ...


def capture_rng_state() -> dict[str, Any]:
    """This process's python, numpy (legacy global), torch CPU and CUDA generator states."""
    name, keys, pos, has_gauss, cached = np.random.get_state(legacy=True)
    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = torch.cuda.get_rng_state_all()
    return {
        "python": random.getstate(),
        "numpy": {
            "bit_generator": str(name),
            "keys": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "torch": torch.get_rng_state(),
        "cuda": list(cuda),
    }


def restore_rng_state(state: Mapping[str, Any]) -> None:
    """Inverse of `capture_rng_state`."""
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    npstate = state["numpy"]
    np.random.set_state(
        (
            npstate["bit_generator"],
            npstate["keys"].numpy().astype(np.uint32),
            npstate["pos"],
            npstate["has_gauss"],
            npstate["cached_gaussian"],
        )
    )
    torch.set_rng_state(state["torch"])
    cuda = state.get("cuda") or []
    if cuda:
        if torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
            torch.cuda.set_rng_state_all(cuda)
        else:
            log.warning(
                "checkpoint has %d CUDA RNG states; this process cannot restore them", len(cuda)
            )


def _gather_rng() -> list[dict[str, Any]]:
    """Every rank's RNG state (collective when a group exists), indexed by rank."""
    mine = capture_rng_state()
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [mine]
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    return gathered


def training_state(
    *,
    step: int,
    epoch: int = 0,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Stateful | None = None,
    amp: Stateful | None = None,
    accumulator: Stateful | None = None,
    extra: Mapping[str, Stateful] | None = None,
) -> dict[str, Any]:
    """The checkpoint dict for `save_checkpoint`. Collective: call it on every rank.

    amp: an `Amp` or a `torch.amp.GradScaler`. extra: other stateful objects by name (a sampler,
    a stateful DataLoader); each must have state_dict()/load_state_dict().
    """
    state: dict[str, Any] = {
        "step": int(step),
        "epoch": int(epoch),
        "model": unwrap_model(model).state_dict(),
        "rng": _gather_rng(),
    }
    slots = {"optimizer": optimizer, "scheduler": scheduler, "amp": amp, "accumulator": accumulator}
    for name, obj in {**slots, **{f"extra.{k}": v for k, v in (extra or {}).items()}}.items():
        if obj is None:
            continue
        if not hasattr(obj, "state_dict"):
            raise TypeError(f"{name}: {type(obj).__name__} has no state_dict(); it cannot be saved")
        state[name] = obj.state_dict()
    return state


def restore_training_state(
    state: Mapping[str, Any],
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Stateful | None = None,
    amp: Stateful | None = None,
    accumulator: Stateful | None = None,
    extra: Mapping[str, Stateful] | None = None,
    restore_rng: bool = True,
    strict: bool = True,
) -> tuple[int, int]:
    """Load `state` into the given objects and this rank's RNG; returns (step, epoch).

    Every object passed must have its entry in `state` (a KeyError names the missing one).
    """
    unwrap_model(model).load_state_dict(state["model"], strict=strict)
    slots = {"optimizer": optimizer, "scheduler": scheduler, "amp": amp, "accumulator": accumulator}
    for name, obj in {**slots, **{f"extra.{k}": v for k, v in (extra or {}).items()}}.items():
        if obj is None:
            continue
        if name not in state:
            raise KeyError(f"checkpoint has no '{name}' entry (saved without it?)")
        obj.load_state_dict(state[name])
    if restore_rng:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        rng = state["rng"]
        if rank < len(rng):
            restore_rng_state(rng[rank])
        else:
            log.warning(
                "checkpoint has RNG states for %d ranks; rank %d keeps its own", len(rng), rank
            )
    return int(state["step"]), int(state["epoch"])
