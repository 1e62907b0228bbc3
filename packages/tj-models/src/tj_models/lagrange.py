"""Lagrange multipliers for a safety-cost limit: dual ascent with Adam, or a PID controller.

Phase 3 calls ``update(mean_episode_cost)`` once per iteration (with the mean over all ranks'
episodes, so every rank holds the same lambda) and weighs cost advantages with ``value``
(``tj_models.ppo.lagrangian_advantage``). Both keep an exact, resumable state.

Reference: OmniSafe, repository PKU-Alignment/omnisafe:
- ``omnisafe/common/lagrange.py`` (``Lagrange.update_lagrange_multiplier``): Adam on the loss
  ``-lambda * (J_c - limit)``, then lambda clamped to ``[0, upper]``; defaults
  ``lagrangian_multiplier_init = 0.001``, ``lambda_lr = 0.035`` (``configs/on-policy/PPOLag.yaml``).
- ``omnisafe/common/pid_lagrange.py`` (``PIDLagrangian.pid_update``, Stooke, Achiam, Abbeel 2020,
  "Responsive Safety in Reinforcement Learning by PID Lagrangian Methods"): defaults kp 0.1,
  ki 0.01, kd 0.01, d_delay 10, EMA alphas 0.95 (``configs/on-policy/CPPOPID.yaml``), the same as
  here.

Differences from OmniSafe, on purpose: the initial value is ``init`` as given (OmniSafe raises it to
at least 1e-5, and its PID reports 0 until the first update); ``upper_bound`` clamps the PID
penalty too (OmniSafe's ``penalty_max`` applies only with both of its norms off); the PID's
``sum_norm`` / ``diff_norm`` switches are not offered (the ``1 + lambda`` division of
``lagrangian_advantage`` is its ``sum_norm``); a non-finite cost raises ``ValueError``.
"""

from __future__ import annotations

import copy
import math
import numbers
from collections import deque
from dataclasses import dataclass
from typing import Any, Literal

import torch

__all__ = ["Lagrange", "LagrangeConfig", "PIDLagrange", "make_lagrange"]

_STATE_VERSION = 1


@dataclass(kw_only=True)
class LagrangeConfig:
    """How lambda follows the constraint ``mean episode cost <= cost_limit``."""

    cost_limit: float  # >= 0
    kind: Literal["lagrange", "pid"] = "lagrange"
    init: float = 0.001  # OmniSafe lagrangian_multiplier_init
    lr: float = 0.035  # OmniSafe lambda_lr (Adam); "lagrange" only
    upper_bound: float | None = None  # clamp; None: no upper bound
    kp: float = 0.1  # PID gains ("pid" only; OmniSafe's defaults)
    ki: float = 0.01
    kd: float = 0.01
    d_delay: int = 10  # the derivative compares with the cost EMA of d_delay updates ago
    p_ema: float = 0.95  # EMA factor of the proportional error
    d_ema: float = 0.95  # EMA factor of the cost the derivative reads

    def __post_init__(self) -> None:
        self.cost_limit = _nonnegative("cost_limit", self.cost_limit)
        if self.kind not in ("lagrange", "pid"):
            raise ValueError(f"LagrangeConfig.kind must be 'lagrange' or 'pid'; got {self.kind!r}")
        self.init = _nonnegative("init", self.init)
        self.lr = _number("lr", self.lr)
        if self.lr <= 0.0:
            raise ValueError(f"LagrangeConfig.lr must be > 0; got {self.lr}")
        if self.upper_bound is not None:
            self.upper_bound = _number("upper_bound", self.upper_bound)
            if self.upper_bound < self.init or self.upper_bound <= 0.0:
                raise ValueError(
                    f"LagrangeConfig.upper_bound must be > 0 and >= init={self.init}; "
                    f"got {self.upper_bound}"
                )
        for name in ("kp", "ki", "kd"):
            setattr(self, name, _nonnegative(name, getattr(self, name)))
        d = self.d_delay
        if isinstance(d, bool) or not isinstance(d, numbers.Integral) or d < 1:
            raise ValueError(f"LagrangeConfig.d_delay must be an int >= 1; got {d!r}")
        self.d_delay = int(d)
        for name in ("p_ema", "d_ema"):
            value = _number(name, getattr(self, name))
            if not 0.0 <= value < 1.0:
                raise ValueError(f"LagrangeConfig.{name} must be in [0, 1); got {value}")
            setattr(self, name, value)


class Lagrange:
    """Dual ascent: Adam on ``-lambda * (mean_cost - cost_limit)``, then lambda clamped to
    ``[0, upper_bound]``. Cost above the limit raises lambda, below lowers it; Adam's first step
    moves it by ``lr``."""

    def __init__(self, config: LagrangeConfig) -> None:
        self.config = config
        self.cost_limit = config.cost_limit
        self._lambda = torch.nn.Parameter(torch.tensor(config.init, dtype=torch.float64))
        self._optimizer = torch.optim.Adam([self._lambda], lr=config.lr)

    @property
    def value(self) -> float:
        return float(self._lambda.detach())

    @property
    def cost_limit(self) -> float:
        return self._cost_limit

    @cost_limit.setter
    def cost_limit(self, limit: float) -> None:
        self._cost_limit = _nonnegative("cost_limit", limit)

    def update(self, mean_episode_cost: float) -> float:
        """One dual step from the mean episode cost of the last iteration; the new lambda."""
        cost = _finite_cost(mean_episode_cost)
        self._optimizer.zero_grad(set_to_none=True)
        loss = -self._lambda * (cost - self._cost_limit)
        loss.backward()
        self._optimizer.step()
        with torch.no_grad():
            self._lambda.clamp_(min=0.0, max=self.config.upper_bound)
        return self.value

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "lagrange",
            "version": _STATE_VERSION,
            "cost_limit": self._cost_limit,
            "value": self.value,
            "optimizer": copy.deepcopy(self._optimizer.state_dict()),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _check_state(state, "lagrange", ("cost_limit", "value", "optimizer"))
        self.cost_limit = state["cost_limit"]
        with torch.no_grad():
            self._lambda.fill_(float(state["value"]))
        self._optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))


class PIDLagrange:
    """PID Lagrangian (Stooke et al. 2020, as OmniSafe's ``PIDLagrangian.pid_update``).

    Per update, with ``e = cost - cost_limit``: the integral ``I = max(0, I + ki * e)`` (starting at
    ``init``), the proportional term an EMA of ``e``, the derivative ``max(0, C_t - C_{t-d})`` of the
    cost's EMA ``C`` over ``d_delay`` updates; ``lambda = clamp(kp * P + I + kd * D, 0, upper)``.
    """

    def __init__(self, config: LagrangeConfig) -> None:
        self.config = config
        self.cost_limit = config.cost_limit
        self._integral = config.init
        self._delta_p = 0.0
        self._cost_d = 0.0
        self._cost_ds: deque[float] = deque([0.0], maxlen=config.d_delay)
        self._penalty = _clamp(config.init, config.upper_bound)

    @property
    def value(self) -> float:
        return self._penalty

    @property
    def integral(self) -> float:
        """The integral term (the penalty's memory of past excess cost)."""
        return self._integral

    @property
    def cost_limit(self) -> float:
        return self._cost_limit

    @cost_limit.setter
    def cost_limit(self, limit: float) -> None:
        self._cost_limit = _nonnegative("cost_limit", limit)

    def update(self, mean_episode_cost: float) -> float:
        """One PID step from the mean episode cost of the last iteration; the new lambda."""
        c = self.config
        cost = _finite_cost(mean_episode_cost)
        delta = cost - self._cost_limit
        self._integral = max(0.0, self._integral + delta * c.ki)
        self._delta_p = c.p_ema * self._delta_p + (1.0 - c.p_ema) * delta
        self._cost_d = c.d_ema * self._cost_d + (1.0 - c.d_ema) * cost
        derivative = max(0.0, self._cost_d - self._cost_ds[0])
        output = c.kp * self._delta_p + self._integral + c.kd * derivative
        self._penalty = _clamp(output, c.upper_bound)
        self._cost_ds.append(self._cost_d)
        return self._penalty

    def state_dict(self) -> dict[str, Any]:
        return {
            "kind": "pid",
            "version": _STATE_VERSION,
            "cost_limit": self._cost_limit,
            "value": self._penalty,
            "integral": self._integral,
            "delta_p": self._delta_p,
            "cost_d": self._cost_d,
            "cost_ds": list(self._cost_ds),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        keys = ("cost_limit", "value", "integral", "delta_p", "cost_d", "cost_ds")
        _check_state(state, "pid", keys)
        history = [float(x) for x in state["cost_ds"]]
        if not 1 <= len(history) <= self.config.d_delay:
            raise ValueError(
                f"PIDLagrange state: cost_ds holds {len(history)} values; this config's d_delay "
                f"is {self.config.d_delay}"
            )
        self.cost_limit = state["cost_limit"]
        self._penalty = float(state["value"])
        self._integral = float(state["integral"])
        self._delta_p = float(state["delta_p"])
        self._cost_d = float(state["cost_d"])
        self._cost_ds = deque(history, maxlen=self.config.d_delay)


def make_lagrange(config: LagrangeConfig) -> Lagrange | PIDLagrange:
    """The multiplier ``config.kind`` names."""
    return PIDLagrange(config) if config.kind == "pid" else Lagrange(config)


def _number(name: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        raise ValueError(f"LagrangeConfig.{name} must be a number; got {x!r}")
    x = float(x)
    if not math.isfinite(x):
        raise ValueError(f"LagrangeConfig.{name} must be finite; got {x}")
    return x


def _nonnegative(name: str, x: Any) -> float:
    x = _number(name, x)
    if x < 0.0:
        raise ValueError(f"LagrangeConfig.{name} must be >= 0; got {x}")
    return x


def _finite_cost(cost: float) -> float:
    if isinstance(cost, bool):
        raise ValueError(f"mean_episode_cost must be a finite number; got {cost!r}")
    try:
        value = float(cost)
    except (TypeError, ValueError):
        raise ValueError(f"mean_episode_cost must be a finite number; got {cost!r}") from None
    if not math.isfinite(value):
        raise ValueError(f"mean_episode_cost must be finite; got {value} (no episode finished?)")
    return value


def _clamp(x: float, upper: float | None) -> float:
    x = max(0.0, x)
    return x if upper is None else min(x, upper)


def _check_state(state: dict[str, Any], kind: str, keys: tuple[str, ...]) -> None:
    if state.get("kind") != kind:
        raise ValueError(f"state is for a {state.get('kind')!r} multiplier, not {kind!r}")
    if state.get("version") != _STATE_VERSION:
        raise ValueError(f"{kind} state version {state.get('version')!r} is not {_STATE_VERSION}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"{kind} state lacks {missing}")
