"""Baseline policies with the agents' interface, and ``evaluate`` (a per-episode metrics table).

A policy sees the same observations as a learning agent (it reads the ``lanes`` and ``phase``
features and respects ``action_mask``) plus the env's static topology at ``reset``:

- ``fixed-time``: the net's own program: each green is held for its programmed duration (rounded up
  to the decision interval), then the next green in program order.
- ``max-pressure``: the feasible green with the largest sum over its green movements of
  (vehicles on the incoming lane - vehicles on the outgoing lane).
- ``greedy``: the feasible green serving the most halting vehicles (max queue).
- ``max-occupancy``: the feasible green serving the most vehicles, moving or halting (greedy that
  also counts the platoons still approaching, so they do not have to stop); on the default net it
  has less delay than greedy and than phase 2's PPO policy (docs/BENCHMARKS.md).
- ``max-pressure``, ``greedy`` and ``max-occupancy`` take ``margin`` (default 0): the current
  green is kept unless another scores more than ``margin`` above it (hysteresis).
- ``random``: a uniformly random feasible green (benchmarks, exploration data).
- ``mixed``: another baseline (``base``, default fixed-time) whose decision is replaced, with
  probability ``switch_prob``, by a random feasible green: diverse but plausible behaviour data
  for phase-1 recording (pure random switching rarely lets queues form and clear).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from tj_rl.config import COST_NAMES, EnvConfig
from tj_rl.env import TrafficSignalCore
from tj_rl.metrics import METRIC_NAMES, Spread, spread
from tj_rl.scenario import Scenario

__all__ = [
    "POLICIES",
    "FixedTimePolicy",
    "GreedyPolicy",
    "MaxOccupancyPolicy",
    "MaxPressurePolicy",
    "MetricsTable",
    "MixedPolicy",
    "Policy",
    "RandomPolicy",
    "evaluate",
    "make_policy",
    "run_episode",
]


class Policy(Protocol):
    def reset(self, env: TrafficSignalCore) -> None: ...
    def compute_actions(
        self, obs: Mapping[str, Any], infos: Mapping[str, Any]
    ) -> dict[str, int]: ...


def _best_feasible(scores: np.ndarray, mask: np.ndarray, current: int, margin: float = 0.0) -> int:
    """The feasible green with the best score; the current one keeps its green unless another
    scores more than ``margin`` above it (hysteresis: fewer switches, longer greens)."""
    scores = np.where(mask.astype(bool), scores, -np.inf)
    if margin and mask[current]:
        scores[current] += margin
    best = float(scores.max())
    if mask[current] and scores[current] >= best:
        return current  # keep the current green on ties: no needless clearance
    return int(np.argmax(scores))


def _current(obs: Mapping[str, np.ndarray], n: int) -> int:
    return int(np.argmax(obs["phase"][:n]))


class FixedTimePolicy:
    def reset(self, env: TrafficSignalCore) -> None:
        self.programs = {a: lt.program for a, lt in env.lights.items()}
        self.max_green = env.config.max_green

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            prog = self.programs[agent]
            n = prog.n_greens
            cur = _current(o, n)
            # the three flags are always phase[-3:] (also when padded to the scenario's maximum)
            in_clearance = bool(o["phase"][-3])
            t_green = float(o["phase"][-2]) * self.max_green
            done = not in_clearance and t_green >= prog.durations[cur] - 1e-6
            out[agent] = (cur + 1) % n if done else cur
        return out


class _ScoredPolicy:
    """A policy that scores every green and takes the best feasible one, with hysteresis
    ``margin`` (in the score's units: vehicles) in favour of the current green."""

    def __init__(self, margin: float = 0.0) -> None:
        if not (math.isfinite(margin) and margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {margin}")
        self.margin = float(margin)


class MaxPressurePolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.moves = {a: lt.phase_movements() for a, lt in env.lights.items()}
        self.capacity = dict(env.lane_capacity)

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            moves = self.moves[agent]  # [P, n_in, n_out]
            p, n_in, n_out = moves.shape
            count = o["lanes"][: n_in + n_out, 1] * self.capacity[agent]  # padded rows dropped
            pressure = count[:n_in, None] - count[None, n_in:]  # [n_in, n_out]
            scores = (moves * pressure[None]).sum(axis=(1, 2))
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class GreedyPolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.serves = {a: lt.phase_movements().any(axis=2) for a, lt in env.lights.items()}

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            serves = self.serves[agent]  # [P, n_in]
            halting = o["lanes"][: serves.shape[1], 0]
            scores = (serves * halting[None]).sum(axis=1)
            p = serves.shape[0]
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class MaxOccupancyPolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.serves = {a: lt.phase_movements().any(axis=2) for a, lt in env.lights.items()}
        self.capacity = dict(env.lane_capacity)

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            serves = self.serves[agent]  # [P, n_in]
            p, n_in = serves.shape
            count = o["lanes"][:n_in, 1] * self.capacity[agent][:n_in]  # occupancy x capacity
            scores = (serves * count[None]).sum(axis=1)
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class RandomPolicy:
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, env: TrafficSignalCore) -> None:
        pass

    def compute_actions(self, obs, infos):
        return {a: int(self.rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}


class MixedPolicy:
    def __init__(self, base: str = "fixed-time", switch_prob: float = 0.3, seed: int = 0) -> None:
        if base in ("mixed", "random") or base not in POLICIES:
            raise ValueError(
                f"mixed: base {base!r} must be one of fixed-time, max-pressure, greedy, "
                "max-occupancy"
            )
        if not 0.0 <= switch_prob <= 1.0:
            raise ValueError(f"mixed: switch_prob={switch_prob}, must be in [0, 1]")
        self.base = POLICIES[base]()
        self.switch_prob = switch_prob
        self.rng = np.random.default_rng(seed)

    def reset(self, env: TrafficSignalCore) -> None:
        self.base.reset(env)

    def compute_actions(self, obs, infos):
        out = self.base.compute_actions(obs, infos)
        for agent, o in obs.items():
            if self.rng.random() < self.switch_prob:
                out[agent] = int(self.rng.choice(np.flatnonzero(o["action_mask"])))
        return out


POLICIES = {
    "fixed-time": FixedTimePolicy,
    "max-pressure": MaxPressurePolicy,
    "greedy": GreedyPolicy,
    "max-occupancy": MaxOccupancyPolicy,
    "random": RandomPolicy,
    "mixed": MixedPolicy,
}


def make_policy(name: str, **kwargs: Any) -> Policy:
    """A baseline by name (``fixed-time``, ``max-pressure``, ``greedy``, ``max-occupancy``,
    ``random``, ``mixed``)."""
    if name not in POLICIES:
        raise ValueError(f"policy {name!r} unknown; choose one of {sorted(POLICIES)}")
    return POLICIES[name](**kwargs)


@dataclass
class MetricsTable:
    """Per-episode rows (SUMO metrics + return and cost sums) with mean / std summaries."""

    policy: str
    rows: list[dict[str, Any]] = field(default_factory=list)

    def _keys(self) -> list[str]:
        names = (*METRIC_NAMES, "return", *(f"cost_{c}" for c in COST_NAMES))
        return [k for k in names if self.rows and k in self.rows[0]]

    def summary(self) -> dict[str, tuple[float, float]]:
        out = {}
        for k in self._keys():
            v = np.array([r[k] for r in self.rows], dtype=np.float64)
            out[k] = (float(np.nanmean(v)), float(np.nanstd(v)) if len(v) > 1 else 0.0)
        return out

    def spread(self) -> dict[str, Spread]:
        """Mean, std, min and max over the episodes per metric (``summary`` plus the range)."""
        return {k: spread(r[k] for r in self.rows) for k in self._keys()}

    def to_markdown(self) -> str:
        s = self.summary()
        lines = ["| metric | mean | std |", "|---|---|---|"]
        lines += [f"| {k} | {m:.3f} | {sd:.3f} |" for k, (m, sd) in s.items()]
        return "\n".join(lines)


def evaluate(
    scenario: Scenario,
    policy: Policy | str,
    episodes: int = 1,
    seeds: Sequence[int] | None = None,
    *,
    config: EnvConfig | None = None,
) -> MetricsTable:
    """Run ``episodes`` full episodes of ``policy`` and return SUMO's metrics per episode."""
    if episodes < 1:
        raise ValueError(f"evaluate: episodes={episodes}, need >= 1")
    seeds = list(seeds) if seeds is not None else [scenario.seed + i for i in range(episodes)]
    if len(seeds) != episodes:
        raise ValueError(f"evaluate: {len(seeds)} seeds for {episodes} episodes")
    name = policy if isinstance(policy, str) else type(policy).__name__
    pol = make_policy(policy) if isinstance(policy, str) else policy
    cfg = config if config is not None else EnvConfig()
    if cfg.metrics is False:
        raise ValueError(
            "evaluate needs EnvConfig(metrics=True or None): metrics come from SUMO's outputs"
        )
    cfg = replace(cfg, metrics=True)
    env = TrafficSignalCore(cfg, scenario=scenario)
    table = MetricsTable(policy=name)
    try:
        for ep, seed in enumerate(seeds):
            table.rows.append(run_episode(env, pol, ep, int(seed)))
    finally:
        env.close()
    return table


def run_episode(env: TrafficSignalCore, pol: Policy, ep: int, seed: int) -> dict[str, Any]:
    """One full episode of ``pol`` on SUMO seed ``seed``: a row of SUMO's metrics (NaN when the
    env's metrics are off), the summed reward (``return``) and every summed cost (``cost_<name>``)."""
    obs, infos = env.reset(seed=seed)
    pol.reset(env)
    ret, costs = 0.0, np.zeros(len(COST_NAMES))
    while True:
        obs, rew, _term, trunc, infos = env.step(pol.compute_actions(obs, infos))
        ret += sum(rew.values())
        costs += sum(np.asarray(i["costs"]) for i in infos.values())
        if trunc["__all__"]:
            break
    last = next(iter(infos.values()))
    row: dict[str, Any] = {"episode": ep, "seed": seed, "status": last.get("truncated_reason", "")}
    row.update(last.get("episode") or dict.fromkeys(METRIC_NAMES, math.nan))
    row["return"] = ret
    row.update({f"cost_{c}": float(v) for c, v in zip(COST_NAMES, costs, strict=True)})
    return row
