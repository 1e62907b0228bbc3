"""The facts a result needs to be read later: machine, versions and git commit.

Machine facts come from tj-dist's ``detect_environment`` (CPUs in this process's cpuset, the
cgroup memory limit, GPUs, WSL2) and tj-monitor's system reader; nothing here re-reads /proc.
"""

from __future__ import annotations

import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["PACKAGES", "git_commit", "machine_facts", "versions"]

PACKAGES = (
    "tj-data", "tj-models", "tj-dist", "tj-rl", "tj-monitor", "tj-hybrid", "tj-bench",
    "torch", "torch-geometric", "ray", "eclipse-sumo", "libsumo", "numpy", "h5py",
)  # fmt: skip


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_facts() -> dict[str, Any]:
    """CPU model and count, RAM and cgroup limit, GPUs, CUDA and driver, WSL2, OS."""
    from tj_dist import detect_environment
    from tj_monitor import read_system_memory

    env = detect_environment()
    mem = read_system_memory()
    facts: dict[str, Any] = {
        "cpu_model": _cpu_model(),
        "cpus": env.cpu_count,
        "ram_bytes": mem.total,
        "memory_limit_bytes": env.memory_limit_bytes,
        "wsl2": env.wsl2,
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "gpus": [
            {"name": g.name, "memory_bytes": g.total_memory_bytes, "capability": list(g.capability)}
            for g in env.gpus
        ],
        "cuda": None,
        "driver": None,
        "nccl": env.nccl_version,
    }
    try:
        import torch

        facts["cuda"] = torch.version.cuda if torch.cuda.is_available() else None
    except ImportError:
        pass
    if env.gpus:
        try:
            import pynvml

            pynvml.nvmlInit()
            facts["driver"] = str(pynvml.nvmlSystemGetDriverVersion())
        except Exception:  # the driver version is a nice-to-have
            pass
    return facts


def versions(packages: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of the packages a result depends on (absent ones left out)."""
    out = {}
    for name in packages:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(cwd: Path | None = None) -> str | None:
    """The checkout's commit (``+dirty`` with local changes), or None outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True,
                              text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, check=True, timeout=10).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty.strip() else "")
