"""A dilemma-zone guard around any policy: green extension as deployed actuated controllers do it.

When the wrapped policy would end a green while vehicles on the lanes losing it are in the Type-II
dilemma zone (``env.dilemma``: the vehicles the ``dilemma_zone`` cost counts), the guard keeps the
green for another decision interval. Two rules, both from practice:

- ``occupied``: extend while the zone is occupied (advance-detector green extension: Zegeer & Deen
  1978), up to max green. On a busy road the zone is rarely empty, so greens run long.
- ``fewer-next``: extend only when fewer vehicles are predicted in the zone one decision later
  (each vehicle at its present speed) than are in it now: end the green at the better of the two
  moments, the idea of Bonneson et al.'s Detection-Control System (D-CS, TTI 2002), which picks the
  phase end with the fewest vehicles in the zones. Vehicles beyond the observation radius are not
  seen, so the prediction can only undercount the next moment's zone.

``max_extensions`` bounds how many decisions in a row one green end may be put off (None: until
max green, where the shield's ``action_mask`` forbids the current green and the policy's choice
stands). The guard never overrides the shield: it only keeps a green the mask allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from tj_rl.env.dilemma import count_in_zone

if TYPE_CHECKING:
    from tj_rl.env.core import TrafficSignalCore

__all__ = ["GUARD_RULES", "DzGuard", "DzGuardConfig", "GuardedPolicy", "zone_count"]

GUARD_RULES = ("occupied", "fewer-next")


@dataclass(frozen=True, kw_only=True)
class DzGuardConfig:
    """How the guard extends a green (module docstring): ``rule`` and ``max_extensions``."""

    rule: Literal["occupied", "fewer-next"] = "occupied"
    max_extensions: int | None = None

    def __post_init__(self) -> None:
        if self.rule not in GUARD_RULES:
            raise ValueError(f"DzGuardConfig: rule {self.rule!r}, expected one of {GUARD_RULES}")
        m = self.max_extensions
        if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
            raise ValueError(f"DzGuardConfig: max_extensions={m!r}, expected an int >= 1 or None")

    def describe(self) -> str:
        """The rule in words (reports print it beside the policy)."""
        bound = ("to at most max green" if self.max_extensions is None
                 else f"by at most {self.max_extensions} decision interval(s), and never past max green")  # fmt: skip
        when = ("while a vehicle losing it is in the dilemma zone" if self.rule == "occupied" else
                "while fewer vehicles losing it are predicted in the dilemma zone one decision later "
                "than are in it now")  # fmt: skip
        return f"a green it would end is extended {when}, {bound}"


def zone_count(obs: Mapping[str, np.ndarray], lanes: np.ndarray, *, zone: tuple[float, float],
               min_speed: float, ahead_s: float = 0.0) -> int:  # fmt: skip
    """Vehicles of one light's observation on ``lanes`` (bool per movement) in the dilemma zone
    ``ahead_s`` seconds from now, each at its present speed (0: now, exactly the cost's count)."""
    real = obs["node_mask"].astype(bool)
    return count_in_zone(obs["nodes"][real], obs["movement"][real], lanes, zone=zone,
                         min_speed=min_speed, ahead_s=ahead_s)  # fmt: skip


class DzGuard:
    """The guard's state over an episode: per light, how long the present green end was put off."""

    def __init__(self, config: DzGuardConfig | None = None) -> None:
        self.config = config or DzGuardConfig()
        self.extensions = 0  # greens kept for the zone this episode

    def __getstate__(self) -> dict[str, Any]:
        """Only the config travels (evaluation workers): the episode state comes with ``reset``."""
        return {"config": self.config, "extensions": 0}

    def reset(self, env: TrafficSignalCore) -> None:
        self.dilemma = env.dilemma
        self.delta_time = float(env.config.delta_time)
        self.index = {a: k for k, a in enumerate(env.lights)}
        self.n_greens = {a: lt.program.n_greens for a, lt in env.lights.items()}
        self.put_off = dict.fromkeys(env.lights, 0)
        self.extensions = 0

    def keep(self, agent: str, obs: Mapping[str, np.ndarray], i: int, j: int) -> bool:
        """Whether the rule keeps green ``i`` that the policy would end for ``j``."""
        lanes = self.dilemma.lanes(self.index[agent], i, j)
        zone = {"zone": self.dilemma.zone, "min_speed": self.dilemma.min_speed}
        now = zone_count(obs, lanes, **zone)
        if now == 0:
            return False
        if self.config.rule == "occupied":
            return True
        return zone_count(obs, lanes, ahead_s=self.delta_time, **zone) < now

    def apply(self, obs: Mapping[str, Mapping[str, np.ndarray]],
              actions: Mapping[str, int]) -> dict[str, int]:  # fmt: skip
        """``actions`` with the green ends the rule puts off replaced by the current green."""
        out = dict(actions)
        bound = self.config.max_extensions
        for agent, o in obs.items():
            cur = int(np.argmax(o["phase"][: self.n_greens[agent]]))
            want = int(out[agent])
            ends = want != cur and bool(o["action_mask"][cur]) and bool(o["action_mask"][want])
            if not ends or (bound is not None and self.put_off[agent] >= bound):
                self.put_off[agent] = 0  # no green end, or the shield decides, or bound reached
                continue
            if self.keep(agent, o, cur, want):
                out[agent] = cur
                self.put_off[agent] += 1
                self.extensions += 1
            else:
                self.put_off[agent] = 0
        return out


class GuardedPolicy:
    """Any ``Policy`` (a baseline, an ``AgentPolicy``) behind a ``DzGuard``."""

    def __init__(self, policy: Any, config: DzGuardConfig | None = None) -> None:
        self.policy = policy
        self.guard = DzGuard(config)

    @property
    def extensions(self) -> int:
        return self.guard.extensions

    def reset(self, env: TrafficSignalCore) -> None:
        self.policy.reset(env)
        self.guard.reset(env)

    def compute_actions(self, obs, infos):
        return self.guard.apply(obs, self.policy.compute_actions(obs, infos))

    def fingerprint(self) -> str | None:
        """The guarded policy's fingerprint and the guard's settings (``tj_rl.eval.row_cache``);
        None when the guarded policy has none."""
        from tj_rl.eval.row_cache import policy_fingerprint

        inner = policy_fingerprint(self.policy)
        return None if inner is None else f"{type(self).__name__}({inner}, {self.guard.config!r})"

    def describe(self) -> str:
        from tj_rl.control.baselines import describe_policy

        return f"{describe_policy(self.policy)}; {self.guard.config.describe()}"
