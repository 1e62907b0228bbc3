"""HorizonSchedule: the progressive prediction horizon (1 -> H) as an explicit, pure object.

The horizon is a step function of the optimiser step: it starts at 1 and grows by one at each
milestone, so ``horizon(step) = 1 + #{milestones <= step}``. Pure (the trainer owns the step
counter), so resuming from a checkpoint needs nothing but the step.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

__all__ = ["HorizonSchedule"]


@dataclass(kw_only=True, frozen=True)
class HorizonSchedule:
    """Horizon 1 before ``milestones[0]``, 2 from there, ..., ``len(milestones) + 1`` at the end."""

    milestones: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        m = self.milestones
        if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in m):
            raise ValueError(f"HorizonSchedule.milestones must be ints >= 0, got {m!r}")
        if any(b <= a for a, b in itertools.pairwise(m)):
            raise ValueError(f"HorizonSchedule.milestones must be strictly increasing, got {m!r}")

    @classmethod
    def linear(cls, *, max_horizon: int, start_step: int, end_step: int) -> HorizonSchedule:
        """Grow evenly from 1 at ``start_step`` to ``max_horizon`` reached at ``end_step``."""
        if max_horizon < 1:
            raise ValueError(f"max_horizon must be >= 1, got {max_horizon}")
        if max_horizon == 1:
            return cls()
        if not 0 <= start_step < end_step:
            raise ValueError(
                f"need 0 <= start_step < end_step, got start_step={start_step}, end_step={end_step}"
            )
        span = end_step - start_step
        k = max_horizon - 1
        milestones = tuple(start_step + round(span * (i + 1) / k) for i in range(k))
        if len(set(milestones)) != k:
            raise ValueError(
                f"{k} horizon increases do not fit in steps [{start_step}, {end_step}]"
            )
        return cls(milestones=milestones)

    @property
    def max_horizon(self) -> int:
        return len(self.milestones) + 1

    def horizon(self, step: int) -> int:
        """Prediction horizon to train at optimiser step ``step`` (>= 0)."""
        if step < 0:
            raise ValueError(f"step must be >= 0, got {step}")
        return 1 + bisect.bisect_right(self.milestones, step)

    def window_length(self, input_steps: int, step: int) -> int:
        """Steps a window needs at ``step``: ``input_steps`` inputs plus one target per horizon."""
        return input_steps + self.horizon(step)
