"""What a record needs to be read later, besides the memory facts: the CPU's model, the NVIDIA
driver, the installed versions of the packages behind it and the source checkout's commit.

For results that are compared across machines and commits (the benchmark runner's results, a
run's report). CPUs, the memory limit, RAM and GPUs come from ``memory_limit`` /
``read_system_memory`` here and tj-dist's ``detect_environment``.
"""

from __future__ import annotations

import os
import platform
import subprocess
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

__all__ = ["cpu_model", "git_commit", "gpu_driver", "package_versions"]


def cpu_model(cpuinfo: str | os.PathLike[str] = "/proc/cpuinfo") -> str:
    """The CPU's model name (``/proc/cpuinfo``'s first ``model name``; elsewhere ``platform``'s)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_driver() -> str | None:
    """The NVIDIA driver's version through NVML; None without nvidia-ml-py or a driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return str(pynvml.nvmlSystemGetDriverVersion())
    except Exception:  # no library, no driver, no device: a fact that is not there
        return None


def package_versions(names: Iterable[str]) -> dict[str, str]:
    """``{name: installed version}`` of the distributions ``names``; those not installed are
    left out."""
    out = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def git_commit(cwd: str | os.PathLike[str] | None = None) -> str | None:
    """The commit checked out at ``cwd`` (``+dirty`` with changes to tracked files), or None
    outside a git checkout or without git."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                              check=True, timeout=10).stdout.strip()  # fmt: skip

    try:
        head, dirty = git("rev-parse", "HEAD"), git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")
