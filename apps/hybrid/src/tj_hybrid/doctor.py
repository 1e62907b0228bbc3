"""``tj-hybrid doctor``: the environment check the seeds ran by hand, in one command.

Every line is OK / WARN / FAIL with what was found and, when not OK, the fix. Checks never raise:
a probe that fails is itself reported. Exit status 1 when any line FAILs. The machine facts (RAM,
swap, the container-aware memory limit, /dev/shm) are one tj-monitor reading, the same numbers
the memory monitor and the loader budget use. Where the checks look and their thresholds are a
``Probes`` value, so tests run them on fixture files.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import platform
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from tj_monitor import SystemMemory

__all__ = ["Check", "Probes", "render", "run_checks"]

Status = Literal["OK", "WARN", "FAIL"]
GiB = 2**30


@dataclass(frozen=True, kw_only=True)
class Check:
    """One line of the report."""

    name: str
    status: Status
    detail: str
    fix: str = ""


@dataclass(frozen=True, kw_only=True)
class Probes:
    """Where the checks read the machine and what they expect; the defaults are this machine's
    files and the reference workstation's needs.

    ``min_memory``: RAM and memory limit below which the low_memory profile is advised;
    ``min_shm``: /dev/shm size below which workers may die with a bus error; ``disk_warn`` /
    ``disk_fail``: free space on a run/data/cache disk below which the line warns / fails.
    """

    proc_version: Path = Path("/proc/version")
    proc_mounts: Path = Path("/proc/mounts")
    cgroup_root: Path = Path("/sys/fs/cgroup")
    proc_cgroup: Path = Path("/proc/self/cgroup")
    shm_path: Path = Path("/dev/shm")
    environ: Mapping[str, str] | None = None
    min_memory: int = 15 * GiB
    min_shm: int = GiB
    disk_warn: int = 5 * GiB
    disk_fail: int = GiB

    def __post_init__(self) -> None:
        if not 0 <= self.disk_fail <= self.disk_warn:
            raise ValueError(
                f"Probes: need 0 <= disk_fail ({self.disk_fail}) <= disk_warn ({self.disk_warn})"
            )
        if self.min_memory < 0 or self.min_shm < 0:
            raise ValueError("Probes: min_memory and min_shm must be >= 0")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def _python() -> Iterable[Check]:
    v = platform.python_version()
    ok = (3, 11) <= tuple(map(int, v.split(".")[:2])) < (3, 13)
    yield Check(
        name="python",
        status="OK" if ok else "FAIL",
        detail=v,
        fix="" if ok else "use Python 3.11 or 3.12 (uv python install 3.11)",
    )


def _torch_and_gpus(env) -> Iterable[Check]:
    import torch

    cuda = torch.version.cuda or "none (CPU build)"
    yield Check(name="torch", status="OK", detail=f"{torch.__version__}, CUDA {cuda}")
    if not env.gpus:
        yield Check(
            name="gpus",
            status="WARN",
            detail="no CUDA device: CPU training (smoke profile)",
            fix="on a GPU machine check the NVIDIA driver (nvidia-smi) and that "
            "CUDA_VISIBLE_DEVICES is not empty",
        )
        return
    for g in env.gpus:
        cc = f"{g.capability[0]}.{g.capability[1]}"
        amp = (
            "bf16"
            if g.capability >= (8, 0)
            else ("fp16 + GradScaler" if g.capability >= (7, 0) else "fp32")
        )
        yield Check(
            name=f"gpu {g.index}",
            status="OK",
            detail=f"{g.name}, compute capability {cc}, {_gib(g.total_memory_bytes)}, AMP {amp}",
        )
    nccl = env.nccl_version
    yield Check(
        name="nccl",
        status="OK" if nccl else "WARN",
        detail=nccl or "not available",
        fix="" if nccl else "DDP falls back to gloo (slower); install a CUDA build of torch",
    )


def _libraries() -> Iterable[Check]:
    for dist, label in [("torch-geometric", "pyg"), ("ray", "ray"), ("eclipse-sumo", "sumo")]:
        v = _version(dist)
        yield Check(
            name=label,
            status="OK" if v else "FAIL",
            detail=v or "not installed",
            fix="" if v else "run `uv sync --all-packages` at the repository root",
        )
    try:
        importlib.import_module("libsumo")
        yield Check(name="libsumo", status="OK", detail=f"importable ({_version('libsumo')})")
    except Exception as exc:
        yield Check(
            name="libsumo",
            status="FAIL",
            detail=f"import failed: {exc}",
            fix="reinstall the pinned wheels (uv sync), or set record.env.backend=traci",
        )


def _memory(system: SystemMemory, probes: Probes) -> Iterable[Check]:
    status: Status = "OK" if system.total >= probes.min_memory else "WARN"
    yield Check(
        name="ram",
        status=status,
        detail=f"{_gib(system.total)} total, {_gib(system.available)} available",
        fix="" if status == "OK" else "use the low_memory profile (--profile low_memory)",
    )
    yield Check(
        name="swap",
        status="OK" if system.swap_total else "WARN",
        detail=f"{_gib(system.swap_used)} used of {_gib(system.swap_total)}",
        fix=""
        if system.swap_total
        else "no swap: an OOM kills instead of slowing down; keep the RAM budget",
    )
    capped = system.limit < system.total  # a cgroup caps this process below physical RAM
    low = capped and system.limit < probes.min_memory
    yield Check(
        name="container limit",
        status="WARN" if low else "OK",
        detail=f"{_gib(system.limit)} ({'cgroup' if capped else 'physical RAM'}); "
        "budgets are fractions of it",
        fix=f"the container allows only {_gib(system.limit)}: raise its memory limit "
        "(docker --memory=16g; WSL: memory= in .wslconfig) or use --profile low_memory"
        if low
        else "",
    )
    shm = system.shm_total
    ok = shm is not None and shm >= probes.min_shm
    yield Check(
        name="/dev/shm",
        status="OK" if ok else "WARN",
        detail=_gib(shm) if shm is not None else "not mounted",
        fix=""
        if ok
        else "DataLoader workers share batches through /dev/shm: enlarge it "
        "(docker --shm-size=2g; WSL: it follows RAM) or use fewer workers",
    )


def _wsl(env) -> Iterable[Check]:
    if not env.wsl2:
        yield Check(name="wsl2", status="OK", detail="not WSL2")
        return
    yield Check(
        name="wsl2",
        status="OK",
        detail="WSL2: NCCL_P2P_DISABLE/NCCL_IB_DISABLE default to 1, pin_memory off, "
        "no expandable_segments (tj_dist.apply_env_defaults)",
    )


def _paths(env, paths: dict[str, Path], probes: Probes) -> Iterable[Check]:
    from tj_dist import check_data_path

    for label, path in paths.items():
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free
        status: Status = (
            "OK" if free >= probes.disk_warn else ("WARN" if free >= probes.disk_fail else "FAIL")
        )
        yield Check(
            name=f"disk {label}",
            status=status,
            detail=f"{path}: {_gib(free)} free",
            fix="" if status == "OK" else f"free space or point {label} elsewhere (--set)",
        )
        if env.wsl2 and check_data_path(path, env) is not None:
            yield Check(
                name=f"drvfs {label}",
                status="WARN",
                detail=f"{path} is on a Windows drive",
                fix="I/O there is 5-10x slower: move it under your Linux home",
            )


def run_checks(paths: dict[str, Path], *, probes: Probes | None = None) -> list[Check]:
    """Run every check; ``paths`` are the run/data/cache folders whose disks are checked;
    ``probes``: where to look and the thresholds (default: this machine)."""
    from tj_dist import detect_environment
    from tj_monitor import read_system_memory

    pr = probes or Probes()
    checks: list[Check] = []
    env = system = None
    try:
        env = detect_environment(
            proc_version=pr.proc_version,
            proc_mounts=pr.proc_mounts,
            shm_path=pr.shm_path,
            cgroup_root=pr.cgroup_root,
            proc_cgroup=pr.proc_cgroup,
            environ=pr.environ,
        )
        system = read_system_memory(
            cgroup_root=pr.cgroup_root, proc_cgroup=pr.proc_cgroup, shm_path=pr.shm_path
        )
    except Exception as exc:
        checks.append(Check(name="environment", status="FAIL", detail=f"probe failed: {exc}"))
    groups: list[Callable[[], Iterable[Check]]] = [_python, _libraries]
    if env is not None and system is not None:
        groups += [
            lambda: _torch_and_gpus(env),
            lambda: _memory(system, pr),
            lambda: _wsl(env),
            lambda: _paths(env, paths, pr),
        ]
    for group in groups:
        try:
            checks.extend(group())
        except Exception as exc:
            checks.append(
                Check(
                    name=getattr(group, "__name__", "check"),
                    status="FAIL",
                    detail=f"check failed: {type(exc).__name__}: {exc}",
                )
            )
    checks.append(Check(name="cpus", status="OK", detail=f"{os.cpu_count()} logical CPUs"))
    return checks


def render(checks: list[Check]) -> str:
    """The report as plain text (one line per check; the fix indented below)."""
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<4}  {c.name:<{width}}  {c.detail}")
        if c.fix:
            lines.append(f"{'':<4}  {'':<{width}}  fix: {c.fix}")
    return "\n".join(lines)
