"""Each training phase's gradients reach exactly its parameters, and frozen parts stay in eval."""

from __future__ import annotations

import pytest
import torch

from tj_models import PHASE_COMPONENTS, TrafficAgent, world_model_loss


def _everything_loss(agent: TrafficAgent, steps) -> torch.Tensor:
    """A loss that depends on every output of every component."""
    wm = agent.predict(steps, input_steps=3, horizon=2)
    loss = world_model_loss(agent.world_model, steps, wm).total
    enc = agent.encode(steps[0])
    out = agent.controller(enc)
    loss = loss + out.raw_logits.sum() + out.value.sum() + out.cost_value.sum()
    return loss + agent.shield(enc).sum()


@pytest.mark.parametrize("phase", [1, 2, 3])
def test_gradients_reach_exactly_the_phase_parameters(
    phase: int, steps, tiny_agent: TrafficAgent
) -> None:
    agent = tiny_agent
    trainable = agent.freeze_for_phase(phase)
    expected = {id(p) for p in agent.phase_parameters(phase)}
    assert {id(p) for p in trainable} == expected
    _everything_loss(agent, steps).backward()
    reached = {id(p) for p in agent.parameters() if p.grad is not None}
    names = {id(p): n for n, p in agent.named_parameters()}
    missing = sorted(names[i] for i in expected - reached)
    leaked = sorted(names[i] for i in reached - expected)
    assert not missing, f"phase {phase}: no gradient for {missing[:5]}"
    assert not leaked, f"phase {phase}: gradient leaked into {leaked[:5]}"
    # every component of the phase really learns something (not only zero grads)
    for name in PHASE_COMPONENTS[phase]:
        grads = [p.grad.abs().sum() for p in agent.component_parameters(name)]
        assert float(torch.stack(grads).sum()) > 0, name


def test_phase_parameter_sets_partition_the_model(tiny_agent: TrafficAgent) -> None:
    agent = tiny_agent
    ids = {
        n: {id(p) for p in agent.component_parameters(n)}
        for n in ("gnn", "world_model", "controller", "shield")
    }
    assert sum(len(v) for v in ids.values()) == len(list(agent.parameters()))
    assert not ids["gnn"] & ids["world_model"]
    p1 = {id(p) for p in agent.phase_parameters(1)}
    assert p1 == ids["gnn"] | ids["world_model"]
    assert {id(p) for p in agent.phase_parameters(3)} == ids["controller"] | ids["shield"]
    with pytest.raises(ValueError, match="unknown training phase"):
        agent.phase_parameters(4)


def test_frozen_components_stay_in_eval_mode(tiny_agent: TrafficAgent) -> None:
    agent = tiny_agent
    agent.freeze_for_phase(2)
    agent.train()
    assert agent.controller.training
    assert not agent.gnn.training and not agent.world_model.training and not agent.shield.training
    agent.freeze_for_phase(1)
    assert agent.gnn.training and agent.world_model.training and not agent.controller.training
    agent.unfreeze()
    assert all(p.requires_grad for p in agent.parameters()) and agent.shield.training
