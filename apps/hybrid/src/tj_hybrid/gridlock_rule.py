"""Training's teleport rule fitted to the scenario (``phase2.gridlock_teleports``; issue 28).

tj-rl's gridlock detection (``phase2.gridlock``) ends a training episode of phase 2 or 3 as a
penalised failure at ``teleports`` (1) SUMO teleports within ``window_s``. On a net where good
controllers teleport too, that fires in nearly every episode whatever the lights do: on
fokr_bs_demo every controller teleports 7-49 vehicles per quarter hour on held-out traffic (the
city's own program 0-33), and 464 of 466 phase-2 training episodes (seed 0) ended as "gridlocks"
about halfway through (80 of 180 decisions), so the policy never trained on the rest of the
quarter hour and its returns were set by when the first teleport came.

``best-baseline`` (the default) keeps the rule but moves its threshold above what the best
controller known does: the candidate baseline (``phase2.imitation.candidates``) with the lowest
validation delay is run on validation traffic (the episodes the teacher choice runs: it takes
their delays from ``FittedRule.delays``; phase 3's run is the row cache's), and the rule fires
at one teleport more than it had in its worst whole validation episode, within ``window_s``;
never below the configured count. Where the best baseline never teleports (the embedded default
net and arterial) nothing changes. ``config`` uses the configured count as it is. The
stuck-queue rule is untouched.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tj_hybrid.config import HybridConfig

if TYPE_CHECKING:
    from tj_hybrid.rl_setup import RLSetup

__all__ = ["FittedRule", "TeleportRule", "fit_teleport_rule", "teleport_rule"]

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TeleportRule:
    """The teleports within ``window_s`` that end a training episode, and why, in words."""

    teleports: int
    line: str


def teleport_rule(summary: Mapping[str, Mapping[str, Any]], configured: int,
                  window_s: float) -> TeleportRule:  # fmt: skip
    """The rule from validation ``summary`` (policy -> {"avg_delay", "teleports"}: spreads with
    ``mean`` and ``max``): one teleport more than the lowest-delay policy's worst episode had,
    never below ``configured``. Policies without a finite delay are left out."""
    scored = {p: m for p, m in summary.items() if math.isfinite(m["avg_delay"].mean)}
    if not scored:
        return TeleportRule(teleports=configured,
                            line=f"{configured} teleport(s) within {window_s:g} s, as configured "
                                 f"(no baseline has a validation score)")  # fmt: skip
    best = min(scored, key=lambda p: scored[p]["avg_delay"].mean)
    most = scored[best]["teleports"].max
    most = math.ceil(most) if math.isfinite(most) else 0
    need = max(configured, most + 1)
    why = (f"the best baseline on validation, {best} ({scored[best]['avg_delay'].mean:.2f} s), "
           f"teleports at most {most} vehicle(s) in a whole episode")  # fmt: skip
    if need == configured:
        return TeleportRule(teleports=need,
                            line=f"{need} teleport(s) within {window_s:g} s, as configured: {why}")
    return TeleportRule(teleports=need,
                        line=f"{need} teleports within {window_s:g} s (configured "
                             f"{configured}, raised: {why})")  # fmt: skip


@dataclasses.dataclass(frozen=True, kw_only=True)
class FittedRule:
    """``fit_teleport_rule``'s answer: the setup to train with (its env's teleport rule fitted),
    the rule in words for the log and the report (None: nothing was fitted) and the candidates'
    ``{name: (mean, worst)}`` validation delays it ran (the teacher choice reuses them)."""

    setup: RLSetup
    line: str | None = None
    delays: Mapping[str, tuple[float, float]] = dataclasses.field(default_factory=dict)


def fit_teleport_rule(cfg: HybridConfig, setup: RLSetup) -> FittedRule:
    """``setup`` with its training env's teleport rule fitted (module docstring); ``setup`` as it
    is (no line, no delays) when there is nothing to fit: no gridlock rule, no teleport rule,
    ``gridlock_teleports: config`` or no validation."""
    from tj_hybrid.evaluation import delays, validation_table

    rule = setup.env.gridlock
    if (rule is None or rule.teleports is None or setup.validation is None
            or cfg.phase2.gridlock_teleports != "best-baseline"):  # fmt: skip
        return FittedRule(setup=setup)
    table = validation_table(cfg, setup, {n: n for n in cfg.phase2.imitation.candidates})
    fitted = teleport_rule(table.summary(("avg_delay", "teleports")), rule.teleports,
                           rule.window_s)  # fmt: skip
    log.info("training's gridlock rule: %s (phase2.gridlock_teleports=best-baseline)", fitted.line)
    if fitted.teleports != rule.teleports:
        gridlock = dataclasses.replace(rule, teleports=fitted.teleports)
        setup = dataclasses.replace(setup, env=dataclasses.replace(setup.env, gridlock=gridlock))
    return FittedRule(setup=setup, line=fitted.line, delays=delays(table))
