"""Functions the tests run in spawned ranks and subprocesses (they must be importable by name).

Also a small CLI (`python _tjdist_workers.py train|saver ...`) for the resume and SIGKILL tests,
which need fresh processes.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import tj_dist

IN_DIM = 6


def make_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(IN_DIM, 16), nn.Tanh(), nn.Linear(16, 3))


def make_data(world: int, micro_batches: int, batch: int, seed: int = 1) -> torch.Tensor:
    """[world, micro_batches, batch, IN_DIM + 3]: inputs and targets of every rank's micro-batch."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(world, micro_batches, batch, IN_DIM + 3, generator=gen)


class OffByOneAccumulator(tj_dist.GradAccumulator):
    """The classic bug: sync the *first* micro-batch of a group instead of the stepping one."""

    def _syncs(self, position: int, is_last: bool) -> bool:
        return position % self.steps == 0


def _train_accumulated(
    data: torch.Tensor, steps: int, clip: float, off_by_one: bool
) -> dict[str, Any]:
    rank = dist.get_rank()
    model = tj_dist.wrap_ddp(make_model(), accumulation_steps=steps)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    cls = OffByOneAccumulator if off_by_one else tj_dist.GradAccumulator
    acc = cls(model, optimizer, steps=steps, clip_grad_norm=clip)
    syncs = []
    for mb in acc.micro_batches(list(data[rank])):
        with mb:
            out = model(mb.data[:, :IN_DIM])
            mb.backward(F.mse_loss(out, mb.data[:, IN_DIM:]))
        syncs.append(mb.sync)
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "syncs": syncs,
        "optimizer_steps": acc.optimizer_steps,
    }


def accumulation_worker(data: torch.Tensor, steps: int, clip: float) -> dict[str, Any]:
    """Train the correct accumulator and the off-by-one variant on this rank's shard."""
    return {
        "correct": _train_accumulated(data, steps, clip, off_by_one=False),
        "off_by_one": _train_accumulated(data, steps, clip, off_by_one=True),
    }


def write_pid(pid_dir: str) -> None:
    Path(pid_dir, f"{dist.get_rank()}.pid").write_text(str(os.getpid()))


def raise_on_rank_one(pid_dir: str) -> None:
    write_pid(pid_dir)
    if dist.get_rank() == 1:
        time.sleep(0.5)
        raise ValueError("boom from rank 1")
    dist.barrier()  # rank 0 would wait here for the default 30 min without fail-fast teardown


def die_on_rank_one(pid_dir: str) -> None:
    write_pid(pid_dir)
    if dist.get_rank() == 1:
        time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def failing_smoke_check(device: torch.device, world_size: int) -> None:
    if dist.get_rank() == 1:
        raise RuntimeError("injected transport failure")


def misc_worker(fallback_port: int, out_dir: str) -> dict[str, Any]:
    """Several group-level behaviours in one launch (each launch costs seconds of startup)."""
    rank = dist.get_rank()
    result: dict[str, Any] = {}

    # comm hooks: compressed all-reduce still averages the gradients across ranks
    for hook in ("fp16", "bf16"):
        torch.manual_seed(0)
        model = tj_dist.wrap_ddp(nn.Linear(4, 1, bias=False), comm_hook=hook)
        x = torch.full((2, 4), float(rank + 1))
        model(x).sum().backward()
        result[f"grad_{hook}"] = model.module.weight.grad.clone()

    # refusals that need a real group
    try:
        tj_dist.wrap_ddp(nn.Linear(2, 2), static_graph=True, accumulation_steps=4)
    except ValueError as exc:
        result["static_graph_error"] = str(exc)
    ddp = tj_dist.wrap_ddp(nn.Linear(2, 2))
    try:
        tj_dist.freeze(ddp, "weight")
    except ValueError as exc:
        result["freeze_ddp_error"] = str(exc)

    # rank_zero_only: the others wait until rank 0's (slow) write is done
    marker = Path(out_dir, "written-by-rank0")
    with tj_dist.rank_zero_only() as main:
        if main:
            time.sleep(1.0)
            marker.write_text("done")
    result["saw_marker_after_context"] = marker.exists()
    # ... and a failure on rank 0 reaches the others instead of leaving them waiting
    try:
        with tj_dist.rank_zero_only() as main:
            if main:
                raise OSError("disk full (injected)")
        result["rank_zero_failure"] = "no error"
    except (OSError, RuntimeError) as exc:
        result["rank_zero_failure"] = f"{type(exc).__name__}: {exc}"

    # save_checkpoint is rank 0's job: other ranks return at once
    result["nonmain_save"] = (
        None if rank == 0 else tj_dist.save_checkpoint(out_dir, {"a": 1}, step=1)
    )

    # every rank's RNG state is gathered into the training state
    torch.manual_seed(100 + rank)
    state = tj_dist.training_state(step=1, model=ddp)
    result["rng_ranks"] = len(state["rng"])
    result["rng_distinct"] = not torch.equal(state["rng"][0]["torch"], state["rng"][1]["torch"])

    # a transport that fails its smoke test on one rank moves every rank to a fresh gloo group
    tj_dist.cleanup()
    os.environ["MASTER_PORT"] = str(fallback_port)
    info = tj_dist.init_distributed("gloo", smoke_test=failing_smoke_check)
    t = torch.ones(1)
    dist.all_reduce(t)
    result["fallback"] = (info.backend, info.fallback_reason, float(t))
    return result


def nccl_worker() -> dict[str, Any]:
    """GPU only: the group launch_local built with NCCL, plus an explicit smoke test."""
    tj_dist.cleanup()
    info = tj_dist.init_distributed("nccl", smoke_test=True)
    t = torch.full((1,), float(info.rank + 1), device=info.device)
    dist.all_reduce(t)
    return {
        "device": str(info.device),
        "backend": info.backend,
        "fallback_reason": info.fallback_reason,
        "sum": float(t),
    }


# ---------------------------------------------------------------- resume: a stateful training run


class SeededSampler:
    """A stateful sampler (torchdata-style state_dict/load_state_dict) drawing from its own RNG."""

    def __init__(self, size: int, seed: int) -> None:
        self.size = size
        self.gen = torch.Generator().manual_seed(seed)

    def draw(self, n: int) -> torch.Tensor:
        return torch.randint(0, self.size, (n,), generator=self.gen)

    def state_dict(self) -> dict[str, Any]:
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.gen.set_state(state["gen"])


class Run:
    """Everything a run owns: model with dropout, AdamW, a scheduler, fp16 GradScaler on CPU."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.model = nn.Sequential(
            nn.Linear(IN_DIM, 32), nn.ReLU(), nn.Dropout(0.2), nn.Linear(32, 1)
        )
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3, gamma=0.7)
        self.amp = tj_dist.AmpConfig(
            precision="fp16", device_type="cpu", init_scale=2.0**8, growth_interval=2
        ).build()
        self.acc = tj_dist.GradAccumulator(
            self.model,
            self.optimizer,
            steps=2,
            amp=self.amp,
            clip_grad_norm=5.0,
            scheduler=self.scheduler,
        )
        self.sampler = SeededSampler(1000, seed=7)
        self.pool = torch.randn(1000, IN_DIM + 1, generator=torch.Generator().manual_seed(3))
        self.step = 0

    def micro_batches(self) -> list[torch.Tensor]:
        # python, numpy and torch global RNGs all shape the data: all must be restored exactly
        n = 8 + random.randint(0, 4)
        batch = self.pool[self.sampler.draw(n)].clone()
        batch[:, :IN_DIM] += float(np.random.normal(0, 0.1)) + 0.05 * torch.randn(n, IN_DIM)
        return list(batch.split(4))

    def train_step(self) -> None:
        for mb in self.acc.micro_batches(self.micro_batches()):
            with mb:
                out = self.model(mb.data[:, :IN_DIM])
                mb.backward(F.mse_loss(out.float(), mb.data[:, IN_DIM:]))
        self.step += 1

    def state(self) -> dict[str, Any]:
        return tj_dist.training_state(
            step=self.step,
            epoch=0,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            amp=self.amp,
            accumulator=self.acc,
            extra={"sampler": self.sampler},
        )

    def restore(self, state: dict[str, Any]) -> None:
        self.step, _ = tj_dist.restore_training_state(
            state,
            model=self.model,
            optimizer=self.optimizer,
            scheduler=self.scheduler,
            amp=self.amp,
            accumulator=self.acc,
            extra={"sampler": self.sampler},
        )


def train_cli(ckpt_dir: str, steps: int, out: str, resume: bool, save_at: int | None) -> None:
    torch.set_num_threads(1)
    random.seed(11)
    np.random.seed(12)
    torch.manual_seed(13)
    run = Run()
    if resume:
        loaded = tj_dist.load_latest(ckpt_dir)
        assert loaded is not None, f"no checkpoint in {ckpt_dir}"
        # scramble every global RNG: only the checkpoint may decide what comes next
        random.seed(999)
        np.random.seed(999)
        torch.manual_seed(999)
        run.restore(loaded.state)
    while run.step < steps:
        run.train_step()
        if save_at is not None and run.step == save_at:
            tj_dist.save_checkpoint(ckpt_dir, run.state(), step=run.step)
    torch.save(
        {
            "params": [p.detach() for p in run.model.parameters()],
            "scale": run.amp.scale,
            "skipped": run.amp.skipped_steps,
            "lr": run.optimizer.param_groups[0]["lr"],
        },
        out,
    )


def saver_cli(ckpt_dir: str, megabytes: int) -> None:
    """Save ever-larger step numbers forever (until killed); each state is tagged with its step."""
    step = 0
    numel = megabytes * 2**20 // 4
    while True:
        step += 1
        state = {"step": step, "payload": torch.full((numel,), float(step))}
        tj_dist.save_checkpoint(ckpt_dir, state, step=step, keep=2)
        print(f"saved {step}", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="cmd", required=True)
    train = sub.add_parser("train")
    train.add_argument("--ckpt-dir", required=True)
    train.add_argument("--steps", type=int, required=True)
    train.add_argument("--out", required=True)
    train.add_argument("--resume", action="store_true")
    train.add_argument("--save-at", type=int, default=None)
    saver = sub.add_parser("saver")
    saver.add_argument("--ckpt-dir", required=True)
    saver.add_argument("--megabytes", type=int, default=64)
    args = parser.parse_args()
    if args.cmd == "train":
        train_cli(args.ckpt_dir, args.steps, args.out, args.resume, args.save_at)
    else:
        saver_cli(args.ckpt_dir, args.megabytes)
    sys.exit(0)
