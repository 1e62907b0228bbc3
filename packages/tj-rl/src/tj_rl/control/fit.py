"""Does a policy fit an env? Checks of a light's observation and action spaces against the
graph encoder and controller that will read them, before anything runs (RLlib's module, the
actor's callers: ``AgentPolicy``, ``RolloutCollector``). Reads spaces only: SUMO need not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np

from tj_rl.control.unpad import OBSERVATION_KEYS

if TYPE_CHECKING:
    from tj_models import GNNConfig, TrafficAgent
    from tj_rl.env.core import TrafficSignalCore

__all__ = ["check_agent_env", "check_features", "check_spaces"]


def check_spaces(
    observation_space: gym.Space, action_space: gym.Space, who: str = "TrafficRLModule"
) -> tuple[int, int]:
    """(number of actions, movement count the encoder must embed) of one light's spaces."""
    if not isinstance(observation_space, gym.spaces.Dict):
        raise ValueError(f"{who} needs tj-rl's Dict observation space, got {observation_space}")
    missing = [k for k in OBSERVATION_KEYS if k not in observation_space.spaces]
    if missing:
        raise ValueError(f"{who}: observation space lacks {missing} (tj-rl >= 0.6 observations)")
    if not isinstance(action_space, gym.spaces.Discrete):
        raise ValueError(f"{who} needs a Discrete action space, got {action_space}")
    n_actions = int(action_space.n)
    if observation_space["action_mask"].shape != (n_actions,):
        raise ValueError(
            f"{who}: action_mask shape {observation_space['action_mask'].shape} does "
            f"not match the action space {action_space}"
        )
    movements = int(np.max(observation_space["movement"].high)) + 1
    return n_actions, movements


def check_features(gnn: GNNConfig, observation_space: gym.spaces.Dict, who: str) -> None:
    """The encoder reads as many node and edge features as the observations carry."""
    features = (
        observation_space["nodes"].shape[-1],
        observation_space["edge_attr"].shape[-1],
    )
    if features != (gnn.node_features, gnn.edge_features):
        raise ValueError(
            f"{who}: the GNN reads {gnn.node_features} node and {gnn.edge_features} edge "
            f"features, the observations have {features}"
        )


def check_agent_env(agent: TrafficAgent, env: TrafficSignalCore, who: str) -> None:
    """Raise ``ValueError`` (starting with ``who``) unless every light of ``env`` shares one
    observation space that ``agent`` can read: its node and edge features, at most its GNN's
    movement groups and at most its controller's ``max_actions`` actions. Reads the env's spaces
    only (SUMO need not run): ``AgentPolicy`` and ``RolloutCollector`` check before acting."""
    spaces = env.observation_spaces
    first = env.possible_agents[0]
    differ = [a for a in env.possible_agents if spaces[a] != spaces[first]]
    if differ:
        raise ValueError(
            f"{who}: lights {[first, *differ]} have different observation spaces; one "
            "forward pass needs one space: use the EnvConfig the policy was trained with "
            "(pad_to_scenario=True, or max_phases / max_lanes)"
        )
    n_actions, movements = check_spaces(spaces[first], env.action_spaces[first], who)
    gnn = agent.gnn.config
    check_features(gnn, spaces[first], who)
    max_actions = agent.config.max_actions
    if n_actions > max_actions:
        raise ValueError(
            f"{who}: the env has {n_actions} actions per light, the agent's controller "
            f"scores {max_actions} (EnvConfig.max_phases <= {max_actions})"
        )
    if movements > gnn.num_movements:
        raise ValueError(
            f"{who}: its GNN embeds {gnn.num_movements} movements, the env's observations "
            f"have up to {movements}; set EnvConfig.max_lanes <= {gnn.num_movements}"
        )
