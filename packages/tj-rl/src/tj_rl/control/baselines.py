"""Baseline policies with the agents' interface (``Policy``: ``reset(env)``, ``compute_actions``).

A policy sees the same observations as a learning agent (it reads the ``lanes`` and ``phase``
features and respects ``action_mask``) plus the env's static topology at ``reset``:

- ``fixed-time``: the net's own program: each green is held for its programmed duration (rounded up
  to the decision interval), then the next green in program order.
- ``max-pressure``: the feasible green with the largest sum over its green movements of
  (vehicles on the incoming lane - vehicles on the outgoing lane).
- ``greedy``: the feasible green serving the most halting vehicles (max queue).
- ``max-occupancy``: the feasible green serving the most vehicles, moving or halting (greedy that
  also counts the platoons still approaching, so they do not have to stop); on the default net it
  has less delay than greedy and than phase 2's PPO policy (docs/BENCHMARKS.md).
- ``advanced-mp``: Advanced-MP (Zhang et al., ICML 2022; ``tj_rl.control.advanced_mp``): the
  current green is kept while its moving vehicles within reach of the stop line in one decision
  interval are at least the best efficient pressure (queue in minus mean queue of the road fed),
  else the feasible green with the most efficient pressure.
- ``max-pressure``, ``greedy`` and ``max-occupancy`` take ``margin`` (default 0): the current
  green is kept unless another scores more than ``margin`` above it (hysteresis).
- ``random``: a uniformly random feasible green (benchmarks, exploration data).
- ``mixed``: another baseline (``base``, default fixed-time) whose decision is replaced, with
  probability ``switch_prob``, by a random feasible green: diverse but plausible behaviour data
  for phase-1 recording (pure random switching rarely lets queues form and clear).
- ``dz-protected``: another baseline (``base``, default max-occupancy) whose green ends wait, up to
  max green, while the dilemma zone of the lanes losing green is occupied
  (``tj_rl.control.dz_protect``): the safe end of the delay-safety frontier.
- ``lookahead``: not a baseline but a privileged teacher for imitation: another baseline (``base``)
  improved by looking ahead in forked copies of the simulation (``tj_rl.control.lookahead``).
- ``scenario-program`` and ``sumo-actuated``: the baselines users deploy, SUMO programs run by
  SUMO (``tj_rl.control.programs``).

``describe_policy`` says in a line how a baseline decides (reports print it beside the table).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np

from tj_rl.control.advanced_mp import AdvancedMaxPressurePolicy
from tj_rl.control.dz_protect import DilemmaProtectedPolicy
from tj_rl.control.lookahead import LookaheadPolicy
from tj_rl.control.programs import ScenarioProgramPolicy, SumoActuatedPolicy
from tj_rl.env.core import TrafficSignalCore

__all__ = [
    "POLICIES",
    "FixedTimePolicy",
    "GreedyPolicy",
    "MaxOccupancyPolicy",
    "MaxPressurePolicy",
    "MixedPolicy",
    "Policy",
    "RandomPolicy",
    "describe_policy",
    "make_policy",
]


class Policy(Protocol):
    """What evaluation runs. Optional members, read where present: ``scenario_for(scenario)``
    (the scenario the policy runs on, e.g. another net), ``reset_options`` (passed to
    ``env.reset``), ``describe()`` (how it decides, in a line)."""

    def reset(self, env: TrafficSignalCore) -> None: ...
    def compute_actions(
        self, obs: Mapping[str, Any], infos: Mapping[str, Any]
    ) -> dict[str, int]: ...


def _best_feasible(scores: np.ndarray, mask: np.ndarray, current: int, margin: float = 0.0) -> int:
    """The feasible green with the best score; the current one keeps its green unless another
    scores more than ``margin`` above it (hysteresis: fewer switches, longer greens)."""
    scores = np.where(mask.astype(bool), scores, -np.inf)
    if margin and mask[current]:
        scores[current] += margin
    best = float(scores.max())
    if mask[current] and scores[current] >= best:
        return current  # keep the current green on ties: no needless clearance
    return int(np.argmax(scores))


def _current(obs: Mapping[str, np.ndarray], n: int) -> int:
    return int(np.argmax(obs["phase"][:n]))


class FixedTimePolicy:
    def fingerprint(self) -> str:
        """What decides its episodes (``tj_rl.eval.row_cache``): nothing but its class."""
        return type(self).__name__

    def reset(self, env: TrafficSignalCore) -> None:
        self.programs = {a: lt.program for a, lt in env.lights.items()}
        self.max_green = env.config.max_green

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            prog = self.programs[agent]
            n = prog.n_greens
            cur = _current(o, n)
            # the three flags are always phase[-3:] (also when padded to the scenario's maximum)
            in_clearance = bool(o["phase"][-3])
            t_green = float(o["phase"][-2]) * self.max_green
            done = not in_clearance and t_green >= prog.durations[cur] - 1e-6
            out[agent] = (cur + 1) % n if done else cur
        return out


class _ScoredPolicy:
    """A policy that scores every green and takes the best feasible one, with hysteresis
    ``margin`` (in the score's units: vehicles) in favour of the current green."""

    def __init__(self, margin: float = 0.0) -> None:
        if not (math.isfinite(margin) and margin >= 0):
            raise ValueError(f"margin must be a finite number >= 0, got {margin}")
        self.margin = float(margin)

    def fingerprint(self) -> str:
        """What decides its episodes (``tj_rl.eval.row_cache``): its class and margin."""
        return f"{type(self).__name__}(margin={self.margin!r})"


class MaxPressurePolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.moves = {a: lt.phase_movements() for a, lt in env.lights.items()}
        self.capacity = dict(env.lane_capacity)

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            moves = self.moves[agent]  # [P, n_in, n_out]
            p, n_in, n_out = moves.shape
            count = o["lanes"][: n_in + n_out, 1] * self.capacity[agent]  # padded rows dropped
            pressure = count[:n_in, None] - count[None, n_in:]  # [n_in, n_out]
            scores = (moves * pressure[None]).sum(axis=(1, 2))
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class GreedyPolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.serves = {a: lt.phase_movements().any(axis=2) for a, lt in env.lights.items()}

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            serves = self.serves[agent]  # [P, n_in]
            halting = o["lanes"][: serves.shape[1], 0]
            scores = (serves * halting[None]).sum(axis=1)
            p = serves.shape[0]
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class MaxOccupancyPolicy(_ScoredPolicy):
    def reset(self, env: TrafficSignalCore) -> None:
        self.serves = {a: lt.phase_movements().any(axis=2) for a, lt in env.lights.items()}
        self.capacity = dict(env.lane_capacity)

    def compute_actions(self, obs, infos):
        out = {}
        for agent, o in obs.items():
            serves = self.serves[agent]  # [P, n_in]
            p, n_in = serves.shape
            count = o["lanes"][:n_in, 1] * self.capacity[agent][:n_in]  # occupancy x capacity
            scores = (serves * count[None]).sum(axis=1)
            out[agent] = _best_feasible(scores, o["action_mask"][:p], _current(o, p), self.margin)
        return out


class RandomPolicy:
    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)

    def reset(self, env: TrafficSignalCore) -> None:
        pass

    def compute_actions(self, obs, infos):
        return {a: int(self.rng.choice(np.flatnonzero(o["action_mask"]))) for a, o in obs.items()}


# the baselines that pick greens through the env's actions (``mixed`` can mix them with random ones)
_BASES = ("fixed-time", "max-pressure", "greedy", "max-occupancy", "advanced-mp")


class MixedPolicy:
    def __init__(self, base: str = "fixed-time", switch_prob: float = 0.3, seed: int = 0) -> None:
        if base not in _BASES:
            raise ValueError(f"mixed: base {base!r} must be one of {', '.join(_BASES)}")
        if not 0.0 <= switch_prob <= 1.0:
            raise ValueError(f"mixed: switch_prob={switch_prob}, must be in [0, 1]")
        self.base = POLICIES[base]()
        self.switch_prob = switch_prob
        self.rng = np.random.default_rng(seed)

    def reset(self, env: TrafficSignalCore) -> None:
        self.base.reset(env)

    def compute_actions(self, obs, infos):
        out = self.base.compute_actions(obs, infos)
        for agent, o in obs.items():
            if self.rng.random() < self.switch_prob:
                out[agent] = int(self.rng.choice(np.flatnonzero(o["action_mask"])))
        return out


POLICIES = {
    "fixed-time": FixedTimePolicy,
    "max-pressure": MaxPressurePolicy,
    "greedy": GreedyPolicy,
    "max-occupancy": MaxOccupancyPolicy,
    "advanced-mp": AdvancedMaxPressurePolicy,
    "random": RandomPolicy,
    "mixed": MixedPolicy,
    "dz-protected": DilemmaProtectedPolicy,
    "lookahead": LookaheadPolicy,
    "scenario-program": ScenarioProgramPolicy,
    "sumo-actuated": SumoActuatedPolicy,
}

_LABELS: dict[type, str] = {
    FixedTimePolicy: "the net's green phases in program order, each held for its programmed "
    "duration, switched by tj-rl's shield (yellow, all-red, min/max green)",
    MaxPressurePolicy: "the feasible green with the most pressure (vehicles in minus vehicles "
    "out over its movements), through tj-rl's shield",
    GreedyPolicy: "the feasible green serving the most halting vehicles, through tj-rl's shield",
    MaxOccupancyPolicy: "the feasible green serving the most vehicles, moving or halting, "
    "through tj-rl's shield",
    AdvancedMaxPressurePolicy: "Advanced-MP (Zhang et al. 2022): the current green while its "
    "moving vehicles within the speed limit x the decision interval of the stop line are at least "
    "the best efficient pressure (queue in minus mean queue of the road fed, over its lanes), else "
    "the feasible green with the most efficient pressure, through tj-rl's shield",
    RandomPolicy: "a uniformly random feasible green, through tj-rl's shield",
    MixedPolicy: "another baseline's green, replaced at random by a random feasible one",
}


def describe_policy(policy: Policy | str) -> str:
    """How ``policy`` (a baseline name or object) decides, in a line: its own ``describe()``,
    a baseline's label (with its hysteresis margin), or its type's name."""
    pol = make_policy(policy) if isinstance(policy, str) else policy
    describe = getattr(pol, "describe", None)
    if callable(describe):
        return str(describe())
    label = _LABELS.get(type(pol), type(pol).__name__)
    margin = getattr(pol, "margin", 0.0)
    return f"{label}; keeps its green unless another scores {margin:g} more" if margin else label


def make_policy(name: str, **kwargs: Any) -> Policy:
    """A baseline by name (``fixed-time``, ``max-pressure``, ``greedy``, ``max-occupancy``,
    ``advanced-mp``, ``random``, ``mixed``, ``dz-protected``, ``scenario-program``, ``sumo-actuated``)."""
    if name not in POLICIES:
        raise ValueError(f"policy {name!r} unknown; choose one of {sorted(POLICIES)}")
    return POLICIES[name](**kwargs)
