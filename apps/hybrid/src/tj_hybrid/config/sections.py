"""The configuration sections every phase shares: run, scenario, model, dist, amp, monitor, memory.

Sections that a package already types are that package's own dataclass (``scenario.env`` is
``tj_rl.EnvConfig``); the others are small app-level dataclasses that build the package config
they stand for when asked (``amp`` -> ``tj_dist.AmpConfig``, ``monitor`` ->
``tj_monitor.MonitorConfig``). Nothing here imports torch: ``--help``, ``--print-config`` and
config errors stay fast.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from tj_rl.env import EnvConfig

if TYPE_CHECKING:
    from tj_dist import AmpConfig
    from tj_monitor import MonitorConfig

__all__ = [
    "AmpSection",
    "DistSection",
    "MemorySection",
    "ModelSection",
    "MonitorSection",
    "RunSection",
    "ScenarioSection",
    "TimeWindows",
    "TrainingSection",
    "check_windows",
    "parse_bytes",
    "positive",
]

# Episode time windows inside the scenario's span: None (one window at the scenario's begin),
# "auto" (windows tiling the span) or their starts in any SUMO time form (25200, "7:15:00").
TimeWindows = list[float | str] | Literal["auto"] | None

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse_bytes(value: float | int | str) -> float:
    """``"6G"``/``"512M"``/``1.5e9`` -> bytes; a number in (0, 1] stays a fraction of the limit."""
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"must be > 0, got {value}")
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)i?B?\s*", str(value), flags=re.IGNORECASE)
    if not m:
        raise ValueError(f"{value!r} is not a size (examples: 0.6, 6G, 512M, 1.5e9)")
    return float(m.group(1)) * _UNITS[m.group(2).upper()]


def check_windows(windows: TimeWindows) -> None:
    """Raise naming the first window start that is no SUMO time (the span is checked later,
    against the scenario: ``tj_hybrid.preflight``)."""
    if windows is None or windows == "auto":
        return
    if not windows:
        raise ValueError("windows: give one or more starts, 'auto' or null")
    from tj_rl.env import parse_time

    for start in windows:
        parse_time(start, what="windows")


def positive(obj: object, *names: str) -> None:
    """Raise naming the first of ``names`` whose value is not > 0."""
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


@dataclass(kw_only=True)
class RunSection:
    """Where runs and data go, and how runs are named. ``name=None``: the scenario's name and
    a timestamp. Data: one folder per scenario under ``data_root`` (``tj_hybrid.data_paths``)."""

    root: Path = Path("runs")
    data_root: Path = Path("data")
    name: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", self.name):
            raise ValueError(f"name {self.name!r}: use letters, digits, '.', '_' and '-' only")


@dataclass(kw_only=True)
class ScenarioSection:
    """The SUMO scenario every phase runs (any ``.sumocfg``) and the env built on it (tj-rl)."""

    path: Path = Path("configs/scenarios/default/default.sumocfg")
    # the greens the lights switch: the scenario's own programs, or netconvert's rebuilt plans
    # (those sumo-actuated extends); scenario-program always runs the own (traffic.py)
    plans: Literal["own", "rebuilt"] = "own"
    env: EnvConfig = field(
        default_factory=lambda: EnvConfig(delta_time=5.0, metrics=False, max_nodes=128)
    )

    def __post_init__(self) -> None:
        if self.path.suffix not in (".sumocfg", ".cfg"):  # SUMO's examples also use .sumo.cfg
            raise ValueError(
                f"path {self.path}: expected a SUMO configuration file (.sumocfg or .cfg)"
            )
        if self.plans not in ("own", "rebuilt"):
            raise ValueError(f"plans: {self.plans!r}, one of own, rebuilt")
        if self.env.gridlock is not None:  # one place: training ends gridlocks, evaluation never
            raise ValueError("env.gridlock: set phase2.gridlock instead (training episodes only)")


@dataclass(kw_only=True)
class ModelSection:
    """Which TrafficAgent (tj-models preset) the phases train."""

    preset: Literal["tiny", "normal", "large"] = "tiny"
    activation_checkpointing: bool = False
    debug: bool = False


@dataclass(kw_only=True)
class MemorySection:
    """The run's host-RAM budget: a fraction of the container-aware limit, or bytes ("6G").

    Each phase plans within it (phase 1: the DataLoaders of all ranks)."""

    budget: float | str = 0.6

    def __post_init__(self) -> None:
        parse_bytes(self.budget)

    def budget_bytes(self, limit: float) -> float:
        """The budget in bytes against ``limit`` (the container-aware memory limit)."""
        value = parse_bytes(self.budget)
        return value if value > 1 else value * limit


@dataclass(kw_only=True)
class DistSection:
    """DDP: processes on this machine and the wrapper's settings (tj_dist.wrap_ddp)."""

    nprocs: int = 2
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    comm_hook: Literal["fp16", "bf16"] | None = None
    threads_per_rank: int | None = None  # torch intra-op threads; None: cores / ranks

    def __post_init__(self) -> None:
        positive(self, "nprocs", "bucket_cap_mb")


@dataclass(kw_only=True)
class AmpSection:
    """Mixed precision (tj_dist.choose_precision / AmpConfig): the GradScaler's parameters."""

    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        positive(self, "init_scale", "growth_interval")
        if self.growth_factor <= 1.0:
            raise ValueError(f"growth_factor={self.growth_factor} must be > 1")
        if not 0.0 < self.backoff_factor < 1.0:
            raise ValueError(f"backoff_factor={self.backoff_factor} must be in (0, 1)")

    def to_config(self, precision: str, device_type: str) -> AmpConfig:
        from tj_dist import AmpConfig

        return AmpConfig(
            precision=precision,
            device_type=device_type,
            init_scale=self.init_scale,
            growth_factor=self.growth_factor,
            backoff_factor=self.backoff_factor,
            growth_interval=self.growth_interval,
        )


@dataclass(kw_only=True)
class MonitorSection:
    """Memory monitor thresholds (tj_monitor.MonitorConfig): fractions of the limit or bytes."""

    interval_s: float = 1.0
    warn: float = 0.75
    cleanup: float = 0.875
    max_cpu_fraction: float = 0.005

    def __post_init__(self) -> None:
        if (self.warn <= 1) == (self.cleanup <= 1) and not self.warn < self.cleanup:
            raise ValueError(f"warn ({self.warn}) must be below cleanup ({self.cleanup})")
        self.to_config()

    def to_config(self, **extra: object) -> MonitorConfig:
        from tj_monitor import MonitorConfig

        return MonitorConfig(
            interval_s=self.interval_s,
            warn=self.warn,
            cleanup=self.cleanup,
            max_cpu_fraction=self.max_cpu_fraction,
            **extra,
        )


@dataclass(kw_only=True)
class TrainingSection:
    """What every training phase has: optimisation, the effective batch, log/checkpoint cadence.

    Gradient accumulation is not configured: it is derived from ``effective_batch`` once the
    number of ranks is known (``tj_hybrid.training.world``), never before."""

    steps: int = 300  # optimizer steps
    effective_batch: int = 64  # samples per optimizer step over all ranks
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 20
    grad_clip: float = 1.0
    log_every: int = 10
    checkpoint_every: int = 50
    keep_checkpoints: int = 2

    def __post_init__(self) -> None:
        positive(self, "steps", "effective_batch", "lr", "log_every", "checkpoint_every")
        if self.keep_checkpoints < 2:
            raise ValueError(f"keep_checkpoints must be >= 2, got {self.keep_checkpoints}")
        if self.weight_decay < 0 or self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay, warmup_steps and grad_clip must be >= 0")
