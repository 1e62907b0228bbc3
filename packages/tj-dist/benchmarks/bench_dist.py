"""What tj-dist's safety costs, measured against the plain alternative in the same run.

    uv run python packages/tj-dist/benchmarks/bench_dist.py [--sizes-mb 64 256] [--repeats 3]
                                                            [--out results.json]

1. Checkpoint save: `save_checkpoint` (temp file, sha256 while writing, fsync, rename, marker)
   versus a plain `torch.save` to the final name (not crash-safe). Load: `load_latest` (size and
   sha256 check, then torch.load weights_only) versus a plain `torch.load(weights_only=True)`.
2. Accumulation over 2 gloo ranks (launch_local): `GradAccumulator` with DDP `no_sync` (one
   all-reduce per optimizer step) versus `sync_each_micro_batch=True` (one per micro-batch).

Variants are interleaved and each timing is the median of `--repeats` runs. Prints a markdown
table and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import tj_dist


def _state(megabytes: int) -> dict[str, Any]:
    numel = megabytes * 2**20 // 4
    # several tensors, like a model + optimizer state, rather than one blob
    return {f"t{i}": torch.randn(numel // 8) for i in range(8)} | {"step": 1}


def bench_checkpoint(sizes_mb: list[int], repeats: int, root: Path) -> list[dict[str, Any]]:
    rows = []
    for size in sizes_mb:
        state = _state(size)
        keys = ("plain_save", "fsync_save", "atomic_save", "plain_load", "verified_load")
        times: dict[str, list[float]] = {k: [] for k in keys}
        for rep in range(repeats):
            plain_dir, atomic_dir = root / f"plain-{size}-{rep}", root / f"atomic-{size}-{rep}"
            fsync_dir = root / f"fsync-{size}-{rep}"
            plain_dir.mkdir()
            fsync_dir.mkdir()
            order = [("plain", plain_dir), ("fsync", fsync_dir), ("atomic", atomic_dir)]
            if rep % 2:
                order.reverse()  # interleave: neither variant always runs on a warmer disk
            for kind, directory in order:
                t0 = time.perf_counter()
                if kind == "plain":
                    torch.save(state, directory / "ckpt.pt")
                elif kind == "fsync":  # durable but not atomic: what a careful script does
                    with open(directory / "ckpt.pt", "wb") as file:
                        torch.save(state, file)
                        file.flush()
                        os.fsync(file.fileno())
                else:
                    tj_dist.save_checkpoint(directory, state, step=1)
                times[f"{kind}_save"].append(time.perf_counter() - t0)
            os.sync()  # both loads read a just-written, page-cached file: same footing
            for kind, directory in order:
                if kind == "fsync":
                    continue
                t0 = time.perf_counter()
                if kind == "plain":
                    torch.load(directory / "ckpt.pt", weights_only=True)
                    times["plain_load"].append(time.perf_counter() - t0)
                else:
                    tj_dist.load_latest(directory)
                    times["verified_load"].append(time.perf_counter() - t0)
            for directory in (plain_dir, fsync_dir, atomic_dir):
                shutil.rmtree(directory)
        rows.append(
            {"size_mb": size, **{k: statistics.median(v) for k, v in times.items()}, "runs": times}
        )
    return rows


def _accumulation_rank(
    steps: int, micro_batches: int, repeats: int, hidden: int
) -> dict[str, list[float]]:
    """Runs in each rank: time no_sync vs sync-every-micro-batch, interleaved."""
    torch.manual_seed(0)
    model = tj_dist.wrap_ddp(
        nn.Sequential(
            nn.Linear(256, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, 1),
        ),
        accumulation_steps=steps,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = [torch.randn(32, 257) for _ in range(micro_batches)]
    times: dict[str, list[float]] = {"no_sync": [], "sync_each": []}
    for rep in range(repeats + 1):  # the first round is a warm-up
        variants = [("no_sync", False), ("sync_each", True)]
        if rep % 2:
            variants.reverse()
        for name, sync_each in variants:
            acc = tj_dist.GradAccumulator(
                model, optimizer, steps=steps, sync_each_micro_batch=sync_each
            )
            torch.distributed.barrier()
            t0 = time.perf_counter()
            for mb in acc.micro_batches(data):
                with mb:
                    mb.backward(F.mse_loss(model(mb.data[:, :256]), mb.data[:, 256:]))
            torch.distributed.barrier()
            if rep:
                times[name].append((time.perf_counter() - t0) / acc.optimizer_steps)
    return times


def bench_accumulation(repeats: int, steps: int = 4, hidden: int = 1024) -> dict[str, Any]:
    micro_batches = steps * 8
    results = tj_dist.launch_local(
        _accumulation_rank, 2, steps, micro_batches, repeats, hidden, backend="gloo"
    )
    params = (256 * hidden + hidden) + (hidden * hidden + hidden) + (hidden + 1)
    times = results[0]
    return {
        "ranks": 2,
        "accumulation_steps": steps,
        "parameters": params,
        "no_sync_s_per_step": statistics.median(times["no_sync"]),
        "sync_each_s_per_step": statistics.median(times["sync_each"]),
        "runs": times,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes-mb", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--dir", default=None, help="where to write checkpoints (default: a temp dir)"
    )
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    args = parser.parse_args()
    if args.repeats < 3:
        parser.error("--repeats must be >= 3 (medians of fewer runs are not reported)")
    root = Path(tempfile.mkdtemp(prefix="tj-dist-bench-", dir=args.dir))
    try:
        ckpt = bench_checkpoint(args.sizes_mb, args.repeats, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    acc = bench_accumulation(args.repeats)
    env = tj_dist.detect_environment()
    machine = f"{platform.node()}: {env.cpu_count} CPUs, {platform.python_version()}, torch {torch.__version__}"
    print(f"\nmachine: {machine}; medians of {args.repeats} interleaved runs\n")
    print(
        "| checkpoint | torch.save | torch.save + fsync | save_checkpoint (atomic) "
        "| torch.load | load_latest (verified) |"
    )
    print("|---|---|---|---|---|---|")
    for r in ckpt:
        print(
            f"| {r['size_mb']} MB | {r['plain_save']:.3f} s | {r['fsync_save']:.3f} s | "
            f"{r['atomic_save']:.3f} s ({r['atomic_save'] / r['fsync_save']:.2f}x) | "
            f"{r['plain_load']:.3f} s | {r['verified_load']:.3f} s "
            f"({r['verified_load'] / r['plain_load']:.2f}x) |"
        )
    print(
        f"\n| accumulation, 2 gloo ranks, N={acc['accumulation_steps']}, {acc['parameters'] / 1e6:.2f} M params "
        "| s per optimizer step |"
    )
    print("|---|---|")
    print(f"| no_sync (1 all-reduce per step) | {acc['no_sync_s_per_step']:.4f} |")
    print(
        f"| sync_each_micro_batch (N all-reduces) | {acc['sync_each_s_per_step']:.4f} "
        f"({acc['sync_each_s_per_step'] / acc['no_sync_s_per_step']:.2f}x) |"
    )
    if args.out:
        Path(args.out).write_text(
            json.dumps(
                {
                    "machine": machine,
                    "repeats": args.repeats,
                    "checkpoint": ckpt,
                    "accumulation": acc,
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    sys.exit(main())
