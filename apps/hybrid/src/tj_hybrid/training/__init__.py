"""Training-loop pieces every DDP phase shares: the rank job and its start, LR schedule, seeding,
rank reduction, per-rank resumable state, checkpoint/log cadence, the world (ranks,
accumulation) derived last, and the memory monitor's cache shrinker."""

from tj_hybrid.training.cadence import Cadence
from tj_hybrid.training.lr import warmup_cosine
from tj_hybrid.training.rank_job import RankJob, start_rank
from tj_hybrid.training.ranks import (
    RankStates,
    latest_checkpoint,
    mean_over_ranks,
    seed_everything,
    sum_over_ranks,
)
from tj_hybrid.training.shrinkers import CacheShrinker
from tj_hybrid.training.threads import torch_threads
from tj_hybrid.training.world import World, resolve_world

__all__ = [
    "CacheShrinker",
    "Cadence",
    "RankJob",
    "RankStates",
    "World",
    "latest_checkpoint",
    "mean_over_ranks",
    "resolve_world",
    "seed_everything",
    "start_rank",
    "sum_over_ranks",
    "torch_threads",
    "warmup_cosine",
]
