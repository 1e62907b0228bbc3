"""`ByteShuffleBuffer`: a shuffle buffer bounded in bytes, not in items.

Items enter in stream order; once the buffered bytes exceed the capacity, uniformly chosen items
leave until they fit again. Capacity 0 keeps stream order. Used by the streaming datasets, with
items being stream positions (replayable without reading data) or decoded samples (live mode).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Generic, TypeVar

import numpy as np

__all__ = ["ByteShuffleBuffer"]

T = TypeVar("T")
_DRAWS = 4096


class ByteShuffleBuffer(Generic[T]):
    def __init__(self, capacity_bytes: int, rng: np.random.Generator) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"shuffle buffer capacity {capacity_bytes} bytes: expected >= 0")
        self.capacity = int(capacity_bytes)
        self.rng = rng
        self.items: list[T] = []
        self.sizes: list[int] = []
        self.nbytes = 0
        self._draws = np.empty(0)
        self._k = 0

    def __len__(self) -> int:
        return len(self.items)

    def _pick(self) -> int:
        if self._k >= len(self._draws):
            self._draws, self._k = self.rng.random(_DRAWS), 0
        j = int(self._draws[self._k] * len(self.items))
        self._k += 1
        return j

    def _pop(self) -> T:
        j = self._pick()
        self.items[j], self.items[-1] = self.items[-1], self.items[j]
        self.sizes[j], self.sizes[-1] = self.sizes[-1], self.sizes[j]
        self.nbytes -= self.sizes.pop()
        return self.items.pop()

    def push(self, item: T, nbytes: int) -> Iterator[T]:
        """Add one item; yields the items that leave to bring the buffer under capacity."""
        self.items.append(item)
        self.sizes.append(int(nbytes))
        self.nbytes += int(nbytes)
        while self.nbytes > self.capacity and self.items:
            yield self._pop()

    def drain(self) -> Iterator[T]:
        """Every remaining item, in random order (end of stream)."""
        while self.items:
            yield self._pop()
