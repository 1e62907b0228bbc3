"""Held-out next-step prediction error of the world model against a constant-velocity baseline.

The world model counts as learned only if it beats physics extrapolation: every vehicle of the
last input step that is still present at the next decision step (``y_mask``) is moved by
``speed * (heading_cos, heading_sin) * dt`` (the snapshot's math heading convention) for the
baseline, and by the model's predicted state for the model. Errors are Euclidean position errors
in metres, accumulated with tj-monitor's streaming accumulators (O(1) memory, mergeable).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from tj_monitor import Mean

__all__ = ["PositionErrors", "constant_velocity", "evaluate_world_model"]


@dataclass(frozen=True, kw_only=True)
class PositionErrors:
    """Next-step position errors (m) over ``vehicles`` held-out vehicle-steps."""

    vehicles: int
    model_mae: float
    model_rmse: float
    cv_mae: float
    cv_rmse: float

    @property
    def improvement(self) -> float:
        """Relative reduction of the mean error versus constant velocity (0.2 = 20% better)."""
        return 1.0 - self.model_mae / self.cv_mae if self.cv_mae > 0 else 0.0

    def as_dict(self) -> dict[str, float]:
        return {**asdict(self), "improvement": self.improvement}


def constant_velocity(x: torch.Tensor, dt: float) -> torch.Tensor:
    """[N, 2] positions after ``dt`` seconds at constant speed and heading (math convention)."""
    vel = x[:, 2:3] * torch.stack([x[:, 5], x[:, 4]], dim=-1)  # speed * (cos, sin)
    return x[:, :2] + vel * dt


@torch.no_grad()
def evaluate_world_model(
    model: Any,
    windows: Iterable[Sequence[Any]],
    *,
    input_steps: int,
    dt: float,
    device: torch.device,
    max_batches: int | None = None,
) -> PositionErrors:
    """Run ``model`` (a WorldModel or its DDP wrapper) on held-out ``windows`` at horizon 1."""
    was_training = model.training
    model.eval()
    m_err, m_sq, c_err, c_sq = Mean(), Mean(), Mean(), Mean()
    try:
        for i, window in enumerate(windows):
            if max_batches is not None and i >= max_batches:
                break
            steps = [s.to(device) for s in window]
            out = model(steps, input_steps=input_steps, horizon=1)
            last = steps[input_steps - 1]
            mask = last.y_mask.bool()
            if not bool(mask.any()):
                continue
            target = last.y_next[mask][:, :2].float()
            pred = out.steps[0].state[mask][:, :2].float()
            base = constant_velocity(last.x[mask].float(), dt)
            for err_mean, err_sq, p in ((m_err, m_sq, pred), (c_err, c_sq, base)):
                d = torch.linalg.vector_norm(p - target, dim=-1).cpu()
                err_mean.update(d)
                err_sq.update(d * d)
    finally:
        model.train(was_training)
    return PositionErrors(
        vehicles=int(m_err.weight),
        model_mae=float(m_err.compute()),
        model_rmse=float(m_sq.compute()) ** 0.5,
        cv_mae=float(c_err.compute()),
        cv_rmse=float(c_sq.compute()) ** 0.5,
    )
