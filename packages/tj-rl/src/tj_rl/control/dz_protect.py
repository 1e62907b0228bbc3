"""``dz-protected``: a baseline with dilemma-zone protection (green extension), as deployed actuated
controllers with advance detection do (Zegeer & Deen 1978; ITE): another baseline (``base``,
default ``max-occupancy``) behind a ``DzGuard`` (``tj_rl.control.dz_guard``). By default a green
the base would end is kept while a vehicle on a lane losing it is in the dilemma zone, up to max
green; ``rule`` and ``max_extensions`` choose the guard's other settings.

The zone is the env's own (``EnvConfig.dilemma_zone``, ``dilemma_min_speed``; ``env.dilemma``),
read from the observation's vehicle graph, so it is exactly the vehicles the ``dilemma_zone`` cost
would count.
"""

from __future__ import annotations

from typing import Any

from tj_rl.control.dz_guard import DzGuardConfig, GuardedPolicy

__all__ = ["DilemmaProtectedPolicy"]


class DilemmaProtectedPolicy(GuardedPolicy):
    """Another baseline (``base``, default ``max-occupancy``: the best delay baseline on the
    embedded net, docs/BENCHMARKS.md) whose green ends wait for the dilemma zone (``DzGuard``)."""

    def __init__(self, base: str = "max-occupancy", *, rule: str = "occupied",
                 max_extensions: int | None = None, **base_kwargs: Any) -> None:  # fmt: skip
        from tj_rl.control.baselines import POLICIES, make_policy

        if base not in POLICIES or base in ("dz-protected", "scenario-program", "sumo-actuated"):
            raise ValueError(f"dz-protected: base {base!r} must pick greens through the env")
        config = DzGuardConfig(rule=rule, max_extensions=max_extensions)  # type: ignore[arg-type]
        super().__init__(make_policy(base, **base_kwargs), config)
        self.base_name = base

    def describe(self) -> str:
        return f"{self.base_name}, but {self.guard.config.describe()}, through tj-rl's shield"
