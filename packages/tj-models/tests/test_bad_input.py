"""Bad input gets a clear error naming the field; NaN is caught in debug mode."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch_geometric.data import Batch

from tj_models import InvalidGraphError, NonFiniteError, TrafficAgent, world_model_loss


def _with(graphs, mini, **changes):
    return dataclasses.replace(mini(graphs), **changes)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda b: {"x": b.x[:, :7]}, r"`x` must have shape \[N, 9\]"),
        (lambda b: {"x": b.x.long()}, "`x` must be a float tensor"),
        (lambda b: {"edge_attr": b.edge_attr[:, :3]}, "`edge_attr` must have shape"),
        (lambda b: {"edge_index": b.edge_index.float()}, "`edge_index` must be an integer"),
        (
            lambda b: {"edge_index": b.edge_index.clone().index_fill_(1, torch.tensor([0]), 99)},
            "must index nodes",
        ),
        (
            lambda b: {"edge_index": b.edge_index.clone().index_fill_(1, torch.tensor([0]), -1)},
            "must index nodes",
        ),
        (
            lambda b: {
                "edge_index": torch.tensor([[0], [b.num_nodes - 1]]),
                "edge_attr": torch.zeros(1, 4),
            },
            "same graph",
        ),
        (lambda b: {"ptr": b.ptr.flip(0)}, "`ptr` must start at 0"),
        (lambda b: {"batch": b.batch.flip(0)}, "`batch` must be sorted"),
        (lambda b: {"movement": b.movement.clone().fill_(16)}, r"`movement` must be in \[-1, 16\)"),
        (lambda b: {"movement": b.movement[:-1]}, "`movement` must have shape"),
        (lambda b: {"movement": None}, "no `movement`"),
    ],
)
def test_encoder_rejects_bad_graphs(
    tiny_agent: TrafficAgent, make_batch, mini, change, message
) -> None:
    batch = make_batch([5, 6, 4])
    with pytest.raises(InvalidGraphError, match=message):
        tiny_agent.encode(_with(batch, mini, **change(batch)))


def test_signal_state_is_checked(tiny_agent: TrafficAgent, make_batch, mini) -> None:
    batch = make_batch([3, 4])
    with pytest.raises(InvalidGraphError, match="`phase`"):
        tiny_agent.policy(_with(batch, mini, phase=torch.tensor([0, 8])))
    with pytest.raises(InvalidGraphError, match="needs per-graph `phase`"):
        tiny_agent.policy(_with(batch, mini, phase=None))
    with pytest.raises(InvalidGraphError, match="time_in_phase"):
        tiny_agent.shield(tiny_agent.encode(_with(batch, mini, time_in_phase=torch.zeros(3))))


def test_world_model_rejects_bad_windows(tiny_agent: TrafficAgent, steps, mini) -> None:
    wm = tiny_agent.world_model
    with pytest.raises(ValueError, match="input_steps must be in"):
        wm(steps, input_steps=9)
    with pytest.raises(ValueError, match="horizon must be"):
        wm(steps, input_steps=2, horizon=0)
    with pytest.raises(ValueError, match="needs >= 7 steps"):
        wm(steps, input_steps=4, horizon=4)
    no_ids = [dataclasses.replace(mini(s), vehicle_id=None) for s in steps]
    with pytest.raises(InvalidGraphError, match="no `vehicle_id`"):
        wm(no_ids, input_steps=3)
    mixed = [steps[0], Batch.from_data_list(steps[1].index_select([0, 1]))]
    with pytest.raises(InvalidGraphError, match="same streams"):
        wm(mixed)
    dup = mini(steps[1])
    dup = dataclasses.replace(dup, vehicle_id=torch.zeros_like(dup.vehicle_id))
    with pytest.raises(ValueError, match="repeats inside one graph"):
        wm([steps[0], dup])
    out = wm(steps, input_steps=5, horizon=2)
    with pytest.raises(ValueError, match=">= 7 steps"):
        world_model_loss(wm, steps, out)


def test_nan_is_caught_in_debug_mode(make_batch, mini) -> None:
    batch = make_batch([4, 5])
    x = batch.x.clone()
    x[3, 2] = float("nan")
    bad = _with(batch, mini, x=x)
    torch.manual_seed(0)
    debug = TrafficAgent.preset("tiny", debug=True)
    with pytest.raises(
        NonFiniteError,
        match=r"input `x`: 1 of 81 values are not finite \(1 NaN, 0 Inf\); first at index \(3, 2\)",
    ):
        debug.encode(bad)
    ea = batch.edge_attr.clone()
    ea[0, 0] = float("inf")
    with pytest.raises(NonFiniteError, match="input `edge_attr`"):
        debug.encode(_with(batch, mini, edge_attr=ea))
    # NaN produced inside the network (a corrupted weight) is named too
    with torch.no_grad():
        debug.controller.value_head[0].weight[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match="Controller `value`"):
        debug.policy(batch)
    # without debug mode there is no check (and no device sync): the NaN just propagates
    fast = TrafficAgent.preset("tiny")
    assert torch.isnan(fast.encode(bad).node).any()
