"""Advanced-MP (Zhang et al., ICML 2022, "Expression might be enough: representing pressure and
demand for reinforcement learning based traffic signal control"), as its reference code computes it
(LiangZhang1996/Advanced_XLight: ``models/advanced_maxpressure_agent.py``, ``utils/cityflow_env.py``).

The rule, per light and decision:

- **efficient pressure** of an incoming lane (the reference's traffic movement: one lane to one
  road) in a green: its queue (halting vehicles) minus the mean queue over the lanes of the road
  its green links feed (the mean of those roads' means where a shared lane feeds several); a
  green's efficient pressure is the sum over the incoming lanes it serves;
- **effective running vehicles** of an incoming lane: vehicles moving (speed >= 0.1 m/s, i.e. not
  halting) between the stop line and the effective range, the distance one covers in a decision
  interval: range = the lane's speed limit x ``horizon`` (the reference's 167 m is CityFlow's
  11.1 m/s x its 15-s action time); the current green's demand is their sum over the lanes it
  serves;
- keep the current green while ``weight`` x its demand >= the best efficient pressure of the
  feasible greens (``>=`` as the reference; the best over all greens or over the others picks the
  same green), else take the feasible green with the most efficient pressure (the current one on
  ties: no needless clearance).

What tj-rl's observation gives in place of the reference's whole-lane counts: queues are the
``lanes`` rows' halting counts, over each movement's observed chain (its lane with those upstream,
or downstream for an outgoing lane, within ``obs_radius``); running vehicles come from the vehicle
nodes (``speed``, ``dist_to_stop_line``, ``movement``), so vehicles beyond ``obs_radius`` or the
``max_nodes`` nearest are not counted (with the defaults the range, 13.9 m/s x 10 s, reaches past
the 100 m observed: every observed approaching vehicle counts). An outgoing road's lanes are its
observed ones (those the light's links feed), grouped by SUMO's lane ids (``<edge>_<index>``).
Right turns count where a green serves them (the reference's 4-phase CityFlow layout leaves them
out: there they always may go).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from tj_rl.env.features import NODE_FEATURES

if TYPE_CHECKING:
    from tj_rl.env.core import TrafficSignalCore
    from tj_rl.env.topology import LightTopology

__all__ = ["AdvancedMaxPressurePolicy", "efficient_pressure_weights"]

_SPEED, _DIST = NODE_FEATURES.index("speed"), NODE_FEATURES.index("dist_to_stop_line")
_HALTING_SPEED = 0.1  # m/s: SUMO's (and the env's ``lanes`` rows') halting threshold


def _road_onehot(lanes: tuple[str, ...]) -> np.ndarray:
    """float [n, roads]: each lane's road, one-hot (SUMO lane ids are ``<edge id>_<index>``)."""
    codes = np.unique([lane.rsplit("_", 1)[0] for lane in lanes], return_inverse=True)[1]
    return np.eye(int(codes.max(initial=-1)) + 1)[codes.reshape(-1)]


def efficient_pressure_weights(light: LightTopology) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(w_in [P, n_in], w_out [P, n_out])``: green p's efficient pressure is
    ``w_in[p] @ queue_in - w_out[p] @ queue_out`` (over the incoming lanes it serves: the lane's
    queue minus the mean queue of the road its green links feed, of their mean where they feed
    several), and its running-vehicle demand ``w_in[p] @ running_in``."""
    moves = light.phase_movements().astype(np.float64)  # [P, n_in, n_out]
    out_road = _road_onehot(light.out_lanes)  # [n_out, R]
    feeds = (moves @ out_road) > 0  # [P, n_in, R]: lane i sends green traffic to road r in p
    roads = feeds.sum(axis=2, keepdims=True)
    share = np.divide(feeds, roads, out=np.zeros(feeds.shape), where=roads > 0)
    w_in = (roads[..., 0] > 0).astype(np.float64)
    w_out = (share.sum(axis=1) / out_road.sum(axis=0)) @ out_road.T
    return w_in, w_out


class AdvancedMaxPressurePolicy:
    """Advanced-MP as a tj-rl baseline (``advanced-mp``; the rule: the module's docstring).
    ``horizon``: seconds of travel that set the effective range (None: the env's
    ``delta_time``); ``weight``: the reference's ``W`` on the current green's demand."""

    def __init__(self, horizon: float | None = None, weight: float = 1.0) -> None:
        if horizon is not None and not (math.isfinite(horizon) and horizon > 0):
            raise ValueError(f"horizon must be a finite number of seconds > 0, got {horizon}")
        if not (math.isfinite(weight) and weight >= 0):
            raise ValueError(f"weight must be a finite number >= 0, got {weight}")
        self.horizon = None if horizon is None else float(horizon)
        self.weight = float(weight)

    def fingerprint(self) -> str:
        """What decides its episodes (``tj_rl.eval.row_cache``): its horizon and weight."""
        return f"{type(self).__name__}(horizon={self.horizon!r}, weight={self.weight!r})"

    def reset(self, env: TrafficSignalCore) -> None:
        seconds = env.config.delta_time if self.horizon is None else self.horizon
        self.weights = {a: efficient_pressure_weights(lt) for a, lt in env.lights.items()}
        self.reach = {a: lt.lane_speed[: lt.n_in] * seconds for a, lt in env.lights.items()}

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            w_in, w_out = self.weights[agent]
            p, n_in = w_in.shape
            n = n_in + w_out.shape[1]
            queue = np.zeros(n)  # padded rows dropped; rows cut by max_lanes count 0
            rows = min(n, len(o["lanes"]))
            queue[:rows] = o["lanes"][:rows, 0]
            pressure = w_in @ queue[:n_in] - w_out @ queue[n_in:]
            demand = w_in @ self._running(o, n_in, self.reach[agent])
            out[agent] = self._choose(pressure, demand, o, p)
        return out

    @staticmethod
    def _running(o, n_in: int, reach: np.ndarray) -> np.ndarray:
        """float [n_in]: vehicles moving towards each incoming lane's stop line within its reach
        (padding nodes, and vehicles past the stop line or on outgoing lanes, left out)."""
        move = o["movement"]
        ok = o["node_mask"].astype(bool) & (move >= 0) & (move < n_in)
        lane = np.where(ok, move, 0)
        dist = o["nodes"][:, _DIST]
        ok &= (o["nodes"][:, _SPEED] >= _HALTING_SPEED) & (dist >= 0) & (dist <= reach[lane])
        return np.bincount(lane[ok], minlength=n_in).astype(np.float64)

    def _choose(self, pressure: np.ndarray, demand: np.ndarray, o, p: int) -> int:
        mask = o["action_mask"][:p].astype(bool)
        current = int(np.argmax(o["phase"][:p]))
        scores = np.where(mask, pressure, -np.inf)
        best = scores.max()
        if mask[current] and (self.weight * demand[current] >= best or scores[current] >= best):
            return current  # its running vehicles still pass, or it has the most pressure
        return int(np.argmax(scores))
