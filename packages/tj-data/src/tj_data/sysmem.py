"""Container-aware memory limit: min(physical RAM, the tightest cgroup v2/v1 memory limit).

A container (Docker, Kubernetes, WSL2 with systemd, CI sandboxes) is OOM-killed at its cgroup
limit, not at `MemTotal`, so loader budgets derive from this number. tj-data imports no other tj
package, so this is its own small reader (tj-monitor has a fuller one); every path is a
parameter so tests run on fixture directories. Unreadable or garbage files count as "no limit".
"""

from __future__ import annotations

from pathlib import Path

import psutil

__all__ = ["cgroup_memory_limit", "default_budget", "memory_limit"]

_V1_UNLIMITED = 1 << 62  # cgroup v1 reports "no limit" as PAGE_COUNTER_MAX (~2^63 rounded)


def _read_int(path: Path, unlimited: tuple[str, ...]) -> int | None:
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None
    if text in unlimited:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if 0 < value < _V1_UNLIMITED else None


def _membership(proc_cgroup: Path) -> tuple[str, str]:
    """(v2 path, v1 memory-controller path) of the process, "/" when unknown."""
    v2 = v1 = "/"
    try:
        lines = proc_cgroup.read_text(encoding="ascii", errors="replace").splitlines()
    except OSError:
        return v2, v1
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path or "/"
        elif "memory" in controllers.split(","):
            v1 = path or "/"
    return v2, v1


def _chain(base: Path, cgroup_path: str) -> list[Path]:
    """Directories from the process's cgroup up to `base` (just `base` under a namespace)."""
    rel = [p for p in cgroup_path.strip("/").split("/") if p and p != ".."]
    leaf = base.joinpath(*rel) if rel else base
    if not leaf.is_dir():
        return [base]
    chain = [leaf]
    while chain[-1] != base:
        chain.append(chain[-1].parent)
    return chain


def cgroup_memory_limit(
    *,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
) -> int | None:
    """Tightest memory limit on the path from the process's cgroup to the root, None if none.

    cgroup v2 (`cgroup.controllers` at the root): `memory.max`; v1 / hybrid: the memory
    controller's `memory.limit_in_bytes`."""
    v2_path, v1_path = _membership(proc_cgroup)
    if (cgroup_root / "cgroup.controllers").is_file():
        files = [d / "memory.max" for d in _chain(cgroup_root, v2_path)]
        unlimited: tuple[str, ...] = ("max",)
    elif (cgroup_root / "memory").is_dir():
        files = [d / "memory.limit_in_bytes" for d in _chain(cgroup_root / "memory", v1_path)]
        unlimited = ("-1",)
    else:
        return None
    limits = [v for v in (_read_int(f, unlimited) for f in files) if v is not None]
    return min(limits) if limits else None


def memory_limit(
    *,
    cgroup_root: Path = Path("/sys/fs/cgroup"),
    proc_cgroup: Path = Path("/proc/self/cgroup"),
    physical: int | None = None,
) -> int:
    """Effective memory limit in bytes: min(physical RAM, cgroup limit)."""
    total = psutil.virtual_memory().total if physical is None else int(physical)
    limit = cgroup_memory_limit(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup)
    return total if limit is None else min(total, limit)


def default_budget(fraction: float = 0.5, *, limit: int | None = None) -> int:
    """A loader budget: `fraction` of the container-aware limit (the rest is for the model,
    the OS and other processes)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction={fraction}: expected 0 < fraction <= 1")
    return int(fraction * (memory_limit() if limit is None else limit))
