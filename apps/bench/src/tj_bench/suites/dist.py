"""Suite ``dist``: what tj-dist's safety and DDP cost, against the plain alternative in one run.

1. Checkpoints: ``save_checkpoint`` (temp file, sha256 while writing, fsync, rename, marker)
   against a plain ``torch.save`` to the final name (not crash-safe) and a ``torch.save`` + fsync
   (durable, not atomic: what a careful script does); ``load_latest`` (size and sha256 check,
   then ``torch.load(weights_only=True)``) against a plain ``torch.load(weights_only=True)``;
   rounds interleaved.
2. Gradient accumulation over real process groups (``_dist_accumulate``): 2 gloo ranks on CPU;
   with CUDA also NCCL over min(2, GPUs) ranks. With a single GPU the NCCL group has one rank: the
   DDP hooks, NCCL kernels and stream syncs are real, inter-GPU traffic is not (said in a note).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

from tj_bench.measure import ratio, timed
from tj_bench.suite import Suite, SuiteContext, parse_counts
from tj_bench.suites._dist_accumulate import VARIANTS, run_accumulation

__all__ = ["SAVES", "SUITE", "accumulation_ratios", "checkpoint_round", "make_state"]

SAVES = ("plain", "fsync", "atomic")

OPTIONS = {
    "sizes_mib": "comma-separated checkpoint sizes in MiB (default 64,256; quick: 8)",
    "steps": "accumulation steps N per optimizer step (default 4); 8N micro-batches per round",
    "hidden": "hidden width of the 3-layer MLP (default 1024: 1.31 M parameters; quick: 128)",
    "gloo_ranks": "gloo ranks on CPU (default 2)",
    "nccl": "also measure NCCL when CUDA is present (default true)",
}


def make_state(mib: int) -> dict[str, Any]:
    """About ``mib`` MiB of float32 in 8 tensors (like a model + optimizer state, not one blob)."""
    import torch

    numel = mib * 2**20 // 4
    return {f"t{i}": torch.randn(numel // 8) for i in range(8)} | {"step": 1}


def _save(kind: str, directory: Path, state: dict[str, Any]) -> None:
    import torch

    import tj_dist

    if kind == "plain":
        torch.save(state, directory / "ckpt.pt")
    elif kind == "fsync":
        with open(directory / "ckpt.pt", "wb") as file:
            torch.save(state, file)
            file.flush()
            os.fsync(file.fileno())
    else:
        tj_dist.save_checkpoint(directory, state, step=1)


def _load(kind: str, directory: Path) -> None:
    import torch

    import tj_dist

    if kind == "plain":
        torch.load(directory / "ckpt.pt", weights_only=True)
    elif tj_dist.load_latest(directory) is None:
        raise RuntimeError(f"load_latest found no checkpoint in {directory}")


def checkpoint_round(state: dict[str, Any], root: Path, rep: int) -> dict[str, float]:
    """One interleaved round: seconds for ``save/<kind>`` and ``load/plain``, ``load/verified``.

    The order flips on odd rounds, so no variant always writes to a warmer disk; both loads read
    a just-written, page-cached file (``os.sync`` first): the same footing.
    """
    dirs = {kind: root / f"{kind}-{rep}" for kind in SAVES}
    dirs["plain"].mkdir(parents=True)
    dirs["fsync"].mkdir(parents=True)  # save_checkpoint makes its own directory
    order = list(SAVES) if rep % 2 == 0 else list(reversed(SAVES))
    out: dict[str, float] = {}
    try:
        for kind in order:
            out[f"save/{kind}"] = timed(lambda k=kind: _save(k, dirs[k], state))[1]
        os.sync()
        for kind in (k for k in order if k != "fsync"):
            load = "load/plain" if kind == "plain" else "load/verified"
            out[load] = timed(lambda k=kind: _load(k, dirs[k]))[1]
    finally:
        for directory in dirs.values():
            shutil.rmtree(directory, ignore_errors=True)
    return out


def accumulation_ratios(no_ddp: float, no_sync: float, sync_each: float) -> dict[str, float]:
    """``no_sync_speedup`` = sync_each / no_sync (what no_sync saves); ``ddp_overhead`` =
    no_sync / no_ddp (what DDP with one all-reduce per step costs over local training)."""
    return {"no_sync_speedup": ratio(sync_each, no_sync), "ddp_overhead": ratio(no_sync, no_ddp)}


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
    sizes = parse_counts(ctx.option("sizes_mib", "8" if q else "64,256"), "dist.sizes_mib")
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
