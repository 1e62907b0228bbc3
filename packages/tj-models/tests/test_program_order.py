"""The controller's program-order input: each action token knows how far after the current green
it comes (what a clone of a fixed cycle needs), and agents saved without it load unchanged."""

from __future__ import annotations

import dataclasses

import torch

from tj_models import TrafficAgent
from tj_models.controller import _program_order
from tj_models.graph import read_graph


def test_order_index_is_the_distance_after_the_current_green(make_batch) -> None:
    """1 + (j - current) mod the light's green count; 0 for every action without a current green."""
    g = read_graph(
        make_batch([3, 2, 4], phases=[3, 4, 4]), node_features=9, edge_features=4, num_movements=12
    )
    g = dataclasses.replace(g, phase=torch.tensor([1, -1, 3]))
    order = _program_order(g, 5)
    assert order.tolist() == [
        [3, 1, 2, 3, 1],  # 3 greens, current 1: green 2 is next (1), green 0 after it (2)
        [0, 0, 0, 0, 0],  # no current green
        [2, 3, 4, 1, 2],  # 4 greens, current 3: green 0 is next
    ]
    # without phase_count the padded width counts as the light's greens
    g = dataclasses.replace(g, phase_count=None)
    assert _program_order(g, 5)[0].tolist() == [5, 1, 2, 3, 4]


def test_it_starts_at_zero_and_learns(steps) -> None:
    torch.manual_seed(0)
    agent = TrafficAgent.preset("tiny")
    emb = agent.controller.order_embedding
    ctrl = agent.controller
    assert emb.shape == (ctrl.max_actions + 1, ctrl.config.hidden_dim)
    assert not emb.any()
    out = agent.controller(agent.encode(steps[0]))
    target = torch.zeros(len(out.value), dtype=torch.long)
    torch.nn.functional.cross_entropy(out.logits, target).backward()
    assert emb.grad is not None and emb.grad[1:].abs().sum() > 0  # rows of real offsets learn


def test_a_controller_saved_without_it_loads_strictly_as_itself(steps) -> None:
    """A state dict from before the order input (tj-models < 0.4.1) loads with strict=True, into
    an agent and into a bare controller, and decides exactly as the agent it was saved from."""
    torch.manual_seed(0)
    saved = TrafficAgent.preset("tiny").eval()
    old = {k: v for k, v in saved.state_dict().items() if "order_embedding" not in k}
    torch.manual_seed(1)
    fresh = TrafficAgent.preset("tiny").eval()
    with torch.no_grad():
        fresh.controller.order_embedding.fill_(0.5)  # whatever it held is replaced by zeros
    fresh.load_state_dict(old, strict=True)
    assert not fresh.controller.order_embedding.any()
    enc_a, enc_b = saved.encode(steps[0]), fresh.encode(steps[0])
    assert torch.equal(saved.controller(enc_a).logits, fresh.controller(enc_b).logits)
    ctrl = {k.removeprefix("controller."): v for k, v in old.items() if k.startswith("controller.")}
    fresh.controller.load_state_dict(ctrl)  # strict, as the RLlib module loads a clone
