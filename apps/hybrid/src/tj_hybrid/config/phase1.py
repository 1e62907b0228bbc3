"""The ``phase1`` section: world-model pretraining, with its recording, dataset and loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from tj_hybrid.config.sections import TimeWindows, TrainingSection, check_windows, positive

__all__ = ["DataSection", "LoaderSection", "Phase1Section", "RecordSection"]


@dataclass(kw_only=True)
class RecordSection:
    """Recording the phase-1 dataset from the scenario with a behaviour policy (tj-rl)."""

    episode_seconds: float = 900.0
    # the episodes' time windows in the scenario's span (episodes cycle through them)
    windows: TimeWindows = None
    train_episodes: int = 16
    holdout_episodes: int = 4
    workers: int = 2
    policy: str = "mixed"
    policy_kwargs: dict[str, float | int | str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        positive(self, "episode_seconds", "train_episodes", "holdout_episodes", "workers")
        check_windows(self.windows)


@dataclass(kw_only=True)
class DataSection:
    """Where the dataset lives and how it is stored and prepared. ``path=None``: a folder per
    scenario and recording setting under ``run.data_root`` (``tj_hybrid.data_paths``)."""

    path: Path | None = None
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
        positive(self, "shard_size", "statistics_samples", "cache_chunks")
        if not 0.0 < self.holdout_fraction < 1.0:
            raise ValueError(f"holdout_fraction must be in (0, 1), got {self.holdout_fraction}")


@dataclass(kw_only=True)
class LoaderSection:
    """DataLoader sizing. ``None`` fields are planned by ``tj_data.plan_loader`` within the
    run's memory budget (``memory.budget``, split over the ranks)."""

    batch_size: int = 16  # windows per rank per micro-batch
    num_workers: int | None = None
    prefetch_factor: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None

    def __post_init__(self) -> None:
        positive(self, "batch_size")
        if self.num_workers is not None and self.num_workers < 0:
            raise ValueError(f"num_workers must be >= 0, got {self.num_workers}")


@dataclass(kw_only=True)
class Phase1Section(TrainingSection):
    """World-model pretraining: the shared training fields plus the horizon schedule, the
    evaluation size, and the phase's recording, dataset and loader."""

    input_steps: int = 4  # T: graphs the world model reads
    max_horizon: int = 2  # H: the progressive schedule grows the horizon 1 -> H
    horizon_start: float = 0.4  # fraction of training where the horizon starts growing
    horizon_end: float = 0.8  # ... and reaches H
    eval_batches: int = 50
    record: RecordSection = field(default_factory=RecordSection)
    data: DataSection = field(default_factory=DataSection)
    loader: LoaderSection = field(default_factory=LoaderSection)

    def __post_init__(self) -> None:
        super().__post_init__()
        positive(self, "input_steps", "max_horizon", "eval_batches")
        if not 0.0 <= self.horizon_start <= self.horizon_end <= 1.0:
            raise ValueError("need 0 <= horizon_start <= horizon_end <= 1")
        if self.effective_batch % self.loader.batch_size:
            raise ValueError(
                f"effective_batch={self.effective_batch} must be a multiple of "
                f"loader.batch_size={self.loader.batch_size} (x ranks x accumulation steps)"
            )
