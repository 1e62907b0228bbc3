"""When a training loop logs and checkpoints: every N optimizer steps and at the last step."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Cadence"]


@dataclass(frozen=True, kw_only=True)
class Cadence:
    """``log(step)`` / ``checkpoint(step)``: is this optimizer step one to log / save?"""

    total: int
    log_every: int
    checkpoint_every: int

    def __post_init__(self) -> None:
        if min(self.total, self.log_every, self.checkpoint_every) < 1:
            raise ValueError(f"Cadence needs positive values, got {self}")

    def log(self, step: int) -> bool:
        return step % self.log_every == 0 or step == self.total

    def checkpoint(self, step: int) -> bool:
        return step % self.checkpoint_every == 0 or step == self.total
