"""Running policies for whole episodes: ``run_episode`` (one row of SUMO's metrics, return and
summed costs) and ``evaluate`` (several episodes -> ``MetricsTable`` with mean / std / spread).

A policy may run on its own version of the scenario (``scenario_for``: e.g. an actuated net) and
ask the env for reset options (``reset_options``: SUMO runs the lights); ``policy_scenario`` and
``run_episode`` honour both, so every policy goes through the same protocol."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from tj_rl.control.baselines import Policy, make_policy
from tj_rl.env.config import COST_NAMES, EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.metrics import METRIC_NAMES, Spread, spread
from tj_rl.env.scenario import Scenario

__all__ = ["MetricsTable", "evaluate", "policy_scenario", "run_episode"]


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
    """Run ``episodes`` full episodes of ``policy`` and return SUMO's metrics per episode (to
    their ends: ``config.gridlock`` is turned off, a gridlocked episode's delay is what counts)."""
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
    cfg = replace(cfg, metrics=True, gridlock=None)
    env = TrafficSignalCore(cfg, scenario=policy_scenario(pol, scenario))
    table = MetricsTable(policy=name)
    try:
        for ep, seed in enumerate(seeds):
            table.rows.append(run_episode(env, pol, ep, int(seed)))
    finally:
        env.close()
    return table


def policy_scenario(pol: Policy, scenario: Scenario) -> Scenario:
    """The scenario ``pol`` runs on: its ``scenario_for(scenario)`` where it has one."""
    scenario_for = getattr(pol, "scenario_for", None)
    return scenario_for(scenario) if callable(scenario_for) else scenario


def run_episode(env: TrafficSignalCore, pol: Policy, ep: int, seed: int) -> dict[str, Any]:
    """One full episode of ``pol`` on SUMO seed ``seed``: a row of SUMO's metrics (NaN when the
    env's metrics are off), the summed reward (``return``) and every summed cost (``cost_<name>``).
    It ends when the env truncates or terminates it; ``status`` is ``"time_limit"``, the SUMO
    death's reason, or the failure that terminated it (``"gridlock"``).
    ``env`` must be built on ``policy_scenario(pol, ...)``; the policy's ``reset_options`` (if
    any) go to ``env.reset``."""
    obs, infos = env.reset(seed=seed, options=getattr(pol, "reset_options", None))
    pol.reset(env)
    ret, costs = 0.0, np.zeros(len(COST_NAMES))
    while True:
        obs, rew, term, trunc, infos = env.step(pol.compute_actions(obs, infos))
        ret += sum(rew.values())
        costs += sum(np.asarray(i["costs"]) for i in infos.values())
        if term["__all__"] or trunc["__all__"]:
            break
    last = next(iter(infos.values()))
    status = last.get("failure") or last.get("truncated_reason", "")
    row: dict[str, Any] = {"episode": ep, "seed": seed, "status": status}
    row.update(last.get("episode") or dict.fromkeys(METRIC_NAMES, math.nan))
    row["return"] = ret
    row.update({f"cost_{c}": float(v) for c, v in zip(COST_NAMES, costs, strict=True)})
    return row
