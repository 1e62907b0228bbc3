"""`StreamingGraphDataset`: an IterableDataset that streams shards sequentially.

Partition (pure, from seed and epoch): shards in a random order form the global stream; rank r
takes a contiguous, equal-length part (padded with repeats or dropped); DataLoader worker w takes
a contiguous sub-part of that. Samples are read in blocks with coalesced reads and pass through
a shuffle buffer bounded in bytes. Exact mid-epoch resume (`tj_data.state`; "consumed" counts
the items the DataLoader delivered on this rank: samples, or batches with `batch_size`): the
stream is replayed on positions and sizes only (no data read) up to the consumed count; with
several DataLoader workers the per-worker counts follow the DataLoader's round-robin (see
`round_robin_consumed`), so the resumed loader needs the same `num_workers` (`PlannedLoader`
records and checks it) and, with workers, `batch_size` set here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any, Literal

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from tj_data.backends import HDF5ReadOptions
from tj_data.batch import GraphBatch
from tj_data.collate import BatchTransform, GraphCollator
from tj_data.gather import gather_samples
from tj_data.mapped import as_store
from tj_data.order import dist_rank_world, epoch_rng, round_robin_consumed, split_even
from tj_data.schema import Schema
from tj_data.shuffle_buffer import ByteShuffleBuffer
from tj_data.state import StreamPosition
from tj_data.store import GraphStore

__all__ = ["StreamingGraphDataset"]


class StreamingGraphDataset(StreamPosition, IterableDataset):
    """Stream a store's samples (or batches, when `batch_size` is set) for one rank.

    Args:
        store: GraphStore or path (npy or HDF5).
        rank, world_size: default to torch.distributed's when initialised, else 0 and 1.
        uneven: "pad" (repeat samples from the start) or "drop" so every rank streams the same
            number of samples; DDP never waits for a rank that ran out.
        shuffle: random shard order + shuffle buffer; False streams in store order.
        shuffle_buffer_bytes: capacity of the shuffle buffer (decoded sample bytes).
        batch_size: yield collated `GraphBatch`es (use DataLoader(batch_size=None)); needed for
            an exact resume with several DataLoader workers.
        read_block: samples read per coalesced read.
        dequantize: "host" decodes quantised fields in the collate, "device" leaves them for
            `batch.to(device).dequantize()`.
    Each `__iter__` pass uses `epoch`, then advances it (so persistent workers move on by
    themselves); `set_epoch(e)` sets the next pass's epoch.
    """

    def __init__(
        self,
        store: GraphStore | str | os.PathLike[str],
        *,
        fields: Sequence[str] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        shuffle_buffer_bytes: int = 32 << 20,
        rank: int | None = None,
        world_size: int | None = None,
        uneven: Literal["pad", "drop"] = "pad",
        batch_size: int | None = None,
        drop_last_batch: bool = False,
        read_block: int = 256,
        transforms: Sequence[BatchTransform] = (),
        dequantize: str = "host",
        hdf5: HDF5ReadOptions | None = None,
    ) -> None:
        super().__init__()
        if uneven not in ("pad", "drop"):
            raise ValueError(f"uneven={uneven!r}: expected 'pad' or 'drop'")
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: expected >= 1 or None")
        if read_block < 1 or shuffle_buffer_bytes < 0:
            raise ValueError("read_block must be >= 1 and shuffle_buffer_bytes >= 0")
        self.store = as_store(store, hdf5=hdf5)
        self.schema: Schema = self.store.schema.select(fields)
        self.rank, self.world_size = dist_rank_world(rank, world_size)
        self.seed, self.shuffle, self.uneven = seed, shuffle, uneven
        self.shuffle_buffer_bytes = shuffle_buffer_bytes if shuffle else 0
        self.batch_size, self.drop_last_batch, self.read_block = (
            batch_size,
            drop_last_batch,
            read_block,
        )
        self.collate_fn = GraphCollator(self.schema, transforms, dequantize=dequantize)
        self._init_position()  # "consumed" counts skipped items too

    # ----- partition (pure) --------------------------------------------------------------
    def rank_indices(self, epoch: int) -> np.ndarray:
        """This rank's stream of global sample indices for `epoch`, before the shuffle buffer."""
        off = self.store.shard_offsets
        k = len(off) - 1
        perm = epoch_rng(self.seed, epoch).permutation(k) if self.shuffle else np.arange(k)
        stream = np.concatenate(
            [np.arange(off[s], off[s + 1]) for s in perm] or [np.zeros(0, np.int64)]
        )
        return split_even(stream, self.rank, self.world_size, drop_last=self.uneven == "drop")

    def worker_indices(self, epoch: int, worker: int, num_workers: int) -> np.ndarray:
        return np.array_split(self.rank_indices(epoch), num_workers)[worker]

    def __len__(self) -> int:
        """Samples this rank streams per epoch (equal on every rank)."""
        n = len(self.store)
        return n // self.world_size if self.uneven == "drop" else -(-n // self.world_size)

    def _items(self, samples: int) -> int:
        if self.batch_size is None:
            return samples
        return (
            samples // self.batch_size if self.drop_last_batch else -(-samples // self.batch_size)
        )

    # ----- iteration ---------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any] | GraphBatch]:
        info = get_worker_info()
        wid, nw = (info.id, info.num_workers) if info is not None else (0, 1)
        epoch, resume = self._start_pass()
        role, skip = wid, 0  # role: whose part of the partition this worker streams
        if resume is not None:
            # a fresh DataLoader asks worker 0 first: rotate roles so that worker 0 streams the
            # part whose turn was next, and skip what each part had already delivered
            lengths = [len(p) for p in np.array_split(np.arange(len(self)), nw)]
            taken, nxt = round_robin_consumed(resume, [self._items(n) for n in lengths])
            role = (wid + nxt) % nw
            skip = taken[role]
        samples = self._samples(epoch, role, nw, skip * (self.batch_size or 1))
        items = samples if self.batch_size is None else self._batches(samples)
        for item in items:
            self._consumed += 1
            yield item

    def _batches(self, samples: Iterator[dict[str, Any]]) -> Iterator[GraphBatch]:
        buf: list[dict[str, Any]] = []
        for s in samples:
            buf.append(s)
            if len(buf) == self.batch_size:
                yield self.collate_fn(buf)
                buf = []
        if buf and not self.drop_last_batch:
            yield self.collate_fn(buf)

    def _samples(self, epoch: int, wid: int, nw: int, skip: int) -> Iterator[dict[str, Any]]:
        """This worker's samples in shuffle-buffer order, the first `skip` left out. Skipping
        replays the buffer on stream positions and sizes only: nothing skipped is read."""
        idx = self.worker_indices(epoch, wid, nw)
        nbytes = self._sample_nbytes(idx)
        rng = epoch_rng(self.seed, epoch, self.rank, wid, nw)
        buf: ByteShuffleBuffer[int] = ByteShuffleBuffer(self.shuffle_buffer_bytes, rng)
        decoded: dict[int, dict[str, Any]] = {}  # stream position -> sample read ahead
        block_end = 0
        emitted = 0

        def leave(positions: Iterator[int]) -> Iterator[dict[str, Any]]:
            nonlocal emitted
            for p in positions:
                emitted += 1
                s = decoded.pop(p, None)
                if emitted <= skip:
                    continue
                if s is None:  # entered the buffer before the resume point: read it now
                    s = gather_samples(self.store, idx[p : p + 1], self.schema, copy=True)[0]
                yield s

        for p in range(len(idx)):
            if emitted >= skip and p >= block_end:  # next block: one coalesced read
                block_end = min(len(idx), p + self.read_block)
                block = gather_samples(self.store, idx[p:block_end], self.schema, copy=True)
                decoded.update(zip(range(p, block_end), block, strict=True))
            yield from leave(buf.push(p, int(nbytes[p])))
        yield from leave(buf.drain())

    def _sample_nbytes(self, idx: np.ndarray) -> np.ndarray:
        """Stored bytes of each sample in `idx` from the CSR pointers (no field data read)."""
        s = self.schema
        shard, local = self.store.locate(idx)
        out = np.empty(len(idx), np.int64)
        for k in np.unique(shard).tolist():
            sel = np.flatnonzero(shard == k)
            node_ptr, edge_ptr = self.store.shard_ptrs(k)
            loc = local[sel]
            nodes = np.asarray(node_ptr)[loc + 1] - np.asarray(node_ptr)[loc]
            edges = np.asarray(edge_ptr)[loc + 1] - np.asarray(edge_ptr)[loc]
            out[sel] = (
                nodes * s.row_nbytes("node") + edges * s.row_nbytes("edge") + s.row_nbytes("sample")
            )
        return out

    # ----- state protocol (tj_data.state.StreamPosition) --------------------------------------
    # Position: items handed out in the current pass of this process (exact without DataLoader
    # workers; with workers `PlannedLoader.state_dict()` counts what it delivered).
    def _state_identity(self) -> dict[str, Any]:
        return {
            "dataset": self.store.fingerprint,
            "num_samples": len(self.store),
            "seed": self.seed,
            "rank": self.rank,
            "world_size": self.world_size,
            "shuffle": self.shuffle,
            "shuffle_buffer_bytes": self.shuffle_buffer_bytes,
            "uneven": self.uneven,
            "batch_size": self.batch_size,
            "drop_last_batch": self.drop_last_batch,
        }

    def _consumed_limit(self, state: dict[str, Any]) -> tuple[int, str]:
        return len(self), "samples this rank streams per epoch"

    @staticmethod
    def live(source: Any, schema: Schema, **kwargs: Any) -> Any:
        """Live mode: a `LiveGraphDataset` over a bounded `LiveQueue` or a generator (online
        data); same shuffle buffer and batching, runs in the consuming process."""
        from tj_data.live import LiveGraphDataset

        return LiveGraphDataset(source, schema, **kwargs)
