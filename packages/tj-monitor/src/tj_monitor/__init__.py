"""tj-monitor: see memory and time. Process-tree RAM/GPU monitor with thresholds and shrinkers,
step timers, metrics logging (JSONL + TensorBoard), profiling helpers and run analysis.

torch and nvidia-ml-py are optional: the monitor reads CUDA statistics only when the host
process already imported torch, and NVML only when it can be loaded.
"""

from tj_monitor.accumulators import MAE, MSE, Mean
from tj_monitor.analyze import (
    RunData,
    RunFormatError,
    RunSummary,
    SeriesSummary,
    load_run,
    summarize,
)
from tj_monitor.cgroup import CgroupMemory, read_cgroup_memory
from tj_monitor.cleanup import CleanupReport, Shrinker
from tj_monitor.gpu import CudaMemory, NvmlDevice, NvmlReader, read_cuda_memory
from tj_monitor.metrics_logger import LoggerConfig, MetricsLogger, detect_rank
from tj_monitor.monitor import MemoryMonitor, MonitorConfig, MonitorStats
from tj_monitor.profiling import OomSnapshot, ProfilerConfig, StepProfiler
from tj_monitor.report import plot_run, render_summary
from tj_monitor.sample import MemorySample, format_bytes, read_sample
from tj_monitor.step_timer import StepStats, StepTimer
from tj_monitor.system import SystemMemory, memory_limit, read_system_memory
from tj_monitor.thresholds import ThresholdEvent, ThresholdGate
from tj_monitor.timing import Timer, TimerStats
from tj_monitor.tree import ProcessMemory, TreeMemory, TreeSampler, measure_processes, tree_memory

__version__ = "0.1.0"

__all__ = [
    "MAE",
    "MSE",
    "CgroupMemory",
    "CleanupReport",
    "CudaMemory",
    "LoggerConfig",
    "Mean",
    "MemoryMonitor",
    "MemorySample",
    "MetricsLogger",
    "MonitorConfig",
    "MonitorStats",
    "NvmlDevice",
    "NvmlReader",
    "OomSnapshot",
    "ProcessMemory",
    "ProfilerConfig",
    "RunData",
    "RunFormatError",
    "RunSummary",
    "SeriesSummary",
    "Shrinker",
    "StepProfiler",
    "StepStats",
    "StepTimer",
    "SystemMemory",
    "ThresholdEvent",
    "ThresholdGate",
    "Timer",
    "TimerStats",
    "TreeMemory",
    "TreeSampler",
    "__version__",
    "detect_rank",
    "format_bytes",
    "load_run",
    "measure_processes",
    "memory_limit",
    "plot_run",
    "read_cgroup_memory",
    "read_cuda_memory",
    "read_sample",
    "read_system_memory",
    "render_summary",
    "summarize",
    "tree_memory",
]
