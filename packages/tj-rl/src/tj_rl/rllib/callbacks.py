"""``TrafficCallbacks``: RLlib (new API stack) callbacks that report the env's safety costs, the
shield's vetoes and episodes ended by SUMO dying as custom metrics of the env runners.

Every step adds the step's per-agent infos (``env.py``'s ``_info``) into a small tally kept in the
episode's ``custom_data`` (RLlib copies it into every continuation chunk of a long episode, so an
episode that spans several ``sample()`` calls is counted once, whole); at the episode's end the
tally goes to the env runner's ``metrics_logger``. The keys, under ``result["env_runners"]``:

- ``"episode_costs_mean"``: ``{name: float}`` for every name of ``tj_rl.COST_NAMES``, the sum over
  lights and steps of ``info["costs"][name]`` in one episode, averaged over the recent episodes
  (the window of RLlib's own ``episode_return_mean``: ``metrics_num_episodes_for_smoothing``).
- ``"episode_weighted_cost_mean"``: the same for ``info["cost"]`` (the ``cost_weights`` sum).
- ``"episode_vetoes_mean"``: the shield's vetoes (``info["vetoed"]``) per episode, same window.
- ``"vetoes_lifetime"``: every veto of every finished episode since the algorithm started.
- ``"episodes_sumo_died"``: finished episodes whose ``truncated_reason`` is not ``"time_limit"``
  (SUMO died: ``"sumo_died: <backend>: <error>"``), counted since the algorithm started; it is
  present (0) from the first finished episode on.
- ``"episodes_gridlock"``: finished episodes the env ended as a gridlock (``info["failure"]``,
  ``EnvConfig.gridlock``), counted since the algorithm started; present (0) from the first
  finished episode on.
- ``"sumo_died_reasons"``: the reasons of the episodes that died since the last result, each cut to
  300 characters; present from the first death on. RLlib unwraps a one-item list, so the value is
  a string for one death, a list for several, ``[]`` for none: ``sumo_died_reasons(result)``
  always gives the list.

Importing this module imports Ray: ``tj_rl`` loads it only on first use of ``tj_rl.TrafficCallbacks``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from ray.rllib.callbacks.callbacks import RLlibCallback

from tj_rl.env.config import COST_NAMES

__all__ = [
    "COSTS_KEY",
    "DIED_KEY",
    "GRIDLOCK_KEY",
    "REASONS_KEY",
    "VETOES_KEY",
    "VETOES_LIFETIME_KEY",
    "WEIGHTED_COST_KEY",
    "EpisodeTally",
    "TrafficCallbacks",
    "sumo_died_reasons",
]

COSTS_KEY = "episode_costs_mean"
WEIGHTED_COST_KEY = "episode_weighted_cost_mean"
VETOES_KEY = "episode_vetoes_mean"
VETOES_LIFETIME_KEY = "vetoes_lifetime"
DIED_KEY = "episodes_sumo_died"
GRIDLOCK_KEY = "episodes_gridlock"
REASONS_KEY = "sumo_died_reasons"
TIME_LIMIT = "time_limit"  # the env's truncated_reason of an episode that ran to its end

_TALLY = "tj_rl_tally"  # the tally's key in episode.custom_data
_REASON_CHARS = 300  # SUMO's messages can carry its whole stderr tail
_REASONS_WINDOW = 100  # at most this many reasons per env runner between two results


@dataclass(kw_only=True)
class EpisodeTally:
    """What one episode's step infos add up to (all lights, all steps so far)."""

    costs: np.ndarray = field(default_factory=lambda: np.zeros(len(COST_NAMES), np.float64))
    weighted_cost: float = 0.0
    vetoes: int = 0
    steps: int = 0
    truncated_reason: str | None = None
    failure: str | None = None  # what terminated the episode (``"gridlock"``)

    def add(self, infos: dict[Any, dict[str, Any]]) -> None:
        """Add one env step's infos (agent id -> info dict)."""
        for info in infos.values():
            costs = info.get("costs")
            if costs is not None:
                self.costs += np.asarray(costs, np.float64)
            self.weighted_cost += float(info.get("cost", 0.0))
            self.vetoes += int(bool(info.get("vetoed", False)))
            reason = info.get("truncated_reason")
            if reason is not None:
                self.truncated_reason = str(reason)
            if info.get("failure") is not None:
                self.failure = str(info["failure"])
        self.steps += 1

    @property
    def sumo_died(self) -> bool:
        """The episode ended by something else than its time limit (SUMO died)."""
        return self.truncated_reason is not None and self.truncated_reason != TIME_LIMIT


class TrafficCallbacks(RLlibCallback):
    """Safety costs, shield vetoes and SUMO deaths per episode as env-runner metrics (keys in the
    module docstring). Give the class to RLlib: ``config.callbacks(TrafficCallbacks)``."""

    def on_episode_start(self, *, episode, **kwargs) -> None:
        episode.custom_data[_TALLY] = EpisodeTally()

    def on_episode_step(self, *, episode, **kwargs) -> None:
        tally = episode.custom_data.setdefault(_TALLY, EpisodeTally())
        tally.add(episode.get_infos(-1))

    def on_episode_end(self, *, episode, env_runner=None, metrics_logger=None, **kwargs) -> None:
        tally = episode.custom_data.pop(_TALLY, None)
        if tally is None or metrics_logger is None:
            return
        log_episode(metrics_logger, tally, window=_window(env_runner))


def log_episode(metrics_logger: Any, tally: EpisodeTally, *, window: int) -> None:
    """Log one finished episode's tally (RLlib's ``MetricsLogger`` of an env runner)."""
    metrics_logger.log_dict(
        {
            COSTS_KEY: {name: float(v) for name, v in zip(COST_NAMES, tally.costs, strict=True)},
            WEIGHTED_COST_KEY: tally.weighted_cost,
            VETOES_KEY: float(tally.vetoes),
        },
        reduce="mean",
        window=window,
    )
    metrics_logger.log_value(VETOES_LIFETIME_KEY, tally.vetoes, reduce="lifetime_sum")
    metrics_logger.log_value(DIED_KEY, int(tally.sumo_died), reduce="lifetime_sum")
    metrics_logger.log_value(GRIDLOCK_KEY, int(tally.failure == "gridlock"), reduce="lifetime_sum")
    if tally.sumo_died:
        reason = (tally.truncated_reason or "")[:_REASON_CHARS]
        metrics_logger.log_value(REASONS_KEY, reason, reduce="item_series", window=_REASONS_WINDOW)


def sumo_died_reasons(result: Mapping[str, Any]) -> list[str]:
    """The reasons of the SUMO deaths in one ``algo.train()`` result, as a list (RLlib gives a
    one-item list as its item)."""
    value = result.get("env_runners", {}).get(REASONS_KEY, [])
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value]
    return []  # NaN: nothing logged this time


def _window(env_runner: Any) -> int:
    """RLlib's own episode-metric window per env runner (its ``_log_episode_metrics``)."""
    config = getattr(env_runner, "config", None)
    if config is None:
        return 100
    runners = getattr(config, "num_env_runners", 0) or 1
    return max(1, math.ceil(config.metrics_num_episodes_for_smoothing / runners))
