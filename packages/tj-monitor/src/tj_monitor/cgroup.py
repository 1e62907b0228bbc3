"""cgroup memory accounting (v1 and v2), read from a cgroup root given as a parameter.

Containers (Docker, Kubernetes, WSL2 with systemd, CI sandboxes) cap memory below physical RAM
through a cgroup, and the kernel OOM-kills at that cap, not at `MemTotal`. No maintained library
reads both hierarchies and walks ancestors for the tightest limit without pulling in a container
runtime, so this is a small hand-written parser. Every path is a parameter so tests run on fixture
directories; unreadable or garbage files degrade to ``None`` plus a note, never an exception.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CgroupMemory", "read_cgroup_memory"]

# cgroup v1 reports "no limit" as PAGE_COUNTER_MAX rounded to pages (0x7FFFFFFFFFFFF000 on x86).
_V1_UNLIMITED = 1 << 62


@dataclass(frozen=True, kw_only=True)
class CgroupMemory:
    """Memory numbers of the cgroup a process lives in.

    ``limit`` is the tightest limit on the path from that cgroup up to the root (``None`` when
    there is none); ``current`` is the usage the kernel charges (page cache included);
    ``working_set`` is ``current - inactive_file``, what the OOM killer cannot reclaim (the number
    kubelet and ``docker stats`` show).
    """

    version: int
    path: str
    limit: int | None
    current: int | None
    inactive_file: int | None
    notes: tuple[str, ...] = ()

    @property
    def working_set(self) -> int | None:
        if self.current is None:
            return None
        return max(self.current - (self.inactive_file or 0), 0)


def _read_text(path: Path, notes: list[str]) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append(f"{path}: unreadable ({exc.strerror or exc})")
        return None


def _read_int(path: Path, notes: list[str], *, unlimited: tuple[str, ...] = ()) -> int | None:
    text = _read_text(path, notes)
    if text is None or text in unlimited:
        return None
    try:
        value = int(text)
    except ValueError:
        notes.append(f"{path}: cannot parse {text[:40]!r} as an integer")
        return None
    if value < 0:
        notes.append(f"{path}: negative value {value}")
        return None
    return value


def _read_stat(path: Path, keys: tuple[str, ...], notes: list[str]) -> int | None:
    """First of ``keys`` found in a ``memory.stat`` file (``key value`` lines)."""
    text = _read_text(path, notes)
    if text is None:
        return None
    found: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2:
            found[parts[0]] = parts[1]
    for key in keys:
        if key in found:
            try:
                return int(found[key])
            except ValueError:
                notes.append(f"{path}: cannot parse {key} value {found[key][:40]!r}")
                return None
    return None


def _membership(proc_cgroup: Path, notes: list[str]) -> tuple[str, str]:
    """(v2 path, v1 memory-controller path) from a ``/proc/<pid>/cgroup`` file; "/" if unknown."""
    v2, v1 = "/", "/"
    text = _read_text(proc_cgroup, notes)
    if text is None:
        return v2, v1
    for line in text.splitlines():
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
    """Directories from the process's cgroup up to ``base``.

    Under a cgroup namespace (or when the host path is not mounted inside a container) the
    process's path does not exist below ``base``; then ``base`` itself is the process's cgroup.
    """
    rel = [p for p in cgroup_path.strip("/").split("/") if p and p != ".."]
    leaf = base.joinpath(*rel) if rel else base
    if not leaf.is_dir():
        return [base]
    chain = [leaf]
    while chain[-1] != base:
        chain.append(chain[-1].parent)
    return chain


def _min_limit(values: list[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def read_cgroup_memory(
    *,
    cgroup_root: str | os.PathLike[str] = Path("/sys/fs/cgroup"),
    proc_cgroup: str | os.PathLike[str] = Path("/proc/self/cgroup"),
) -> CgroupMemory | None:
    """Read the memory limit and usage of the cgroup in ``proc_cgroup``; ``None`` without cgroups.

    Pure v2 (``cgroup.controllers`` at the root) reads ``memory.max``/``memory.current``; v1 and
    hybrid setups read ``memory/memory.limit_in_bytes``/``memory.usage_in_bytes``.
    """
    notes: list[str] = []
    cgroup_root = Path(cgroup_root)
    v2_path, v1_path = _membership(Path(proc_cgroup), notes)
    if (cgroup_root / "cgroup.controllers").is_file():
        chain = _chain(cgroup_root, v2_path)
        leaf = chain[0]
        limits = [_read_int(d / "memory.max", notes, unlimited=("max",)) for d in chain]
        return CgroupMemory(
            version=2,
            path=v2_path,
            limit=_min_limit(limits),
            current=_read_int(leaf / "memory.current", notes),
            inactive_file=_read_stat(leaf / "memory.stat", ("inactive_file",), notes),
            notes=tuple(notes),
        )
    v1_base = cgroup_root / "memory"
    if v1_base.is_dir():
        chain = _chain(v1_base, v1_path)
        leaf = chain[0]
        limits = []
        for d in chain:
            value = _read_int(d / "memory.limit_in_bytes", notes, unlimited=("-1",))
            limits.append(None if value is not None and value >= _V1_UNLIMITED else value)
        return CgroupMemory(
            version=1,
            path=v1_path,
            limit=_min_limit(limits),
            current=_read_int(leaf / "memory.usage_in_bytes", notes),
            inactive_file=_read_stat(
                leaf / "memory.stat", ("total_inactive_file", "inactive_file"), notes
            ),
            notes=tuple(notes),
        )
    return None
