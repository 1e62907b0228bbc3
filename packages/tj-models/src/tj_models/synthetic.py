"""Synthetic traffic snapshots for smoke tests, benchmarks and examples (no SUMO needed).

A four-leg intersection (3 lanes per approach, one movement per lane), IDM car following, a
fixed-time signal with random green durations, Poisson arrivals (``initial_vehicles`` more placed
on the approaches at the start, for graphs of a chosen size from the first step) and a dilemma
zone (vehicles that cannot stop comfortably at a red run it; others may brake hard, which makes
risk labels). Every decision step becomes one snapshot with the fields of the traffic-snapshot
contract (``x``, ``edge_index``, ``edge_attr``, ``vehicle_id``, ``movement``, ``y_next``,
``y_mask``, ``risk`` and the per-sample signal state), as PyG ``Data``; windows collate to one
PyG ``Batch`` per step.
Edges use ``tj_models.geometry``, the same code the world-model rollout uses, with tj-rl's
conventions and defaults (math heading: ``heading_cos``/``heading_sin`` are the x/y components of
the direction of travel; 4 nearest neighbours within 30 m; collision-course inverse TTC).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch_geometric.data import Batch, Data

from tj_models.config import FeatureLayout
from tj_models.geometry import edge_features, radius_edges

__all__ = ["SyntheticTrafficConfig", "collate_windows", "simulate_stream", "synthetic_windows"]

_LANES = 3  # right, through, left: movement = approach * 3 + lane
# direction of travel per approach (N, E, S, W), degrees counter-clockwise from +x (tj-rl's heading)
_HEADINGS = np.array([270.0, 180.0, 90.0, 0.0])


@dataclass(kw_only=True, frozen=True)
class SyntheticTrafficConfig:
    steps: int = 24  # recorded decision steps per stream
    warmup_steps: int = 10  # simulated before recording so the approaches are populated
    decision_interval: float = 2.0  # s between snapshots
    substeps: int = 4
    arrival_rate: float = 0.35  # vehicles / s over the whole intersection
    initial_vehicles: float = 0.0  # mean (Poisson) vehicles on the approaches at the start
    approach_length: float = 120.0  # m
    exit_length: float = 25.0  # m past the stop line before a vehicle leaves
    green_min: float = 10.0
    green_max: float = 30.0
    edge_radius: float = 30.0  # m (tj-rl GraphConfig default)
    max_neighbors: int = 4  # tj-rl GraphConfig.k_nearest default
    conflict_distance: float = 2.5  # m (tj-rl GraphConfig default)
    risk_ttc: float = 2.0  # s: a leader TTC below this marks the vehicle at risk
    risk_brake: float = -4.0  # m/s^2: braking harder than this marks the vehicle at risk

    def __post_init__(self) -> None:
        for name in ("steps", "substeps"):
            if getattr(self, name) < 1:
                raise ValueError(f"SyntheticTrafficConfig.{name} must be >= 1")
        if min(self.warmup_steps, self.arrival_rate, self.initial_vehicles) < 0 or (
            self.green_min > self.green_max
        ):
            raise ValueError(
                "SyntheticTrafficConfig: warmup_steps, arrival_rate, initial_vehicles >= 0; "
                "green_min <= green_max"
            )
        if not (self.edge_radius > 0 and self.conflict_distance > 0 and self.max_neighbors >= 0):
            raise ValueError(
                "SyntheticTrafficConfig: edge_radius, conflict_distance > 0; max_neighbors >= 0"
            )


class _Intersection:
    """Vehicle state arrays; lane-level IDM; phase 0 = N/S green, phase 1 = E/W green."""

    def __init__(self, cfg: SyntheticTrafficConfig, rng: np.random.Generator) -> None:
        self.cfg, self.rng = cfg, rng
        self.s = np.zeros(0)  # distance to the stop line (m), negative once past it
        self.v = np.zeros(0)
        self.a = np.zeros(0)
        self.v0 = np.zeros(0)
        self.length = np.zeros(0)
        self.wait = np.zeros(0)
        self.lane = np.zeros(0, dtype=np.int64)  # approach * 3 + lane
        self.vid = np.zeros(0, dtype=np.int64)
        self.next_id = 0
        self.phase, self.time_in_phase = 0, 0.0
        self.green_for = rng.uniform(cfg.green_min, cfg.green_max)
        if cfg.initial_vehicles > 0:
            self._place(int(rng.poisson(cfg.initial_vehicles)))

    def _place(self, n: int) -> None:
        """``n`` vehicles at random points of random lanes, at least 15 m apart on a lane (a
        point too close to one already placed is drawn again, 10 times at most)."""
        for _ in range(n):
            lane = int(self.rng.integers(4 * _LANES))
            for _ in range(10):
                s = self.rng.uniform(0.0, self.cfg.approach_length)
                if not (np.abs(self.s[self.lane == lane] - s) < 15.0).any():
                    self._add(lane, s)
                    break

    def _add(self, lane: int, s: float) -> None:
        v0 = self.rng.uniform(9.0, 14.0)
        self.s = np.append(self.s, s)
        self.v = np.append(self.v, v0 * self.rng.uniform(0.7, 1.0))
        self.a = np.append(self.a, 0.0)
        self.v0 = np.append(self.v0, v0)
        self.length = np.append(self.length, self.rng.choice([4.5, 5.0, 12.0], p=[0.5, 0.4, 0.1]))
        self.wait = np.append(self.wait, 0.0)
        self.lane = np.append(self.lane, lane)
        self.vid = np.append(self.vid, self.next_id)
        self.next_id += 1

    def _green(self) -> np.ndarray:
        approach = self.lane // _LANES
        return (approach % 2) == self.phase

    def _arrive(self, dt: float) -> None:
        n_new = self.rng.poisson(self.cfg.arrival_rate * dt)
        for _ in range(n_new):
            lane = int(self.rng.integers(4 * _LANES))
            same = self.lane == lane
            if same.any() and (self.cfg.approach_length - self.s[same].max()) < 12.0:
                continue  # entrance blocked
            self._add(lane, self.cfg.approach_length)

    def step(self, dt: float) -> tuple[np.ndarray, np.ndarray]:
        """Advance by ``dt``; returns (ids, at-risk flags) of the vehicles simulated this substep."""
        self.time_in_phase += dt
        if self.time_in_phase >= self.green_for:
            self.phase, self.time_in_phase = 1 - self.phase, 0.0
            self.green_for = self.rng.uniform(self.cfg.green_min, self.cfg.green_max)
        self._arrive(dt)
        n = self.s.shape[0]
        gap = np.full(n, 1e3)
        dv = np.zeros(n)
        for lane in np.unique(self.lane):
            idx = np.flatnonzero(self.lane == lane)
            idx = idx[np.argsort(self.s[idx])]  # closest to (or past) the stop line first
            for k in range(1, idx.shape[0]):
                me, lead = idx[k], idx[k - 1]
                gap[me] = self.s[me] - self.s[lead] - self.length[lead]
                dv[me] = self.v[me] - self.v[lead]
        red = ~self._green() & (self.s > 0)
        can_stop = self.v**2 / (2 * 4.5) < self.s
        stop = red & can_stop
        gap = np.where(stop, np.minimum(gap, self.s - 1.0), gap)
        dv = np.where(stop & (self.s - 1.0 < gap + 1e-9), self.v, dv)
        gap = np.maximum(gap, 0.1)
        s_star = 2.0 + self.v * 1.2 + self.v * dv / (2 * np.sqrt(2.0 * 3.0))
        acc = 2.0 * (1 - (self.v / self.v0) ** 4 - (np.maximum(s_star, 0) / gap) ** 2)
        acc = np.clip(acc, -9.0, 2.0)
        self.v = np.maximum(self.v + acc * dt, 0.0)
        self.a = acc
        self.s = self.s - self.v * dt
        self.wait = np.where(self.v < 0.1, self.wait + dt, 0.0)
        ttc = np.where(dv > 0.1, gap / np.maximum(dv, 1e-6), np.inf)
        risky = (ttc < self.cfg.risk_ttc) | (acc < self.cfg.risk_brake)
        ids = self.vid.copy()
        keep = self.s > -self.cfg.exit_length
        for name in ("s", "v", "a", "v0", "length", "wait", "lane", "vid"):
            setattr(self, name, getattr(self, name)[keep])
        return ids, risky

    def features(self) -> np.ndarray:
        """[n, 9] snapshot features in the contract's order (math heading convention)."""
        theta = np.deg2rad(_HEADINGS[self.lane // _LANES])
        direction = np.stack([np.cos(theta), np.sin(theta)], -1)
        right = np.stack([direction[:, 1], -direction[:, 0]], -1)
        offset = 1.6 + 3.2 * (self.lane % _LANES)
        stop_point = -direction * 10.0 + right * offset[:, None]
        pos = stop_point - direction * self.s[:, None]
        return np.stack(
            [
                pos[:, 0],
                pos[:, 1],
                self.v,
                self.a,
                np.sin(theta),
                np.cos(theta),
                self.s,
                self.wait,
                self.length,
            ],
            axis=-1,
        ).astype(np.float32)


def simulate_stream(
    config: SyntheticTrafficConfig, *, seed: int, intersection: int = 0, episode: int = 0
) -> list[Data]:
    """One (episode, intersection) stream of ``config.steps`` snapshots."""
    rng = np.random.default_rng(seed)
    sim = _Intersection(config, rng)
    dt = config.decision_interval / config.substeps
    layout = FeatureLayout()
    raw: list[dict[str, np.ndarray | float | int]] = []
    for k in range(config.warmup_steps + config.steps + 1):
        snap = {
            "x": sim.features(),
            "vid": sim.vid.copy(),
            "movement": sim.lane.copy(),
            "phase": sim.phase,
            "time_in_phase": sim.time_in_phase,
            "time": k * config.decision_interval,
        }
        at_risk: set[int] = set()
        for _ in range(config.substeps):
            ids, risky = sim.step(dt)
            at_risk.update(ids[risky].tolist())
        snap["risk"] = np.array([v in at_risk for v in snap["vid"].tolist()], dtype=np.float32)  # type: ignore[union-attr]
        if k >= config.warmup_steps:
            raw.append(snap)
    samples = []
    for k in range(config.steps):
        cur, nxt = raw[k], raw[k + 1]
        x = torch.from_numpy(cur["x"])  # type: ignore[arg-type]
        n = x.shape[0]
        where = {int(v): i for i, v in enumerate(nxt["vid"])}  # type: ignore[union-attr]
        idx = [where.get(int(v), -1) for v in cur["vid"]]  # type: ignore[union-attr]
        y_mask = torch.tensor([i >= 0 for i in idx], dtype=torch.bool)
        y_next = torch.zeros(n, 9)
        if n and y_mask.any():
            y_next[y_mask] = torch.from_numpy(nxt["x"])[[i for i in idx if i >= 0]]  # type: ignore[arg-type]
        ptr = torch.tensor([0, n])
        batch = torch.zeros(n, dtype=torch.long)
        ei = radius_edges(x[:, :2], ptr, batch, config.edge_radius, config.max_neighbors)
        samples.append(
            Data(
                x=x,
                edge_index=ei,
                edge_attr=edge_features(
                    x, ei, layout, "math", conflict_distance=config.conflict_distance
                ),
                vehicle_id=torch.from_numpy(cur["vid"]),
                movement=torch.from_numpy(cur["movement"]),  # type: ignore[arg-type]
                y_next=y_next,
                y_mask=y_mask,
                risk=torch.from_numpy(cur["risk"]),  # type: ignore[arg-type]
                phase=torch.tensor([cur["phase"]]),
                time_in_phase=torch.tensor([cur["time_in_phase"]], dtype=torch.float32),
                phase_count=torch.tensor([2]),
                intersection=torch.tensor([intersection]),
                episode=torch.tensor([episode]),
                sim_time=torch.tensor([cur["time"]], dtype=torch.float32),
                num_nodes=n,
            )
        )
    return samples


def synthetic_windows(
    config: SyntheticTrafficConfig, *, streams: int, window: int, stride: int = 1, seed: int = 0
) -> list[list[Data]]:
    """All windows of ``window`` consecutive snapshots from ``streams`` independent streams."""
    if window < 1 or window > config.steps or stride < 1:
        raise ValueError(f"need 1 <= window <= steps={config.steps} and stride >= 1")
    out = []
    for i in range(streams):
        stream = simulate_stream(config, seed=seed * 100_003 + i, intersection=i, episode=seed)
        out += [stream[s : s + window] for s in range(0, len(stream) - window + 1, stride)]
    return out


def collate_windows(windows: Sequence[Sequence[Data]]) -> list[Batch]:
    """``B`` windows of ``L`` steps -> ``L`` PyG batches; graph ``b`` of each step is window ``b``."""
    lengths = {len(w) for w in windows}
    if len(lengths) != 1:
        raise ValueError(f"windows must have one length, got {sorted(lengths)}")
    return [Batch.from_data_list([w[t] for w in windows]) for t in range(lengths.pop())]
