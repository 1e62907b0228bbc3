"""Gradient accumulation over a real process group (``tj_dist.launch_local``): what DDP's
all-reduces cost and what ``no_sync`` saves.

Each rank times, interleaved round by round (the order flips on odd rounds), the same MLP
trained for ``steps * 8`` micro-batches of 32 rows with ``GradAccumulator``:

- ``no_ddp``: an unwrapped copy (no all-reduce at all: the baseline DDP is measured against);
- ``no_sync``: DDP with ``no_sync`` on all but the stepping micro-batch (one all-reduce per step);
- ``sync_each``: DDP with ``sync_each_micro_batch=True`` (one all-reduce per micro-batch).

The first round is a warm-up and is not returned.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["VARIANTS", "accumulation_rank", "run_accumulation"]

VARIANTS = ("no_ddp", "no_sync", "sync_each")
ROWS, FEATURES = 32, 256


def _mlp(hidden: int, device: Any) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
        nn.Linear(hidden, 1),
    ).to(device)  # fmt: skip


def accumulation_rank(steps: int, repeats: int, hidden: int, cuda: bool) -> dict[str, Any]:
    """Runs in every rank: seconds per optimizer step per variant, ``repeats`` rounds each."""
    import torch
    import torch.nn.functional as F

    import tj_dist

    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    models = {"no_ddp": _mlp(hidden, device)}
    models["no_sync"] = models["sync_each"] = tj_dist.wrap_ddp(
        _mlp(hidden, device), accumulation_steps=steps, device=device
    )
    optimizers = {"no_ddp": torch.optim.SGD(models["no_ddp"].parameters(), lr=1e-3)}
    optimizers["no_sync"] = optimizers["sync_each"] = torch.optim.SGD(
        models["no_sync"].parameters(), lr=1e-3
    )
    data = [torch.randn(ROWS, FEATURES + 1, device=device) for _ in range(steps * 8)]
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)
        torch.distributed.barrier()

    for rep in range(repeats + 1):  # round 0 is a warm-up
        for name in VARIANTS if rep % 2 == 0 else reversed(VARIANTS):
            model = models[name]
            acc = tj_dist.GradAccumulator(model, optimizers[name], steps=steps,
                                          sync_each_micro_batch=name == "sync_each")  # fmt: skip
            sync()
            t0 = time.perf_counter()
            for mb in acc.micro_batches(data):
                with mb:
                    out = model(mb.data[:, :FEATURES])
                    mb.backward(F.mse_loss(out, mb.data[:, FEATURES:]))
            sync()
            if rep:
                times[name].append((time.perf_counter() - t0) / acc.optimizer_steps)
    params = sum(p.numel() for p in models["no_ddp"].parameters())
    return {"times": times, "parameters": params, "threads": torch.get_num_threads()}


def run_accumulation(
    backend: str, ranks: int, steps: int, repeats: int, hidden: int
) -> dict[str, Any]:
    """Launch ``ranks`` local ranks on ``backend`` ("gloo" on CPU, "nccl" on GPUs); rank 0's
    result (every rank times the same collective-bound loop)."""
    import tj_dist

    results = tj_dist.launch_local(accumulation_rank, ranks, steps, repeats, hidden,
                                   backend == "nccl", backend=backend)  # fmt: skip
    return results[0]
