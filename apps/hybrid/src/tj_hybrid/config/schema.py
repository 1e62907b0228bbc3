"""The trainer's configuration tree: what ``configs/hybrid.yaml`` may contain.

Sections that a package already types are that package's own dataclass (``record.env`` is
``tj_rl.EnvConfig``); the others are small app-level dataclasses whose ``__post_init__`` builds the
package config they stand for (``amp`` -> ``tj_dist.AmpConfig``, ``monitor`` ->
``tj_monitor.MonitorConfig``), so a bad value fails at load time with its dotted path.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tj_dist import AmpConfig
from tj_monitor import MonitorConfig
from tj_rl import EnvConfig

__all__ = [
    "AmpSection",
    "DataSection",
    "DistSection",
    "HybridConfig",
    "LoaderSection",
    "ModelSection",
    "MonitorSection",
    "Phase1Section",
    "RecordSection",
    "RunSection",
    "parse_bytes",
]

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


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")


@dataclass(kw_only=True)
class RunSection:
    """Where runs go and how they are named. ``name=None``: a timestamp."""

    root: Path = Path("runs")
    name: str | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.name is not None and not re.fullmatch(r"[A-Za-z0-9._-]+", self.name):
            raise ValueError(f"name {self.name!r}: use letters, digits, '.', '_' and '-' only")


@dataclass(kw_only=True)
class RecordSection:
    """Recording the phase-1 dataset from SUMO with a behaviour policy (tj-rl)."""

    scenario: Path = Path("configs/scenarios/default/default.sumocfg")
    episode_seconds: float = 900.0
    train_episodes: int = 16
    holdout_episodes: int = 4
    workers: int = 2
    policy: str = "mixed"
    policy_kwargs: dict[str, float | int | str] = field(default_factory=dict)
    env: EnvConfig = field(
        default_factory=lambda: EnvConfig(delta_time=5.0, metrics=False, max_nodes=128)
    )

    def __post_init__(self) -> None:
        _positive(self, "episode_seconds", "train_episodes", "holdout_episodes", "workers")


@dataclass(kw_only=True)
class DataSection:
    """Where the dataset lives and how it is stored and prepared."""

    path: Path = Path("data/phase1")
    json_source: Path | None = None  # seed-style JSON chunks to import instead of recording
    backend: Literal["npy", "hdf5"] = "npy"
    shard_size: int = 4096
    holdout_fraction: float = 0.2  # JSON import only: last episodes held out
    statistics: Literal["sampled", "exact"] = "sampled"
    statistics_samples: int = 10_000
    quantize: dict[str, Literal["float16", "int8"]] = field(default_factory=dict)
    reader: Literal["mmap", "chunked"] = "mmap"  # chunked: decoded shards in a byte-bounded LRU
    cache_chunks: int = 3  # shards the chunked reader keeps per process
    augment: Literal["phase1", "none"] = "phase1"

    def __post_init__(self) -> None:
        _positive(self, "shard_size", "statistics_samples", "cache_chunks")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}")


@dataclass(kw_only=True)
class LoaderSection:
    """DataLoader sizing. ``None`` fields are planned by ``tj_data.plan_loader`` within the budget."""

    ram_budget: float | str = 0.6  # fraction of the container-aware limit, or bytes ("6G")
    batch_size: int = 16  # windows per device per micro-batch
    num_workers: int | None = None
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None

    def __post_init__(self) -> None:
        parse_bytes(self.ram_budget)
        _positive(self, "batch_size")
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")

    @property
    def budget(self) -> float:
        return parse_bytes(self.ram_budget)


@dataclass(kw_only=True)
class ModelSection:
    """Which TrafficAgent (tj-models preset) to train."""

    preset: Literal["tiny", "normal", "large"] = "tiny"
    activation_checkpointing: bool = False
    debug: bool = False


@dataclass(kw_only=True)
class Phase1Section:
    """World-model pretraining: optimisation, horizon schedule, evaluation and checkpoints."""

    steps: int = 300  # optimizer steps
    effective_batch: int = 64  # windows per optimizer step over all ranks
    lr: float = 3e-3
    weight_decay: float = 1e-4
    warmup_steps: int = 20
    grad_clip: float = 1.0
    input_steps: int = 4  # T: graphs the world model reads
    max_horizon: int = 2  # H: the progressive schedule grows the horizon 1 -> H
    horizon_start: float = 0.4  # fraction of training where the horizon starts growing
    horizon_end: float = 0.8  # ... and reaches H
    log_every: int = 10
    checkpoint_every: int = 50
    keep_checkpoints: int = 2
    eval_batches: int = 50

    def __post_init__(self) -> None:
        _positive(self, "steps", "effective_batch", "lr", "input_steps", "max_horizon")
        _positive(self, "log_every", "checkpoint_every", "eval_batches")
        if self.keep_checkpoints < 2:
            raise ValueError(f"keep_checkpoints must be >= 2, got {self.keep_checkpoints}")
        if not 0.0 <= self.horizon_start <= self.horizon_end <= 1.0:
            raise ValueError("need 0 <= horizon_start <= horizon_end <= 1")
        if self.weight_decay < 0 or self.warmup_steps < 0 or self.grad_clip < 0:
            raise ValueError("weight_decay, warmup_steps and grad_clip must be >= 0")


@dataclass(kw_only=True)
class DistSection:
    """DDP: processes on this machine and the wrapper's settings (tj_dist.wrap_ddp)."""

    nprocs: int = 2
    backend: Literal["auto", "nccl", "gloo"] = "auto"
    bucket_cap_mb: float = 25.0
    gradient_as_bucket_view: bool = True
    static_graph: bool = False
    comm_hook: Literal["fp16", "bf16"] | None = None
    threads_per_rank: int | None = None  # torch intra-op threads; None: cores / nprocs

    def __post_init__(self) -> None:
        _positive(self, "nprocs", "bucket_cap_mb")


@dataclass(kw_only=True)
class AmpSection:
    """Mixed precision (tj_dist.choose_precision / AmpConfig): GradScaler parameters per phase."""

    precision: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    init_scale: float = 2.0**16
    growth_factor: float = 2.0
    backoff_factor: float = 0.5
    growth_interval: int = 2000

    def __post_init__(self) -> None:
        self.to_config("fp32", "cpu")  # validates the scaler parameters

    def to_config(self, precision: str, device_type: str) -> AmpConfig:
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
        return MonitorConfig(
            interval_s=self.interval_s,
            warn=self.warn,
            cleanup=self.cleanup,
            max_cpu_fraction=self.max_cpu_fraction,
            **extra,
        )


@dataclass(kw_only=True)
class HybridConfig:
    """The whole trainer configuration (``configs/hybrid.yaml`` <- profile <- ``--set``)."""

    profile: str = "custom"  # set by the profile overlay; informational
    run: RunSection = field(default_factory=RunSection)
    record: RecordSection = field(default_factory=RecordSection)
    data: DataSection = field(default_factory=DataSection)
    loader: LoaderSection = field(default_factory=LoaderSection)
    model: ModelSection = field(default_factory=ModelSection)
    phase1: Phase1Section = field(default_factory=Phase1Section)
    dist: DistSection = field(default_factory=DistSection)
    amp: AmpSection = field(default_factory=AmpSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)

    def __post_init__(self) -> None:
        per_step = self.loader.batch_size * self.dist.nprocs
        if self.phase1.effective_batch % per_step:
            raise ValueError(
                f"phase1.effective_batch={self.phase1.effective_batch} must be a multiple of "
                f"loader.batch_size x dist.nprocs = {per_step} (gradient accumulation steps)"
            )

    @property
    def accumulation_steps(self) -> int:
        return self.phase1.effective_batch // (self.loader.batch_size * self.dist.nprocs)
