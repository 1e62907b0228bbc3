"""Start, query and tear down the torch.distributed process group the same way everywhere.

`init_distributed` reads torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT),
is a no-op when a group already exists (Ray Train, our own launcher) and runs single-process when
no launcher variables are set. Under WSL2 a NCCL smoke all-reduce decides, on all ranks together,
whether to fall back to gloo.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from .environment import EnvironmentInfo, detect_environment

__all__ = [
    "BACKENDS",
    "DistInfo",
    "cleanup",
    "get_rank",
    "get_world_size",
    "init_distributed",
    "is_main_process",
    "rank_zero_only",
]

log = logging.getLogger(__name__)

BACKENDS = ("auto", "nccl", "gloo")
# Generous: rank 0 may be loading a dataset or compiling while the others wait in rendezvous.
DEFAULT_TIMEOUT = timedelta(minutes=30)
# Checkpoint writes of a few GB on a slow disk must not trip a collective timeout.
DEFAULT_BARRIER_TIMEOUT = timedelta(hours=2)
SMOKE_TIMEOUT = timedelta(seconds=60)


@dataclass(frozen=True, kw_only=True)
class DistInfo:
    """Where this process sits: rank, world size, device, backend, and who created the group."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device
    backend: str | None  # None: single process, no group
    owns_group: bool = False  # True when init_distributed created it (cleanup may destroy it)
    fallback_reason: str | None = None  # set when NCCL failed its smoke test and gloo was used

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def _int_var(environ: Mapping[str, str], name: str) -> int:
    value = environ[name]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{name}={value!r} is not an integer") from None


def _launch_vars(environ: Mapping[str, str]) -> tuple[int, int, int] | None:
    """(rank, world_size, local_rank) from torchrun's variables, None when not launched."""
    if "WORLD_SIZE" not in environ:
        if "RANK" in environ:
            raise ValueError("RANK is set but WORLD_SIZE is missing; launch with torchrun")
        return None
    world_size = _int_var(environ, "WORLD_SIZE")
    if "RANK" not in environ:
        raise ValueError(
            f"WORLD_SIZE={world_size} is set but RANK is missing: launch with torchrun, or set "
            "RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT for every process"
        )
    rank = _int_var(environ, "RANK")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must be in [0, WORLD_SIZE={world_size})")
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in environ:
            raise ValueError(f"WORLD_SIZE={world_size} is set but {name} is missing")
    local_rank = _int_var(environ, "LOCAL_RANK") if "LOCAL_RANK" in environ else rank
    return rank, world_size, local_rank


def _resolve_backend(backend: str) -> str:
    if backend == "auto":
        return "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl" and not torch.cuda.is_available():
        raise ValueError("backend='nccl' needs CUDA, and torch.cuda.is_available() is False")
    return backend


def _device_for(backend: str | None, local_rank: int) -> torch.device:
    if backend == "nccl" or (backend is None and torch.cuda.is_available()):
        count = torch.cuda.device_count()
        index = local_rank if local_rank < count else torch.cuda.current_device()
        return torch.device("cuda", index)
    return torch.device("cpu")


def _info_from_existing_group() -> DistInfo:
    backend = dist.get_backend()
    local_rank = int(os.environ.get("LOCAL_RANK", dist.get_rank()))
    device = _device_for("nccl" if "nccl" in str(backend) else "gloo", local_rank)
    return DistInfo(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=device,
        backend=str(backend),
    )


def nccl_all_reduce_check(device: torch.device, world_size: int) -> None:
    """One all-reduce on `device`: raises if NCCL (or gloo) cannot move data between ranks."""
    tensor = torch.ones(1, device=device)
    work = dist.all_reduce(tensor, async_op=True)
    work.wait(timeout=SMOKE_TIMEOUT)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    if tensor.item() != world_size:
        raise RuntimeError(f"all-reduce returned {tensor.item()}, expected {world_size}")


def _agree_on_smoke(store: dist.Store, rank: int, world_size: int, error: str | None) -> list[str]:
    """Share each rank's smoke result through the TCP store (works even when NCCL does not)."""
    store.set(f"tj_dist/smoke/{rank}", error or "")
    keys = [f"tj_dist/smoke/{r}" for r in range(world_size)]
    store.wait(keys, SMOKE_TIMEOUT)
    errors = []
    for r, key in enumerate(keys):
        text = store.get(key).decode()
        if text:
            errors.append(f"rank {r}: {text}")
    return errors


def init_distributed(
    backend: str = "auto",
    *,
    timeout: timedelta = DEFAULT_TIMEOUT,
    env: EnvironmentInfo | None = None,
    smoke_test: bool | Callable[[torch.device, int], None] | None = None,
) -> DistInfo:
    """Join (or skip) the process group described by torchrun's environment variables.

    backend: "auto" (NCCL with CUDA, gloo without), "nccl" or "gloo". smoke_test: None runs the
    NCCL all-reduce check only under WSL2; True always; a callable `(device, world_size)` replaces
    the check. If the check fails on any rank, every rank switches to gloo with a warning.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; use one of {', '.join(BACKENDS)}")
    if dist.is_available() and dist.is_initialized():
        log.debug("process group already initialised; init_distributed is a no-op")
        return _info_from_existing_group()
    resolved = _resolve_backend(backend)
    launch = _launch_vars(os.environ)  # the same variables the env:// rendezvous below reads
    if launch is None:
        device = _device_for(None, 0)
        log.info("no launcher variables (WORLD_SIZE, RANK): single process on %s", device)
        return DistInfo(rank=0, world_size=1, local_rank=0, device=device, backend=None)
    rank, world_size, local_rank = launch
    device = _device_for(resolved, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # Our own rendezvous (the same env:// handler init_process_group uses, torchrun's agent
    # store included) keeps a handle on the TCP store for the smoke-test agreement and fallback.
    store, rank, world_size = next(dist.rendezvous("env://", rank, world_size, timeout=timeout))
    store.set_timeout(timeout)
    dist.init_process_group(
        resolved,
        store=dist.PrefixStore("default_pg", store),
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    log.info("rank %d/%d joined a %s group on %s", rank, world_size, resolved, device)
    fallback_reason = None
    if smoke_test is None:
        run_smoke = (
            resolved == "nccl"
            and (env if env is not None else detect_environment(probe_gpus=False)).wsl2
        )
    else:
        run_smoke = bool(smoke_test)
    if run_smoke:
        check = smoke_test if callable(smoke_test) else nccl_all_reduce_check
        try:
            check(device, world_size)
            error = None
        except Exception as exc:  # any failure means this transport is unusable here
            error = f"{type(exc).__name__}: {exc}"
        errors = _agree_on_smoke(store, rank, world_size, error)
        if errors:
            fallback_reason = f"{resolved} smoke all-reduce failed ({'; '.join(errors)})"
            log.warning("%s: falling back to gloo", fallback_reason)
            dist.destroy_process_group()
            dist.init_process_group(
                "gloo",
                store=dist.PrefixStore("tj_dist_gloo_fallback", store),
                rank=rank,
                world_size=world_size,
                timeout=timeout,
            )
            resolved = "gloo"
    return DistInfo(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        device=device,
        backend=resolved,
        owns_group=True,
        fallback_reason=fallback_reason,
    )


def cleanup(info: DistInfo | None = None) -> None:
    """Destroy the process group; with `info` from a no-op init (Ray Train), leave it alone."""
    if info is not None and not info.owns_group:
        return
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main_process() -> bool:
    """True on rank 0, and in a single process without a group."""
    return get_rank() == 0


@contextmanager
def rank_zero_only(*, timeout: timedelta = DEFAULT_BARRIER_TIMEOUT) -> Iterator[bool]:
    """Run the body's work on rank 0 while the other ranks wait; yields `is rank 0`.

    The wait is a gloo collective on a CPU group with its own long timeout, so a slow checkpoint
    write never trips the NCCL watchdog. If rank 0 raises, the other ranks raise too (no hang).
    Every rank must enter the context (it creates a group collectively).
    """
    if get_world_size() == 1:
        yield True
        return
    group = dist.new_group(backend="gloo", timeout=timeout)
    rank = dist.get_rank()
    try:
        error: BaseException | None = None
        try:
            yield rank == 0
        except BaseException as exc:
            error = exc
        status: list[str | None] = [None]
        if rank == 0 and error is not None:
            status = [f"{type(error).__name__}: {error}"]
        dist.broadcast_object_list(status, src=0, group=group)
        if error is not None:
            raise error
        if status[0] is not None:
            raise RuntimeError(f"rank 0 failed inside rank_zero_only: {status[0]}")
    finally:
        dist.destroy_process_group(group)
