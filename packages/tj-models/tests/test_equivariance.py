"""Node-permutation equivariance (per-vehicle outputs) and invariance (per-graph outputs)."""

from __future__ import annotations

import torch

from tj_models import TrafficAgent, world_model_loss

ATOL = 1e-5


def test_gnn_controller_shield(tiny_agent: TrafficAgent, make_batch, permute) -> None:
    agent = tiny_agent.eval()
    batch = make_batch([7, 0, 12, 3], seed=3)
    permuted, perm = permute(batch, seed=4)
    with torch.no_grad():
        a, b = agent.encode(batch), agent.encode(permuted)
        assert torch.allclose(a.node[perm], b.node, atol=ATOL)
        assert torch.allclose(a.risk_logit[perm], b.risk_logit, atol=ATOL)
        ca, cb = agent.controller(a), agent.controller(b)
        assert torch.allclose(ca.logits, cb.logits, atol=ATOL)
        assert torch.allclose(ca.value, cb.value, atol=ATOL)
        assert torch.allclose(ca.cost_value, cb.cost_value, atol=ATOL)
        assert torch.allclose(ca.influence[perm], cb.influence, atol=ATOL)
        assert torch.allclose(ca.attention[perm], cb.attention, atol=ATOL)
        assert torch.allclose(agent.shield(a), agent.shield(b), atol=ATOL)


def test_world_model(tiny_agent: TrafficAgent, steps, permute) -> None:
    agent = tiny_agent.eval()
    permuted, perms = zip(*(permute(s, seed=10 + i) for i, s in enumerate(steps)), strict=True)
    with torch.no_grad():
        a = agent.predict(steps, input_steps=3, horizon=2)
        b = agent.predict(list(permuted), input_steps=3, horizon=2)
        last = perms[2]  # the predicted vehicles are those of the last input step
        for pa, pb in zip(a.steps, b.steps, strict=True):
            assert torch.equal(pa.active[last], pb.active)
            assert torch.allclose(pa.state[last], pb.state, atol=1e-4)
            assert torch.allclose(pa.risk_logit[last], pb.risk_logit, atol=ATOL)
            assert torch.allclose(pa.presence_logit[last], pb.presence_logit, atol=ATOL)
            assert torch.allclose(pa.aggregates, pb.aggregates, atol=1e-4)
        la = world_model_loss(agent.world_model, steps, a).total
        lb = world_model_loss(agent.world_model, list(permuted), b).total
        assert torch.allclose(la, lb, atol=1e-5)
