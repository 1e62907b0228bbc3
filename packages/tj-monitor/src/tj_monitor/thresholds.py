"""Memory thresholds: resolution against the limit, and a once-per-crossing gate.

A gate fires when the value reaches its threshold, then stays silent until the value falls below
``threshold - hysteresis`` (re-arm), so a value hovering around the line fires once, not every
sample. A rate limit (``min_interval_s``) bounds how often it can fire at all; a crossing that
happens inside the rate-limit window is not lost: it fires when the window ends if the value is
still above the line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tj_monitor.sample import MemorySample

__all__ = ["Level", "ThresholdEvent", "ThresholdGate", "resolve_bytes"]

Level = Literal["warn", "cleanup"]


def resolve_bytes(spec: float, limit: int, *, name: str = "threshold") -> int:
    """A threshold given as a fraction of ``limit`` (0 < spec <= 1) or as bytes (spec > 1)."""
    if isinstance(spec, bool) or not isinstance(spec, int | float) or not math.isfinite(spec):
        raise ValueError(f"{name}: expected a fraction in (0, 1] or bytes > 1, got {spec!r}")
    if spec <= 0:
        raise ValueError(f"{name}: must be > 0, got {spec!r}")
    if spec <= 1:
        return int(spec * limit)
    if float(spec) != int(spec):
        raise ValueError(f"{name}: byte counts must be whole numbers, got {spec!r}")
    return int(spec)


@dataclass(frozen=True, kw_only=True)
class ThresholdEvent:
    """One firing: which level, the measured value and the line it crossed, in bytes."""

    level: Level
    value: int
    threshold: int
    rearm_below: int
    limit: int
    sample: MemorySample | None = None

    @property
    def excess(self) -> int:
        """Bytes to free to get back under the re-arm line."""
        return max(self.value - self.rearm_below, 0)


@dataclass(kw_only=True)
class ThresholdGate:
    """Fires once per upward crossing of ``threshold``; re-arms below ``threshold - hysteresis``."""

    level: Level
    threshold: int
    hysteresis: int
    min_interval_s: float = 0.0
    armed: bool = field(default=True, init=False)
    fired: int = field(default=0, init=False)
    _last_fired: float = field(default=-math.inf, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.threshold <= 0:
            raise ValueError(f"{self.level}: threshold must be > 0 bytes, got {self.threshold}")
        if not 0 <= self.hysteresis < self.threshold:
            raise ValueError(
                f"{self.level}: hysteresis must be in [0, threshold={self.threshold}), "
                f"got {self.hysteresis}"
            )
        if self.min_interval_s < 0:
            raise ValueError(
                f"{self.level}: min_interval_s must be >= 0, got {self.min_interval_s}"
            )

    @property
    def rearm_below(self) -> int:
        return self.threshold - self.hysteresis

    def update(self, value: int, now: float) -> bool:
        """Feed one measurement taken at monotonic time ``now``; True when the gate fires."""
        if not self.armed:
            if value < self.rearm_below:
                self.armed = True
            return False
        if value >= self.threshold and now - self._last_fired >= self.min_interval_s:
            self.armed = False
            self._last_fired = now
            self.fired += 1
            return True
        return False

    def event(self, value: int, limit: int, sample: MemorySample | None = None) -> ThresholdEvent:
        return ThresholdEvent(
            level=self.level,
            value=value,
            threshold=self.threshold,
            rearm_below=self.rearm_below,
            limit=limit,
            sample=sample,
        )
