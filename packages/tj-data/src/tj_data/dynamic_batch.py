"""`DynamicBatchSize`: grow or shrink the batch size between steps from measured memory headroom.

The seeds' `get_dynamic_batch_size` done properly: usage is the larger of process-tree PSS /
budget and (when CUDA is in use) the device's used / total memory; above `shrink_above` the size
shrinks at once (and a cooldown starts), below `grow_below` for `patience` consecutive checks it
grows; in between nothing changes (hysteresis: no oscillation around one threshold). A CUDA OOM
backs off by `oom_factor` and caps growth below the size that failed. `DynamicBatchSampler`
feeds the current size to a DataLoader (`batch_sampler=`); `run_step` retries a step after an
OOM with the smaller size.
"""

from __future__ import annotations

import gc
import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
from torch.utils.data import Sampler

from tj_data.state import Resumable
from tj_monitor import tree_memory

__all__ = ["BatchSizeEvent", "DynamicBatchSampler", "DynamicBatchSize"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(kw_only=True, frozen=True)
class BatchSizeEvent:
    step: int
    old: int
    new: int
    usage: float
    reason: str  # "grow" | "shrink" | "oom"


def _cuda_usage(device: torch.device | None) -> float:
    if device is None or device.type != "cuda" or not torch.cuda.is_available():
        return 0.0
    free, total = torch.cuda.mem_get_info(device)
    return 1.0 - free / total if total else 0.0


class DynamicBatchSize(Resumable):
    """Batch-size controller (see the module docstring).

    Args:
        initial, min_size, max_size: sizes (max_size None: unbounded).
        budget_bytes: host budget for the process tree's PSS (None: host memory is ignored).
        grow_below, shrink_above: usage thresholds (fractions), grow_below < shrink_above.
        grow_factor, shrink_factor, oom_factor: multipliers (> 1, < 1, < 1).
        patience: calm checks below grow_below before growing; cooldown: checks after a
            shrink/OOM during which it does not grow.
        check_every: steps between measurements (a PSS read costs ~12 ms per GiB).
        cuda_device: device whose memory counts (default: the current one when CUDA is used).
        memory_fn: host usage in bytes (default: process-tree PSS).
    """

    def __init__(
        self,
        initial: int,
        *,
        min_size: int = 1,
        max_size: int | None = None,
        budget_bytes: int | None = None,
        grow_below: float = 0.6,
        shrink_above: float = 0.85,
        grow_factor: float = 1.25,
        shrink_factor: float = 0.75,
        oom_factor: float = 0.5,
        patience: int = 5,
        cooldown: int = 10,
        check_every: int = 10,
        cuda_device: torch.device | str | None = None,
        memory_fn: Callable[[], int] | None = None,
    ) -> None:
        if not 1 <= min_size <= initial <= (max_size or initial):
            raise ValueError(
                f"DynamicBatchSize: need 1 <= min_size ({min_size}) <= initial ({initial}) <= "
                f"max_size ({max_size})"
            )
        if not 0.0 < grow_below < shrink_above <= 1.0:
            raise ValueError(
                f"DynamicBatchSize: need 0 < grow_below ({grow_below}) < shrink_above "
                f"({shrink_above}) <= 1"
            )
        if not (grow_factor > 1.0 and 0.0 < shrink_factor < 1.0 and 0.0 < oom_factor < 1.0):
            raise ValueError("DynamicBatchSize: need grow_factor > 1, 0 < shrink/oom_factor < 1")
        if patience < 1 or cooldown < 0 or check_every < 1:
            raise ValueError(
                "DynamicBatchSize: need patience >= 1, cooldown >= 0, check_every >= 1"
            )
        if budget_bytes is not None and budget_bytes < 1:
            raise ValueError(f"DynamicBatchSize.budget_bytes={budget_bytes}: expected > 0")
        self.batch_size, self.min_size, self.max_size = int(initial), int(min_size), max_size
        self.budget_bytes = budget_bytes
        self.grow_below, self.shrink_above = grow_below, shrink_above
        self.grow_factor, self.shrink_factor, self.oom_factor = (
            grow_factor,
            shrink_factor,
            oom_factor,
        )
        self.patience, self.cooldown, self.check_every = patience, cooldown, check_every
        if cuda_device is None and torch.cuda.is_available() and torch.cuda.is_initialized():
            cuda_device = torch.device("cuda", torch.cuda.current_device())
        self.cuda_device = torch.device(cuda_device) if cuda_device is not None else None
        self.memory_fn = memory_fn or (lambda: tree_memory().pss)
        self.ceiling: int | None = None  # below the last size that hit an OOM
        self.events: list[BatchSizeEvent] = []
        self.last_usage = 0.0
        self._step = 0
        self._calm = 0
        self._cool = 0

    def usage(self) -> float:
        """max(host PSS / budget, CUDA used / total), measured now."""
        host = self.memory_fn() / self.budget_bytes if self.budget_bytes else 0.0
        return max(host, _cuda_usage(self.cuda_device))

    def _set(self, new: int, usage: float, reason: str) -> int:
        upper = min(x for x in (self.max_size, self.ceiling, 1 << 62) if x is not None)
        new = max(self.min_size, min(int(new), upper))
        if new != self.batch_size:
            self.events.append(
                BatchSizeEvent(
                    step=self._step, old=self.batch_size, new=new, usage=usage, reason=reason
                )
            )
            log.info("batch size %d -> %d (%s, usage %.2f)", self.batch_size, new, reason, usage)
            self.batch_size = new
        return new

    def update(self) -> int:
        """Call once per training step; returns the batch size for the next step."""
        self._step += 1
        if self._step % self.check_every:
            return self.batch_size
        u = self.last_usage = self.usage()
        if self._cool:
            self._cool -= 1
        if u > self.shrink_above:
            self._calm, self._cool = 0, self.cooldown
            return self._set(math.floor(self.batch_size * self.shrink_factor), u, "shrink")
        if u < self.grow_below and not self._cool:
            self._calm += 1
            if self._calm >= self.patience:
                self._calm = 0
                return self._set(math.ceil(self.batch_size * self.grow_factor), u, "grow")
        else:
            self._calm = 0
        return self.batch_size

    def on_oom(self, exc: BaseException | None = None) -> int:
        """Back off after an out-of-memory error; re-raises it when already at min_size."""
        if self.batch_size <= self.min_size:
            if exc is not None:
                raise exc
            raise MemoryError(f"out of memory at the minimum batch size {self.min_size}")
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        self.ceiling = self.batch_size - 1
        self._calm, self._cool = 0, self.cooldown
        return self._set(math.floor(self.batch_size * self.oom_factor), self.last_usage, "oom")

    def run_step(self, step_fn: Callable[[int], T]) -> T:
        """`step_fn(batch_size)`, retried with a smaller size after each CUDA OOM."""
        while True:
            try:
                return step_fn(self.batch_size)
            except torch.OutOfMemoryError as exc:
                log.warning("CUDA out of memory at batch size %d: backing off", self.batch_size)
                self.on_oom(exc)

    # state protocol (tj_data.state.Resumable): the size, its OOM ceiling and the step count
    state_fields = ("batch_size", "step")

    def _get_position(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "ceiling": self.ceiling, "step": self._step}

    def _reset_position(self, state: dict[str, Any]) -> None:
        self.batch_size, self.ceiling, self._step = (
            state["batch_size"],
            state["ceiling"],
            state["step"],
        )


class DynamicBatchSampler(Sampler[list[int]]):
    """Batches of `controller.batch_size` indices from `sampler`, read at each batch (use as
    `DataLoader(batch_sampler=...)`; with workers, a change shows after the prefetched batches)."""

    yields_batches = True

    def __init__(
        self, sampler: Sampler[int], controller: DynamicBatchSize, *, drop_last: bool = False
    ):
        self.sampler, self.controller, self.drop_last = sampler, controller, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        buf: list[int] = []
        for i in self.sampler:
            buf.append(int(i))
            if len(buf) >= self.controller.batch_size:
                yield buf
                buf = []
        if buf and not self.drop_last:
            yield buf

    def __len__(self) -> int:
        n = len(self.sampler)  # type: ignore[arg-type]
        b = self.controller.batch_size
        return n // b if self.drop_last else -(-n // b)

    def set_epoch(self, epoch: int) -> None:
        fn = getattr(self.sampler, "set_epoch", None)
        if callable(fn):
            fn(epoch)
