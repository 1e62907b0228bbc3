"""Rollout samples as graphs: one sample per light per decision step, ready for a tj-data store.

A padded observation (DESIGN "RL observation") is cut to its real nodes and edges (``node_mask``,
``edge_mask``, edges whose two ends are real; local ids renumbered to the kept nodes), and carries
what PPO-Lagrangian needs of that decision: the action, its log-probability under the collecting
policy, the reward and cost advantages and returns (``gae.py``), the values, the policy version
and the light. ``rollout_schema`` is the tj-data schema of such samples (node, edge and sample
fields), so they flow through ``LiveQueue`` / ``LiveGraphDataset`` and spill to a graph store
unchanged. Numpy only: collector processes import neither Ray nor tj-data's torch parts here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tj_rl.rollout.advantages import gae

__all__ = [
    "ROLLOUT_FIELDS",
    "Transition",
    "fragment_samples",
    "graph_sample",
    "rollout_schema",
]

# per-sample training fields a fragment adds to each observation (float32 unless named)
ROLLOUT_FIELDS: tuple[str, ...] = (
    "action", "logp", "value", "cost_value", "reward", "cost",
    "advantage", "returns", "cost_advantage", "cost_returns", "version", "light",
)  # fmt: skip
_INTS = {"action": "int64", "version": "int64", "light": "int16"}


def rollout_schema(space: Mapping[str, Any]) -> Any:
    """The tj-data ``Schema`` of rollout samples for one light's observation ``space`` (a gymnasium
    Dict space, or a mapping of name -> array with the same shapes)."""
    from tj_data.schema import Schema

    def shape(name: str) -> tuple[int, ...]:
        return tuple(int(s) for s in space[name].shape)

    sample: dict[str, Any] = {
        "phase": ("float32", shape("phase")),
        "time_in_phase": "float32",
        "action_mask": ("int8", shape("action_mask")),
        "lanes": ("float32", shape("lanes")),
        "lane_mask": ("int8", shape("lane_mask")),
        "phase_lanes": ("int8", shape("phase_lanes")),
    }
    sample |= {name: _INTS.get(name, "float32") for name in ROLLOUT_FIELDS}
    return Schema.graph(
        node_features=shape("nodes")[-1],
        edge_features=shape("edge_attr")[-1],
        node_fields={"movement": "int64"},
        sample_fields=sample,
    )


def graph_sample(obs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One padded observation -> a compact graph sample (real nodes and edges only; edge ids local
    to the kept nodes, int32, as tj-data stores them). The inputs are not modified."""
    keep = np.asarray(obs["node_mask"]).astype(bool)
    src, dst = np.asarray(obs["edge_index"], dtype=np.int64)
    edges = np.asarray(obs["edge_mask"]).astype(bool) & keep[src] & keep[dst]
    new_id = np.cumsum(keep) - 1  # kept node slot -> compact id
    return {
        "x": np.asarray(obs["nodes"], np.float32)[keep],
        "movement": np.asarray(obs["movement"], np.int64)[keep],
        "edge_index": np.stack([new_id[src[edges]], new_id[dst[edges]]]).astype(np.int32),
        "edge_attr": np.asarray(obs["edge_attr"], np.float32)[edges],
        "phase": np.asarray(obs["phase"], np.float32),
        "time_in_phase": np.float32(np.asarray(obs["time_in_phase"]).reshape(-1)[0]),
        "action_mask": np.asarray(obs["action_mask"], np.int8),
        "lanes": np.asarray(obs["lanes"], np.float32),
        "lane_mask": np.asarray(obs["lane_mask"], np.int8),
        "phase_lanes": np.asarray(obs["phase_lanes"], np.int8),
    }


@dataclass(kw_only=True)
class Transition:
    """One decision step of all L lights (arrays [L]); ``next_value`` / ``next_cost_value`` are
    the critics on the observation after the step (the bootstrap)."""

    observations: Sequence[Mapping[str, np.ndarray]]  # L padded observations before the step
    action: np.ndarray
    logp: np.ndarray
    value: np.ndarray
    cost_value: np.ndarray
    reward: np.ndarray
    cost: np.ndarray
    next_value: np.ndarray
    next_cost_value: np.ndarray
    terminated: bool
    episode_end: bool


def fragment_samples(
    steps: Sequence[Transition], *, version: int, gamma: float, lam: float,
    cost_gamma: float | None = None, cost_lam: float | None = None,
) -> list[dict[str, np.ndarray]]:  # fmt: skip
    """The graph samples of a time-ordered fragment (step-major, light-minor), with GAE for reward
    and for cost over the fragment (no carry across an episode's end; the fragment's last step
    bootstraps from its ``next_value``)."""
    if not steps:
        return []

    def col(name: str) -> np.ndarray:
        return np.stack([np.asarray(getattr(s, name), np.float32) for s in steps])  # [T, L]

    term = np.array([[s.terminated] * len(s.action) for s in steps], bool)
    end = np.array([[s.episode_end] * len(s.action) for s in steps], bool)
    adv, ret = gae(col("reward"), col("value"), col("next_value"), terminated=term,
                   episode_end=end, gamma=gamma, lam=lam)  # fmt: skip
    cadv, cret = gae(col("cost"), col("cost_value"), col("next_cost_value"), terminated=term,
                     episode_end=end, gamma=gamma if cost_gamma is None else cost_gamma,
                     lam=lam if cost_lam is None else cost_lam)  # fmt: skip
    out = []
    for t, step in enumerate(steps):
        for i, obs in enumerate(step.observations):
            sample = graph_sample(obs)
            sample |= {
                "action": np.int64(step.action[i]),
                "logp": np.float32(step.logp[i]),
                "value": np.float32(step.value[i]),
                "cost_value": np.float32(step.cost_value[i]),
                "reward": np.float32(step.reward[i]),
                "cost": np.float32(step.cost[i]),
                "advantage": adv[t, i], "returns": ret[t, i],
                "cost_advantage": cadv[t, i], "cost_returns": cret[t, i],
                "version": np.int64(version), "light": np.int16(i),
            }  # fmt: skip
            out.append(sample)
    return out
