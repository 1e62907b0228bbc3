"""Traffic snapshots (DESIGN "Traffic snapshot"): field names, dtypes and units defined once, here.

One sample = the vehicles near one controlled light at one decision step, with phase-1 targets:
``y_next`` is the same vehicle's node features at the next decision step, matched by episode-unique
vehicle id (``y_mask`` 0 when it left the light's graph or the episode ended), and ``risk`` labels a
vehicle 1 when, within the next ``horizon`` decision steps, it is in a pair with time-to-collision
below ``ttc_threshold`` (an edge with ``inv_ttc > 1 / ttc_threshold``, either end) or brakes harder
than ``brake_decel`` m/s^2. ``SnapshotBuilder`` is pure numpy (no SUMO): feed it each step's
graphs, it emits finished samples per light in time order.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from tj_data import FieldSpec, Schema
from tj_rl.env.features import EDGE_FEATURES, NODE_FEATURES, VehicleGraph

__all__ = ["SNAPSHOT_FIELDS", "RiskConfig", "SnapshotBuilder", "snapshot_schema"]

_NF = len(NODE_FEATURES)

# name -> (level, dtype, trailing shape, columns, description with units)
SNAPSHOT_FIELDS: dict[str, tuple[str, str, tuple[int, ...], tuple[str, ...] | None, str]] = {
    "x": ("node", "float32", (_NF,), NODE_FEATURES,
          "rel_x, rel_y (m, from the intersection centre), speed (m/s), accel (m/s^2), heading_sin, "
          "heading_cos (unit heading, angle counter-clockwise from +x), dist_to_stop_line (m, "
          "negative past it), waiting_time (s), length (m)"),
    "vehicle_id": ("node", "int64", (), None, "episode-unique vehicle id (matches across steps)"),
    "movement": ("node", "int64", (), None,
                 "[0, n_in): incoming lane index; [n_in, n_in + n_out): n_in + outgoing lane index"),
    "y_next": ("node", "float32", (_NF,), NODE_FEATURES,
               "the vehicle's x at the next decision step (zeros when y_mask is 0)"),
    "y_mask": ("node", "bool", (), None, "vehicle present near the same light at the next step"),
    "risk": ("node", "float32", (), None,
             "1 if TTC < ttc_threshold or braking harder than brake_decel within the horizon"),
    "edge_attr": ("edge", "float32", (len(EDGE_FEATURES),), EDGE_FEATURES,
                  "dx, dy (m, neighbour - vehicle), closing speed (m/s), inverse TTC (1/s, 0 when "
                  "not on a collision course)"),
    "intersection": ("sample", "int64", (), None, "index of the light in metadata['intersections']"),
    "episode": ("sample", "int64", (), None, "recording-wide episode id"),
    "sim_time": ("sample", "float32", (), None, "simulation time of the decision step (s)"),
    "time_in_phase": ("sample", "float32", (), None, "seconds the current green has shown (s)"),
    "phase": ("sample", "int64", (), None, "current green phase index"),
    "phase_count": ("sample", "int64", (), None, "number of green phases of the light"),
}  # fmt: skip


def snapshot_schema() -> Schema:
    """The tj-data schema of a recorded traffic dataset (written into its manifest)."""
    return Schema(
        fields=tuple(
            FieldSpec(name=n, level=lv, dtype=dt, shape=sh, columns=cols, description=desc)
            for n, (lv, dt, sh, cols, desc) in SNAPSHOT_FIELDS.items()
        )
    )


@dataclass(frozen=True, kw_only=True)
class RiskConfig:
    """Risk label definition (see the module docstring)."""

    ttc_threshold: float = 2.0
    brake_decel: float = 4.5
    horizon: int = 1

    def __post_init__(self) -> None:
        if self.ttc_threshold <= 0:
            raise ValueError(f"RiskConfig.ttc_threshold: {self.ttc_threshold}, must be > 0")
        if self.brake_decel <= 0:
            raise ValueError(f"RiskConfig.brake_decel: {self.brake_decel}, must be > 0")
        if self.horizon < 1:
            raise ValueError(f"RiskConfig.horizon: {self.horizon}, must be >= 1")


@dataclass
class _Pending:
    sample: dict[str, np.ndarray | int | float]
    ids: np.ndarray  # int64 vehicle ids of the nodes
    risk: np.ndarray  # float32 [n]
    age: int = 0


@dataclass
class SnapshotBuilder:
    """Builds the samples of one episode; call ``step`` per decision step, then ``finish``."""

    episode: int
    risk: RiskConfig = field(default_factory=RiskConfig)
    _ids: dict[str, int] = field(default_factory=dict)
    _pending: dict[int, deque[_Pending]] = field(default_factory=dict)

    def vehicle_ids(self, names: tuple[str, ...]) -> np.ndarray:
        """Episode-unique int ids, assigned in order of first appearance."""
        ids = self._ids
        return np.fromiter((ids.setdefault(v, len(ids)) for v in names), np.int64, len(names))

    def _at_risk(self, g: VehicleGraph) -> np.ndarray:
        """bool [n]: in a low-TTC pair or braking hard at this step."""
        hit = g.x[:, 3] < -self.risk.brake_decel
        low = g.edge_attr[:, 3] > 1.0 / self.risk.ttc_threshold
        hit[g.edge_index[0, low]] = True
        hit[g.edge_index[1, low]] = True
        return hit

    def step(
        self,
        graphs: Mapping[int, VehicleGraph],
        phase: Mapping[int, tuple[int, int, float]],
        sim_time: float,
    ) -> list[tuple[int, dict]]:
        """Add the graphs of one step (light index -> graph; phase: index -> (phase, count,
        time in phase)). Returns the (light, sample) pairs finished by this step."""
        done: list[tuple[int, dict]] = []
        for light, g in graphs.items():
            ids = self.vehicle_ids(g.ids)
            queue = self._pending.setdefault(light, deque())
            if queue:
                at_risk = ids[self._at_risk(g)]
                order = np.argsort(ids)
                for p in queue:
                    p.age += 1
                    p.risk[np.isin(p.ids, at_risk)] = 1.0
                    if p.age == 1:  # next-step targets, matched by vehicle id
                        pos = np.searchsorted(ids, p.ids, sorter=order).clip(
                            0, max(len(ids) - 1, 0)
                        )
                        match = order[pos] if len(ids) else pos
                        found = (ids[match] == p.ids) if len(ids) else np.zeros(len(p.ids), bool)
                        p.sample["y_mask"] = found
                        y = np.zeros_like(p.sample["x"])
                        y[found] = g.x[match[found]]
                        p.sample["y_next"] = y
                while queue and queue[0].age >= self.risk.horizon:
                    done.append((light, self._emit(queue.popleft())))
            ph, count, tip = phase[light]
            sample: dict = {
                "x": g.x,
                "vehicle_id": ids,
                "movement": g.movement,
                "edge_index": g.edge_index,
                "edge_attr": g.edge_attr,
                "intersection": light,
                "episode": self.episode,
                "sim_time": float(sim_time),
                "time_in_phase": float(tip),
                "phase": int(ph),
                "phase_count": int(count),
            }
            queue.append(_Pending(sample=sample, ids=ids, risk=np.zeros(len(ids), np.float32)))
        return done

    def finish(self) -> list[tuple[int, dict]]:
        """Samples still waiting for their horizon (episode end: no next step, y_mask 0)."""
        out = []
        for light, queue in self._pending.items():
            while queue:
                out.append((light, self._emit(queue.popleft())))
        self._pending.clear()
        return out

    @staticmethod
    def _emit(p: _Pending) -> dict:
        s = p.sample
        if "y_mask" not in s:
            s["y_mask"] = np.zeros(len(p.ids), bool)
            s["y_next"] = np.zeros_like(s["x"])
        s["risk"] = p.risk
        return s
