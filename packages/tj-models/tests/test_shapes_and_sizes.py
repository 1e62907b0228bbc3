"""Output shapes of every component at every preset; parameter counts of the presets."""

from __future__ import annotations

import pytest
import torch

from tj_models import PRESETS, TrafficAgent, world_model_loss

# the issue's table: per-component parameter ranges of the `normal` preset
NORMAL_RANGES = {
    "gnn": (2_000_000, 3_000_000),
    "world_model": (5_000_000, 8_000_000),
    "controller": (3_000_000, 5_000_000),
    "shield": (1_000_000, 2_000_000),
}


def _counts(name: str) -> dict[str, int]:
    with torch.device("meta"):  # no memory, no init cost
        return TrafficAgent.preset(name).parameter_counts()


def test_normal_preset_is_inside_the_issue_ranges() -> None:
    counts = _counts("normal")
    for name, (lo, hi) in NORMAL_RANGES.items():
        assert lo <= counts[name] <= hi, f"{name}: {counts[name]:,} not in [{lo:,}, {hi:,}]"


def test_tiny_is_well_under_a_million_and_large_is_bigger() -> None:
    tiny, normal, large = _counts("tiny"), _counts("normal"), _counts("large")
    assert tiny["total"] < 300_000
    for name in NORMAL_RANGES:
        assert large[name] > normal[name] > tiny[name]
    assert tiny["total"] == sum(tiny[n] for n in NORMAL_RANGES)


@pytest.mark.parametrize("preset", PRESETS)
def test_output_shapes(preset: str, steps) -> None:
    torch.manual_seed(0)
    agent = TrafficAgent.preset(preset, max_actions=6)
    b, n = steps[0].num_graphs, steps[0].num_nodes
    d = agent.config.gnn.hidden_dim
    m = agent.config.gnn.num_movements
    enc = agent.encode(steps[0])
    assert enc.node.shape == (n, d) and enc.risk_logit.shape == (n,)
    out = agent.policy(steps[0])
    assert out.logits.shape == out.raw_logits.shape == out.action_mask.shape == (b, 6)
    assert out.value.shape == out.cost_value.shape == (b,)
    assert out.influence.shape == (n,) and out.attention.shape == (n, 6)
    assert agent.shield(enc).shape == (b, 6)
    shielded = agent.shielded_policy(1.0)(enc)
    assert shielded.mask.shape == shielded.cost.shape == (b, 6) and shielded.fallback.shape == (b,)

    wm = agent.predict(steps, input_steps=3, horizon=2)
    n_last = steps[2].num_nodes
    assert len(wm.steps) == 2 and len(wm.gnn_risk_logits) == 3
    for p in wm.steps:
        assert p.state.shape == p.delta.shape == (n_last, 9)
        assert p.risk_logit.shape == p.presence_logit.shape == p.active.shape == (n_last,)
        assert p.aggregates.shape == (b, m, 2)
    loss = world_model_loss(agent.world_model, steps, wm)
    assert set(loss.components) == {"state", "presence", "risk", "aggregate", "gnn_risk"}
    assert loss.total.shape == () and torch.isfinite(loss.total)
