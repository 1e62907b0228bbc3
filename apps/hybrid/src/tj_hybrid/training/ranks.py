"""Rank-level helpers: identical seeding, means over ranks, every rank's resumable state, rank
0's newest checkpoint on every rank (only rank 0's machine may hold it: a node-local run folder).

``RankStates`` wraps one object per rank that follows tj-data's state protocol
(``state_dict()`` / ``load_state_dict(state)``, no arguments): only rank 0 writes the checkpoint,
so saving gathers every rank's state (a collective) and loading gives each rank its own.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import tj_dist

__all__ = [
    "RankStates",
    "latest_checkpoint",
    "mean_over_ranks",
    "seed_everything",
    "sum_over_ranks",
]


def _initialized() -> bool:
    return dist.is_available() and dist.is_initialized()


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (identical initial weights on every rank)."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def mean_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """The mean of each value over the ranks (an all-reduce); unchanged without a group."""
    if not _initialized() or not values:
        return values
    t = torch.tensor(list(values.values()), dtype=torch.float64)
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return dict(zip(values, t.tolist(), strict=True))


def sum_over_ranks(values: dict[str, float]) -> dict[str, float]:
    """The sum of each value over the ranks (an all-reduce); unchanged without a group."""
    if not _initialized() or not values:
        return values
    t = torch.tensor(list(values.values()), dtype=torch.float64)
    dist.all_reduce(t)
    return dict(zip(values, t.tolist(), strict=True))


class RankStates:
    """Checkpoint the per-rank state of ``obj`` (a loader, a sampler) for every rank."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def state_dict(self) -> dict[str, Any]:
        mine = self.obj.state_dict()
        if not _initialized():
            return {"ranks": [mine]}
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        return {"ranks": gathered}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rank = dist.get_rank() if _initialized() else 0
        ranks = state["ranks"]
        if len(ranks) != (dist.get_world_size() if _initialized() else 1):
            raise ValueError(
                f"the checkpoint holds the states of {len(ranks)} rank(s); this run has "
                f"{dist.get_world_size() if _initialized() else 1}: resume with the same ranks"
            )
        self.obj.load_state_dict(ranks[rank])


def latest_checkpoint(folder: Path) -> Any:
    """``tj_dist.load_latest(folder)`` as rank 0 reads it, on every rank (a broadcast): under
    torchrun with node-local run folders only rank 0's machine holds the checkpoints."""
    if not _initialized() or dist.get_world_size() == 1:
        return tj_dist.load_latest(folder)
    box = [tj_dist.load_latest(folder) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]
