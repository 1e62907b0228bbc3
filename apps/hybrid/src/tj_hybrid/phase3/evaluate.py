"""Phase 3's evaluation: the phase-3 policy, the phase-2 policy it started from and tj-rl's
baselines on held-out traffic (route seeds never trained on, plus a ~30% heavier set) and SUMO
seeds never used in training, same protocol; each episode's weighted safety cost (phase 3's
``cost_weights``, summed over steps and lights, as in training) is added to the table."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tj_hybrid.config import HybridConfig
from tj_hybrid.training import torch_threads
from tj_rl.env import COST_NAMES

__all__ = ["EVAL_METRICS", "evaluate_phase3", "weighted_cost"]

EVAL_METRICS = ("avg_delay", "avg_trip_time", "avg_waiting_time", "mean_queue", "throughput",
                "cost", *(f"cost_{c}" for c in COST_NAMES), "vetoes")  # fmt: skip


def weighted_cost(row: Mapping[str, Any], weights: Mapping[str, float]) -> float:
    """An episode's safety cost: the named costs of its row weighted as in training."""
    return float(sum(weights.get(c, 0.0) * row[f"cost_{c}"] for c in COST_NAMES))


def evaluate_phase3(cfg: HybridConfig, setup: Any, agents: Mapping[str, Path],
                    shielded: Mapping[str, float] | None = None) -> dict[str, Any]:  # fmt: skip
    """Held-out tables (normal and heavy) of ``agents`` (name -> agent dir) and the baselines;
    ``shielded``: agents that act behind their learned shield, with its threshold."""
    from tj_rl.control import AgentPolicy
    from tj_rl.eval import evaluate_heldout

    env = dataclasses.replace(setup.env, metrics=True, route_files=(),
                              cost_weights=dict(cfg.phase3.cost_weights))  # fmt: skip
    shielded = shielded or {}
    policies: dict[str, Any] = {name: AgentPolicy(path, shield_threshold=shielded.get(name))
                                for name, path in agents.items()}  # fmt: skip
    policies |= cfg.phase2.eval.baseline_policies()
    out: dict[str, Any] = {}
    for label, demand in (("held_out", setup.held_out), ("held_out_heavy", setup.held_out_heavy)):
        with torch_threads(1):  # one small forward per decision (see training/threads.py)
            table = evaluate_heldout(setup.scenario, policies, demand, cfg.phase2.eval.sumo_seeds,
                                     config=env, training_seeds=())  # fmt: skip
        for row in table.rows:
            row["cost"] = weighted_cost(row, cfg.phase3.cost_weights)
        out[label] = {"markdown": table.to_markdown(EVAL_METRICS), "rows": table.rows,
                      "summary": {p: {m: s._asdict() for m, s in ms.items()}
                                  for p, ms in table.summary(EVAL_METRICS).items()}}  # fmt: skip
    return out
