"""Phase-1 data loading: window datasets over the stores, the loader plan, per-batch preparation.

PROVISIONAL: to be rebuilt on tj-data part 2 (plan_loader, build_loader, statistics,
augmentation) when it lands.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from tj_data import MmapGraphDataset, WindowDataset
from tj_hybrid.config.schema import HybridConfig

__all__ = ["LoaderSpec", "TrainLoader", "feature_statistics", "make_eval_loader",
           "make_train_loader", "plan_phase1_loader"]  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class LoaderSpec:
    train: Path
    holdout: Path
    window: int
    horizon: int
    batch_size: int
    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    persistent_workers: bool
    seed: int


class _WindowSampler(Sampler[int]):
    def __init__(self, n: int, rank: int, world: int, seed: int) -> None:
        self.n, self.rank, self.world, self.seed = n, rank, world, seed
        self.epoch, self._start = 0, 0

    def __len__(self) -> int:
        return -(-self.n // self.world)

    def order(self) -> np.ndarray:
        perm = np.random.default_rng([self.seed, self.epoch]).permutation(self.n)
        pad = len(self) * self.world - self.n
        perm = np.concatenate([perm, perm[:pad]])
        return perm[self.rank :: self.world]

    def __iter__(self) -> Iterator[int]:
        start, self._start = self._start, 0
        yield from self.order()[start:].tolist()

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self, consumed: int = 0) -> dict[str, Any]:
        return {"epoch": self.epoch, "offset": consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self._start = int(state["epoch"]), int(state["offset"])


@dataclass
class TrainLoader:
    loader: DataLoader
    sampler: Any

    def prepare(
        self, window: list[Any], *, device: torch.device, epoch: int, index: int
    ) -> list[Any]:
        return [s.to(device, non_blocking=True) for s in window]


def _windows(path: Path, spec: LoaderSpec) -> WindowDataset:
    return WindowDataset(MmapGraphDataset(path), window=spec.window, horizon=spec.horizon)


def make_train_loader(spec: LoaderSpec, *, rank: int, world_size: int, seed: int) -> TrainLoader:
    ds = _windows(spec.train, spec)
    sampler = _WindowSampler(len(ds), rank, world_size, seed)
    loader = DataLoader(ds, batch_size=spec.batch_size, sampler=sampler, collate_fn=ds.collate_fn,
                        num_workers=spec.num_workers, pin_memory=spec.pin_memory,
                        persistent_workers=spec.persistent_workers and spec.num_workers > 0,
                        prefetch_factor=spec.prefetch_factor if spec.num_workers > 0 else None)  # fmt: skip
    return TrainLoader(loader=loader, sampler=sampler)


def make_eval_loader(spec: LoaderSpec) -> DataLoader:
    ds = _windows(spec.holdout, spec)
    return DataLoader(ds, batch_size=spec.batch_size, shuffle=False, collate_fn=ds.collate_fn)


def feature_statistics(cfg: HybridConfig, ds: Any) -> dict[str, list[float]]:
    base = MmapGraphDataset(ds.train)
    idx = np.random.default_rng(0).choice(len(base), size=min(len(base), 2000), replace=False)
    samples = base.__getitems__(sorted(idx.tolist()))
    x = np.concatenate([s["x"] for s in samples])
    e = np.concatenate([s["edge_attr"] for s in samples])
    return {"node_mean": x.mean(0).tolist(), "node_std": (x.std(0) + 1e-6).tolist(),
            "edge_mean": e.mean(0).tolist(), "edge_std": (e.std(0) + 1e-6).tolist()}  # fmt: skip


def plan_phase1_loader(
    cfg: HybridConfig, ds: Any, *, nprocs: int, backend: str
) -> tuple[LoaderSpec, dict[str, Any]]:
    spec = LoaderSpec(train=ds.train, holdout=ds.holdout, window=cfg.phase1.input_steps,
                      horizon=cfg.phase1.max_horizon, batch_size=cfg.loader.batch_size,
                      num_workers=cfg.loader.num_workers or 0, prefetch_factor=2,
                      pin_memory=False, persistent_workers=False, seed=cfg.run.seed)  # fmt: skip
    return spec, asdict(spec)
