"""Detect what the training process runs on: WSL2, drvfs mounts, /dev/shm, GPUs, NCCL, CPUs, cgroup.

Every probe is a pure function of file contents or paths passed in (defaults point at the real
/proc and /sys files), so the WSL2 and drvfs logic is tested from fixture files on any Linux box.
The machine facts (the container-aware memory limit, /dev/shm) come from tj-monitor, their one
implementation, so this module and the memory monitor never disagree on the limit.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from tj_monitor import memory_limit, shm_usage

__all__ = [
    "DrvfsMount",
    "EnvironmentInfo",
    "GpuInfo",
    "detect_environment",
    "is_wsl2",
    "parse_drvfs_mounts",
]

log = logging.getLogger(__name__)

# Variables WSL sets in every process it starts (WSL_INTEROP only exists under WSL2).
WSL_ENV_VARS = ("WSL_DISTRO_NAME", "WSL_INTEROP")


@dataclass(frozen=True, kw_only=True)
class DrvfsMount:
    """A Windows drive mounted into WSL (`C:\\` on `/mnt/c`): every file access crosses the VM."""

    mount_point: str
    source: str  # the Windows path, e.g. "C:\\"
    fstype: str


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
    index: int
    name: str
    capability: tuple[int, int]
    total_memory_bytes: int


@dataclass(frozen=True, kw_only=True)
class EnvironmentInfo:
    """What `detect_environment` found; consumed by `apply_env_defaults` and `init_distributed`.

    `shm_bytes`: size of /dev/shm (`tj_monitor.shm_usage`), None when not mounted;
    `memory_limit_bytes`: the effective memory limit, min(physical RAM, the tightest cgroup
    limit) (`tj_monitor.memory_limit`).
    """

    wsl2: bool
    kernel: str
    drvfs_mounts: tuple[DrvfsMount, ...] = ()
    shm_bytes: int | None = None
    gpus: tuple[GpuInfo, ...] = ()
    nccl_version: str | None = None
    cpu_count: int = 1
    memory_limit_bytes: int | None = None
    environ_flags: Mapping[str, str] = field(default_factory=dict)

    @property
    def cuda(self) -> bool:
        return bool(self.gpus)


def is_wsl2(proc_version: str, environ: Mapping[str, str] | None = None) -> bool:
    """True under WSL2: its kernel string names `microsoft-standard(-WSL2)`, or WSL_INTEROP is set.

    WSL1 reports `Microsoft` too (no real Linux kernel, no GPU) and is not WSL2.
    """
    text = proc_version.lower()
    if "microsoft-standard" in text or "wsl2" in text:
        return True
    env = environ if environ is not None else {}
    return "microsoft" in text and "WSL_INTEROP" in env


_OCTAL = re.compile(r"\\([0-7]{3})")
_DRIVE = re.compile(r"^[A-Za-z]:")


def _unescape(field_text: str) -> str:
    """/proc/mounts escapes space, tab, newline and backslash as 3-digit octal (`\\040`)."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field_text)


def parse_drvfs_mounts(proc_mounts: str) -> tuple[DrvfsMount, ...]:
    """Windows drives in a /proc/mounts text: `9p` with `aname=drvfs`, or fstype `drvfs` (WSL1)."""
    found = []
    for line in proc_mounts.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        source, mount_point, fstype, options = parts[:4]
        is_drvfs = fstype == "drvfs" or (fstype == "9p" and "aname=drvfs" in options)
        if is_drvfs:
            # the source field is the Windows path ("C:\\134" unescaped) or just "drvfs"; then
            # 9p's unescaped `path=` option has it
            windows = _unescape(source)
            if not _DRIVE.match(windows):
                opts = re.split("[,;]", options)
                windows = next((o[5:] for o in opts if o.startswith("path=")), windows)
            found.append(
                DrvfsMount(mount_point=_unescape(mount_point), source=windows, fstype=fstype)
            )
    return tuple(found)


def _gpus() -> tuple[GpuInfo, ...]:
    if not torch.cuda.is_available():
        return ()
    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append(
            GpuInfo(
                index=i,
                name=props.name,
                capability=(props.major, props.minor),
                total_memory_bytes=props.total_memory,
            )
        )
    return tuple(gpus)


def _nccl_version() -> str | None:
    """NCCL version torch was built with (None on builds without NCCL)."""
    try:
        version = torch.cuda.nccl.version()
    except (AttributeError, RuntimeError):
        return None
    if isinstance(version, tuple):
        return ".".join(str(v) for v in version)
    return str(version)


def _cpu_count() -> int:
    """CPUs this process may run on (affinity), which is what worker counts should follow."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _read(path: str | os.PathLike[str]) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def detect_environment(
    *,
    proc_version: str | os.PathLike[str] = "/proc/version",
    proc_mounts: str | os.PathLike[str] = "/proc/mounts",
    shm_path: str | os.PathLike[str] = "/dev/shm",
    cgroup_root: str | os.PathLike[str] = "/sys/fs/cgroup",
    proc_cgroup: str | os.PathLike[str] = "/proc/self/cgroup",
    environ: Mapping[str, str] | None = None,
    probe_gpus: bool = True,
) -> EnvironmentInfo:
    """Probe the machine once; every source is a parameter so tests can feed fixture files
    (`cgroup_root` and `proc_cgroup` as `tj_monitor.memory_limit` reads them)."""
    env = dict(os.environ if environ is None else environ)
    kernel = _read(proc_version).strip()
    shm = shm_usage(shm_path)
    info = EnvironmentInfo(
        wsl2=is_wsl2(kernel, env),
        kernel=kernel,
        drvfs_mounts=parse_drvfs_mounts(_read(proc_mounts)),
        shm_bytes=shm.total if shm is not None else None,
        gpus=_gpus() if probe_gpus else (),
        nccl_version=_nccl_version() if probe_gpus else None,
        cpu_count=_cpu_count(),
        memory_limit_bytes=memory_limit(cgroup_root=cgroup_root, proc_cgroup=proc_cgroup),
        environ_flags={k: env[k] for k in WSL_ENV_VARS if k in env},
    )
    log.debug("environment: %s", info)
    return info
