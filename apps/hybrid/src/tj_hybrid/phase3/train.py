"""Phase 3 on one rank: PPO-Lagrangian with DDP and gradient accumulation on streamed rollouts.

``train_rank(job)`` runs on every rank (``tj_dist.launch_local``, or torchrun). Each rank owns its
collector processes and their bounded queue (``collectors.py``). An iteration: read
``samples_per_iteration / ranks`` fresh samples from the stream (older policy versions than
``max_policy_lag`` are dropped and counted; the time blocked is the data wait), seal them into a
static batch (spilled to disk past its byte bound), normalise the advantages over all ranks,
run ``epochs`` shuffled passes of micro-batches with the frozen GNN's embeddings cached, update
lambda by the Lagrange rule on the mean episode cost of all ranks, publish the new weights
(rank 0), log, checkpoint. A checkpoint holds the controller and shield, the optimizer, the
scaler, lambda's state, the policy version and the cost limit; ``--resume`` continues at the next
iteration with the same weights published and the same limit. With each checkpoint rank 0
exports the policy as a candidate for the validation choice (``select.py``).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

import tj_dist
from tj_data import LiveGraphDataset, LiveQueue, collate_graphs
from tj_hybrid.phase3.batch import EmbeddingCache, IterationBatch
from tj_hybrid.phase3.collectors import (
    CollectorPool,
    CollectorSpec,
    CollectorsStalled,
    SampleStream,
)
from tj_hybrid.phase3.learner import Learner, LossWeights, micro_batch_loss
from tj_hybrid.phase3.plan import byte_bound
from tj_hybrid.phase3.select import candidate_dir
from tj_hybrid.progress import StepProgress
from tj_hybrid.training import (
    CacheShrinker,
    RankJob,
    latest_checkpoint,
    start_rank,
    sum_over_ranks,
)
from tj_models import LagrangeConfig, TrafficAgent, lagrangian_advantage, make_lagrange
from tj_monitor import LoggerConfig, MetricsLogger
from tj_rl.rollout.batch import rollout_graph
from tj_rl.rollout.collector import publish_weights
from tj_rl.rollout.samples import rollout_schema

__all__ = ["Phase3Job", "Progress", "train_rank"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Phase3Job(RankJob):
    """Everything a phase-3 rank needs besides the shared fields: the agent, the collectors' env
    and how many, the queue's bound, the memory budget."""

    agent_dir: str  # phase 2's agent (GNN frozen; controller and shield trained here)
    env_config: dict[str, Any]
    space: dict[str, Any]  # one light's observation shapes (name -> zeros), for the schema
    collectors_per_rank: int
    queue_bytes: int
    budget: int  # the run's memory budget: fractions in the phase3 sizes are of it
    cost_limit: float  # the config's, or auto's (``phase3/limit.py``); a resumed run keeps its own
    node: int = 0  # this machine's node rank under torchrun: its collectors' weights file


class Progress:
    """Where phase 3 is: iterations done, the policy version, the cost limit it trains under."""

    def __init__(self) -> None:
        self.iteration, self.version = 0, 0
        self.cost_limit: float = 0.0

    def state_dict(self) -> dict[str, Any]:
        return {"iteration": self.iteration, "version": self.version,
                "cost_limit": self.cost_limit}  # fmt: skip

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.iteration, self.version = int(state["iteration"]), int(state["version"])
        if state["cost_limit"] is not None:  # None: a run of before the limit was set up front
            self.cost_limit = float(state["cost_limit"])


def _weights(job: Phase3Job) -> Path:
    """The weights this machine's collectors read; one file per machine (written by its first
    rank: every rank holds the same weights after a DDP step), so a node-local run folder works
    and machines sharing one never write the same file."""
    name = "weights.safetensors" if job.node == 0 else f"weights-node{job.node}.safetensors"
    return job.phase_dir.root / name


def _collect(stream: Any, batch: IterationBatch, want: int, version: int, lag: int
             ) -> tuple[float, int]:  # fmt: skip
    """Fill ``batch`` with ``want`` samples of versions >= version - lag; (wait s, dropped)."""
    wait, dropped = 0.0, 0
    while len(batch) < want:
        t0 = time.perf_counter()
        sample = next(stream, None)
        wait += time.perf_counter() - t0
        if sample is None:  # the pool was closed under us
            raise CollectorsStalled("the rollout stream ended (the collector pool was closed)")
        if int(sample["version"]) < version - lag:
            dropped += 1
            continue
        batch.add(sample)
    batch.seal()
    return wait, dropped


def _advantages(batch: IterationBatch, lam: float) -> torch.Tensor:
    """Advantages normalised over all ranks' samples (OmniSafe), then combined with lambda."""
    adv_r = torch.from_numpy(batch.column("advantage")).double()
    adv_c = torch.from_numpy(batch.column("cost_advantage")).double()
    s = sum_over_ranks({"n": float(len(adv_r)), "r": float(adv_r.sum()), "rr": float((adv_r**2).sum()),
                        "c": float(adv_c.sum())})  # fmt: skip
    mean_r, mean_c = s["r"] / s["n"], s["c"] / s["n"]
    std_r = max((s["rr"] / s["n"] - mean_r**2), 0.0) ** 0.5
    # tj_models.normalize_advantages' convention (reward standardised, cost centred), with the
    # moments of all ranks' samples
    r = (adv_r - mean_r) / (std_r + 1e-8)
    c = adv_c - mean_c
    return lagrangian_advantage(r.float(), c.float(), lam)


def _episode_stats(episodes: list[dict[str, Any]]) -> dict[str, float]:
    """Sums over all ranks of the episodes that ended during this iteration's collection."""
    return sum_over_ranks({
        "n": float(len(episodes)), "cost": float(sum(e["cost"] for e in episodes)),
        "return": float(sum(e["return"] for e in episodes)),
        "died": float(sum(e["sumo_died"] for e in episodes)),
        "gridlock": float(sum(bool(e.get("gridlock")) for e in episodes)),
    })  # fmt: skip


def train_rank(job: Phase3Job) -> dict[str, Any] | None:
    """Train on this rank; rank 0 returns the summary, the others None."""
    cfg, p3, pdir = job.cfg, job.cfg.phase3, job.phase_dir
    info = start_rank(job)
    rank, world, device = info.rank, info.world_size, info.device

    agent = TrafficAgent.load(job.agent_dir)
    params = agent.freeze_for_phase(3)
    agent.gnn.to(device)
    learner = Learner(agent.controller, agent.shield).to(device)
    choice = tj_dist.choose_precision(cfg.amp.precision, device)
    amp = cfg.amp.to_config(choice.precision, device.type).build()
    accum = job.world.accumulation_steps
    model = tj_dist.wrap_ddp(learner, bucket_cap_mb=cfg.dist.bucket_cap_mb,
                             gradient_as_bucket_view=cfg.dist.gradient_as_bucket_view,
                             comm_hook=cfg.dist.comm_hook, accumulation_steps=accum)  # fmt: skip
    optimizer = torch.optim.AdamW(params, lr=p3.lr)
    acc = tj_dist.GradAccumulator(model, optimizer, steps=accum, amp=amp,
                                  clip_grad_norm=p3.grad_clip or None)  # fmt: skip
    lc = p3.lagrange
    lagrange = make_lagrange(LagrangeConfig(cost_limit=job.cost_limit, kind=lc.kind, init=lc.init,
                                            lr=lc.lr, upper_bound=lc.upper_bound, kp=lc.kp,
                                            ki=lc.ki, kd=lc.kd))  # fmt: skip
    progress = Progress()
    progress.cost_limit = job.cost_limit
    extra = {"lagrange": lagrange, "progress": progress}
    if job.resume and (loaded := latest_checkpoint(pdir.checkpoints)) is not None:
        tj_dist.restore_training_state(loaded.state, model=model, optimizer=optimizer, amp=amp,
                                       accumulator=acc, extra=extra)  # fmt: skip
        if rank == 0:
            log.info("resumed phase 3 from %s (iteration %d, policy version %d, lambda %.4f)",
                     loaded.path, progress.iteration, progress.version, lagrange.value)  # fmt: skip
    lagrange.cost_limit = float(progress.cost_limit)
    with tj_dist.rank_zero_only():
        if info.local_rank == 0:
            publish_weights(_weights(job), agent, progress.version)

    schema = rollout_schema(job.space)
    queue = LiveQueue(max_items=1 << 20, max_bytes=job.queue_bytes)
    spec = CollectorSpec(env_config=job.env_config, agent_dir=job.agent_dir,
                         weights=str(_weights(job)), fragment_steps=p3.collect.fragment_steps,
                         gamma=p3.gamma, lam=p3.gae_lambda, seed=cfg.run.seed * 100 + rank,
                         cost_scale=p3.cost_scale,
                         shield_threshold=p3.shield_threshold,
                         dz_guard=p3.guard.config())  # fmt: skip
    pool = CollectorPool(spec, job.collectors_per_rank, queue, name=f"rank{rank}")
    cache = EmbeddingCache(byte_bound(p3.cache, job.budget, default=0), enabled=p3.embedding_cache)
    CacheShrinker(cfg.monitor.to_config()).attach(cache)
    weights = LossWeights(clip=p3.clip, vf_coeff=p3.vf_coeff, cost_vf_coeff=p3.cost_vf_coeff,
                          shield_coeff=p3.shield_coeff, entropy=p3.entropy)  # fmt: skip
    logger = MetricsLogger(pdir.logs, LoggerConfig(console_every=0))
    bar = StepProgress("phase 3: PPO-Lagrangian", total=p3.iterations, start=progress.iteration,
                       enabled=rank == 0)  # fmt: skip
    per_rank = p3.samples_per_iteration // world
    # the first iteration of a run also waits for the collectors to start (imports, SUMO): the
    # steady-state fraction leaves it out
    totals = {"wait": 0.0, "wall": 0.0, "train": 0.0, "dropped": 0, "queue_peak": 0,
              "wait_steady": 0.0, "wall_steady": 0.0}  # fmt: skip
    first = progress.iteration
    try:
        if progress.iteration < p3.iterations:  # a resume of a finished run only exports
            pool.start()
        stream = iter(LiveGraphDataset(SampleStream(pool, p3.collect.timeout_s), schema,
                                       shuffle_buffer_bytes=0, validate=False))  # fmt: skip
        while progress.iteration < p3.iterations:
            it = progress.iteration
            t_it = time.perf_counter()
            batch = IterationBatch(schema, ram_bytes=byte_bound(p3.batch_ram, job.budget, default=0),
                                   spill_dir=pdir.root / "spill" / f"rank{rank}")  # fmt: skip
            wait, dropped = _collect(stream, batch, per_rank, progress.version,
                                     p3.collect.max_policy_lag)  # fmt: skip
            episodes = pool.episodes()
            eps = _episode_stats(episodes)
            mean_cost = eps["cost"] / eps["n"] if eps["n"] else None
            if mean_cost is not None:
                lagrange.update(mean_cost)  # OmniSafe's order: lambda first, then the policy
            lam = lagrange.value
            adv = _advantages(batch, lam)
            t_train = time.perf_counter()
            stats = _train_epochs(job, agent, model, acc, cache, batch, adv, weights, schema,
                                  device, it, rank)  # fmt: skip
            train_s = time.perf_counter() - t_train
            progress.version += 1
            progress.iteration += 1
            with tj_dist.rank_zero_only():
                if info.local_rank == 0:
                    publish_weights(_weights(job), agent, progress.version)
            wall = time.perf_counter() - t_it
            totals["wait"] += wait
            totals["wall"] += wall
            if it > first:
                totals["wait_steady"] += wait
                totals["wall_steady"] += wall
            totals["train"] += train_s
            totals["dropped"] += dropped
            totals["queue_peak"] = pool.stats.queue_peak
            metrics = {
                **stats, "lambda": lam, "cost_limit": progress.cost_limit,
                "episodes": eps["n"], "episode_cost_mean": mean_cost if mean_cost is not None else float("nan"),
                "episode_return_mean": eps["return"] / eps["n"] if eps["n"] else float("nan"),
                "episodes_sumo_died": eps["died"], "episodes_gridlock": eps["gridlock"],
                **sum_over_ranks({"samples/dropped_stale": float(dropped),
                                  "collectors/restarts": float(pool.stats.restarts)}),
                "time/data_wait_fraction": wait / wall, "time/iteration_s": wall,
                "time/train_s": train_s, "queue/bytes_peak": float(totals["queue_peak"]),
                "queue/bytes_bound": float(job.queue_bytes), "batch/spilled": float(batch.spilled),
                "policy_version": float(progress.version),
            }  # fmt: skip
            batch.close()
            cache.clear()
            logger.log(progress.iteration, metrics)
            bar.update(progress.iteration, cost=metrics["episode_cost_mean"], lam=lam)
            if progress.iteration % p3.checkpoint_every == 0 or progress.iteration == p3.iterations:
                state = tj_dist.training_state(step=progress.iteration, model=model,
                                               optimizer=optimizer, amp=amp, accumulator=acc,
                                               extra=extra)  # fmt: skip
                with tj_dist.rank_zero_only() as main:
                    if main:  # the candidate first: every checkpoint has one (phase3/select.py)
                        agent.save(candidate_dir(pdir, progress.iteration))
                        tj_dist.save_checkpoint(pdir.checkpoints, state, step=progress.iteration,
                                                keep=p3.keep_checkpoints)  # fmt: skip
    finally:
        bar.close()
        logger.close()
        pool.close()
    summary = _finish(job, agent, pool, totals, progress, lagrange.value)
    tj_dist.cleanup(info)
    return summary


def _train_epochs(job: Phase3Job, agent: TrafficAgent, model: Any, acc: Any, cache: EmbeddingCache,
                  batch: IterationBatch, adv: torch.Tensor, weights: LossWeights, schema: Any,
                  device: torch.device, it: int, rank: int) -> dict[str, float]:  # fmt: skip
    """``epochs`` shuffled passes over the batch in micro-batches; mean losses, epoch times."""
    p3 = job.cfg.phase3
    sums: dict[str, float] = {}
    n, epoch_s = 0, []
    for epoch in range(p3.epochs):
        t0 = time.perf_counter()
        order = np.random.default_rng([job.cfg.run.seed, rank, it, epoch]).permutation(len(batch))
        chunks = [order[i : i + p3.micro_batch] for i in range(0, len(order), p3.micro_batch)]
        for mb in acc.micro_batches(chunks):
            idx = mb.data
            gb = collate_graphs(batch.take(idx), schema=schema).to(device)
            encoded = cache.encode(agent.gnn, rollout_graph(gb), idx.tolist())
            with mb:
                loss = micro_batch_loss(model, encoded, gb, adv[idx].to(device), weights)
                mb.backward(loss.total)
            parts = {"loss/total": loss.total, "loss/policy": loss.ppo.policy,
                     "loss/value": loss.ppo.value, "loss/cost_value": loss.ppo.cost_value,
                     "loss/shield": loss.shield, "policy/entropy": loss.ppo.entropy,
                     "policy/approx_kl": loss.ppo.approx_kl,
                     "policy/clip_fraction": loss.ppo.clip_fraction}  # fmt: skip
            for k, v in parts.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach())
            n += 1
        epoch_s.append(time.perf_counter() - t0)
    out = {k: v / max(n, 1) for k, v in sums.items()}
    later = epoch_s[1:] or epoch_s
    out |= {"time/epoch_first_s": epoch_s[0], "time/epoch_later_s": float(np.mean(later)),
            "cache/hit_rate": cache.stats()["hit_rate"]}  # fmt: skip
    return out


def _finish(job: Phase3Job, agent: TrafficAgent, pool: CollectorPool, totals: dict[str, Any],
            progress: Progress, lam: float) -> dict[str, Any] | None:  # fmt: skip
    """Rank 0 saves the agent; every rank's data-path totals are reduced first."""
    s = sum_over_ranks({"wait": totals["wait"], "wall": totals["wall"], "train": totals["train"],
                        "wait_steady": totals["wait_steady"], "wall_steady": totals["wall_steady"],
                        "dropped": float(totals["dropped"]), "samples": float(pool.stats.samples),
                        "restarts": float(pool.stats.restarts)})  # fmt: skip
    with tj_dist.rank_zero_only() as main:
        if not main:
            return None
        agent.save(job.phase_dir.agent)
        return {"data_wait_fraction": s["wait"] / max(s["wall"], 1e-9),
                "data_wait_fraction_steady": (s["wait_steady"] / s["wall_steady"]
                                              if s["wall_steady"] else float("nan")),
                "train_fraction": s["train"] / max(s["wall"], 1e-9),
                "dropped_stale": s["dropped"], "collector_samples": s["samples"],
                "collector_restarts": s["restarts"], "queue_bytes_peak": totals["queue_peak"],
                "iterations": progress.iteration, "policy_version": progress.version,
                "cost_limit": progress.cost_limit, "lambda": lam}  # fmt: skip
