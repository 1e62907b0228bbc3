"""``TrafficSignalEnv``: ``TrafficSignalCore`` with RLlib's ``MultiAgentEnv`` base class.

Importing this module imports Ray RLlib (seconds and ~160 MB per process), so ``tj_rl`` loads it only
when ``tj_rl.TrafficSignalEnv`` is first used. Given RLlib's ``EnvContext`` as
config, each env runner gets its own ``route_stream`` (its own order of a demand pool's files)
unless the config names one. Give the class to RLlib directly:
``config.environment(TrafficSignalEnv, env_config={"scenario": "path/to.sumocfg", "backend": ...})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.rllib.env.multi_agent_env import MultiAgentEnv

from tj_rl.env.config import EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.scenario import Scenario

__all__ = ["TrafficSignalEnv"]


class TrafficSignalEnv(TrafficSignalCore, MultiAgentEnv):
    """RLlib ``MultiAgentEnv``: one agent per controlled light, per-agent Dict observation spaces."""

    def __init__(
        self,
        config: EnvConfig | Mapping[str, Any] | None = None,
        *,
        scenario: Scenario | str | Path | None = None,
    ) -> None:
        index = getattr(config, "worker_index", None)  # RLlib's EnvContext: which env runner
        if isinstance(config, Mapping) and index is not None and "route_stream" not in config:
            # each env runner draws its own order of the demand pool's route files
            config = {**config, "route_stream": int(index) * 1000 + int(getattr(config, "vector_index", 0))}
        TrafficSignalCore.__init__(self, config, scenario=scenario)
        MultiAgentEnv.__init__(self)
        self._agent_ids = set(self.possible_agents)
