"""Pluggable rewards, chosen by name in ``EnvConfig.reward`` (or any zero-argument factory).

A reward object is made per light and episode, sees the light's lane aggregates and vehicle graph at
each decision step, and returns a float (higher is better):

- ``diff-waiting-time``: decrease of the summed waiting time on the incoming lanes, / 100 (sumo-rl's).
- ``queue``: minus the halting vehicles on the incoming lanes.
- ``pressure``: minus |vehicles on incoming lanes - vehicles on outgoing lanes| (PressLight).
- ``delay``: minus the summed normalised delay ``1 - v / v_max`` of approaching vehicles.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Protocol

import numpy as np

from tj_rl.env.features import VehicleGraph
from tj_rl.env.topology import LightTopology

__all__ = ["REWARDS", "LaneStats", "Reward", "RewardInput", "make_reward"]


@dataclass(kw_only=True, slots=True)
class LaneStats:
    """Lane aggregates of one light: incoming lanes first, then outgoing lanes (a per-step value:
    treat as read-only; not frozen because it is built for every light at every decision)."""

    count: np.ndarray  # float32 [n_in + n_out] vehicles on the lane
    halting: np.ndarray  # vehicles slower than 0.1 m/s
    waiting: np.ndarray  # summed waiting time (s) of the lane's vehicles


@dataclass(kw_only=True, slots=True)
class RewardInput:
    """What a reward sees of one light at one decision step (read-only by convention)."""

    light: LightTopology
    lanes: LaneStats
    graph: VehicleGraph


class Reward(Protocol):
    def reset(self, inp: RewardInput) -> None: ...
    def __call__(self, inp: RewardInput) -> float: ...


class DiffWaitingTime:
    def __init__(self) -> None:
        self.last = 0.0

    def reset(self, inp: RewardInput) -> None:
        self.last = float(inp.lanes.waiting[: inp.light.n_in].sum()) / 100.0

    def __call__(self, inp: RewardInput) -> float:
        now = float(inp.lanes.waiting[: inp.light.n_in].sum()) / 100.0
        r, self.last = self.last - now, now
        return r


class Queue:
    def reset(self, inp: RewardInput) -> None:
        pass

    def __call__(self, inp: RewardInput) -> float:
        return -float(inp.lanes.halting[: inp.light.n_in].sum())


class Pressure:
    def reset(self, inp: RewardInput) -> None:
        pass

    def __call__(self, inp: RewardInput) -> float:
        n = inp.light.n_in
        return -abs(float(inp.lanes.count[:n].sum()) - float(inp.lanes.count[n:].sum()))


class Delay:
    def reset(self, inp: RewardInput) -> None:
        pass

    def __call__(self, inp: RewardInput) -> float:
        g, light = inp.graph, inp.light
        approaching = (g.movement < light.n_in) & (g.x[:, 6] > 0)
        if not approaching.any():
            return 0.0
        vmax = light.lane_speed[g.movement[approaching]]
        speed = g.x[approaching, 2]
        return -float(np.clip(1.0 - speed / np.maximum(vmax, 0.1), 0.0, 1.0).sum())


REWARDS: MappingProxyType[str, Callable[[], Reward]] = MappingProxyType(
    {
        "diff-waiting-time": DiffWaitingTime,
        "queue": Queue,
        "pressure": Pressure,
        "delay": Delay,
    }
)


def make_reward(spec: str | Callable[[], Reward]) -> Reward:
    """A fresh reward object from a registered name or a factory."""
    if isinstance(spec, str):
        if spec not in REWARDS:
            raise ValueError(
                f"reward {spec!r} unknown; choose one of {sorted(REWARDS)} or pass a factory"
            )
        return REWARDS[spec]()
    return spec()
