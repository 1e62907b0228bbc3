"""tj_models.lagrange: direction and sign of the dual step, Adam's first step, exact resume (with a
variant that drops Adam's state and must diverge), the PID terms by hand, and config checks."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
import torch

from tj_models import Lagrange, LagrangeConfig, PIDLagrange, make_lagrange

COSTS = [3.0, 2.5, 0.4, 5.0, 1.0, 1.0, 0.0, 7.5, 2.2, 0.9, 4.4, 0.1, 3.3, 1.7]


def test_cost_above_the_limit_raises_lambda_below_lowers_it_never_below_zero() -> None:
    lag = Lagrange(LagrangeConfig(cost_limit=1.0, init=0.5))
    values = [lag.update(2.0) for _ in range(5)]
    assert values == sorted(values) and values[0] > 0.5
    top = values[-1]
    values = [lag.update(0.5) for _ in range(300)]
    # Adam's momentum carries lambda up for a few updates after the cost falls below the limit
    # (as in OmniSafe); then it falls, and is clamped at 0, never negative
    assert max(values) < top + 5 * 0.035 and values[-1] < top
    assert min(values) >= 0.0 and values[-1] == 0.0
    fresh = Lagrange(LagrangeConfig(cost_limit=1.0, init=0.5))
    below = [fresh.update(0.5) for _ in range(5)]
    assert below == sorted(below, reverse=True) and below[0] < 0.5


def test_first_adam_step_moves_lambda_by_lr() -> None:
    up = Lagrange(LagrangeConfig(cost_limit=1.0, init=0.5, lr=0.035))
    assert up.value == 0.5
    assert abs(up.update(1.0 + 1e3) - (0.5 + 0.035)) < 1e-6  # lr * sign(grad), whatever the size
    down = Lagrange(LagrangeConfig(cost_limit=1.0, init=0.5, lr=0.035))
    assert abs(down.update(1.0 - 1e-3) - (0.5 - 0.035)) < 1e-6
    same = Lagrange(LagrangeConfig(cost_limit=1.0, init=0.5))
    assert same.update(1.0) == 0.5  # on the limit: no move


def test_upper_bound_clamps() -> None:
    lag = Lagrange(LagrangeConfig(cost_limit=0.0, init=0.0, lr=0.5, upper_bound=1.0))
    assert max(lag.update(10.0) for _ in range(20)) == 1.0
    pid = PIDLagrange(LagrangeConfig(cost_limit=0.0, kind="pid", ki=1.0, upper_bound=2.0))
    assert max(pid.update(10.0) for _ in range(20)) == 2.0


def test_cost_limit_is_settable_and_changes_the_direction() -> None:
    lag = Lagrange(LagrangeConfig(cost_limit=10.0, init=0.5))
    twin = Lagrange(LagrangeConfig(cost_limit=10.0, init=0.5))
    assert lag.update(5.0) == twin.update(5.0) < 0.5
    lag.cost_limit = 1.0  # phase 3 sets it after calibration
    assert lag.cost_limit == 1.0 and twin.cost_limit == 10.0
    before = lag.value
    for _ in range(10):
        lag.update(5.0)
        twin.update(5.0)
    assert lag.value > before > twin.value  # 5 is now above the limit
    with pytest.raises(ValueError, match="cost_limit must be >= 0"):
        lag.cost_limit = -1.0
    lag.cost_limit = np.float32(2.5)  # numpy scalars from a calibration are fine
    assert lag.cost_limit == 2.5


@pytest.mark.parametrize("kind", ["lagrange", "pid"])
def test_non_finite_cost_is_rejected(kind: str) -> None:
    lag = make_lagrange(LagrangeConfig(cost_limit=1.0, kind=kind))
    for bad in (float("nan"), float("inf")):
        with pytest.raises(ValueError, match="must be finite"):
            lag.update(bad)
    with pytest.raises(ValueError, match="finite number"):
        lag.update("high")  # type: ignore[arg-type]
    assert lag.value == 0.001  # untouched


def _round_trip(state: dict) -> dict:
    """Through torch.save / torch.load(weights_only=True), as a training checkpoint stores it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


@pytest.mark.parametrize("kind", ["lagrange", "pid"])
def test_state_dict_round_trip_resumes_exactly(kind: str) -> None:
    config = LagrangeConfig(cost_limit=2.0, kind=kind, init=0.3)
    a, b = make_lagrange(config), make_lagrange(config)
    for cost in COSTS[:7]:
        assert a.update(cost) == b.update(cost)
    state = _round_trip(a.state_dict())
    a.update(100.0)  # the saved state must not alias the live object
    resumed = make_lagrange(config)
    resumed.load_state_dict(state)
    assert resumed.value == b.value and resumed.cost_limit == b.cost_limit
    for cost in COSTS[7:]:
        assert resumed.update(cost) == b.update(cost)  # bit for bit


def test_resume_without_adam_state_would_diverge() -> None:
    """The round-trip test can fail: restoring lambda alone (fresh Adam moments) drifts."""
    config = LagrangeConfig(cost_limit=2.0, init=0.3)
    a, b = Lagrange(config), Lagrange(config)
    for cost in COSTS[:7]:
        a.update(cost)
        b.update(cost)
    naive = Lagrange(LagrangeConfig(cost_limit=2.0, init=a.value))
    assert [naive.update(c) for c in COSTS[7:]] != [b.update(c) for c in COSTS[7:]]


def test_state_of_the_wrong_kind_or_version_is_refused() -> None:
    lag = Lagrange(LagrangeConfig(cost_limit=1.0))
    pid = PIDLagrange(LagrangeConfig(cost_limit=1.0, kind="pid"))
    with pytest.raises(ValueError, match="'pid' multiplier, not 'lagrange'"):
        lag.load_state_dict(pid.state_dict())
    with pytest.raises(ValueError, match="version"):
        pid.load_state_dict({**pid.state_dict(), "version": 99})
    with pytest.raises(ValueError, match="lacks"):
        pid.load_state_dict({k: v for k, v in pid.state_dict().items() if k != "integral"})
    short = PIDLagrange(LagrangeConfig(cost_limit=1.0, kind="pid", d_delay=2))
    for cost in COSTS:
        pid.update(cost)
    with pytest.raises(ValueError, match="d_delay"):
        short.load_state_dict(pid.state_dict())


def test_pid_first_step_by_hand() -> None:
    # limit 1, cost 3: e = 2; I = 0.001 + 0.01 * 2 = 0.021; P = 0.05 * 2 = 0.1;
    # C = 0.05 * 3 = 0.15, D = max(0, 0.15 - 0) = 0.15; lambda = 0.1 * 0.1 + 0.021 + 0.01 * 0.15
    pid = PIDLagrange(LagrangeConfig(cost_limit=1.0, kind="pid"))
    assert pid.value == 0.001
    assert pid.update(3.0) == pytest.approx(0.0325, abs=1e-12)
    assert pid.integral == pytest.approx(0.021, abs=1e-12)


def test_pid_constant_excess_grows_the_integral_and_the_penalty_stays_nonnegative() -> None:
    pid = PIDLagrange(LagrangeConfig(cost_limit=1.0, kind="pid"))
    integrals, values = [], []
    for _ in range(50):
        values.append(pid.update(3.0))
        integrals.append(pid.integral)
    assert all(b > a for a, b in itertools.pairwise(integrals))
    assert integrals[-1] == pytest.approx(0.001 + 50 * 0.02)
    assert values[-1] > values[0] > 0.0
    for _ in range(500):  # far below the limit: the penalty falls to 0 and stays there
        values.append(pid.update(0.0))
        assert pid.integral >= 0.0
    assert min(values) >= 0.0 and values[-1] == 0.0


def test_pid_derivative_reacts_to_a_rising_cost_only() -> None:
    config = LagrangeConfig(
        cost_limit=100.0, kind="pid", init=0.0, kp=0.0, ki=0.0, kd=1.0, d_delay=3
    )
    rising = PIDLagrange(config)
    assert all(rising.update(c) > 0.0 for c in (1.0, 2.0, 4.0, 8.0))  # D > 0 while rising
    falling = PIDLagrange(config)
    falling.update(50.0)
    for _ in range(200):
        falling.update(50.0)  # settle the cost EMA near 50
    assert falling.update(0.0) == 0.0  # a falling cost gives no negative derivative


def test_make_lagrange_picks_by_kind() -> None:
    assert type(make_lagrange(LagrangeConfig(cost_limit=1.0))) is Lagrange
    assert type(make_lagrange(LagrangeConfig(cost_limit=1.0, kind="pid"))) is PIDLagrange


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"cost_limit": -1.0}, "cost_limit must be >= 0"),
        ({"cost_limit": float("nan")}, "cost_limit must be finite"),
        ({"cost_limit": "1"}, "cost_limit must be a number"),
        ({"kind": "ppo"}, "kind must be 'lagrange' or 'pid'"),
        ({"init": -0.1}, "init must be >= 0"),
        ({"lr": 0.0}, "lr must be > 0"),
        ({"upper_bound": 0.0}, "upper_bound must be > 0"),
        ({"upper_bound": 0.5, "init": 1.0}, "upper_bound must be > 0 and >= init"),
        ({"kp": -0.1}, "kp must be >= 0"),
        ({"ki": True}, "ki must be a number"),
        ({"d_delay": 0}, "d_delay must be an int >= 1"),
        ({"d_delay": 2.5}, "d_delay must be an int >= 1"),
        ({"p_ema": 1.0}, r"p_ema must be in \[0, 1\)"),
        ({"d_ema": -0.1}, r"d_ema must be in \[0, 1\)"),
    ],
)
def test_bad_configs_are_rejected(fields: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        LagrangeConfig(**{"cost_limit": 1.0, **fields})


def test_config_defaults_are_omnisafes() -> None:
    c = LagrangeConfig(cost_limit=25.0)
    assert (c.kind, c.init, c.lr, c.upper_bound) == ("lagrange", 0.001, 0.035, None)
    assert (c.kp, c.ki, c.kd, c.d_delay, c.p_ema, c.d_ema) == (0.1, 0.01, 0.01, 10, 0.95, 0.95)
