"""Pure functions that decide sample order and partitions (no I/O, no state).

Every order is a function of (seed, epoch, sizes) only, so every rank and worker computes the same
global order independently and resume is a matter of skipping a count.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = [
    "chunk_shuffle_order",
    "dist_rank_world",
    "epoch_rng",
    "pack_by_budget",
    "round_robin_consumed",
    "split_even",
]


def epoch_rng(seed: int, epoch: int, *extra: int) -> np.random.Generator:
    """Independent, reproducible stream for (seed, epoch, extra...)."""
    return np.random.default_rng([int(seed) & 0xFFFFFFFF, int(epoch), *(int(e) for e in extra)])


def chunk_shuffle_order(
    shard_offsets: np.ndarray,
    *,
    seed: int,
    epoch: int,
    window_shards: int = 1,
    shuffle: bool = True,
) -> np.ndarray:
    """Global sample order: shards in a random order, samples shuffled within groups of
    `window_shards` consecutive (already permuted) shards. int64 [N]."""
    off = np.asarray(shard_offsets, np.int64)
    n = int(off[-1])
    if not shuffle:
        return np.arange(n, dtype=np.int64)
    if window_shards < 1:
        raise ValueError(f"window_shards={window_shards}: expected >= 1")
    rng = epoch_rng(seed, epoch)
    perm = rng.permutation(len(off) - 1)
    out = np.empty(n, np.int64)
    pos = 0
    for g in range(0, len(perm), window_shards):
        group = perm[g : g + window_shards]
        idx = np.concatenate([np.arange(off[k], off[k + 1]) for k in group])
        rng.shuffle(idx)
        out[pos : pos + len(idx)] = idx
        pos += len(idx)
    return out


def split_even(items: np.ndarray, rank: int, world_size: int, *, drop_last: bool) -> np.ndarray:
    """Rank's contiguous part of `items`, every rank the same length: the tail is dropped
    (drop_last) or padded by repeating items from the start (like DistributedSampler)."""
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank}: expected 0 <= rank < world_size={world_size}")
    n = len(items)
    per = n // world_size if drop_last else -(-n // world_size)
    total = per * world_size
    if total > n:
        items = np.concatenate([items, np.resize(items, total - n)])
    return items[rank * per : (rank + 1) * per]


def pack_by_budget(sizes: Sequence[tuple[np.ndarray, float]]) -> tuple[np.ndarray, int]:
    """Greedy packing of samples (in the given order) into batches under every (size, cap):
    each batch is the longest prefix whose summed sizes stay <= cap for all caps (at least one
    sample). Returns (cut positions int64 [nb+1], number of single samples over a cap)."""
    n = len(sizes[0][0])
    cums = [(np.concatenate([[0], np.cumsum(s, dtype=np.float64)]), float(cap)) for s, cap in sizes]
    cuts, start, oversized = [0], 0, 0
    while start < n:
        end = n
        for c, cap in cums:
            end = min(end, int(np.searchsorted(c, c[start] + cap, side="right")) - 1)
        if end <= start:
            end, oversized = start + 1, oversized + 1
        cuts.append(end)
        start = end
    return np.asarray(cuts, np.int64), oversized


def round_robin_consumed(consumed: int, counts: Sequence[int]) -> tuple[list[int], int]:
    """After `consumed` items of a DataLoader that takes one item from each worker in turn
    (skipping exhausted workers): (items delivered by each worker, the worker whose turn is next).
    """
    taken = [0] * len(counts)
    left = int(consumed)
    if left > sum(counts):
        raise ValueError(f"consumed={consumed} exceeds the {sum(counts)} items of the epoch")
    active = [w for w, c in enumerate(counts) if c > 0]
    while left > 0 and active:
        rounds = min(min(counts[w] - taken[w] for w in active), left // len(active))
        if rounds == 0:
            for w in active[:left]:
                taken[w] += 1
            return taken, active[left]
        for w in active:
            taken[w] += rounds
        left -= rounds * len(active)
        active = [w for w in active if taken[w] < counts[w]]
    return taken, (active[0] if active else 0)


def dist_rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Explicit values, else torch.distributed's when initialised, else (0, 1)."""
    if rank is not None and world_size is not None:
        r, w = int(rank), int(world_size)
    else:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            r = dist.get_rank() if rank is None else int(rank)
            w = dist.get_world_size() if world_size is None else int(world_size)
        else:
            r, w = (
                (0 if rank is None else int(rank)),
                (1 if world_size is None else int(world_size)),
            )
    if w < 1 or not 0 <= r < w:
        raise ValueError(
            f"rank={r}, world_size={w}: expected world_size >= 1 and 0 <= rank < world_size"
        )
    return r, w
