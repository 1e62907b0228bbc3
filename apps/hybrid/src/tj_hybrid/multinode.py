"""The trainer started by torchrun (one or several machines): who this process is, and the rules.

Under ``torchrun`` every rank process runs the same command; the trainer spawns no ranks of its
own. The phases that train with DDP (the registry's ``ddp`` flag: 1 and 3) run in the rank
itself; rank 0 alone writes the run's config, checkpoints, reports and results. The run needs a
name (``run.name``): each node would otherwise pick its own timestamp. Data that one rank makes
for all (phase 1's dataset) is made by rank 0 first; then by local rank 0 of every other node,
which finds it on a shared path and records its own copy on a node-local one; then read by the
rest (``node_shares``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from tj_hybrid.config.layering import ConfigError

if TYPE_CHECKING:
    from tj_hybrid.config.schema import HybridConfig
    from tj_hybrid.phase_api import PhaseContext, PhaseResult
    from tj_hybrid.phases import PhaseSpec

__all__ = [
    "Torchrun",
    "check_torchrun_run",
    "join_job",
    "node_shares",
    "peer_lost",
    "rank_result",
    "rank_zero_value",
    "torchrun_launch",
]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True)
class Torchrun:
    """This rank as torchrun's variables describe it (GROUP_RANK is the node's rank)."""

    run_id: str  # TORCHELASTIC_RUN_ID (--rdzv-id): the same on every node of the job
    rank: int  # RANK: 0 .. world_size - 1 over all nodes
    world_size: int  # WORLD_SIZE: --nnodes x --nproc-per-node
    local_rank: int  # LOCAL_RANK: this rank's index on its machine (its GPU with NCCL)
    local_world_size: int  # LOCAL_WORLD_SIZE: --nproc-per-node of this machine
    node_rank: int  # GROUP_RANK: the node's place in the rendezvous

    def __post_init__(self) -> None:
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"RANK={self.rank} must be in [0, WORLD_SIZE={self.world_size})")
        if not 0 <= self.local_rank < self.local_world_size:
            raise ValueError(f"LOCAL_RANK={self.local_rank} must be in "
                             f"[0, LOCAL_WORLD_SIZE={self.local_world_size})")  # fmt: skip

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def torchrun_launch(environ: Mapping[str, str] | None = None) -> Torchrun | None:
    """This process's place when torchrun started it (TORCHELASTIC_RUN_ID is set), else None."""
    env = os.environ if environ is None else environ
    if "TORCHELASTIC_RUN_ID" not in env:
        return None
    try:
        return Torchrun(
            run_id=env["TORCHELASTIC_RUN_ID"], rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]), local_rank=int(env["LOCAL_RANK"]),
            local_world_size=int(env["LOCAL_WORLD_SIZE"]), node_rank=int(env["GROUP_RANK"]),
        )  # fmt: skip
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"started by torchrun but its variables are incomplete: {exc}") from None


def check_torchrun_run(cfg: HybridConfig, specs: Sequence[PhaseSpec]) -> None:
    """Refuse what cannot run under torchrun: a run without a name, a phase without DDP."""
    if cfg.run.name is None:
        raise ConfigError("under torchrun set run.name (every node must write the same run)")
    other = [s.name for s in specs if not s.ddp]
    if other:
        raise ConfigError(f"phase(s) {', '.join(other)} do not run under torchrun; run them "
                          "with the plain command (phase 2: on the Ray head, see "
                          "docs/MULTI_NODE.md)")  # fmt: skip


def node_shares(launch: Torchrun, make: Callable[[], T]) -> T:
    """``make()`` on every rank in three waves separated by barriers: rank 0, then local rank 0
    of the other nodes, then everyone else (a shared path is written once, a node-local one once
    per node, and nobody reads a half-made folder)."""
    import torch.distributed as dist

    waves = (launch.is_main, launch.local_rank == 0 and not launch.is_main, launch.local_rank > 0)
    result: T | None = None
    for mine in waves:
        if mine:
            result = make()
        dist.barrier()
    assert result is not None
    return result


def join_job(launch: Torchrun, backend: str) -> str:
    """Join the job's process group (dying with this node's torchrun agent, so a killed agent
    leaves no rank behind) and return the job's nodes in words, for the error that names a lost
    one: ``node 0 host-a (ranks 0-1), node 1 host-b (ranks 2-3)``."""
    import socket

    import torch.distributed as dist

    import tj_dist
    from tj_monitor import die_with_parent

    die_with_parent(os.getppid(), signal.SIGKILL)
    tj_dist.init_distributed(backend)
    places: list[tuple[int, str, int] | None] = [None] * launch.world_size
    dist.all_gather_object(places, (launch.node_rank, socket.gethostname(), launch.rank))
    nodes: dict[tuple[int, str], list[int]] = {}
    for node, host, rank in (p for p in places if p is not None):
        nodes.setdefault((node, host), []).append(rank)
    return ", ".join(f"node {node} {host} (ranks {', '.join(map(str, ranks))})"
                     for (node, host), ranks in sorted(nodes.items()))  # fmt: skip


def rank_zero_value(value: T) -> T:
    """Rank 0's ``value`` on every rank (what rank 0's run folder says decides for all)."""
    import torch.distributed as dist

    box: list[T] = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def rank_result(context: PhaseContext) -> PhaseResult:
    """What a rank other than 0 returns from a phase: rank 0 writes the real result."""
    from tj_hybrid.phase_api import PhaseResult

    pdir = context.phase_dir
    return PhaseResult(name=context.spec.name, agent=pdir.agent, report=pdir.report,
                       headline="done (rank 0 reports)")  # fmt: skip


# what a collective raises when a peer's process is gone (gloo: its TCP pair; NCCL: the watchdog)
_LOST_PEER_SIGNS = ("gloo/transport", "Connection reset", "Connection closed", "ProcessGroupNCCL",
                    "NCCL communicator")  # fmt: skip


def peer_lost(exc: BaseException) -> bool:
    """True when ``exc`` says that another rank of the job is gone (a lost node or process)."""
    import torch.distributed as dist

    if isinstance(exc, dist.DistError):
        return True
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _LOST_PEER_SIGNS)
