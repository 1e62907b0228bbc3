"""Learning-rate schedules as ``LambdaLR`` factors (pure functions of the step)."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["warmup_cosine"]


def warmup_cosine(warmup: int, total: int, floor: float = 0.1) -> Callable[[int], float]:
    """Linear warm-up over ``warmup`` steps, then cosine decay to ``floor`` at ``total``."""
    if warmup < 0 or total < 1 or not 0.0 <= floor <= 1.0:
        raise ValueError(f"need warmup >= 0, total >= 1, 0 <= floor <= 1 (got {warmup}, "
                         f"{total}, {floor})")  # fmt: skip

    def factor(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total - warmup)
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * min(1.0, t)))

    return factor
