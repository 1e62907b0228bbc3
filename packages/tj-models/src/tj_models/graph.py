"""Reading a batch of vehicle graphs from any object with PyG attribute names, with validation.

Models accept a tj-data ``GraphBatch``, a PyG ``Batch`` or any object with ``x``, ``edge_index``,
``edge_attr``, ``batch``, ``ptr`` and named extras (ARCHITECTURE "Batch"). ``read_graph`` turns it
into a :class:`GraphInput` once, so no model depends on the input's class. Shape and dtype checks
cost nothing; value checks (index ranges, batch/ptr consistency, movement range) are fused into one
device sync per graph; NaN/Inf checks run only in debug mode (a config flag).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

__all__ = ["GraphInput", "InvalidGraphError", "NonFiniteError", "check_finite", "read_graph"]


class InvalidGraphError(ValueError):
    """The input batch does not have the shape, dtype or index ranges the model expects."""


class NonFiniteError(FloatingPointError):
    """A NaN or Inf was found in debug mode; the message names the tensor and the count."""


@dataclass(frozen=True, slots=True)
class GraphInput:
    """The fields the models use, validated. Per-node: movement, vehicle_id; per-graph: the rest."""

    x: Tensor  # [N, F] float
    edge_index: Tensor  # [2, E] int64, batch-global node ids
    edge_attr: Tensor  # [E, D] float
    batch: Tensor  # [N] int64
    ptr: Tensor  # [B + 1] int64
    movement: Tensor | None = None  # [N] int64 in [-1, num_movements); -1 = no movement group
    vehicle_id: Tensor | None = None  # [N] int64
    phase: Tensor | None = None  # [B] int64 current green phase (-1 = none)
    time_in_phase: Tensor | None = None  # [B] float seconds
    phase_count: Tensor | None = None  # [B] int64 number of green phases

    @property
    def num_graphs(self) -> int:
        return self.ptr.numel() - 1

    @property
    def num_nodes(self) -> int:
        return self.x.shape[0]

    def counts(self) -> Tensor:
        """Nodes per graph [B] (empty graphs are 0)."""
        return self.ptr[1:] - self.ptr[:-1]

    def with_(self, **changes: Any) -> GraphInput:
        return replace(self, **changes)


def check_finite(name: str, tensor: Tensor) -> None:
    """Raise :class:`NonFiniteError` naming ``name`` when ``tensor`` holds NaN or Inf."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return
    bad = ~torch.isfinite(tensor)
    n_bad = int(bad.sum())
    if n_bad:
        first = tuple(int(i) for i in bad.nonzero()[0])
        nans = int(torch.isnan(tensor).sum())
        raise NonFiniteError(
            f"{name}: {n_bad} of {tensor.numel()} values are not finite ({nans} NaN, "
            f"{n_bad - nans} Inf); first at index {first}"
        )


def _field(obj: Any, name: str, required: bool) -> Tensor | None:
    value = getattr(obj, name, None)
    if value is None:
        if required:
            raise InvalidGraphError(
                f"input has no `{name}`; expected a batch with PyG field names "
                "(x, edge_index, edge_attr, batch, ptr and the named extras)"
            )
        return None
    if not isinstance(value, Tensor):
        raise InvalidGraphError(f"`{name}` must be a torch.Tensor, got {type(value).__name__}")
    return value


def _int_vector(name: str, t: Tensor, length: int | None, what: str) -> Tensor:
    if t.is_floating_point() or t.is_complex() or t.dtype == torch.bool:
        raise InvalidGraphError(f"`{name}` must be an integer tensor, got {t.dtype}")
    if t.dim() != 1 or (length is not None and t.shape[0] != length):
        raise InvalidGraphError(f"`{name}` must have shape [{what}], got {tuple(t.shape)}")
    return t.long()


def _phase_index(phase: Tensor, b: int) -> Tensor:
    """``[B]`` phase index from an index vector or a one-hot ``[B, A]`` (an all-zero row is -1)."""
    if phase.dim() == 2 and phase.shape[0] == b:
        hot = phase > 0.5 if phase.is_floating_point() else phase.bool()
        return torch.where(
            hot.any(-1), hot.long().argmax(-1), torch.full_like(hot[:, 0], -1, dtype=torch.long)
        )
    return _int_vector("phase", phase, b, f"B={b} (index) or [B, A] (one-hot)")


def read_graph(
    obj: Any,
    *,
    node_features: int,
    edge_features: int,
    num_movements: int,
    need_ids: bool = False,
    need_signal: bool = False,
    max_actions: int | None = None,
    debug: bool = False,
) -> GraphInput:
    """Validate ``obj`` and return a :class:`GraphInput` (float fields cast to float32).

    Optional extras (``vehicle_id``, ``phase``, ``time_in_phase``, ``phase_count``) are read when
    present; ``need_ids`` / ``need_signal`` make them required. ``phase`` is range-checked against
    ``max_actions`` when that is given.
    """
    if isinstance(obj, GraphInput):
        return obj
    x = _field(obj, "x", True)
    assert x is not None
    if x.dim() != 2 or x.shape[1] != node_features:
        raise InvalidGraphError(
            f"`x` must have shape [N, {node_features}] (node features), got {tuple(x.shape)}"
        )
    if not x.is_floating_point():
        raise InvalidGraphError(f"`x` must be a float tensor, got {x.dtype}")
    n = x.shape[0]
    edge_index = _field(obj, "edge_index", True)
    edge_attr = _field(obj, "edge_attr", True)
    assert edge_index is not None and edge_attr is not None
    if edge_index.dim() != 2 or edge_index.shape[0] != 2 or edge_index.is_floating_point():
        raise InvalidGraphError(
            f"`edge_index` must be an integer tensor of shape [2, E], got "
            f"{tuple(edge_index.shape)} {edge_index.dtype}"
        )
    e = edge_index.shape[1]
    if edge_attr.dim() != 2 or edge_attr.shape != (e, edge_features):
        raise InvalidGraphError(
            f"`edge_attr` must have shape [E={e}, {edge_features}], got {tuple(edge_attr.shape)}"
        )
    batch = _field(obj, "batch", False)
    ptr = _field(obj, "ptr", False)
    if batch is None and ptr is None:  # a single graph (e.g. a PyG Data)
        batch = torch.zeros(n, dtype=torch.long, device=x.device)
        ptr = torch.tensor([0, n], dtype=torch.long, device=x.device)
    elif batch is None or ptr is None:
        raise InvalidGraphError("input has `batch` but no `ptr` (or the reverse); give both")
    batch = _int_vector("batch", batch, n, f"N={n}")
    ptr = _int_vector("ptr", ptr, None, "B+1")
    if ptr.numel() < 1:
        raise InvalidGraphError("`ptr` must have at least one entry ([B + 1])")
    b = ptr.numel() - 1
    movement = _field(obj, "movement", True)
    assert movement is not None
    movement = _int_vector("movement", movement, n, f"N={n}")
    vehicle_id = _field(obj, "vehicle_id", need_ids)
    if vehicle_id is not None:
        vehicle_id = _int_vector("vehicle_id", vehicle_id, n, f"N={n}")
    phase = _field(obj, "phase", need_signal)
    if phase is not None:
        phase = _phase_index(phase, b)
    time_in_phase = _field(obj, "time_in_phase", need_signal)
    if time_in_phase is not None:
        if time_in_phase.dim() == 2 and time_in_phase.shape[1] == 1:
            time_in_phase = time_in_phase.squeeze(1)
        if time_in_phase.dim() != 1 or time_in_phase.shape[0] != b:
            raise InvalidGraphError(
                f"`time_in_phase` must have shape [B={b}], got {tuple(time_in_phase.shape)}"
            )
        time_in_phase = time_in_phase.float()
    phase_count = _field(obj, "phase_count", False)
    if phase_count is not None:
        phase_count = _int_vector("phase_count", phase_count, b, f"B={b}")

    _check_values(
        edge_index, batch, ptr, movement, vehicle_id, phase, n, num_movements, max_actions
    )
    x = x.float()
    edge_attr = edge_attr.float()
    if debug:
        check_finite("input `x`", x)
        check_finite("input `edge_attr`", edge_attr)
        if time_in_phase is not None:
            check_finite("input `time_in_phase`", time_in_phase)
    return GraphInput(
        x=x,
        edge_index=edge_index.long(),
        edge_attr=edge_attr,
        batch=batch,
        ptr=ptr,
        movement=movement,
        vehicle_id=vehicle_id,
        phase=phase,
        time_in_phase=time_in_phase,
        phase_count=phase_count,
    )


def _check_values(
    edge_index: Tensor,
    batch: Tensor,
    ptr: Tensor,
    movement: Tensor,
    vehicle_id: Tensor | None,
    phase: Tensor | None,
    n: int,
    num_movements: int,
    max_actions: int | None,
) -> None:
    """All value checks in one device sync; raise naming the first failed check."""
    b = ptr.numel() - 1
    true = torch.ones((), dtype=torch.bool, device=ptr.device)
    diffs = ptr[1:] - ptr[:-1]
    ok_ptr = (ptr[0] == 0) & (ptr[-1] == n) & ((diffs >= 0).all() if b else true)
    checks: list[tuple[str, Tensor]] = [
        (f"`ptr` must start at 0, end at N={n} and never decrease", ok_ptr)
    ]
    if n:
        in_range = (batch >= 0).all() & (batch < b).all()
        ordered = (batch[1:] >= batch[:-1]).all() if n > 1 else true
        counts = torch.bincount(batch.clamp(0, max(b - 1, 0)), minlength=b)[:b]
        same = (counts == diffs.clamp(min=0)).all() if b else true
        checks.append(
            ("`batch` must be sorted, in [0, B) and agree with `ptr`", in_range & ordered & same)
        )
        mv = (movement >= -1).all() & (movement < num_movements).all()
        checks.append((f"`movement` must be in [-1, {num_movements})", mv))
        if vehicle_id is not None:
            checks.append(("`vehicle_id` must be >= 0", (vehicle_id >= 0).all()))
    if edge_index.shape[1]:
        lo, hi = edge_index.min(), edge_index.max()
        checks.append((f"`edge_index` must index nodes in [0, N={n})", (lo >= 0) & (hi < n)))
        src = edge_index[0].clamp(0, max(n - 1, 0))
        dst = edge_index[1].clamp(0, max(n - 1, 0))
        if n:
            checks.append(
                (
                    "`edge_index` must connect nodes of the same graph (batch-global ids)",
                    (batch[src] == batch[dst]).all(),
                )
            )
    if phase is not None and max_actions is not None and b:
        ok = (phase >= -1).all() & (phase < max_actions).all()
        checks.append((f"`phase` must be in [-1, max_actions={max_actions})", ok))
    results = torch.stack([c for _, c in checks]).tolist()
    for (message, _), ok in zip(checks, results, strict=True):
        if not ok:
            raise InvalidGraphError(message)
