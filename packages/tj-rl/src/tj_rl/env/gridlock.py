"""Gridlock: an episode whose controlled approaches stop moving, detected from the numbers the env
already reads at every decision step, and the failure it ends in (README "Gridlock").

Two rules, either one is a gridlock (``GridlockConfig``):

- **teleports**: SUMO teleports a vehicle that has stood at the front of a lane, in front of an
  intersection, for more than ``--time-to-teleport`` seconds (default 300): SUMO's own judgement
  that the vehicle "is assumed to be in grid-lock" (SUMO docs, "Why Vehicles are teleporting",
  https://sumo.dlr.de/docs/Simulation/Why_Vehicles_are_teleporting.html). A vehicle starved at a
  red light is counted as a "yield" teleport, one blocked by the vehicles ahead as a "jam" one:
  every teleport counts here (the env's ``teleports`` counter, ``stats.teleports.total``).
- **stuck**: for ``window_s`` simulated seconds the halting vehicles on the controlled approaches
  (``info["system"]["queue"]``) stay at least ``min_queue``, never fall below
  ``1 - queue_drop`` of their value at the window's start, and almost no vehicle leaves: SUMO's
  arrivals over the window (``stats.vehicles.inserted - stats.vehicles.running``, cumulative
  counters) are at most ``outflow_ratio`` times the window's lowest queue. It fires before SUMO's
  300 s teleport does, and where teleporting is off (``--time-to-teleport -1``).

Per step the detector keeps one ``(time, queue, arrived, teleports, rewards)`` row per decision
of the last ``window_s`` seconds: no per-vehicle work.

The failure: the episode terminates (``terminated``, not a time-limit truncation: training does not
bootstrap through it) and every light's reward of that step gets ``penalty``: ``"held"`` (the
default) is the light's worst reward of the window held for every decision left in the episode
(the return of staying stuck to the end, undiscounted, in the reward's own units, so it needs no
per-reward calibration); a number is added as it is (reward units before ``reward_scale``).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

__all__ = ["GRIDLOCK", "GridlockConfig", "GridlockDetector"]

GRIDLOCK = "gridlock"  # info["failure"] of an episode that ended in one
_EPS = 1e-6


@dataclass(frozen=True, kw_only=True)
class GridlockConfig:
    """When an episode counts as gridlocked and what the failure costs (seconds, vehicles)."""

    window_s: float = 180.0
    min_queue: float = 10.0  # fewer halting vehicles than this on the approaches: nothing stuck
    queue_drop: float = 0.1  # "does not fall": never below (1 - queue_drop) x the window's first
    outflow_ratio: float = 0.1  # "almost no vehicle leaves": arrivals <= ratio x lowest queue
    teleports: int | None = 1  # this many SUMO teleports within window_s (None: rule off)
    penalty: float | Literal["held"] = "held"

    def __post_init__(self) -> None:
        if not float(self.window_s) > 0:
            raise ValueError(f"GridlockConfig.window_s: {self.window_s}, must be > 0")
        if not float(self.min_queue) >= 1:
            raise ValueError(f"GridlockConfig.min_queue: {self.min_queue}, must be >= 1")
        for name in ("queue_drop", "outflow_ratio"):
            if not 0 <= float(getattr(self, name)) < 1:
                raise ValueError(f"GridlockConfig.{name}: {getattr(self, name)}, need 0 <= x < 1")
        bad = not isinstance(self.teleports, int) or isinstance(self.teleports, bool)
        if self.teleports is not None and (bad or self.teleports < 1):
            raise ValueError(f"GridlockConfig.teleports: {self.teleports!r}, None or an int >= 1")
        if isinstance(self.penalty, str):
            if self.penalty != "held":
                raise ValueError(f"GridlockConfig.penalty: {self.penalty!r}, 'held' or a number")
        elif isinstance(self.penalty, bool) or not math.isfinite(float(self.penalty)):
            raise ValueError(f"GridlockConfig.penalty: {self.penalty!r}, 'held' or a number")

    @classmethod
    def of(cls, value: GridlockConfig | Mapping[str, Any] | None) -> GridlockConfig | None:
        """``value`` typed (a config file's mapping becomes a ``GridlockConfig``)."""
        if value is None or isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            return cls(**value)
        raise ValueError(f"gridlock: {value!r}, expected None, a GridlockConfig or a mapping")


@dataclass(frozen=True, slots=True)
class _Row:
    t: float
    queue: float
    arrived: float
    teleports: float
    rewards: np.ndarray


class GridlockDetector:
    """Watches one episode's decision steps for a gridlock (``config`` None: never fires)."""

    def __init__(self, config: GridlockConfig | None, *, delta_time: float) -> None:
        self.config = config
        self.delta_time = float(delta_time)
        self._rows: deque[_Row] = deque()
        self.detail: dict[str, Any] | None = None  # what fired, once it has

    def reset(self, t: float, counters: Mapping[str, float]) -> None:
        """A new episode at ``t`` with SUMO's cumulative ``counters`` (``SumoSession.counters``)."""
        self.detail = None
        self._rows.clear()
        if self.config is not None:
            self._rows.append(_Row(t, math.inf, _arrived(counters), counters["teleports"],
                                   np.zeros(0)))  # fmt: skip

    def update(
        self, t: float, queue: float, counters: Mapping[str, float], rewards: Mapping[str, float]
    ) -> bool:
        """Add the decision step at ``t`` (system queue, counters, this step's rewards); True when
        the episode is gridlocked (then ``detail`` says which rule fired and on what)."""
        cfg = self.config
        if cfg is None:
            return False
        rows = self._rows
        rows.append(_Row(t, float(queue), _arrived(counters), counters["teleports"],
                         np.fromiter(rewards.values(), np.float64, len(rewards))))  # fmt: skip
        start = t - cfg.window_s + _EPS
        while len(rows) > 2 and rows[1].t <= start:  # rows[0]: the last step at or before start
            rows.popleft()
        first, now = rows[0], rows[-1]
        teleports = now.teleports - first.teleports
        arrivals = now.arrived - first.arrived
        low = min(r.queue for r in rows)
        if cfg.teleports is not None and teleports >= cfg.teleports:
            rule = "teleports"
        elif (first.t <= start and low >= cfg.min_queue
              and low >= (1.0 - cfg.queue_drop) * first.queue
              and arrivals <= cfg.outflow_ratio * low):  # fmt: skip
            rule = "stuck"
        else:
            return False
        self.detail = {"rule": rule, "since": first.t, "queue": now.queue,
                       "arrivals": arrivals, "teleports": teleports}  # fmt: skip
        return True

    def penalise(
        self, rewards: Mapping[str, float], *, seconds_left: float, reward_scale: float
    ) -> dict[str, float]:
        """Every light's reward of the failing step plus the config's ``penalty`` (``rewards`` are
        scaled by ``reward_scale`` already; a numeric penalty is scaled here)."""
        cfg = self.config
        assert cfg is not None and self.detail is not None
        if cfg.penalty == "held":
            steps = max(0, math.ceil(seconds_left / self.delta_time - _EPS))
            worst = np.min([r.rewards for r in self._rows if len(r.rewards)], axis=0)
            extra = np.minimum(worst, 0.0) * steps
        else:
            extra = np.full(len(rewards), float(cfg.penalty) * reward_scale)
        return {a: float(r + p) for (a, r), p in zip(rewards.items(), extra, strict=True)}


def _arrived(counters: Mapping[str, float]) -> float:
    """Vehicles that left the simulation so far (inserted minus still running)."""
    return counters["inserted"] - counters["running"]
