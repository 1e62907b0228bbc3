"""The world a DDP phase runs in, resolved from the config and the machine, and what follows.

Gradient accumulation is derived here, after the number of ranks is final: a config asking for 2
NCCL ranks on a 1-GPU machine gets 1 rank and twice the accumulation, so the effective batch
(samples per optimizer step) stays what the config says. Under torchrun the ranks are torchrun's
(all nodes'), ``dist.nprocs`` is not read, and what is planned per machine (threads, memory,
collectors) divides by this node's ranks, ``local_nprocs``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from tj_hybrid.config.layering import ConfigError
from tj_hybrid.config.sections import DistSection
from tj_hybrid.multinode import Torchrun

__all__ = ["World", "resolve_world"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class World:
    """Ranks, backend and the accumulation that keeps the configured effective batch."""

    nprocs: int  # ranks in the whole job (every node's)
    local_nprocs: int = 0  # ranks on this machine; 0: all of them (the local launcher)
    backend: str  # "nccl" | "gloo"
    micro_batch: int  # samples per rank per forward/backward
    accumulation_steps: int

    def __post_init__(self) -> None:
        if self.local_nprocs == 0:
            object.__setattr__(self, "local_nprocs", self.nprocs)
        if not 1 <= self.local_nprocs <= self.nprocs:
            raise ValueError(f"local_nprocs={self.local_nprocs} must be in [1, {self.nprocs}]")

    @property
    def device_type(self) -> str:
        return "cuda" if self.backend == "nccl" else "cpu"

    @property
    def effective_batch(self) -> int:
        return self.nprocs * self.micro_batch * self.accumulation_steps


def resolve_world(
    dist: DistSection, *, effective_batch: int, micro_batch: int, gpus: int, section: str,
    launch: Torchrun | None = None,
) -> World:
    """Ranks from ``dist`` (or torchrun's ``launch``) and the ``gpus`` found; accumulation from
    the final rank count."""
    backend = dist.backend
    if backend == "auto":
        backend = "nccl" if gpus > 0 else "gloo"
    n, local = dist.nprocs, 0
    if launch is not None:
        n, local = launch.world_size, launch.local_world_size
        if backend == "nccl" and gpus < local:
            raise ConfigError(f"dist.backend=nccl: torchrun started {local} rank(s) on this "
                              f"machine but it has {gpus} GPU(s); use --nproc-per-node {gpus}")
    elif backend == "nccl":
        if gpus < 1:
            raise ConfigError("dist.backend=nccl needs a CUDA GPU; none found (use gloo or auto)")
        if gpus < n:
            log.warning("dist.nprocs=%d but %d GPU(s): using %d NCCL rank(s)", n, gpus, gpus)
            n = gpus
    per_step = n * micro_batch
    if effective_batch % per_step:
        raise ConfigError(
            f"{section}.effective_batch={effective_batch} is not a multiple of {n} rank(s) x "
            f"{micro_batch} per micro-batch = {per_step}; choose a multiple of {per_step}"
        )
    return World(nprocs=n, local_nprocs=local, backend=backend, micro_batch=micro_batch,
                 accumulation_steps=effective_batch // per_step)  # fmt: skip
