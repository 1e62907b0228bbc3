"""The ``dilemma_zone`` cost: vehicles caught in the Type-II dilemma zone when their green ends.

At yellow onset a driver between about 2.5 s and 5.5 s of travel from the stop line can neither stop
comfortably nor clear the junction before red (Zegeer & Deen 1978, "Green-extension systems at
high-speed intersections", ITE Journal; Parsonson's 2.5-5.5 s "option zone"). At every green end
(a decision that starts a yellow) the env counts, per light, the vehicles on the approach lanes
losing their green whose travel time ``dist_to_stop_line / speed`` is inside ``EnvConfig.
dilemma_zone`` and whose speed exceeds ``EnvConfig.dilemma_min_speed``. It reads the decision
step's vehicle graph (the state at the yellow onset): no extra SUMO call. A lane counts as losing
green when any of its links does (the graph keeps one movement per approach lane, not per link).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tj_rl.env.graphs import PaddedGraphs
from tj_rl.env.topology import LightTopology

__all__ = ["DilemmaZone", "count_in_zone", "in_dilemma_zone", "losing_lanes"]

_SPEED, _DIST = 2, 6  # NODE_FEATURES columns


def losing_lanes(light: LightTopology, i: int, j: int) -> np.ndarray:
    """bool [n_in]: approach lanes with a link green in green ``i`` and not in green ``j``."""
    lose = light.green_links[i] & ~light.green_links[j]
    idx = {lane: k for k, lane in enumerate(light.in_lanes)}
    out = np.zeros(light.n_in, bool)
    for (a, _, _), lost in zip(light.links, lose, strict=True):
        if a and lost:
            out[idx[a]] = True
    return out


def in_dilemma_zone(
    speed: np.ndarray, dist: np.ndarray, *, zone: tuple[float, float], min_speed: float
) -> np.ndarray:
    """bool per vehicle: faster than ``min_speed`` and ``dist / speed`` within ``zone`` (s)."""
    fast = speed > max(min_speed, 1e-6)
    travel = np.divide(dist, speed, out=np.full(speed.shape, np.inf, np.float64), where=fast)
    return fast & (travel >= zone[0]) & (travel <= zone[1])


def count_in_zone(nodes: np.ndarray, movement: np.ndarray, lanes: np.ndarray, *,
                  zone: tuple[float, float], min_speed: float, ahead_s: float = 0.0) -> int:  # fmt: skip
    """Vehicles (rows of ``nodes`` with their ``movement``) on ``lanes`` (bool per movement) in the
    zone ``ahead_s`` seconds from now, each at its present speed (0: now, the cost's count)."""
    on = (movement >= 0) & (movement < len(lanes))
    on[on] = lanes[movement[on]]
    if not on.any():
        return 0
    speed = nodes[on, _SPEED].astype(np.float64)
    dist = nodes[on, _DIST].astype(np.float64) - speed * ahead_s
    inside = in_dilemma_zone(speed, dist, zone=zone, min_speed=min_speed) & (dist >= 0)
    return int(inside.sum())


class DilemmaZone:
    """Dilemma-zone counts of the lights at their green ends (losing lanes memoised per switch)."""

    def __init__(
        self,
        lights: Sequence[LightTopology],
        *,
        zone: tuple[float, float],
        min_speed: float,
    ) -> None:
        self.lights = tuple(lights)
        self.zone = (float(zone[0]), float(zone[1]))
        self.min_speed = float(min_speed)
        self._losing: dict[tuple[int, int, int], np.ndarray] = {}

    def lanes(self, k: int, i: int, j: int) -> np.ndarray:
        """``losing_lanes`` of light ``k`` for the switch from green ``i`` to green ``j``."""
        key = (k, i, j)
        if key not in self._losing:
            self._losing[key] = losing_lanes(self.lights[k], i, j)
        return self._losing[key]

    def count(self, batch: PaddedGraphs, k: int, i: int, j: int) -> int:
        """Vehicles of light ``k`` in the zone on the lanes that lose green from ``i`` to ``j``."""
        n = batch.num_nodes[k]
        return count_in_zone(batch.nodes[k, :n], batch.movement[k, :n], self.lanes(k, i, j),
                             zone=self.zone, min_speed=self.min_speed)  # fmt: skip

    def green_ends(
        self, batch: PaddedGraphs, before: Sequence[int], after: Sequence[int]
    ) -> np.ndarray:
        """float32 [L]: the counts of the lights whose green ends (``before`` -> ``after`` needs a
        clearance), 0 for the others."""
        out = np.zeros(len(self.lights), np.float32)
        for k, (i, j) in enumerate(zip(before, after, strict=True)):
            if i != j and j >= 0 and self.lights[k].program.needs_clearance(i, j):
                out[k] = self.count(batch, k, i, j)
        return out
