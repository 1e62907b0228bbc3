"""Other views of ``TrafficSignalCore``: Gymnasium single-agent (one-light scenarios) and PettingZoo
``ParallelEnv`` (any number of lights). Both own the wrapped env and close it with themselves.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
from pettingzoo import ParallelEnv

from tj_rl.env.core import TrafficSignalCore

__all__ = ["ParallelTrafficEnv", "SingleAgentTrafficEnv"]


class SingleAgentTrafficEnv(gym.Env):
    """Gymnasium ``Env`` for a scenario with exactly one controlled light."""

    metadata = {"render_modes": []}  # noqa: RUF012 - gymnasium convention

    def __init__(self, env: TrafficSignalCore) -> None:
        if len(env.possible_agents) != 1:
            raise ValueError(
                f"SingleAgentTrafficEnv needs a scenario with one controlled light, got "
                f"{len(env.possible_agents)} ({env.possible_agents[:5]}...); set Scenario.tls_ids "
                "or use TrafficSignalEnv / ParallelTrafficEnv"
            )
        self.env = env
        self.agent = env.possible_agents[0]
        self.observation_space = env.observation_spaces[self.agent]
        self.action_space = env.action_spaces[self.agent]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, infos = self.env.reset(seed=seed, options=options)
        return obs[self.agent], infos[self.agent]

    def step(self, action: Any):
        obs, rew, term, trunc, info = self.env.step({self.agent: action})
        a = self.agent
        return obs[a], rew[a], term[a], trunc[a], info[a]

    def close(self) -> None:
        self.env.close()


class ParallelTrafficEnv(ParallelEnv):
    """PettingZoo ``ParallelEnv``; agents leave ``agents`` when their episode ends."""

    metadata = {"render_modes": [], "name": "tj_traffic_signal_v0"}  # noqa: RUF012

    def __init__(self, env: TrafficSignalCore) -> None:
        self.env = env
        self.possible_agents = list(env.possible_agents)
        self.agents: list[str] = []

    def observation_space(self, agent: str):
        return self.env.observation_spaces[agent]

    def action_space(self, agent: str):
        return self.env.action_spaces[agent]

    def reset(self, seed: int | None = None, options: dict | None = None):
        obs, infos = self.env.reset(seed=seed, options=options)
        self.agents = list(self.possible_agents)
        return obs, infos

    def step(self, actions: Mapping[str, Any]):
        obs, rew, term, trunc, info = self.env.step(actions)
        term = {a: v for a, v in term.items() if a != "__all__"}
        trunc = {a: v for a, v in trunc.items() if a != "__all__"}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rew, term, trunc, info

    def close(self) -> None:
        self.env.close()
