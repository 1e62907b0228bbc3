"""The named safety costs of every controlled light at one decision step (README "Costs"), computed
for all lights at once from the step's padded graph batch."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np

from tj_rl.env.config import COST_NAMES
from tj_rl.env.graphs import PaddedGraphs

__all__ = ["SHARED_COUNTERS", "cost_matrix", "safety_counts"]

# SUMO's network-wide counters behind costs 3-5, in COST_NAMES order
SHARED_COUNTERS: tuple[str, ...] = ("emergency_braking", "teleports", "collisions")


class SafetyCounts(Protocol):
    def __call__(
        self, batch: PaddedGraphs, *, ttc_threshold: float, hard_brake_decel: float
    ) -> tuple[np.ndarray, np.ndarray]: ...


def safety_counts(
    batch: PaddedGraphs, *, ttc_threshold: float, hard_brake_decel: float
) -> tuple[np.ndarray, np.ndarray]:
    """Per light: vehicles that are the target of an edge with time-to-collision below
    ``ttc_threshold``, and vehicles decelerating harder than ``hard_brake_decel`` (comparisons in
    float32, the features' precision)."""
    low = batch.edge_attr[..., 3] > np.float32(1.0 / ttc_threshold)  # [L, E]; padding is 0
    if low.any():
        li, ei = low.nonzero()
        flagged = np.zeros(batch.nodes.shape[:2], bool)
        flagged[li, batch.edge_index[li, 1, ei]] = True
        low_ttc = flagged.sum(axis=1)
    else:
        low_ttc = np.zeros(len(low), np.int64)
    return low_ttc, (batch.nodes[..., 3] < np.float32(-hard_brake_decel)).sum(axis=1)


def cost_matrix(
    batch: PaddedGraphs,
    vetoed: Sequence[bool],
    counters: Mapping[str, float],
    previous: Mapping[str, float],
    *,
    dilemma: np.ndarray | None = None,
    red_light: np.ndarray | None = None,
    ttc_threshold: float,
    hard_brake_decel: float,
    counts: SafetyCounts = safety_counts,
) -> np.ndarray:
    """float32 [L, len(COST_NAMES)]: veto, vehicles (edge targets) in a pair with time-to-collision
    below ``ttc_threshold``, vehicles decelerating harder than ``hard_brake_decel``, and SUMO's
    emergency braking / teleports / collisions in the interval (``counters - previous``, shared),
    ``dilemma`` (per light: vehicles in the dilemma zone at its green end, ``dilemma.py``) and
    ``red_light`` (per light: vehicles that entered on red in the interval, ``red_light.py``);
    None: 0. ``counts`` computes the two per-light vehicle counts (``safety_counts`` or its compiled twin)."""
    costs = np.empty((len(vetoed), len(COST_NAMES)), np.float32)
    costs[:, 0] = vetoed
    costs[:, 1], costs[:, 2] = counts(
        batch, ttc_threshold=ttc_threshold, hard_brake_decel=hard_brake_decel
    )
    costs[:, 3:6] = [counters[k] - previous[k] for k in SHARED_COUNTERS]
    costs[:, 6] = 0.0 if dilemma is None else dilemma
    costs[:, 7] = 0.0 if red_light is None else red_light
    return costs
