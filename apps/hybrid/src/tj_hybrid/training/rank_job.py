"""What every DDP phase hands its ranks and how a rank starts: the job's shared fields (config,
phase folder, world, threads, resume, log level) and ``start_rank``: logging like the parent, the
process group (a no-op under torchrun or Ray Train, where one exists), torch threads, and
identical seeding, so every rank builds the same initial weights."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

import tj_dist
from tj_hybrid.config.schema import HybridConfig
from tj_hybrid.log_setup import setup_logging
from tj_hybrid.run_dir import PhaseDir
from tj_hybrid.training.ranks import seed_everything
from tj_hybrid.training.world import World

__all__ = ["RankJob", "start_rank"]


@dataclass(frozen=True, kw_only=True)
class RankJob:
    """The fields every phase's rank job has; a phase's job adds its own. Picklable: spawned
    ranks receive it as an argument."""

    cfg: HybridConfig
    phase_dir: PhaseDir
    world: World
    threads: int  # torch intra-op threads per rank
    resume: bool
    log_level: int = logging.INFO


def start_rank(job: RankJob) -> tj_dist.DistInfo:
    """Start this rank as ``job`` says; returns where it sits (rank, world size, device)."""
    setup_logging(job.log_level)  # a spawned rank logs like the parent
    info = tj_dist.init_distributed(job.world.backend)
    torch.set_num_threads(job.threads)
    seed_everything(job.cfg.run.seed)  # identical initial weights on every rank
    return info
