"""Phase 1 and phase 3 under DistributedDataParallel on a real gloo process group.

DDP without ``find_unused_parameters`` fails on the second step when any trainable parameter got
no gradient, so two steps prove that every parameter of the phase is used on every step.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from tj_models import TrafficAgent, shield_cost_loss, world_model_loss


@pytest.fixture
def gloo_group(tmp_path: Path):
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("gloo_group")
def test_phase1_world_model_under_ddp(tiny_agent: TrafficAgent, steps) -> None:
    agent = tiny_agent
    opt = torch.optim.AdamW(agent.freeze_for_phase(1), lr=1e-3)
    model = DDP(agent.world_model)  # the whole phase-1 model: GNN encoder + temporal core
    for horizon in (1, 2):
        out = model(steps, input_steps=3, horizon=horizon)
        loss = world_model_loss(agent.world_model, steps, out).total
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.isfinite(loss)


@pytest.mark.usefixtures("gloo_group")
def test_phase3_controller_and_shield_under_ddp(tiny_agent: TrafficAgent, steps) -> None:
    agent = tiny_agent
    opt = torch.optim.AdamW(agent.freeze_for_phase(3), lr=1e-3)
    controller, shield = DDP(agent.controller), DDP(agent.shield)
    actions = torch.zeros(steps[0].num_graphs, dtype=torch.long)
    for step in steps[:2]:
        with torch.no_grad():
            enc = agent.encode(step)  # frozen encoder
        out = controller(enc)
        logp = torch.log_softmax(out.logits, -1).gather(1, actions[:, None]).squeeze(1)
        cost = shield(enc)
        loss = -logp.mean() + out.value.pow(2).mean() + out.cost_value.pow(2).mean()
        loss = loss + shield_cost_loss(cost, actions, torch.ones_like(logp))
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.isfinite(loss)
