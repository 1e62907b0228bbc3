"""Streaming metric accumulators (mean, MSE, MAE): O(1) memory, mergeable across ranks.

An evaluation loop over a large dataset must not keep every prediction to compute an average
error. Each accumulator keeps a float64 (weight, sum) pair, so merging is exact and cheap
(``merge`` between objects, ``all_reduce`` across torch.distributed ranks). Hand-written rather
than torchmetrics because tj-monitor keeps torch optional and takes numpy arrays and tensors
alike; the state is two numbers. State protocol as torchdata: ``state_dict`` /
``load_state_dict`` / ``reset``.
"""

from __future__ import annotations

import math
from typing import Any, Self

import numpy as np

__all__ = ["MAE", "MSE", "Mean"]


def _is_tensor(x: Any) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "numel")


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(x.shape) if _is_tensor(x) else np.shape(x)


class _Accumulator:
    """(weight, sum) pair; ``compute()`` = sum / weight (NaN when empty)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.weight = 0.0
        self.total = 0.0

    def _add(self, total: float, weight: float) -> None:
        self.total += float(total)
        self.weight += float(weight)

    def compute(self) -> float:
        return self.total / self.weight if self.weight > 0 else math.nan

    def merge(self, other: Self) -> Self:
        """Fold ``other`` into this accumulator (same type); returns self."""
        if type(other) is not type(self):
            raise TypeError(f"cannot merge {type(other).__name__} into {type(self).__name__}")
        self._add(other.total, other.weight)
        return self

    def state_dict(self) -> dict[str, float]:
        return {"weight": self.weight, "total": self.total}

    def load_state_dict(self, state: dict[str, float]) -> None:
        missing = {"weight", "total"} - set(state)
        if missing:
            raise KeyError(f"{type(self).__name__}.load_state_dict: missing {sorted(missing)}")
        self.weight, self.total = float(state["weight"]), float(state["total"])

    def all_reduce(self, group: Any = None) -> Self:
        """A new accumulator holding the sum over all ranks of ``group`` (a collective call).

        Without an initialised process group it returns a copy of this one.
        """
        import torch
        import torch.distributed as dist

        out = type(self)()
        out.load_state_dict(self.state_dict())
        if not (dist.is_available() and dist.is_initialized()):
            return out
        device = "cpu"
        if dist.get_backend(group) == "nccl":
            device = f"cuda:{torch.cuda.current_device()}"
        buf = torch.tensor([self.weight, self.total], dtype=torch.float64, device=device)
        dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
        out.weight, out.total = buf.tolist()
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}(value={self.compute():.6g}, weight={self.weight:.6g})"


class Mean(_Accumulator):
    """Running (optionally weighted) mean of every element passed to ``update``.

    >>> m = Mean(); m.update([1.0, 2.0]); m.update(3.0); m.compute()
    2.0
    """

    def update(self, values: Any, weights: Any = None) -> None:
        if _is_tensor(values):
            v = values.detach().double()
            if weights is None:
                self._add(v.sum().item(), v.numel())
            else:
                w = weights.detach().double().expand_as(v)
                self._add((v * w).sum().item(), w.sum().item())
            return
        v = np.asarray(values, dtype=np.float64)
        if weights is None:
            self._add(v.sum(), v.size)
        else:
            w = np.broadcast_to(np.asarray(weights, dtype=np.float64), v.shape)
            self._add((v * w).sum(), w.sum())


class _ErrorMean(_Accumulator):
    def _errors(self, diff: Any) -> Any:
        raise NotImplementedError

    def update(self, pred: Any, target: Any) -> None:
        """Add ``pred - target`` elementwise (shapes must match exactly)."""
        if _shape(pred) != _shape(target):
            raise ValueError(
                f"{type(self).__name__}.update: pred shape {_shape(pred)} "
                f"!= target shape {_shape(target)}"
            )
        if _is_tensor(pred):
            diff = pred.detach().double() - target.detach().to(pred.device).double()
            self._add(self._errors(diff).sum().item(), diff.numel())
            return
        diff = np.asarray(pred, dtype=np.float64) - np.asarray(target, dtype=np.float64)
        self._add(self._errors(diff).sum(), diff.size)


class MSE(_ErrorMean):
    """Streaming mean squared error.

    >>> e = MSE(); e.update([1.0, 2.0], [0.0, 0.0]); e.compute()
    2.5
    """

    def _errors(self, diff: Any) -> Any:
        return diff * diff


class MAE(_ErrorMean):
    """Streaming mean absolute error.

    >>> e = MAE(); e.update([1.0, -3.0], [0.0, 0.0]); e.compute()
    2.0
    """

    def _errors(self, diff: Any) -> Any:
        return abs(diff)
