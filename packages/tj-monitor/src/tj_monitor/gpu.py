"""GPU memory: torch's caching-allocator statistics and NVML device readings.

The two are kept apart on purpose: torch numbers devices as this process sees them (after
``CUDA_VISIBLE_DEVICES``), NVML numbers physical devices, and guessing a mapping would be wrong
on exactly the multi-GPU machines where it matters. torch is never imported here: CUDA statistics
are read only when the host process already imported torch and initialised CUDA, so sampling
neither pays torch's import nor creates a CUDA context.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

__all__ = ["CudaMemory", "NvmlDevice", "NvmlReader", "read_cuda_memory"]


@dataclass(frozen=True, kw_only=True)
class CudaMemory:
    """torch.cuda.memory_stats of one device, in bytes (counts for retries/OOMs)."""

    index: int
    allocated: int
    reserved: int
    peak_allocated: int
    num_alloc_retries: int
    num_ooms: int


@dataclass(frozen=True, kw_only=True)
class NvmlDevice:
    """One physical GPU as NVML (nvidia-smi) reports it.

    ``tree_used`` is the GPU memory of the monitored process tree's processes on this device;
    ``None`` where the driver does not report per-process memory (WSL2, some containers).
    """

    index: int
    name: str
    total: int
    used: int
    utilization: int | None
    tree_used: int | None


def read_cuda_memory() -> tuple[tuple[CudaMemory, ...], str | None]:
    """CUDA allocator stats per device, or ``((), reason)`` when they are not available."""
    torch = sys.modules.get("torch")
    if torch is None:
        return (), "cuda: torch not imported by this process"
    try:
        if not torch.cuda.is_initialized():
            return (), "cuda: CUDA not initialised in this process"
        out = []
        for i in range(torch.cuda.device_count()):
            s = torch.cuda.memory_stats(i)
            out.append(
                CudaMemory(
                    index=i,
                    allocated=int(s.get("allocated_bytes.all.current", 0)),
                    reserved=int(s.get("reserved_bytes.all.current", 0)),
                    peak_allocated=int(s.get("allocated_bytes.all.peak", 0)),
                    num_alloc_retries=int(s.get("num_alloc_retries", 0)),
                    num_ooms=int(s.get("num_ooms", 0)),
                )
            )
        return tuple(out), None
    except Exception as exc:  # a broken driver must not crash the host
        return (), f"cuda: {type(exc).__name__}: {exc}"


class NvmlReader:
    """Reads NVML device totals, utilisation and per-process memory; inert when NVML is absent.

    ``open()`` never raises: when nvidia-ml-py is not installed or no driver is loaded,
    ``available`` is False and ``reason`` says why.
    """

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._tried = False
        self.reason: str | None = "nvml: not opened"

    @property
    def available(self) -> bool:
        return self._nvml is not None

    def open(self) -> NvmlReader:
        """Load NVML once; a failure is remembered (a driver does not appear mid-run)."""
        if self._nvml is not None or self._tried:
            return self
        self._tried = True
        try:
            import pynvml
        except ImportError:
            self.reason = "nvml: nvidia-ml-py not installed"
            return self
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:  # pynvml.NVMLError and friends: no driver, no device
            self.reason = f"nvml: {exc}"
            return self
        self._nvml = pynvml
        self.reason = None
        return self

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # a dead driver is not worth an exception
                self._nvml.nvmlShutdown()
        self._nvml = None
        self._handles = []
        self._tried = False
        self.reason = "nvml: closed"

    def read(self, pids: Collection[int] = ()) -> tuple[tuple[NvmlDevice, ...], str | None]:
        """One reading of every device; ``pids`` selects the processes summed in ``tree_used``."""
        nv = self._nvml
        if nv is None:
            return (), self.reason
        out = []
        try:
            for i, handle in enumerate(self._handles):
                mem = nv.nvmlDeviceGetMemoryInfo(handle)
                name = nv.nvmlDeviceGetName(handle)
                name = name.decode() if isinstance(name, bytes) else str(name)
                try:
                    util: int | None = int(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
                except nv.NVMLError:
                    util = None
                out.append(
                    NvmlDevice(
                        index=i,
                        name=name,
                        total=int(mem.total),
                        used=int(mem.used),
                        utilization=util,
                        tree_used=self._tree_used(handle, pids),
                    )
                )
        except Exception as exc:  # the driver can fail mid-run (Xid errors); degrade
            return (), f"nvml: {type(exc).__name__}: {exc}"
        return tuple(out), None

    def _tree_used(self, handle: Any, pids: Collection[int]) -> int | None:
        nv = self._nvml
        try:
            procs = nv.nvmlDeviceGetComputeRunningProcesses(handle)
        except nv.NVMLError:
            return None
        wanted = set(pids)
        total = 0
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            if p.pid in wanted and isinstance(used, int):
                total += used
        return total

    def __enter__(self) -> NvmlReader:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()
