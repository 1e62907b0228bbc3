"""Gradient accumulation over N micro-batches that matches one big batch exactly, DDP or not.

Within a group, every micro-batch but the last runs forward and backward inside DDP's `no_sync()`
(gradients add up locally); the stepping micro-batch, `(i + 1) % N == 0` or the last one of the
iterable, all-reduces the accumulated sum. Losses are divided by N; a final partial group of r < N
micro-batches has its gradients rescaled by N / r before the step, so every optimizer step sees
the mean over exactly the samples it used. Unscale, clip, step, scaler update and zero_grad happen
only on the stepping micro-batch.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from .ddp import STATIC_GRAPH_ACCUMULATION_ERROR
from .precision import Amp

__all__ = ["GradAccumulator", "MicroBatch"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(kw_only=True)
class MicroBatch(Generic[T]):
    """One micro-batch of an accumulation group; use it as a context around forward + backward."""

    data: T
    index: int  # position in the iterable
    position: int  # position within its group, 0..steps-1
    sync: bool  # True on the stepping micro-batch: gradients are all-reduced
    is_last: bool
    stepped: bool = False  # an optimizer step ran (and was not skipped)
    skipped: bool = False  # the step was skipped (inf/NaN gradients under fp16)
    grad_norm: float | None = None
    _accumulator: GradAccumulator | None = None
    _backward_done: bool = False
    _stack: contextlib.ExitStack | None = None

    def __enter__(self) -> MicroBatch[T]:
        assert self._accumulator is not None
        stack = contextlib.ExitStack()
        model = self._accumulator.model
        if not self.sync and isinstance(model, DistributedDataParallel):
            stack.enter_context(model.no_sync())
        if self._accumulator.amp is not None:
            stack.enter_context(self._accumulator.amp.autocast())
        self._stack = stack.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._stack is not None
        self._stack.__exit__(*exc)
        if exc[0] is None and not self._backward_done:
            raise RuntimeError(f"micro-batch {self.index}: backward(loss) was not called")

    def backward(self, loss: torch.Tensor) -> None:
        """Backward of loss / N (scaled under fp16); on the stepping micro-batch also step."""
        assert self._accumulator is not None
        if self._backward_done:
            raise RuntimeError(f"micro-batch {self.index}: backward(loss) called twice")
        self._backward_done = True
        self._accumulator._backward(self, loss)


class GradAccumulator:
    """Drive N-step gradient accumulation: `for mb in acc.micro_batches(loader): with mb: ...`.

    steps: N >= 1. clip_grad_norm: max global L2 norm (after unscaling), None for no clipping.
    amp: an `Amp` (autocast + GradScaler), None for plain fp32. sync_each_micro_batch: all-reduce
    every micro-batch instead of using no_sync (more traffic, no unsynced gradient state).
    scheduler: stepped after every optimizer step that was not skipped.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        steps: int,
        amp: Amp | None = None,
        clip_grad_norm: float | None = None,
        sync_each_micro_batch: bool = False,
        scheduler: Any | None = None,
    ) -> None:
        if not isinstance(steps, int) or steps < 1:
            raise ValueError(f"accumulation steps={steps!r} must be an integer >= 1")
        if clip_grad_norm is not None and clip_grad_norm <= 0:
            raise ValueError(f"clip_grad_norm={clip_grad_norm} must be > 0 or None")
        if steps > 1 and getattr(model, "static_graph", False):
            raise ValueError(STATIC_GRAPH_ACCUMULATION_ERROR)
        self.model = model
        self.optimizer = optimizer
        self.steps = steps
        self.amp = amp
        self.clip_grad_norm = clip_grad_norm
        self.sync_each_micro_batch = sync_each_micro_batch
        self.scheduler = scheduler
        self.optimizer_steps = 0
        self.skipped_steps = 0

    def _syncs(self, position: int, is_last: bool) -> bool:
        """Whether the micro-batch at `position` in its group all-reduces: the stepping one."""
        return self.sync_each_micro_batch or (position + 1) % self.steps == 0 or is_last

    def micro_batches(self, iterable: Iterable[T]) -> Iterator[MicroBatch[T]]:
        """Yield one `MicroBatch` per item; looks one item ahead to know which one is last."""
        iterator = iter(iterable)
        try:
            current = next(iterator)
        except StopIteration:
            return
        index = 0
        while True:
            try:
                upcoming = next(iterator)
                is_last = False
            except StopIteration:
                is_last = True
            position = index % self.steps
            mb = MicroBatch(
                data=current,
                index=index,
                position=position,
                sync=self._syncs(position, is_last),
                is_last=is_last,
                _accumulator=self,
            )
            yield mb
            if not mb._backward_done:
                raise RuntimeError(
                    f"micro-batch {index}: the loop body did not call backward(loss)"
                )
            if is_last:
                return
            current = upcoming
            index += 1

    def _backward(self, mb: MicroBatch[Any], loss: torch.Tensor) -> None:
        scaled = loss / self.steps
        if self.amp is not None:
            scaled = self.amp.scale_loss(scaled)
        scaled.backward()
        steps_now = (mb.position + 1) % self.steps == 0 or mb.is_last
        if steps_now:
            self._step(mb, group_size=mb.position + 1)

    def _step(self, mb: MicroBatch[Any], group_size: int) -> None:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if self.amp is not None:
            self.amp.unscale_(self.optimizer)
        if group_size != self.steps:
            # a partial final group: the losses were divided by N, the mean needs r
            with torch.no_grad():
                for p in params:
                    p.grad.mul_(self.steps / group_size)
        if self.clip_grad_norm is not None:
            norm = torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm)
            mb.grad_norm = float(norm)
        if self.amp is not None:
            stepped = self.amp.step(self.optimizer)
        else:
            self.optimizer.step()
            stepped = True
        self.optimizer.zero_grad(set_to_none=True)
        self.optimizer_steps += 1
        mb.stepped = stepped
        mb.skipped = not stepped
        if not stepped:
            self.skipped_steps += 1
        elif self.scheduler is not None:
            self.scheduler.step()

    def state_dict(self) -> dict[str, int]:
        return {"optimizer_steps": self.optimizer_steps, "skipped_steps": self.skipped_steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.optimizer_steps = int(state["optimizer_steps"])
        self.skipped_steps = int(state["skipped_steps"])
