"""CPU bf16 autocast for every component; PyG Batch, a GraphBatch-like dataclass and a single Data."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch_geometric.data import Data

from tj_models import TrafficAgent, world_model_loss


def test_cpu_bf16_autocast_forward_backward(tiny_agent: TrafficAgent, steps) -> None:
    agent = tiny_agent
    seen = []
    hook = agent.gnn.input.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = agent.predict(steps, input_steps=3, horizon=2)
        wm_loss = world_model_loss(agent.world_model, steps, out).total
        enc = agent.encode(steps[0])
        pol = agent.controller(enc)
        cost = agent.shield(enc)
        shielded = agent.shielded_policy(0.5)(enc)
    hook.remove()
    assert seen and all(d == torch.bfloat16 for d in seen)  # autocast really ran in bf16
    for t in (wm_loss, pol.logits, pol.value, pol.cost_value, cost, shielded.logits):
        assert t.dtype == torch.float32 and torch.isfinite(t).all()
    (
        wm_loss + pol.value.sum() + pol.cost_value.sum() + cost.sum() + pol.raw_logits.sum()
    ).backward()
    grads = [p.grad for p in agent.parameters() if p.grad is not None]
    assert len(grads) == len(list(agent.parameters()))
    assert all(torch.isfinite(g).all() for g in grads)


def test_fp32_and_bf16_agree_roughly(tiny_agent: TrafficAgent, steps) -> None:
    agent = tiny_agent.eval()
    with torch.no_grad():
        ref = agent.policy(steps[0]).value
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = agent.policy(steps[0]).value
    assert torch.allclose(ref, low, atol=0.1, rtol=0.1)


def test_pyg_batch_and_graphbatch_like_dataclass_give_the_same_outputs(
    tiny_agent: TrafficAgent, steps, mini
) -> None:
    agent = tiny_agent.eval()
    with torch.no_grad():
        a = agent.predict(steps, input_steps=3)
        b = agent.predict([mini(s) for s in steps], input_steps=3)
        assert torch.equal(a.steps[0].state, b.steps[0].state)
        assert torch.equal(agent.policy(steps[0]).logits, agent.policy(mini(steps[0])).logits)


def test_a_single_unbatched_graph(tiny_agent: TrafficAgent, steps) -> None:
    """A PyG Data without batch/ptr is one graph."""
    one = steps[0].get_example(1)
    data = Data(
        **{
            k: one[k]
            for k in (
                "x",
                "edge_index",
                "edge_attr",
                "movement",
                "phase",
                "time_in_phase",
                "phase_count",
            )
        }
    )
    agent = tiny_agent.eval()
    with torch.no_grad():
        single = agent.policy(data)
        batched = agent.policy(steps[0])
    assert single.logits.shape == (1, 8)
    assert torch.allclose(single.logits[0], batched.logits[1], atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_other_float_input_dtypes_are_cast(tiny_agent: TrafficAgent, steps, mini, dtype) -> None:
    m = mini(steps[0])
    m = dataclasses.replace(m, x=m.x.to(dtype), edge_attr=m.edge_attr.to(dtype))
    out = tiny_agent.policy(m)
    assert out.raw_logits.dtype == torch.float32 and torch.isfinite(out.raw_logits).all()


def test_rl_style_one_hot_phase_and_column_time(tiny_agent: TrafficAgent, steps, mini) -> None:
    """The RL observation may carry the phase one-hot [B, A] and time in phase as [B, 1]."""
    m = mini(steps[0])
    one_hot = torch.nn.functional.one_hot(m.phase, 4).float()
    one_hot[0] = 0.0  # no current green phase (e.g. during a yellow)
    rl = dataclasses.replace(m, phase=one_hot, time_in_phase=m.time_in_phase[:, None])
    index = dataclasses.replace(m, phase=torch.cat([torch.tensor([-1]), m.phase[1:]]))
    agent = tiny_agent.eval()
    with torch.no_grad():
        assert torch.equal(agent.policy(rl).logits, agent.policy(index).logits)
