"""Baselines that are SUMO programs: the lights run as SUMO runs them, measured like any policy.

- ``scenario-program``: the scenario's own signal programs (its net's, or those its additional
  files load over them), unchanged; ``source``: the scenario whose programs run, when the one
  evaluated has other plans (a trainer that switches netconvert's rebuilt plans, ``rebuilt_plans``).
- ``sumo-actuated``: SUMO's gap-based actuated control on plans netconvert rebuilds from the net
  (``actuated_net``); the scenario's own program files are left out, so SUMO runs these.

Both have the ``Policy`` interface and go through ``tj_rl.eval``'s protocol like every policy:
``scenario_for(scenario)`` gives the scenario the policy runs on (the evaluation builds its env
on it) and ``reset_options`` asks the env to leave the lights to SUMO (``TrafficSignalCore.reset``
with ``signals="program"``: no action applied, observations, costs and metrics as usual).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from tj_rl.control.actuated_net import ActuatedSpec, rebuilt_plans
from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.scenario import Scenario

__all__ = ["ScenarioProgramPolicy", "SumoActuatedPolicy"]


class ScenarioProgramPolicy:
    """The scenario's own signal programs, run by SUMO (``scenario-program``).

    ``source``: take the net and additional files (the programs) from this scenario instead of
    the evaluated one; its routes and time windows stay the evaluated one's."""

    reset_options: Mapping[str, Any] = MappingProxyType({"signals": "program"})

    def __init__(self, *, source: Scenario | None = None) -> None:
        self.source = source

    def scenario_for(self, scenario: Scenario) -> Scenario:
        if self.source is None:
            return scenario
        return scenario.replace(net_file=self.source.net_file,
                                additional_files=self.source.additional_files)  # fmt: skip

    def fingerprint(self) -> str:
        """Its class (``tj_rl.eval.row_cache``): the programs are in the files of the scenario
        it runs on (``scenario_for``), which the cache hashes."""
        return type(self).__name__

    def describe(self) -> str:
        return ("the scenario's own signal programs (its net's, or those its additional files "
                "load), run by SUMO unchanged")  # fmt: skip

    def reset(self, env: TrafficSignalCore) -> None:
        pass

    def compute_actions(self, obs: Mapping[str, Any], infos: Mapping[str, Any]) -> dict[str, int]:
        return {}  # the env applies no action in a program episode


class SumoActuatedPolicy(ScenarioProgramPolicy):
    """SUMO's gap-based actuated control on the net's rebuilt plans (``sumo-actuated``).

    ``min_dur`` / ``max_dur`` / ``extra_args``: netconvert's options (``ActuatedSpec``);
    ``cache_dir``: where converted nets are kept (default ``~/.cache/tj-rl/nets``)."""

    def __init__(self, *, min_dur: int = 5, max_dur: int = 50, extra_args: Sequence[str] = (),
                 cache_dir: str | Path | None = None) -> None:  # fmt: skip
        super().__init__()
        self.spec = ActuatedSpec(min_dur=min_dur, max_dur=max_dur, extra_args=tuple(extra_args))
        self.cache_dir = cache_dir

    def scenario_for(self, scenario: Scenario) -> Scenario:
        return rebuilt_plans(scenario, spec=self.spec, cache_dir=self.cache_dir)

    def fingerprint(self) -> str:
        """Its netconvert options (``tj_rl.eval.row_cache``); the rebuilt net is hashed as
        the scenario it runs on."""
        return f"{type(self).__name__}({self.spec!r})"

    def describe(self) -> str:
        return (f"SUMO's gap-based actuated control on plans rebuilt from the net "
                f"({self.spec.describe()}), SUMO's own detectors and gap rules")  # fmt: skip
