"""Live mode: stream samples produced online (rollouts) through a bounded queue.

`LiveQueue` is bounded by items and bytes: `put` blocks the producer instead of growing memory.
`LiveGraphDataset` iterates any iterable source (a `LiveQueue` or a generator, which is bounded
by construction since it is pulled) through the same byte-bounded shuffle buffer and optional
batching as `StreamingGraphDataset`. It runs in the consuming process (DataLoader
num_workers=0): the queue lives in the producer's process and is not shared with workers.
Resumable state (`tj_data.state`): epoch and items delivered; an online source cannot be rewound,
so a load restores the epoch and the count, not the samples that were queued or buffered.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from tj_data.batch import GraphBatch
from tj_data.collate import BatchTransform, GraphCollator
from tj_data.order import epoch_rng
from tj_data.schema import Schema
from tj_data.shuffle_buffer import ByteShuffleBuffer
from tj_data.state import StreamPosition

__all__ = ["LiveGraphDataset", "LiveQueue", "QueueClosed", "sample_nbytes"]


class QueueClosed(RuntimeError):
    """`put` on a closed LiveQueue."""


def sample_nbytes(sample: Mapping[str, Any]) -> int:
    return sum(int(np.asarray(v).nbytes) for v in sample.values())


class LiveQueue:
    """Thread-safe FIFO of samples bounded by `max_items` and `max_bytes` (whichever binds
    first; one sample larger than max_bytes is still accepted into an empty queue)."""

    def __init__(self, *, max_items: int = 1024, max_bytes: int = 64 << 20) -> None:
        if max_items < 1 or max_bytes < 1:
            raise ValueError(
                f"LiveQueue: max_items={max_items}, max_bytes={max_bytes}: expected >= 1"
            )
        self.max_items, self.max_bytes = max_items, max_bytes
        self._q: deque[tuple[Mapping[str, Any], int]] = deque()
        self._bytes = 0
        self._closed = False
        self._cv = threading.Condition()

    def __len__(self) -> int:
        return len(self._q)

    @property
    def nbytes(self) -> int:
        return self._bytes

    def _full(self, nbytes: int) -> bool:
        return bool(self._q) and (
            len(self._q) >= self.max_items or self._bytes + nbytes > self.max_bytes
        )

    def put(self, sample: Mapping[str, Any], timeout: float | None = None) -> None:
        """Append a sample, blocking while the queue is full; TimeoutError after `timeout` s."""
        n = sample_nbytes(sample)
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while self._full(n) and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(
                        f"LiveQueue full ({len(self._q)} items, {self._bytes} bytes) for {timeout}s"
                    )
                self._cv.wait(left)
            if self._closed:
                raise QueueClosed("put on a closed LiveQueue")
            self._q.append((sample, n))
            self._bytes += n
            self._cv.notify_all()

    def close(self) -> None:
        """No more samples: consumers finish after draining what is queued."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def get(self, timeout: float | None = None) -> Mapping[str, Any] | None:
        """Next sample, blocking while empty; None once closed and drained."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._q and not self._closed:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"LiveQueue empty for {timeout}s")
                self._cv.wait(left)
            if not self._q:
                return None
            sample, n = self._q.popleft()
            self._bytes -= n
            self._cv.notify_all()
            return sample

    def __iter__(self) -> Iterator[Mapping[str, Any]]:
        while (s := self.get()) is not None:
            yield s


class LiveGraphDataset(StreamPosition, IterableDataset):
    """Iterate an online source of samples with a byte-bounded shuffle buffer.

    Args:
        source: a LiveQueue or any iterable of sample mappings.
        schema: levels of the fields (for collate) and optional validation of every sample.
        validate: check each sample against the schema (SchemaMismatchError on a bad one).
    """

    def __init__(
        self,
        source: Iterable[Mapping[str, Any]],
        schema: Schema,
        *,
        shuffle_buffer_bytes: int = 8 << 20,
        batch_size: int | None = None,
        seed: int = 0,
        validate: bool = True,
        transforms: Sequence[BatchTransform] = (),
        dequantize: str = "host",
    ) -> None:
        super().__init__()
        if batch_size is not None and batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: expected >= 1 or None")
        self.source, self.schema, self.validate = source, schema, validate
        self.shuffle_buffer_bytes, self.batch_size, self.seed = (
            shuffle_buffer_bytes,
            batch_size,
            seed,
        )
        self.collate_fn = GraphCollator(schema, transforms, dequantize=dequantize)
        self._init_position()

    def __iter__(self) -> Iterator[dict[str, Any] | GraphBatch]:
        if get_worker_info() is not None:
            raise RuntimeError(
                "LiveGraphDataset runs in the consuming process: use DataLoader(num_workers=0)"
            )
        epoch, _ = self._start_pass()  # a loaded count counts on: the source is not rewound
        buf: ByteShuffleBuffer[dict[str, Any]] = ByteShuffleBuffer(
            self.shuffle_buffer_bytes, epoch_rng(self.seed, epoch)
        )
        for item in self._items(buf):
            self._consumed += 1
            yield item

    def _items(self, buf: ByteShuffleBuffer[dict[str, Any]]) -> Iterator[Any]:
        batch: list[dict[str, Any]] = []

        def emit(samples: Iterator[dict[str, Any]]) -> Iterator[Any]:
            for s in samples:
                if self.batch_size is None:
                    yield s
                    continue
                batch.append(s)
                if len(batch) == self.batch_size:
                    yield self.collate_fn(batch)
                    batch.clear()

        for i, raw in enumerate(self.source):
            if self.validate:
                sample, _, _ = self.schema.validate_sample(raw, where=f"live sample {i}")
            else:
                sample = dict(raw)
            yield from emit(buf.push(sample, sample_nbytes(sample)))
        yield from emit(buf.drain())
        if batch:
            yield self.collate_fn(list(batch))

    def _state_identity(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "batch_size": self.batch_size,
            "shuffle_buffer_bytes": self.shuffle_buffer_bytes,
        }
