"""The ``phase3`` section: PPO-Lagrangian under a safety-cost limit, DDP on streamed rollouts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tj_hybrid.config.sections import parse_bytes, positive
from tj_rl.control.dz_guard import GUARD_RULES, DzGuardConfig
from tj_rl.env import COST_NAMES

__all__ = ["CollectSection", "GuardSection", "LagrangeSection", "Phase3Section"]


def _size(obj: object, name: str) -> None:
    """A size (``"64M"``, ``1e8``) or a fraction (0, 1] of the memory budget; named when bad."""
    try:
        parse_bytes(getattr(obj, name))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


@dataclass(kw_only=True)
class LagrangeSection:
    """The multiplier's update (OmniSafe PPOLag: dual ascent with Adam; or its PID variant)."""

    kind: Literal["lagrange", "pid"] = "lagrange"
    init: float = 0.001
    lr: float = 0.3  # OmniSafe's 0.035 suits hundreds of epochs; phase 3 runs tens
    upper_bound: float | None = None
    kp: float = 0.1
    ki: float = 0.01
    kd: float = 0.01

    def __post_init__(self) -> None:
        if self.init < 0 or self.lr <= 0:
            raise ValueError(f"need init >= 0 and lr > 0, got init={self.init}, lr={self.lr}")
        for name in ("kp", "ki", "kd"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.upper_bound is not None and self.upper_bound <= 0:
            raise ValueError(f"upper_bound must be > 0 or null, got {self.upper_bound}")


@dataclass(kw_only=True)
class CollectSection:
    """Collector processes (one SUMO env + the current policy on CPU each) and their queue."""

    collectors: int | None = None  # in all; None: from the CPUs and the memory budget
    fragment_steps: int = 32  # decision steps per fragment (x lights = samples)
    max_policy_lag: int = 1  # fragments of older policy versions are dropped (and counted)
    queue: float | str | None = None  # LiveQueue byte bound per rank; None: from the memory plan
    timeout_s: float = 600.0  # no sample for this long: fail naming the collectors

    def __post_init__(self) -> None:
        positive(self, "fragment_steps", "timeout_s")
        if self.collectors is not None and self.collectors < 1:
            raise ValueError(f"collectors must be >= 1 or null, got {self.collectors}")
        if self.max_policy_lag < 0:
            raise ValueError(f"max_policy_lag must be >= 0, got {self.max_policy_lag}")
        if self.queue is not None:
            _size(self, "queue")


@dataclass(kw_only=True)
class GuardSection:
    """The dilemma-zone guard the phase-3 policy acts behind (``tj_rl.control.dz_guard``): in
    phase 3's collectors (the guard is part of the env it learns in), in the choice on
    validation, in the held-out tables, ``eval --agent`` and ``watch``. ``rule``: ``none``,
    ``occupied`` (extend a green while the zone of the lanes losing it is occupied) or
    ``fewer-next`` (only while fewer vehicles are predicted there one decision later);
    ``max_extensions``: decisions in a row one green end may be put off (null: up to max green)."""

    rule: Literal["none", "occupied", "fewer-next"] = "occupied"
    max_extensions: int | None = 2

    def __post_init__(self) -> None:
        if self.rule not in ("none", *GUARD_RULES):
            raise ValueError(f"rule: one of none, {', '.join(GUARD_RULES)}; got {self.rule!r}")
        self.config()  # max_extensions checked by tj-rl's own config

    def config(self) -> DzGuardConfig | None:
        """tj-rl's guard config, or None when ``none``."""
        if self.rule == "none":
            DzGuardConfig(max_extensions=self.max_extensions)  # the bound is checked either way
            return None
        return DzGuardConfig(rule=self.rule, max_extensions=self.max_extensions)

    def describe(self) -> str:
        """In words, for the log and reports."""
        cfg = self.config()
        return "none" if cfg is None else cfg.describe()


def _default_weights() -> dict[str, float]:
    """The default cost: what a signal's decisions cause (issue 29). ``low_ttc`` is reported, not
    weighted: it counts vehicles running up to a queue and follows delay across controllers;
    ``red_light`` is 0 unless the scenario's drivers may run reds (tj-rl README, costs)."""
    return {"veto": 0.0, "dilemma_zone": 1.0, "red_light": 1.0, "hard_braking": 1.0,
            "emergency_braking": 1.0, "teleport": 1.0, "collision": 10.0}  # fmt: skip


@dataclass(kw_only=True)
class Phase3Section:
    """Constrained fine-tuning of the phase-2 controller and training of the shield's critic.

    ``samples_per_iteration`` light-decisions are collected per iteration (over all ranks), then
    read for ``epochs`` epochs of shuffled micro-batches; ``effective_batch`` samples make one
    optimizer step (ranks x micro_batch x accumulation). ``cost_limit: auto`` sets the limit from
    the baselines' delay-cost frontier on validation traffic: its cost at ``(1 + delay_slack)`` x
    the phase-2 policy's delay, at most ``cost_limit_fraction`` x the phase-2 policy's cost (that
    alone when no baseline is that fast); ``tj_hybrid.phase3.limit``."""

    iterations: int = 30
    samples_per_iteration: int = 2048
    effective_batch: int = 256
    micro_batch: int = 64
    epochs: int = 4
    lr: float = 3e-4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip: float = 0.2
    vf_coeff: float = 0.5
    cost_vf_coeff: float = 0.5
    shield_coeff: float = 0.5  # the shield critic's loss (cost of the taken action)
    entropy: float = 0.01
    grad_clip: float = 10.0
    cost_scale: float = 0.05  # per-step cost x this for the critics (returns of a few units)
    cost_limit: float | str = "auto"
    cost_limit_fraction: float = 0.6
    delay_slack: float = 0.05  # auto: phase 3 may be this fraction slower than phase 2
    cost_weights: dict[str, float] = field(default_factory=_default_weights)
    shield_threshold: float | None = None  # act behind the learned shield's veto; null: off
    guard: GuardSection = field(default_factory=GuardSection)  # dilemma-zone guard (GuardSection)
    embedding_cache: bool = True  # the frozen GNN's embeddings computed once per iteration
    cache: float | str = "256M"  # byte bound of that cache
    batch_ram: float | str = "512M"  # an iteration's batch above this spills to a tj-data store
    checkpoint_every: int = 2
    keep_checkpoints: int = 2
    # exported: ``best``: on validation traffic, phase 2's policy or a checkpoint's (the lowest
    # delay within the cost limit, else the lowest cost; ``tj_hybrid.phase3.select``); ``last``
    select: Literal["best", "last"] = "best"
    lagrange: LagrangeSection = field(default_factory=LagrangeSection)
    collect: CollectSection = field(default_factory=CollectSection)

    def __post_init__(self) -> None:
        positive(self, "iterations", "samples_per_iteration", "effective_batch", "micro_batch",
                 "epochs", "lr", "clip", "checkpoint_every", "cost_limit_fraction",
                 "cost_scale")  # fmt: skip
        if not (0 < self.gamma <= 1 and 0 <= self.gae_lambda <= 1):
            raise ValueError(f"need 0 < gamma <= 1 and 0 <= gae_lambda <= 1, got gamma="
                             f"{self.gamma}, gae_lambda={self.gae_lambda}")  # fmt: skip
        if isinstance(self.cost_limit, str):
            if self.cost_limit != "auto":
                raise ValueError(f"cost_limit: a number >= 0 or 'auto', got {self.cost_limit!r}")
        elif self.cost_limit < 0:
            raise ValueError(f"cost_limit must be >= 0, got {self.cost_limit}")
        if not (math.isfinite(self.delay_slack) and 0 <= self.delay_slack < 1):
            raise ValueError(f"delay_slack: a fraction of phase 2's delay in [0, 1), got "
                             f"{self.delay_slack}")  # fmt: skip
        unknown = set(self.cost_weights) - set(COST_NAMES)
        if unknown:
            raise ValueError(f"cost_weights: unknown cost(s) {sorted(unknown)}; known {COST_NAMES}")
        if self.select not in ("best", "last"):
            raise ValueError(f"select: 'best' or 'last', got {self.select!r}")
        if self.keep_checkpoints < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {self.keep_checkpoints}")
        negative = {k: v for k, v in self.cost_weights.items() if v < 0}
        if negative:
            raise ValueError(f"cost_weights must be >= 0 (a negative one rewards a cost): {negative}")
        for name in ("cache", "batch_ram"):
            _size(self, name)
        if self.micro_batch > self.effective_batch:
            raise ValueError(f"micro_batch={self.micro_batch} exceeds effective_batch="
                             f"{self.effective_batch}")  # fmt: skip
