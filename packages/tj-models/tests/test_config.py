"""Configs: validation messages, dict round trip, presets, the horizon schedule."""

from __future__ import annotations

import itertools

import pytest

from tj_models import (
    ControllerConfig,
    FeatureLayout,
    GNNConfig,
    HorizonSchedule,
    RolloutConfig,
    TrafficAgentConfig,
    WorldModelLossConfig,
)
from tj_models.synthetic import SyntheticTrafficConfig


@pytest.mark.parametrize(
    ("factory", "message"),
    [
        (lambda: GNNConfig(hidden_dim=30, heads=4), "divisible"),
        (lambda: GNNConfig(dropout=1.0), "dropout"),
        (lambda: GNNConfig(num_layers=0), "num_layers"),
        (lambda: GNNConfig(node_features=5), "layout names column 8"),
        (lambda: FeatureLayout(speed=0), "distinct"),
        (lambda: RolloutConfig(heading="north"), "heading"),
        (lambda: RolloutConfig(max_neighbors=-1), "max_neighbors"),
        (lambda: RolloutConfig(conflict_distance=0.0), "conflict_distance"),
        (lambda: RolloutConfig(conflict_distance=float("nan")), "conflict_distance"),
        (lambda: SyntheticTrafficConfig(conflict_distance=-1.0), "conflict_distance"),
        (lambda: ControllerConfig(logit_cap=0), "logit_cap"),
        (lambda: TrafficAgentConfig(max_actions=0), "max_actions"),
        (lambda: WorldModelLossConfig(state_weight=-1), "state_weight"),
        (lambda: TrafficAgentConfig.preset("huge"), "unknown preset"),
    ],
)
def test_bad_config_is_rejected_with_the_field(factory, message) -> None:
    with pytest.raises(ValueError, match=message):
        factory()


def test_dict_round_trip_and_unknown_keys() -> None:
    cfg = TrafficAgentConfig.preset("tiny", max_actions=5, debug=True)
    data = cfg.to_dict()
    assert TrafficAgentConfig.from_dict(data) == cfg
    data["gnn"]["hiden_dim"] = 3
    with pytest.raises(ValueError, match=r"gnn\.hiden_dim"):
        TrafficAgentConfig.from_dict(data)
    bad = cfg.to_dict()
    bad["world_model"]["rollout"]["heading"] = "up"
    with pytest.raises(ValueError, match="heading"):
        TrafficAgentConfig.from_dict(bad)


def test_rollout_defaults_are_tj_rl_snapshot_defaults() -> None:
    # tj_rl.env.features.GraphConfig(): edge_radius=30.0, k_nearest=4, conflict_distance=2.5, math heading
    cfg = RolloutConfig()
    assert (cfg.edge_radius, cfg.max_neighbors, cfg.conflict_distance) == (30.0, 4, 2.5)
    assert cfg.heading == "math"


def test_presets_differ_in_size() -> None:
    dims = [TrafficAgentConfig.preset(n).gnn.hidden_dim for n in ("tiny", "normal", "large")]
    assert dims == sorted(dims) and len(set(dims)) == 3


def test_horizon_schedule_grows_from_one_to_max() -> None:
    s = HorizonSchedule.linear(max_horizon=4, start_step=100, end_step=400)
    assert s.milestones == (200, 300, 400)
    horizons = [s.horizon(step) for step in range(0, 600, 10)]
    assert horizons[0] == 1 and horizons[-1] == 4
    assert all(b >= a for a, b in itertools.pairwise(horizons))
    assert s.horizon(199) == 1 and s.horizon(200) == 2 and s.horizon(400) == 4
    assert s.window_length(input_steps=5, step=250) == 7
    assert HorizonSchedule().horizon(10**9) == 1
    assert HorizonSchedule.linear(max_horizon=1, start_step=0, end_step=1).max_horizon == 1


@pytest.mark.parametrize(
    "factory",
    [
        lambda: HorizonSchedule(milestones=(5, 5)),
        lambda: HorizonSchedule(milestones=(-1,)),
        lambda: HorizonSchedule.linear(max_horizon=5, start_step=0, end_step=2),
        lambda: HorizonSchedule.linear(max_horizon=3, start_step=10, end_step=10),
        lambda: HorizonSchedule().horizon(-1),
    ],
)
def test_horizon_schedule_rejects_bad_values(factory) -> None:
    with pytest.raises(ValueError):
        factory()
