"""The typed memory record: one sample of a process tree, the system and the GPUs."""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tj_monitor.gpu import CudaMemory, NvmlDevice, NvmlReader, read_cuda_memory
from tj_monitor.system import SystemMemory, read_system_memory
from tj_monitor.tree import TreeMemory, TreeSampler

__all__ = ["Measure", "MemorySample", "format_bytes", "read_sample", "update_peaks"]

Measure = Literal["pressure", "tree_pss", "system"]


def format_bytes(n: float | None) -> str:
    """Human-readable binary size: ``format_bytes(3 * 2**30) == '3.00 GiB'``; ``None`` -> 'n/a'."""
    if n is None:
        return "n/a"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    return f"{value:.2f} TiB"


@dataclass(frozen=True, kw_only=True)
class MemorySample:
    """One reading. ``tree`` is ``None`` when no process tree is watched (system view only).

    ``notes`` says which parts were not available and why (no CUDA, no NVML, unreadable cgroup
    files); those parts are empty or ``None`` rather than raising.
    """

    time: float
    tree: TreeMemory | None
    system: SystemMemory
    cuda: tuple[CudaMemory, ...] = ()
    nvml: tuple[NvmlDevice, ...] = ()
    notes: tuple[str, ...] = ()

    def value(self, measure: Measure) -> int:
        """The number thresholds compare: tree PSS (estimated while stale), memory used against
        the limit, or the larger of the two."""
        tree = self.tree.pss_estimate if self.tree is not None else 0
        if measure == "tree_pss":
            return tree
        if measure == "system":
            return self.system.container_used
        return max(tree, self.system.container_used)

    def to_dict(self) -> dict[str, Any]:
        """Nested plain-Python form (JSON-serialisable), derived numbers included."""
        d = dataclasses.asdict(self)
        sys_d = d["system"]
        sys_d["used"] = self.system.used
        sys_d["container_used"] = self.system.container_used
        if self.tree is not None:
            d["tree"]["pss_estimate"] = self.tree.pss_estimate
        if self.system.cgroup is not None:
            sys_d["cgroup"]["working_set"] = self.system.cgroup.working_set
        return d

    def to_flat(self) -> dict[str, float | int | None]:
        """One flat row (CSV/JSONL column names) without per-process details."""
        s = self.system
        cg = s.cgroup
        row: dict[str, float | int | None] = {"time": self.time}
        t = self.tree
        row.update(
            tree_pss=t.pss if t else None,
            tree_pss_age_s=t.pss_age_s if t else None,
            tree_pss_estimate=t.pss_estimate if t else None,
            tree_uss=t.uss if t else None,
            tree_rss=t.rss if t else None,
            tree_swap=t.swap if t else None,
            tree_processes=t.processes if t else None,
            tree_skipped=t.skipped if t else None,
            sys_total=s.total,
            sys_available=s.available,
            sys_used=s.used,
            swap_total=s.swap_total,
            swap_used=s.swap_used,
            limit=s.limit,
            container_used=s.container_used,
            cgroup_limit=cg.limit if cg else None,
            cgroup_current=cg.current if cg else None,
            cgroup_working_set=cg.working_set if cg else None,
            shm_total=s.shm_total,
            shm_used=s.shm_used,
        )
        for c in self.cuda:
            p = f"cuda{c.index}_"
            row.update(
                {
                    p + "allocated": c.allocated,
                    p + "reserved": c.reserved,
                    p + "peak": c.peak_allocated,
                    p + "alloc_retries": c.num_alloc_retries,
                    p + "ooms": c.num_ooms,
                }
            )
        for g in self.nvml:
            p = f"gpu{g.index}_"
            row.update(
                {
                    p + "used": g.used,
                    p + "total": g.total,
                    p + "util": g.utilization,
                    p + "tree_used": g.tree_used,
                }
            )
        return row


def update_peaks(peaks: dict[str, float], row: dict[str, float | int | None]) -> None:
    """Fold one flat row into per-column extremes: the maximum, except the minimum for
    ``sys_available`` (less available is worse) and nothing for ``time``."""
    for key, value in row.items():
        if value is None or key == "time":
            continue
        old = peaks.get(key)
        if old is None:
            peaks[key] = value
        elif key == "sys_available":
            peaks[key] = min(old, value)
        else:
            peaks[key] = max(old, value)


def read_sample(
    *,
    tree: TreeSampler | None,
    cuda: bool = True,
    nvml: NvmlReader | None = None,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    shm_path: Path = Path("/dev/shm"),
) -> MemorySample:
    """One reading of a process tree (``None``: system only), the system, CUDA (if the host uses
    it) and NVML (if a reader is given).

    Raises ``psutil.NoSuchProcess`` only when the tree's root process does not exist.
    """
    notes: list[str] = []
    tree_mem = tree.read() if tree is not None else None
    system = read_system_memory(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup, shm_path=shm_path)
    if system.cgroup is not None:
        notes.extend(system.cgroup.notes)
    else:
        notes.append(f"cgroup: no memory controller under {cgroup_root}")
    cuda_mem: tuple[CudaMemory, ...] = ()
    if cuda:
        cuda_mem, note = read_cuda_memory()
        if note:
            notes.append(note)
    devices: tuple[NvmlDevice, ...] = ()
    if nvml is not None:
        devices, note = nvml.open().read(tree_mem.pids if tree_mem else ())
        if note:
            notes.append(note)
    return MemorySample(
        time=time.time(),
        tree=tree_mem,
        system=system,
        cuda=cuda_mem,
        nvml=devices,
        notes=tuple(notes),
    )
