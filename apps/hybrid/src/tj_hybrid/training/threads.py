"""``torch_threads(n)``: run a block with ``n`` torch intra-op threads, restoring the old count.

Evaluation steps one small forward pass per SUMO decision (a few graphs). With more than one
thread, OpenMP's workers spin-wait between those tiny ops; on a loaded machine they are descheduled
and every op waits for them: one held-out episode took 85-215 s with 2 threads and 1.6 s with one
(2-core VM at load 6-9, phase 3's evaluation). The evaluations run under ``torch_threads(1)``.
Phase 2's PPO loop is the same case, learner included (tiny preset, minibatch 128, one 2-core VM
shared with other work): an iteration of 1,024 decisions took 4.6-5.6 s in every run with one
thread, and 5.2 s to 240 s with two (slow whenever other processes kept both cores busy); with
eight simulations per env runner 2.0 s, and 2.1-60 s with two threads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["torch_threads"]


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    import torch

    if n < 1:
        raise ValueError(f"torch_threads: n={n}, expected >= 1")
    old = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(old)
