"""System memory: RAM, swap, /dev/shm and the container-aware effective limit."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import psutil

from tj_monitor.cgroup import CgroupMemory, read_cgroup_memory

__all__ = ["ShmUsage", "SystemMemory", "memory_limit", "read_system_memory", "shm_usage"]


@dataclass(frozen=True, kw_only=True)
class SystemMemory:
    """Machine-wide memory and the limit that the kernel actually enforces on this process.

    ``limit`` = min(physical RAM, cgroup limit). ``container_used`` is the memory counted
    against that limit: the cgroup working set when a cgroup limit applies, else
    ``total - available`` (what ``free`` calls used, without reclaimable cache).
    """

    total: int
    available: int
    swap_total: int
    swap_used: int
    limit: int
    cgroup: CgroupMemory | None
    shm_total: int | None
    shm_used: int | None

    @property
    def used(self) -> int:
        return max(self.total - self.available, 0)

    @property
    def container_used(self) -> int:
        cg = self.cgroup
        if cg is not None and cg.limit is not None and cg.limit < self.total:
            ws = cg.working_set
            if ws is not None:
                return ws
        return self.used


def memory_limit(
    *,
    cgroup_root: str | os.PathLike[str] = Path("/sys/fs/cgroup"),
    proc_cgroup: str | os.PathLike[str] = Path("/proc/self/cgroup"),
    physical: int | None = None,
) -> int:
    """Effective memory limit in bytes: min(physical RAM, cgroup v2 ``memory.max`` / v1 limit).

    >>> memory_limit() <= psutil.virtual_memory().total
    True
    """
    total = psutil.virtual_memory().total if physical is None else physical
    cg = read_cgroup_memory(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)
    return _effective_limit(total, cg)


def _effective_limit(total: int, cg: CgroupMemory | None) -> int:
    return total if cg is None or cg.limit is None else min(total, cg.limit)


class ShmUsage(NamedTuple):
    """Size and use of the shared-memory filesystem, in bytes."""

    total: int
    used: int


def shm_usage(path: str | os.PathLike[str] = "/dev/shm") -> ShmUsage | None:
    """Total and used bytes of the shared-memory filesystem at ``path``, ``None`` when absent.

    DataLoader workers hand batches to the main process through it; Docker's default is 64 MiB.
    """
    try:
        usage = shutil.disk_usage(path)
    except OSError:
        return None
    return ShmUsage(total=usage.total, used=usage.used)


def read_system_memory(
    *,
    cgroup_root: str | os.PathLike[str] = Path("/sys/fs/cgroup"),
    proc_cgroup: str | os.PathLike[str] = Path("/proc/self/cgroup"),
    shm_path: str | os.PathLike[str] = Path("/dev/shm"),
) -> SystemMemory:
    """One reading of RAM, swap, cgroup and ``/dev/shm`` (shm fields ``None`` when absent)."""
    vm = psutil.virtual_memory()
    swap = psutil.swap_memory()
    cg = read_cgroup_memory(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)
    limit = _effective_limit(vm.total, cg)
    shm = shm_usage(shm_path)
    return SystemMemory(
        total=vm.total,
        available=vm.available,
        swap_total=swap.total,
        swap_used=swap.used,
        limit=limit,
        cgroup=cg,
        shm_total=shm.total if shm is not None else None,
        shm_used=shm.used if shm is not None else None,
    )
