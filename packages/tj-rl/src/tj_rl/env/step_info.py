"""The info dicts a step returns: one agent's decision, costs and overflow, the network-wide
system numbers, and the infos and results of a step whose SUMO died (``TrafficSignalCore.step``'s
contract, README "Info (per agent)")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tj_rl.env.config import COST_NAMES
from tj_rl.env.costs import SHARED_COUNTERS
from tj_rl.env.features import VehicleGraph
from tj_rl.env.shield import Decision

__all__ = ["decision_info", "died_infos", "died_step", "system_info"]


def decision_info(
    decision: Decision,
    graph: VehicleGraph,
    costs: np.ndarray,
    *,
    sim_time: float,
    vetoes_total: int,
    weights: np.ndarray,
    overflow_lanes: int,
) -> dict[str, Any]:
    """One agent's info: its decision, named costs and their weighted sum, graph overflow."""
    return {
        "sim_time": sim_time,
        "requested_action": decision.requested,
        "applied_action": decision.applied,
        "vetoed": decision.vetoed,
        "veto_reason": decision.reason,
        "vetoes_total": vetoes_total,
        "costs": costs,
        "cost": float(costs @ weights),
        "overflow_nodes": graph.dropped_nodes,
        "overflow_edges": graph.dropped_edges,
        "overflow_lanes": overflow_lanes,
        "num_vehicles": graph.num_nodes + graph.dropped_nodes,
    }


def system_info(
    counters: Mapping[str, float], previous: Mapping[str, float], queue: float
) -> dict[str, float]:
    """``info["system"]``: vehicles still expected, the system queue, and SUMO's network-wide
    counters over the interval."""
    return {
        "min_expected_vehicles": counters["min_expected"],
        "queue": queue,
        **{k: counters[k] - previous[k] for k in SHARED_COUNTERS},
    }


def died_infos(
    decisions: Mapping[str, Decision], *, sim_time: float, reason: str
) -> dict[str, dict[str, Any]]:
    """Every agent's info of a step cut short by SUMO's death (zero costs, the reason)."""
    return {
        a: {
            "sim_time": sim_time,
            "truncated_reason": reason,
            "applied_action": d.applied,
            "vetoed": d.vetoed,
            "costs": np.zeros(len(COST_NAMES), np.float32),
            "cost": 0.0,
        }
        for a, d in decisions.items()
    }


def died_step(last_obs: Mapping[str, Any], infos: dict[str, dict[str, Any]]) -> tuple:
    """The results of a step cut short by SUMO's death: the last observations, zero rewards,
    truncated (not terminated: nothing about the traffic ended it) for every agent of ``infos``."""
    agents = list(infos)
    terminateds = dict.fromkeys(agents, False) | {"__all__": False}
    truncateds = dict.fromkeys(agents, True) | {"__all__": True}
    return dict(last_obs), dict.fromkeys(agents, 0.0), terminateds, truncateds, infos
