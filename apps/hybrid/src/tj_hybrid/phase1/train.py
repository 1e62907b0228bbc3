"""Phase 1 on one rank: world-model pretraining with DDP, AMP, accumulation and checkpoints.

``train_rank(job)`` runs on every rank (spawned by ``tj_dist.launch_local``, or under torchrun /
Ray Train, where ``init_distributed`` is a no-op). Resuming is exact: model, optimizer, scheduler,
GradScaler, every rank's sampler position and RNG state come back from the newest valid
checkpoint, and augmentation draws from a generator keyed by (seed, rank, epoch, batch), so a run
killed and resumed ends with the same parameters as one that never stopped (CPU, fixed seed).
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

import tj_dist
from tj_hybrid.config.schema import HybridConfig
from tj_hybrid.log_setup import setup_logging
from tj_hybrid.phase1.evaluate import evaluate_world_model
from tj_hybrid.phase1.loader import LoaderSpec, TrainLoader, make_eval_loader, make_train_loader
from tj_hybrid.progress import StepProgress
from tj_hybrid.run_dir import PhaseDir
from tj_models import HorizonSchedule, TrafficAgent, TrafficAgentConfig, world_model_loss
from tj_monitor import LoggerConfig, MetricsLogger, StepTimer

__all__ = ["Phase1Job", "RankStates", "train_rank"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Phase1Job:
    """Everything a rank needs; picklable (spawned ranks receive it as an argument)."""

    cfg: HybridConfig
    phase_dir: PhaseDir
    loader: LoaderSpec
    agent_config: dict[str, Any]
    feature_stats: dict[str, list[float]]
    decision_interval: float
    resume: bool
    threads: int
    log_level: int = logging.INFO


class RankStates:
    """Saves every rank's state of ``obj`` (a collective ``all_gather_object``) and restores each
    rank's own: samplers differ per rank, and only rank 0 writes the checkpoint."""

    def __init__(self, obj: Any, consumed: int = 0) -> None:
        self.obj, self.consumed = obj, consumed

    def state_dict(self) -> dict[str, Any]:
        mine = self.obj.state_dict(consumed=self.consumed)
        if not (dist.is_available() and dist.is_initialized()):
            return {"ranks": [mine]}
        gathered: list[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(gathered, mine)
        return {"ranks": gathered}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        ranks = state["ranks"]
        if rank >= len(ranks):
            raise ValueError(f"checkpoint has sampler states of {len(ranks)} ranks, not {rank + 1}")
        self.obj.load_state_dict(ranks[rank])


def _seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def _lr_lambda(warmup: int, total: int) -> Any:
    def fn(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total - warmup)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return fn


def _batches(train: TrainLoader, epoch: int) -> Iterator[tuple[int, Any]]:
    """Batches over epochs without end, tagged with their epoch; a resumed sampler continues."""
    while True:
        train.set_epoch(epoch)
        for batch in train.loader:
            yield epoch, batch
        epoch += 1


def _mean_over_ranks(values: dict[str, float]) -> dict[str, float]:
    if not (dist.is_available() and dist.is_initialized()) or not values:
        return values
    t = torch.tensor(list(values.values()), dtype=torch.float64)
    dist.all_reduce(t)
    t /= dist.get_world_size()
    return dict(zip(values, t.tolist(), strict=True))


def train_rank(job: Phase1Job) -> dict[str, Any] | None:
    """Train the world model on this rank; rank 0 returns the run summary, the others None."""
    cfg, p1, pdir = job.cfg, job.cfg.phase1, job.phase_dir
    setup_logging(job.log_level)  # a spawned rank logs like the parent
    info = tj_dist.init_distributed(cfg.dist.backend)
    rank, world, device = info.rank, info.world_size, info.device
    torch.set_num_threads(job.threads)
    _seed_everything(cfg.run.seed)  # identical initial weights on every rank

    agent = TrafficAgent.from_config(TrafficAgentConfig.from_dict(job.agent_config))
    stats = {k: torch.tensor(v) for k, v in job.feature_stats.items()}
    agent.gnn.set_feature_statistics(
        stats["node_mean"], stats["node_std"], stats["edge_mean"], stats["edge_std"]
    )
    params = agent.freeze_for_phase(1)
    world_model = agent.world_model.to(device)
    choice = tj_dist.choose_precision(cfg.amp.precision, device)
    tj_dist.enable_tf32(choice)
    amp = cfg.amp.to_config(choice.precision, device.type).build()
    accum = cfg.accumulation_steps
    model = tj_dist.wrap_ddp(
        world_model,
        bucket_cap_mb=cfg.dist.bucket_cap_mb,
        gradient_as_bucket_view=cfg.dist.gradient_as_bucket_view,
        static_graph=cfg.dist.static_graph,
        comm_hook=cfg.dist.comm_hook,
        accumulation_steps=accum,
    )
    optimizer = torch.optim.AdamW(params, lr=p1.lr, weight_decay=p1.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, _lr_lambda(p1.warmup_steps, p1.steps))
    acc = tj_dist.GradAccumulator(
        model, optimizer, steps=accum, amp=amp, clip_grad_norm=p1.grad_clip or None,
        scheduler=scheduler,
    )  # fmt: skip
    schedule = HorizonSchedule.linear(
        max_horizon=p1.max_horizon,
        start_step=int(p1.horizon_start * p1.steps),
        end_step=max(int(p1.horizon_end * p1.steps), int(p1.horizon_start * p1.steps) + 1),
    )
    train = make_train_loader(job.loader, rank=rank, world_size=world)
    sampler_state = RankStates(train.sampler)

    step, epoch = 0, 0
    if job.resume:
        loaded = tj_dist.load_latest(pdir.checkpoints)
        if loaded is not None:
            step, epoch = tj_dist.restore_training_state(
                loaded.state, model=model, optimizer=optimizer, scheduler=scheduler, amp=amp,
                accumulator=acc, extra={"sampler": sampler_state},
            )  # fmt: skip
            sampler_state.consumed = int(loaded.state["extra.sampler"]["ranks"][rank]["offset"])
            if rank == 0:
                log.info("resumed phase 1 from %s (step %d)", loaded.path, step)

    logger = MetricsLogger(pdir.logs, LoggerConfig(console_every=0))
    timer = StepTimer()
    progress = StepProgress("phase 1: world model", total=p1.steps, start=step, enabled=rank == 0)
    last_epoch = epoch
    consumed = sampler_state.consumed
    recent: dict[str, float] = {}
    try:
        stream = timer.iterate(_batches(train, epoch), size=lambda d: d[1][0].ptr.numel() - 1)
        for mb in acc.micro_batches(stream):
            if acc.optimizer_steps >= p1.steps:
                break
            batch_epoch, window = mb.data
            if batch_epoch != last_epoch:
                last_epoch, consumed = batch_epoch, 0
            horizon = schedule.horizon(acc.optimizer_steps)
            window = train.prepare(window, device=device, epoch=batch_epoch, index=consumed)
            consumed += int(window[0].ptr.numel() - 1)
            with mb:
                out = model(window, input_steps=p1.input_steps, horizon=horizon)
                loss = world_model_loss(world_model, window, out)
                mb.backward(loss.total)
            for k, v in loss.components.items():
                recent[f"train/{k}_loss"] = float(v.detach())
            recent["train/loss"] = float(loss.total.detach())
            if not mb.stepped:
                continue
            step = acc.optimizer_steps
            progress.update(step, loss=recent["train/loss"])
            if step % p1.log_every == 0 or step == p1.steps:
                metrics = _mean_over_ranks(dict(recent))
                tstats = timer.stats()
                metrics |= {
                    "lr": scheduler.get_last_lr()[0],
                    "horizon": horizon,
                    "epoch": batch_epoch,
                    "amp/scale": amp.scale,
                    "amp/skipped_steps": amp.skipped_steps,
                    "time/data_wait_fraction": tstats.data_wait_fraction,
                    "throughput/windows_per_s": tstats.throughput * world,
                }
                if mb.grad_norm is not None:
                    metrics["grad_norm"] = float(mb.grad_norm)
                logger.log(step, metrics)
            if step % p1.checkpoint_every == 0 or step == p1.steps:
                sampler_state.consumed = consumed
                state = tj_dist.training_state(
                    step=step, epoch=batch_epoch, model=model, optimizer=optimizer,
                    scheduler=scheduler, amp=amp, accumulator=acc, extra={"sampler": sampler_state},
                )  # fmt: skip
                with tj_dist.rank_zero_only() as main:
                    if main:
                        tj_dist.save_checkpoint(
                            pdir.checkpoints, state, step=step, keep=p1.keep_checkpoints
                        )
    finally:
        progress.close()
        logger.close()
    summary = _finish(job, agent, world_model, timer, device, rank)
    tj_dist.cleanup(info)
    return summary


def _finish(
    job: Phase1Job, agent: TrafficAgent, world_model: Any, timer: StepTimer, device: Any, rank: int
) -> dict[str, Any] | None:
    """Rank 0 saves the agent and evaluates on the held-out episodes; the others wait."""
    tstats = timer.stats()
    wait = _mean_over_ranks({"wait": tstats.data_wait_fraction})["wait"]
    with tj_dist.rank_zero_only() as main:
        if not main:
            return None
        agent.save(job.phase_dir.agent)
        errors = evaluate_world_model(
            world_model,
            make_eval_loader(job.loader),
            input_steps=job.cfg.phase1.input_steps,
            dt=job.decision_interval,
            device=device,
            max_batches=job.cfg.phase1.eval_batches,
        )
        summary = {
            "eval": errors.as_dict(),
            "data_wait_fraction": wait,
            "windows_per_s": tstats.throughput
            * (dist.get_world_size() if dist.is_initialized() else 1),
            "steps": job.cfg.phase1.steps,
        }
        job.phase_dir.eval.write_text(json.dumps(summary, indent=2))
    return summary
