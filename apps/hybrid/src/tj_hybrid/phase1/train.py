"""Phase 1 on one rank: world-model pretraining with DDP, AMP, accumulation and checkpoints.

``train_rank(job)`` runs on every rank (spawned by ``tj_dist.launch_local``, or under torchrun /
Ray Train, where ``init_distributed`` is a no-op). Resuming is exact: model, optimizer, scheduler,
GradScaler, every rank's loader position (tj-data's state protocol) and RNG state come back from
the newest valid checkpoint, and augmentation draws from a generator keyed by (seed, rank, epoch,
windows consumed), so a run killed and resumed ends with the same parameters as one that never
stopped (CPU, fixed seed).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

import tj_dist
from tj_hybrid.phase1.evaluate import evaluate_world_model
from tj_hybrid.phase1.loader import LoaderSpec, TrainLoader, make_eval_loader, make_train_loader
from tj_hybrid.progress import StepProgress
from tj_hybrid.training import (
    Cadence,
    RankStates,
    latest_checkpoint,
    mean_over_ranks,
    warmup_cosine,
)
from tj_hybrid.training.rank_job import RankJob, start_rank
from tj_models import HorizonSchedule, TrafficAgent, TrafficAgentConfig, world_model_loss
from tj_monitor import LoggerConfig, MetricsLogger, StepTimer, atomic_write_json

__all__ = ["LoopPosition", "Phase1Job", "train_rank"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Phase1Job(RankJob):
    """Everything a phase-1 rank needs besides the shared fields: the loader plan, the agent's
    config and input statistics, the decision interval."""

    loader: LoaderSpec
    agent_config: dict[str, Any]
    feature_stats: dict[str, list[float]]
    decision_interval: float


class LoopPosition:
    """Where this rank's loop is: the loader's state after the last batch used (tj-data's
    protocol, carried with each batch because the accumulator looks one batch ahead), the
    epoch, and the windows consumed in it (the augmentation key)."""

    def __init__(self, train: TrainLoader) -> None:
        self.train = train
        self.loader_state: dict[str, Any] | None = None
        self.epoch, self.consumed = 0, 0

    def state_dict(self) -> dict[str, Any]:
        loader = self.loader_state if self.loader_state is not None else self.train.loader.state_dict()
        return {"loader": loader, "epoch": self.epoch, "consumed": self.consumed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.train.loader.load_state_dict(state["loader"])
        self.loader_state = state["loader"]
        self.epoch, self.consumed = int(state["epoch"]), int(state["consumed"])

    def batches(self) -> Iterator[tuple[int, int, Any, dict[str, Any]]]:
        """``(epoch, consumed before it, batch, loader state after it)`` over endless epochs;
        a loaded position continues where it was."""
        epoch, consumed = self.epoch, self.consumed
        while True:
            self.train.set_epoch(epoch)  # keeps a just-loaded position of this epoch
            for batch in self.train.loader:
                yield epoch, consumed, batch, self.train.loader.state_dict()
                consumed += int(batch[0].ptr.numel() - 1)
            epoch, consumed = epoch + 1, 0

    def used(self, epoch: int, consumed: int, loader_state: dict[str, Any]) -> None:
        """Record that the batch carrying ``loader_state`` was used (trained on)."""
        self.epoch, self.consumed, self.loader_state = epoch, consumed, loader_state


def train_rank(job: Phase1Job) -> dict[str, Any] | None:
    """Train the world model on this rank; rank 0 returns the run summary, the others None."""
    cfg, p1, pdir = job.cfg, job.cfg.phase1, job.phase_dir
    info = start_rank(job)
    rank, world, device = info.rank, info.world_size, info.device

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
    accum = job.world.accumulation_steps
    model = tj_dist.wrap_ddp(
        world_model,
        bucket_cap_mb=cfg.dist.bucket_cap_mb,
        gradient_as_bucket_view=cfg.dist.gradient_as_bucket_view,
        static_graph=cfg.dist.static_graph,
        comm_hook=cfg.dist.comm_hook,
        accumulation_steps=accum,
    )
    optimizer = torch.optim.AdamW(params, lr=p1.lr, weight_decay=p1.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, warmup_cosine(p1.warmup_steps, p1.steps)
    )
    acc = tj_dist.GradAccumulator(
        model, optimizer, steps=accum, amp=amp, clip_grad_norm=p1.grad_clip or None,
        scheduler=scheduler,
    )  # fmt: skip
    schedule = HorizonSchedule.linear(
        max_horizon=p1.max_horizon,
        start_step=int(p1.horizon_start * p1.steps),
        end_step=max(int(p1.horizon_end * p1.steps), int(p1.horizon_start * p1.steps) + 1),
    )
    cadence = Cadence(total=p1.steps, log_every=p1.log_every, checkpoint_every=p1.checkpoint_every)
    train = make_train_loader(job.loader, rank=rank, world_size=world)
    position = LoopPosition(train)
    positions = RankStates(position)

    step = 0
    if job.resume:
        loaded = latest_checkpoint(pdir.checkpoints)
        if loaded is not None:
            step, _ = tj_dist.restore_training_state(
                loaded.state, model=model, optimizer=optimizer, scheduler=scheduler, amp=amp,
                accumulator=acc, extra={"position": positions},
            )  # fmt: skip
            if rank == 0:
                log.info("resumed phase 1 from %s (step %d)", loaded.path, step)

    logger = MetricsLogger(pdir.logs, LoggerConfig(console_every=0))
    timer = StepTimer()
    progress = StepProgress("phase 1: world model", total=p1.steps, start=step, enabled=rank == 0)
    recent: dict[str, float] = {}
    try:
        stream = timer.iterate(position.batches(), size=lambda d: d[2][0].ptr.numel() - 1)
        for mb in acc.micro_batches(stream):
            if acc.optimizer_steps >= p1.steps:
                break
            epoch, index, window, loader_state = mb.data
            horizon = schedule.horizon(acc.optimizer_steps)
            window = train.prepare(window, device=device, epoch=epoch, index=index)
            with mb:
                out = model(window, input_steps=p1.input_steps, horizon=horizon)
                loss = world_model_loss(world_model, window, out)
                mb.backward(loss.total)
            position.used(epoch, index + int(window[0].ptr.numel() - 1), loader_state)
            for k, v in loss.components.items():
                recent[f"train/{k}_loss"] = float(v.detach())
            recent["train/loss"] = float(loss.total.detach())
            if not mb.stepped:
                continue
            step = acc.optimizer_steps
            progress.update(step, loss=recent["train/loss"])
            if cadence.log(step):
                metrics = mean_over_ranks(dict(recent))
                tstats = timer.stats()
                metrics |= {
                    "lr": scheduler.get_last_lr()[0],
                    "horizon": horizon,
                    "epoch": epoch,
                    "amp/scale": amp.scale,
                    "amp/skipped_steps": amp.skipped_steps,
                    "time/data_wait_fraction": tstats.data_wait_fraction,
                    "throughput/windows_per_s": tstats.throughput * world,
                }
                if mb.grad_norm is not None:
                    metrics["grad_norm"] = float(mb.grad_norm)
                logger.log(step, metrics)
            if cadence.checkpoint(step):
                state = tj_dist.training_state(
                    step=step, epoch=epoch, model=model, optimizer=optimizer,
                    scheduler=scheduler, amp=amp, accumulator=acc, extra={"position": positions},
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
    wait = mean_over_ranks({"wait": tstats.data_wait_fraction})["wait"]
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
        atomic_write_json(job.phase_dir.eval, summary)
    return summary
