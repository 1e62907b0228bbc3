"""RLlib's ``MultiAgentEnv`` on tj-rl's env: ``TrafficSignalEnv`` (``TrafficSignalCore`` in this
process) and ``ProcessTrafficSignalEnv`` (the same env in a child process, ``sim_child.py``: what
lets one env runner step several libsumo simulations, ``vector.py``).

Importing this module imports Ray RLlib (seconds and ~160 MB per process), so ``tj_rl`` loads it only
when ``tj_rl.TrafficSignalEnv`` is first used. Given RLlib's ``EnvContext`` as
config, each env runner gets its own ``route_stream`` (its own order of a demand pool's files)
unless the config names one. Give the class to RLlib directly:
``config.environment(TrafficSignalEnv, env_config={"scenario": "path/to.sumocfg", "backend": ...})``.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from ray.rllib.env.multi_agent_env import MultiAgentEnv

from tj_rl.env.config import COST_NAMES, EnvConfig
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.scenario import Scenario
from tj_rl.env.step_info import died_step
from tj_rl.rllib.sim_child import SimChild, SimChildDied

__all__ = ["ProcessTrafficSignalEnv", "TrafficSignalEnv", "runner_stream"]

EnvArg = EnvConfig | Mapping[str, Any] | None  # an env config: typed, RLlib's dict, or defaults
ScenarioArg = Scenario | str | Path | None


def runner_stream(config: Any) -> int | None:
    """The route stream of an env built from RLlib's ``EnvContext`` (its env runner's and vector
    index), None for a plain config or one that names its ``route_stream``."""
    index = getattr(config, "worker_index", None)
    if not isinstance(config, Mapping) or index is None or "route_stream" in config:
        return None
    return int(index) * 1000 + int(getattr(config, "vector_index", 0))


class TrafficSignalEnv(TrafficSignalCore, MultiAgentEnv):
    """RLlib ``MultiAgentEnv``: one agent per controlled light, per-agent Dict observation spaces."""

    def __init__(self, config: EnvArg = None, *, scenario: ScenarioArg = None) -> None:
        stream = runner_stream(config)
        if stream is not None:  # each env runner draws its own order of the demand pool's files
            config = {**config, "route_stream": stream}
        TrafficSignalCore.__init__(self, config, scenario=scenario)
        MultiAgentEnv.__init__(self)
        self._agent_ids = set(self.possible_agents)


class ProcessTrafficSignalEnv(MultiAgentEnv):
    """``TrafficSignalEnv``'s API and results, the simulation in a child process (``SimChild``).

    Same observations, rewards and infos as ``TrafficSignalEnv`` for the same config, seed and
    actions. ``send_reset`` / ``send_step`` + ``receive`` split a call so that a vector env can
    start every child before it waits for any. A child that dies mid-episode (killed, crashed)
    ends the episode like a SUMO death: the step returns truncated for every agent with
    ``info["truncated_reason"]`` ``"sumo_died: ..."`` and the last observations; the next reset
    starts a new child (its first episode seeded from the route stream and the restart count,
    so it does not replay the first one's SUMO seed). A reset whose child dies is run once more
    in a new child; a second death is raised (``SimChildDied``).
    """

    def __init__(self, config: EnvArg = None, *, scenario: ScenarioArg = None) -> None:
        stream = runner_stream(config)
        if isinstance(config, EnvConfig) or config is None:
            cfg = config if config is not None else EnvConfig()
            config = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
        data = dict(config)
        if stream is not None:
            data["route_stream"] = stream
        if scenario is not None:
            data["scenario"] = scenario
        self._config = data
        self._restarts = 0
        self._waiting: str | None = None  # the command sent, its reply not read yet
        self._death: SimChildDied | None = None  # why the child died when a step was sent
        self._reset: dict[str, Any] = {"seed": None, "options": None}  # the last reset's arguments
        self._last_obs: dict[str, Any] = {}
        self._child: SimChild | None = SimChild(data)
        agents, self.observation_spaces, self.action_spaces = self._child.spaces
        self.possible_agents, self.agents = list(agents), list(agents)
        MultiAgentEnv.__init__(self)
        self._agent_ids = set(self.possible_agents)

    @property
    def route_stream(self) -> int:
        return int(self._config.get("route_stream", 0))

    @property
    def child_pid(self) -> int | None:
        """The simulation child's pid (None between a death and the next reset)."""
        return self._child.pid if self._child is not None else None

    def set_route_stream(self, stream: int) -> None:
        """Draw the demand pool's files in the order of ``stream`` (before the first episode: the
        env is rebuilt in the child)."""
        if stream == self.route_stream:
            return
        if self._waiting is not None:
            raise RuntimeError("ProcessTrafficSignalEnv.set_route_stream: a reply is not read yet")
        self._config["route_stream"] = int(stream)
        self._live().call("stream", int(stream))

    # ------------------------------------------------------------------ split calls
    def send_reset(self, *, seed: int | None = None,
                   options: Mapping[str, Any] | None = None) -> None:  # fmt: skip
        self._send("reset", {"seed": seed, "options": options})

    def send_step(self, action_dict: Mapping[str, Any]) -> None:
        self._send("step", dict(action_dict))

    def receive(self) -> Any:
        """The result of the call sent last (``reset``'s or ``step``'s, as theirs)."""
        command, self._waiting = self._waiting, None
        if command is None:
            raise RuntimeError("ProcessTrafficSignalEnv.receive: nothing was sent")
        if self._child is None:  # it died when the step was sent
            assert self._death is not None
            return self._died(self._death)
        try:
            result = self._child.receive()
        except SimChildDied as exc:
            self._child = None
            if command != "reset":
                return self._died(exc)
            result = self._live().call("reset", self._fresh(self._reset))  # once; again: raised
        self._last_obs = result[0]
        return result

    # ------------------------------------------------------------------ MultiAgentEnv
    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        self.send_reset(seed=seed, options=options)
        return self.receive()

    def step(self, action_dict: Mapping[str, Any]):
        self.send_step(action_dict)
        return self.receive()

    def close(self) -> None:
        child, self._child, self._waiting = getattr(self, "_child", None), None, None
        if child is not None:
            child.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.close()

    # ------------------------------------------------------------------ internals
    def _live(self) -> SimChild:
        if self._child is None:
            self._child = SimChild(self._config)
        return self._child

    def _send(self, command: str, argument: Any) -> None:
        if self._waiting is not None:
            raise RuntimeError(f"ProcessTrafficSignalEnv: {command} sent before the reply to "
                               f"{self._waiting} was read")  # fmt: skip
        if command == "reset":
            self._reset = argument
            if self._child is None:  # the last one died (or was closed): a new one
                argument = self._fresh(argument)
        try:
            self._live().send(command, argument)
        except SimChildDied as exc:
            self._child, self._death = None, exc
            if command == "reset":  # a new child, once; a second death is raised
                self._live().send(command, self._fresh(argument))
        self._waiting = command

    def _fresh(self, reset: dict[str, Any]) -> dict[str, Any]:
        """A reset's arguments for a new child: unseeded, its first episode would replay the
        first child's SUMO seed, so it gets one from the route stream and the restart count."""
        self._restarts += 1
        if reset["seed"] is not None:
            return reset
        state = np.random.SeedSequence([self.route_stream, self._restarts]).generate_state(1)
        return {**reset, "seed": int(state[0] >> 1)}

    def _died(self, exc: SimChildDied):
        """A truncated step for every agent, as ``TrafficSignalCore`` reports a SUMO death."""
        reason = f"sumo_died: {exc}"
        zeros = np.zeros(len(COST_NAMES), np.float32)
        agents = self.possible_agents
        infos = {a: {"truncated_reason": reason, "applied_action": -1, "vetoed": False,
                     "costs": zeros.copy(), "cost": 0.0} for a in agents}  # fmt: skip
        return died_step(self._last_obs, infos)
