"""Intersections with no vehicle are a normal case: every component and the loss handle them."""

from __future__ import annotations

import torch

from tj_models import TrafficAgent, world_model_loss


def _finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def test_some_empty_graphs(tiny_agent: TrafficAgent, make_batch) -> None:
    batch = make_batch([0, 5, 0, 3, 0])
    enc = tiny_agent.encode(batch)
    out = tiny_agent.controller(enc)
    cost = tiny_agent.shield(enc)
    assert out.logits.shape[0] == cost.shape[0] == 5  # from ptr, not batch.max() + 1
    assert _finite(enc.node, out.raw_logits, out.value, out.cost_value, cost)
    (out.value.sum() + cost.sum() + out.raw_logits.sum()).backward()
    assert all(_finite(p.grad) for p in tiny_agent.parameters() if p.grad is not None)


def test_all_graphs_empty(tiny_agent: TrafficAgent, make_batch) -> None:
    batch = make_batch([0, 0, 0])
    assert batch.num_nodes == 0
    enc = tiny_agent.encode(batch)
    out = tiny_agent.controller(enc)
    assert out.logits.shape == (3, 8) and _finite(out.raw_logits, out.value, tiny_agent.shield(enc))
    window = [make_batch([0, 0, 0], seed=s) for s in range(4)]
    wm = tiny_agent.predict(window, input_steps=2, horizon=2)
    assert wm.steps[1].state.shape == (0, 9) and wm.steps[1].aggregates.shape == (3, 16, 2)
    loss = world_model_loss(tiny_agent.world_model, window, wm)
    assert torch.isfinite(loss.total)
    loss.total.backward()


def test_window_with_vehicles_appearing_and_leaving(tiny_agent: TrafficAgent, make_batch) -> None:
    """Graph 0 empties out, graph 1 fills up, graph 2 is empty at every step."""
    window = [
        make_batch(c, seed=i) for i, c in enumerate([[4, 0, 0], [2, 3, 0], [0, 6, 0], [0, 2, 0]])
    ]
    wm = tiny_agent.predict(window, input_steps=3, horizon=1)
    loss = world_model_loss(tiny_agent.world_model, window, wm)
    assert torch.isfinite(loss.total)
    loss.total.backward()
    assert all(_finite(p.grad) for p in tiny_agent.parameters() if p.grad is not None)
