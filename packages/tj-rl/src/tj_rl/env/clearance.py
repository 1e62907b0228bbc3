"""Yellow and all-red intervals of one light from its approach speed and junction size (ITE).

ITE, "Guidelines for Determining Traffic Signal Change and Clearance Intervals" (2020), kinematic
formulas: yellow ``Y = t + v / (2a + 2Gg)`` (perception-reaction ``t`` = 1.0 s, deceleration
``a`` = 3.05 m/s^2, grade ``G`` = 0) and all-red ``R = (W + L) / v`` (``W`` the distance across the
junction, ``L`` = 6 m vehicle length), with ``v`` the fastest speed limit among the light's
approach lanes. ``W`` is the longest internal (via) lane of the light's links, or the junction
shape's diameter when the net has no internal lanes. Both are rounded up to the simulation step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import sumolib

__all__ = ["ITE_DECEL", "ITE_REACTION", "ITE_VEHICLE_LENGTH", "ceil_to", "ite_intervals"]

ITE_REACTION = 1.0  # s
ITE_DECEL = 3.05  # m/s^2
ITE_VEHICLE_LENGTH = 6.0  # m
_G = 9.81


def ceil_to(value: float, step: float) -> float:
    """``value`` rounded up to a whole number of simulation steps (no float residue)."""
    return round(math.ceil(value / step - 1e-9) * step, 9)


def _width(net: sumolib.net.Net, links: Sequence[tuple[str, str, str]]) -> float:
    vias = [net.getLane(v).getLength() for _, _, v in links if v]
    if vias:
        return float(max(vias))
    shape = [p for a, _, _ in links if a for p in net.getLane(a).getEdge().getToNode().getShape()]
    return float(max((math.dist(p, q) for p in shape for q in shape), default=0.0))


def ite_intervals(
    net: sumolib.net.Net,
    links: Sequence[tuple[str, str, str]],
    *,
    step: float,
    grade: float = 0.0,
) -> tuple[float, float]:
    """(yellow, all-red) seconds of the light whose controlled links are ``links`` (in, out, via)."""
    v = max(net.getLane(a).getSpeed() for a, _, _ in links if a)
    yellow = ITE_REACTION + v / (2 * ITE_DECEL + 2 * grade * _G)
    all_red = (_width(net, links) + ITE_VEHICLE_LENGTH) / v
    return ceil_to(yellow, step), ceil_to(all_red, step)
