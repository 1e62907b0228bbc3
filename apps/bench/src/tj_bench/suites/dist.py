"""Suite ``dist``: what tj-dist's safety and DDP cost, against the plain alternative in one run.

1. Checkpoints (``_dist_checkpoint``): ``save_checkpoint`` against ``torch.save`` with and without
   fsync, ``load_latest`` (verified) against ``torch.load``; rounds interleaved.
2. Gradient accumulation over real process groups (``_dist_accumulate``): 2 gloo ranks on CPU;
   with CUDA also NCCL over min(2, GPUs) ranks. With a single GPU the NCCL group has one rank: the
   DDP hooks, NCCL kernels and stream syncs are real, inter-GPU traffic is not (said in a note).
"""

from __future__ import annotations

import math

from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._dist_accumulate import VARIANTS, run_accumulation
from tj_bench.suites._dist_checkpoint import checkpoint_round, make_state

__all__ = ["SUITE", "accumulation_ratios", "parse_sizes"]

OPTIONS = {
    "sizes_mib": "comma-separated checkpoint sizes in MiB (default 64,256; quick: 8)",
    "steps": "accumulation steps N per optimizer step (default 4); 8N micro-batches per round",
    "hidden": "hidden width of the 3-layer MLP (default 1024: 1.31 M parameters; quick: 128)",
    "gloo_ranks": "gloo ranks on CPU (default 2)",
    "nccl": "also measure NCCL when CUDA is present (default true)",
}


def parse_sizes(text: str) -> list[int]:
    """``"64,256"`` -> ``[64, 256]`` (MiB); sizes must be positive integers."""
    return parse_counts(text, "sizes_mib")


def accumulation_ratios(no_ddp: float, no_sync: float, sync_each: float) -> dict[str, float]:
    """``no_sync_speedup`` = sync_each / no_sync (what no_sync saves); ``ddp_overhead`` =
    no_sync / no_ddp (what DDP with one all-reduce per step costs over local training)."""

    def div(a: float, b: float) -> float:
        return a / b if b > 0 else math.nan

    return {"no_sync_speedup": div(sync_each, no_sync), "ddp_overhead": div(no_sync, no_ddp)}


def _checkpoints(ctx: SuiteContext, sizes: list[int]) -> None:
    states = {size: make_state(size) for size in sizes}
    for rep in ctx.repetitions("checkpoint rounds"):
        for size in sizes:
            t = checkpoint_round(states[size], ctx.workdir / "ckpt", rep)
            base = f"checkpoint/{size}MiB"
            for key, seconds in t.items():
                ctx.record(f"{base}/{key}", seconds, unit="s", better="lower")
            ctx.record(f"{base}/atomic_vs_fsync_save", t["save/atomic"] / t["save/fsync"],
                       unit="x", better="lower")  # fmt: skip
            ctx.record(f"{base}/verified_vs_plain_load", t["load/verified"] / t["load/plain"],
                       unit="x", better="lower")  # fmt: skip


def _accumulation(ctx: SuiteContext, backend: str, ranks: int, steps: int, hidden: int) -> None:
    out = run_accumulation(backend, ranks, steps, ctx.runs, hidden)
    times = out["times"]
    base = f"accumulate/{backend}"
    for rep in range(ctx.runs):
        for v in VARIANTS:
            ctx.record(f"{base}/{v}", times[v][rep], unit="s/step", better="lower")
        ratios = accumulation_ratios(*(times[v][rep] for v in VARIANTS))
        ctx.record(f"{base}/no_sync_speedup", ratios["no_sync_speedup"], unit="x", better="higher")
        ctx.record(f"{base}/ddp_overhead", ratios["ddp_overhead"], unit="x", better="lower")
    ctx.param(f"{backend}_ranks", ranks)
    ctx.param("parameters", out["parameters"])
    if backend == "gloo":
        ctx.param("gloo_threads_per_rank", out["threads"])


def run(ctx: SuiteContext) -> None:
    q = ctx.quick
    sizes = parse_sizes(ctx.option("sizes_mib", "8" if q else "64,256"))
    steps, hidden = ctx.option("steps", 4), ctx.option("hidden", 128 if q else 1024)
    gloo_ranks, want_nccl = ctx.option("gloo_ranks", 2), ctx.option("nccl", True)
    if steps < 1 or hidden < 1 or gloo_ranks < 1:
        raise ValueError("dist: steps, hidden and gloo_ranks must be >= 1")
    ctx.param("sizes_mib", ",".join(map(str, sizes)))
    ctx.param("accumulation_steps", steps)
    ctx.param("micro_batches_per_round", steps * 8)
    ctx.param("hidden", hidden)
    _checkpoints(ctx, sizes)
    _accumulation(ctx, "gloo", gloo_ranks, steps, hidden)
    gpus = 0
    if want_nccl and ctx.cuda:
        import torch

        gpus = torch.cuda.device_count()
    if gpus:
        _accumulation(ctx, "nccl", min(2, gpus), steps, hidden)
        if gpus == 1:
            ctx.note("NCCL with one GPU: a one-rank group. DDP's hooks, the NCCL all-reduce "
                     "kernels and stream syncs run for real; no gradient crosses a link, so "
                     "no_sync saves launch overhead only.")  # fmt: skip
    else:
        why = "disabled (--set dist.nccl=false)" if not want_nccl else "no CUDA device"
        ctx.unavailable("nccl", f"{why}: NCCL accumulation not measured")
    ctx.note("Checkpoint rounds interleave the variants (order flipped every other round); both "
             "loads read a just-written, page-cached file. Accumulation: every rank times the "
             "variants round by round inside one process group (a warm-up round first); the "
             "figures are rank 0's seconds per optimizer step.")  # fmt: skip


SUITE = Suite(
    name="dist",
    summary="tj-dist: crash-safe checkpoint cost, DDP and no_sync accumulation cost over real "
    "gloo process groups (NCCL when CUDA is present)",
    run=run,
    options=OPTIONS,
)
