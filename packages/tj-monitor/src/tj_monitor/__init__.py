"""tj-monitor: see memory and time. Process-tree RAM/GPU monitor with thresholds and shrinkers,
step timers, metrics logging (JSONL + TensorBoard), profiling helpers and run analysis.

It is also the one home of the machine facts other packages build on: the container-aware
memory limit (``memory_limit``), cgroup v1/v2 readers (``read_cgroup_memory``), RAM, swap and
/dev/shm (``read_system_memory``, ``shm_usage``) and process-tree PSS/USS within a CPU budget
(``tree_memory``, ``TreeSampler``, ``PeakPssSampler``), the facts a record is read with later
(``cpu_model``, ``gpu_driver``, ``package_versions``, ``git_commit``), and of the process
toolkit: stopping a process tree with its reap rules (``stop_tree``, ``stop_processes``), a
function in a fresh child (``run_in_child``) and the parent-death signal (``die_with_parent``,
``parent_death_hook``).

The core needs psutil and numpy only. rich, matplotlib and tensorboard (tables, the live view,
PNG curves, TensorBoard files) come with the ``report`` extra, imported where used;
``import tj_monitor`` loads none of them. torch and nvidia-ml-py are optional too: the monitor
reads CUDA statistics only when the host process already imported torch, and NVML only when it
can be loaded.
"""

from importlib import metadata as _metadata

from tj_monitor.accumulators import MAE, MSE, Mean
from tj_monitor.analyze import (
    RunData,
    RunFormatError,
    RunSummary,
    SeriesSummary,
    load_run,
    summarize,
)
from tj_monitor.atomic import (
    AtomicPath,
    atomic_open,
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    fsync_dir,
    publish_dir,
    remove_stale_temps,
)
from tj_monitor.cgroup import CgroupMemory, read_cgroup_memory
from tj_monitor.child import ChildFailed, ChildOutcome, describe_exit, run_in_child
from tj_monitor.cleanup import CleanupReport, Shrinker
from tj_monitor.gpu import CudaMemory, NvmlDevice, NvmlReader, read_cuda_memory
from tj_monitor.machine import cpu_model, git_commit, gpu_driver, package_versions
from tj_monitor.metrics_logger import LoggerConfig, MetricsLogger, detect_rank
from tj_monitor.monitor import MemoryMonitor, MonitorConfig, MonitorStats
from tj_monitor.parent_death import die_with_parent, parent_death_hook
from tj_monitor.peak import PeakPssSampler
from tj_monitor.processes import (
    ProcessHandle,
    Stopped,
    processes_naming,
    stop_processes,
    stop_tree,
    with_descendants,
)
from tj_monitor.profiling import OomSnapshot, ProfilerConfig, StepProfiler
from tj_monitor.progress import progress_bar, track_progress
from tj_monitor.report import plot_memory_stages, plot_run, render_stages, render_summary
from tj_monitor.sample import MemorySample, format_bytes, read_sample
from tj_monitor.stages import StagedSummary, StageRow, load_stages, summarize_stages
from tj_monitor.step_timer import StepStats, StepTimer
from tj_monitor.system import ShmUsage, SystemMemory, memory_limit, read_system_memory, shm_usage
from tj_monitor.thresholds import ThresholdEvent, ThresholdGate
from tj_monitor.timing import Timer, TimerStats
from tj_monitor.tree import ProcessMemory, TreeMemory, TreeSampler, measure_processes, tree_memory

__version__ = _metadata.version("tj-monitor")  # one source of truth: pyproject.toml

__all__ = [
    "MAE",
    "MSE",
    "AtomicPath",
    "CgroupMemory",
    "ChildFailed",
    "ChildOutcome",
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
    "PeakPssSampler",
    "ProcessHandle",
    "ProcessMemory",
    "ProfilerConfig",
    "RunData",
    "RunFormatError",
    "RunSummary",
    "SeriesSummary",
    "ShmUsage",
    "Shrinker",
    "StageRow",
    "StagedSummary",
    "StepProfiler",
    "StepStats",
    "StepTimer",
    "Stopped",
    "SystemMemory",
    "ThresholdEvent",
    "ThresholdGate",
    "Timer",
    "TimerStats",
    "TreeMemory",
    "TreeSampler",
    "__version__",
    "atomic_open",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_text",
    "cpu_model",
    "describe_exit",
    "detect_rank",
    "die_with_parent",
    "format_bytes",
    "fsync_dir",
    "git_commit",
    "gpu_driver",
    "load_run",
    "load_stages",
    "measure_processes",
    "memory_limit",
    "package_versions",
    "parent_death_hook",
    "plot_memory_stages",
    "plot_run",
    "processes_naming",
    "progress_bar",
    "publish_dir",
    "read_cgroup_memory",
    "read_cuda_memory",
    "read_sample",
    "read_system_memory",
    "remove_stale_temps",
    "render_stages",
    "render_summary",
    "run_in_child",
    "shm_usage",
    "stop_processes",
    "stop_tree",
    "summarize",
    "summarize_stages",
    "track_progress",
    "tree_memory",
    "with_descendants",
]
