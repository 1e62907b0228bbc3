"""One training function, four ways to run it: single process, launch_local, torchrun, Ray Train.

    uv run python packages/tj-dist/examples/train_anywhere.py                      # one process
    uv run python packages/tj-dist/examples/train_anywhere.py --local 2            # 2 local ranks
    uv run torchrun --nproc-per-node=2 packages/tj-dist/examples/train_anywhere.py # torchrun
    uv run python packages/tj-dist/examples/train_anywhere.py --ray 2              # Ray Train

`train_loop(config)` calls `init_distributed()`, which joins torchrun's group, finds the group Ray
Train or launch_local already created (no-op), or runs alone. It trains a small regression model
with DDP, AMP, gradient accumulation and an atomic checkpoint, and returns a summary dict.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

import tj_dist

DEFAULTS: dict[str, Any] = {
    "backend": "auto",
    "precision": "auto",
    "accumulation": 4,
    "micro_batch": 16,
    "micro_batches": 24,  # per rank and epoch: 6 optimizer steps
    "epochs": 2,
    "lr": 0.05,
    "checkpoint_dir": None,
}


def _data(rank: int, count: int, batch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A fixed regression task (same weights everywhere), a different slice of it per rank."""
    true_w = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    gen = torch.Generator().manual_seed(1000 + rank)
    xs = torch.randn(count, batch, 8, generator=gen)
    return [(x, x @ true_w + 0.01 * torch.randn(batch, 1, generator=gen)) for x in xs]


def train_loop(config: dict[str, Any]) -> dict[str, Any]:
    """The training function. `config` must stay a required parameter: Ray Train passes the
    config only to functions with exactly one required argument."""
    cfg = {**DEFAULTS, **config}
    info = tj_dist.init_distributed(cfg["backend"])
    torch.manual_seed(0)  # same initial weights on every rank (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1)).to(info.device)
    model = tj_dist.wrap_ddp(model, accumulation_steps=cfg["accumulation"])
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    choice = tj_dist.choose_precision(cfg["precision"], info.device)
    amp = tj_dist.AmpConfig.from_choice(choice).build()
    acc = tj_dist.GradAccumulator(
        model, optimizer, steps=cfg["accumulation"], amp=amp, clip_grad_norm=1.0
    )
    batches = _data(info.rank, cfg["micro_batches"], cfg["micro_batch"])
    losses = []
    for _epoch in range(cfg["epochs"]):
        for mb in acc.micro_batches(batches):
            x, y = (t.to(info.device) for t in mb.data)
            with mb:
                loss = F.mse_loss(model(x).float(), y)
                mb.backward(loss)
            losses.append(loss.detach().item())
    checkpoint = None
    if cfg["checkpoint_dir"]:
        state = tj_dist.training_state(
            step=acc.optimizer_steps, epoch=cfg["epochs"], model=model, optimizer=optimizer, amp=amp
        )
        with tj_dist.rank_zero_only() as main:
            if main:
                checkpoint = str(
                    tj_dist.save_checkpoint(cfg["checkpoint_dir"], state, step=acc.optimizer_steps)
                )
    flat = torch.cat([p.detach().flatten().cpu() for p in model.parameters()])
    agree = True
    if info.distributed:
        everyone = [torch.zeros_like(flat) for _ in range(info.world_size)]
        dist.all_gather(everyone, flat.to(info.device) if info.backend == "nccl" else flat)
        agree = all(torch.equal(everyone[0].cpu(), t.cpu()) for t in everyone)
    summary = {
        "rank": info.rank,
        "world_size": info.world_size,
        "backend": info.backend,
        "precision": choice.precision,
        "optimizer_steps": acc.optimizer_steps,
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "ranks_agree": agree,
        "checkpoint": checkpoint,
    }
    tj_dist.cleanup(info)  # leaves Ray Train's own group alone
    return summary


def run_ray(
    config: dict[str, Any], num_workers: int, storage_path: str, use_gpu: bool = False
) -> dict[str, Any]:
    """Run `train_loop` on `num_workers` Ray Train workers (Ray must be initialised or reachable)."""
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    trainer = TorchTrainer(
        train_loop,
        train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=num_workers, use_gpu=use_gpu),
        run_config=RunConfig(storage_path=storage_path, name="tj-dist-train-anywhere"),
    )
    result = trainer.fit()
    return result.return_value  # rank 0's return value (Ray Train v2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--local", type=int, metavar="N", help="spawn N local ranks (launch_local)")
    parser.add_argument("--ray", type=int, metavar="N", help="run on N Ray Train workers")
    parser.add_argument(
        "--ray-address", default=None, help="join this Ray cluster (default: start one)"
    )
    parser.add_argument("--gpu", action="store_true", help="Ray Train: one GPU per worker")
    parser.add_argument(
        "--storage-path",
        default=None,
        help="Ray Train run storage; on several machines a path all of them share (NFS, S3)",
    )
    parser.add_argument("--checkpoint-dir", default=None)
    args = parser.parse_args()
    config = {"checkpoint_dir": args.checkpoint_dir}
    if args.local:
        result: Any = tj_dist.launch_local(train_loop, args.local, config)
    elif args.ray:
        import ray

        ray.init(address=args.ray_address, include_dashboard=False)
        try:
            storage = args.storage_path or tempfile.mkdtemp(prefix="tj-dist-ray-")
            result = run_ray(config, args.ray, str(Path(storage).resolve()), use_gpu=args.gpu)
        finally:
            ray.shutdown()
    else:
        result = train_loop(config)  # single process, or one rank under torchrun
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
