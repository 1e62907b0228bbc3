"""``dz-protected``: a baseline with dilemma-zone protection (green extension), as deployed actuated
controllers with advance detection do (Zegeer & Deen 1978; ITE): when the base baseline would end
a green while a vehicle on an approach lane losing that green is in the dilemma zone, the green is
kept for another decision interval, as long as the shield allows keeping it (never past max green:
at max green the shield's ``action_mask`` forbids the current green and the base's choice stands).

The zone is the env's own (``EnvConfig.dilemma_zone``, ``dilemma_min_speed``; ``env.dilemma``),
read from the observation's vehicle graph (``nodes``' speed and distance to the stop line,
``movement``), so it is exactly the vehicles the ``dilemma_zone`` cost would count.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tj_rl.env.core import TrafficSignalCore
from tj_rl.env.dilemma import in_dilemma_zone

__all__ = ["DilemmaProtectedPolicy"]

_SPEED, _DIST = 2, 6  # NODE_FEATURES columns


class DilemmaProtectedPolicy:
    """Another baseline (``base``, default ``max-occupancy``: the best delay baseline on the
    embedded net, docs/BENCHMARKS.md) whose green ends wait while the dilemma zone is occupied."""

    def __init__(self, base: str = "max-occupancy", **base_kwargs: Any) -> None:
        from tj_rl.control.baselines import POLICIES, make_policy

        if base not in POLICIES or base in ("dz-protected", "scenario-program", "sumo-actuated"):
            raise ValueError(f"dz-protected: base {base!r} must pick greens through the env")
        self.base_name = base
        self.base = make_policy(base, **base_kwargs)
        self.extensions = 0  # greens kept for the zone this episode

    def reset(self, env: TrafficSignalCore) -> None:
        self.base.reset(env)
        self.dilemma = env.dilemma
        self.index = {a: k for k, a in enumerate(env.lights)}
        self.n_greens = {a: lt.program.n_greens for a, lt in env.lights.items()}
        self.extensions = 0

    def occupied(self, agent: str, obs: dict[str, np.ndarray], i: int, j: int) -> bool:
        """Whether a vehicle of ``obs`` is in the zone on a lane losing green from ``i`` to ``j``."""
        lanes = self.dilemma.lanes(self.index[agent], i, j)
        mov = obs["movement"]
        on = obs["node_mask"].astype(bool) & (mov >= 0) & (mov < len(lanes))
        on[on] = lanes[mov[on]]
        if not on.any():
            return False
        nodes = obs["nodes"][on]
        zone = in_dilemma_zone(
            nodes[:, _SPEED].astype(np.float64),
            nodes[:, _DIST].astype(np.float64),
            zone=self.dilemma.zone,
            min_speed=self.dilemma.min_speed,
        )
        return bool(zone.any())

    def compute_actions(self, obs, infos):
        out = self.base.compute_actions(obs, infos)
        for agent, o in obs.items():
            n = self.n_greens[agent]
            cur = int(np.argmax(o["phase"][:n]))
            want = int(out[agent])
            if want == cur or not o["action_mask"][cur] or not o["action_mask"][want]:
                continue  # no green end, or the shield decides (clearance, min or max green)
            if self.occupied(agent, o, cur, want):
                out[agent] = cur
                self.extensions += 1
        return out

    def describe(self) -> str:
        return (
            f"{self.base_name}, but a green it would end is extended (to at most max green) while "
            "a vehicle losing it is in the dilemma zone, through tj-rl's shield"
        )
