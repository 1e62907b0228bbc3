"""World-model contract: targets, rollout feedback, geometry, fp32 LSTM, activation checkpointing."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from tj_models import (
    FeatureLayout,
    TrafficAgent,
    edge_features,
    match_nodes,
    radius_edges,
    world_model_loss,
    world_model_targets,
)


def test_horizon_one_target_from_y_next_equals_matching_the_next_step(
    tiny_agent: TrafficAgent, steps
) -> None:
    wm = tiny_agent.world_model
    out = wm(steps, input_steps=3, horizon=2)
    targets = world_model_targets(wm, steps, out)
    last, nxt = steps[2], steps[3]
    idx = match_nodes(last.batch, last.vehicle_id, nxt.batch, nxt.vehicle_id, key_base=10**6)
    assert torch.equal(targets[0].state_mask, idx >= 0)
    assert torch.allclose(targets[0].state[idx >= 0], nxt.x[idx[idx >= 0]])
    # horizon 2: matched in step T+1 = 4, risk label from there, aggregates over all its vehicles
    idx2 = match_nodes(
        last.batch, last.vehicle_id, steps[4].batch, steps[4].vehicle_id, key_base=10**6
    )
    assert torch.equal(targets[1].state_mask, idx2 >= 0)
    assert torch.equal(targets[1].risk[idx2 >= 0], steps[4].risk[idx2[idx2 >= 0]])
    assert targets[1].aggregates[..., 0].sum() == steps[4].num_nodes - int(
        (steps[4].movement < 0).sum()
    )


def test_rollout_feeds_predictions_back(tiny_agent: TrafficAgent, steps) -> None:
    wm = tiny_agent.world_model.eval()
    with torch.no_grad():
        out = wm(steps, input_steps=2, horizon=4)
    assert out.horizon == 4 and len(out.steps) == 4
    actives = [p.active for p in out.steps]
    assert all(torch.all(b <= a) for a, b in itertools.pairwise(actives))  # vehicles only leave
    x_prev = steps[1].x
    for p in out.steps:  # each step starts from the previous prediction
        layout = FeatureLayout()
        assert torch.allclose(p.state[:, layout.length], x_prev[:, layout.length])
        assert torch.all(p.state[:, layout.speed] >= 0)
        assert torch.allclose(p.state[:, [4, 5]].norm(dim=-1), torch.ones(len(p.state)), atol=1e-5)
        x_prev = p.state
    # an untrained model keeps the vehicles (presence starts near 0.9) ...
    assert actives[1].float().mean() > 0.9
    # ... and a model that predicts every vehicle gone empties the rollout graph
    with torch.no_grad():
        wm.node_decoder[-1].bias[10] = -50.0
        gone = wm(steps, input_steps=2, horizon=3)
    assert not gone.steps[1].active.any() and torch.all(gone.steps[2].aggregates >= 0)


def test_gradients_flow_through_the_rollout(tiny_agent: TrafficAgent, steps) -> None:
    wm = tiny_agent.world_model
    out = wm(steps, input_steps=2, horizon=3)
    out.steps[2].state.sum().backward()  # only the last horizon: reaches the first decoder pass
    assert wm.track_lstm.weight_ih_l0.grad is not None
    assert wm.encoder.input.weight.grad.abs().sum() > 0


def test_edge_features_and_radius_edges() -> None:
    layout = FeatureLayout()
    x = torch.zeros(3, 9)
    x[:, 8] = 4.0  # length
    x[0, :2] = torch.tensor([0.0, 0.0])  # heading +y (math 90 deg: sin 1, cos 0) at 10 m/s
    x[0, 2], x[0, 4] = 10.0, 1.0
    x[1, :2] = torch.tensor([0.0, 20.0])  # stopped 20 m ahead
    x[1, 4] = 1.0
    x[2, :2] = torch.tensor([100.0, 0.0])  # far away
    x[2, 4] = 1.0
    ei = radius_edges(x[:, :2], torch.tensor([0, 3]), torch.zeros(3, dtype=torch.long), 30.0)
    assert sorted(map(tuple, ei.t().tolist())) == [(0, 1), (1, 0)]
    attr = edge_features(x, ei, layout, "math")
    row = {tuple(e): a for e, a in zip(ei.t().tolist(), attr, strict=True)}
    # closing at 10 m/s over a bumper gap of 20 - 4 = 16 m: inverse TTC 0.625 1/s
    assert torch.allclose(row[(1, 0)], torch.tensor([0.0, 20.0, 10.0, 0.625]))
    assert torch.allclose(row[(0, 1)], torch.tensor([0.0, -20.0, 10.0, 0.625]))
    # SUMO convention: the same (sin, cos) = (1, 0) means moving along +x: no closing along y
    attr_sumo = edge_features(x, ei, layout, "sumo")
    assert attr_sumo[:, 2].abs().max() < 1e-6 and not attr_sumo[:, 3].any()


def test_radius_edges_cap_and_inactive_nodes() -> None:
    pos = torch.tensor([[0.0, 0], [1, 0], [2, 0], [3, 0], [0, 0], [0, 1]])
    ptr, batch = torch.tensor([0, 4, 6]), torch.tensor([0, 0, 0, 0, 1, 1])
    ei = radius_edges(pos, ptr, batch, 10.0, max_neighbors=2)
    assert torch.all(batch[ei[0]] == batch[ei[1]])  # never across graphs
    assert torch.bincount(ei[1], minlength=6).max() <= 2
    nearest_of_0 = sorted(ei[0][ei[1] == 0].tolist())
    assert nearest_of_0 == [1, 2]
    active = torch.tensor([True, False, True, True, True, True])
    ei = radius_edges(pos, ptr, batch, 10.0, active=active)
    assert 1 not in ei.flatten().tolist()


def test_match_nodes() -> None:
    src_b, src_id = torch.tensor([0, 0, 1]), torch.tensor([5, 7, 5])
    dst_b, dst_id = torch.tensor([0, 1, 1]), torch.tensor([7, 5, 9])
    assert match_nodes(src_b, src_id, dst_b, dst_id, key_base=10).tolist() == [-1, 0, 1]
    assert match_nodes(src_b, src_id, dst_b[:0], dst_id[:0], key_base=10).tolist() == [-1, -1, -1]


def test_lstm_math_stays_fp32_under_autocast(tiny_agent: TrafficAgent, steps) -> None:
    seen = []
    hooks = [
        lstm.register_forward_hook(lambda m, i, o: seen.append((i[0].dtype, o[0].dtype)))
        for lstm in (tiny_agent.world_model.graph_lstm, tiny_agent.world_model.track_lstm)
    ]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = tiny_agent.predict(steps, input_steps=3, horizon=2)
        loss = world_model_loss(tiny_agent.world_model, steps, out)
    for h in hooks:
        h.remove()
    assert seen and all(d == (torch.float32, torch.float32) for d in seen)
    assert torch.isfinite(loss.total)
    loss.total.backward()


def test_activation_checkpointing_gives_the_same_gradients(steps) -> None:
    def grads(ckpt: bool) -> tuple[float, list[torch.Tensor]]:
        torch.manual_seed(0)
        agent = TrafficAgent.preset("tiny")
        agent.set_activation_checkpointing(ckpt)
        assert agent.world_model.config.activation_checkpointing is ckpt
        out = agent.predict(steps, input_steps=3, horizon=2)
        loss = world_model_loss(agent.world_model, steps, out).total
        loss.backward()
        return loss.detach().item(), [
            p.grad.clone() for p in agent.phase_parameters(1) if p.grad is not None
        ]

    plain_loss, plain = grads(False)
    ckpt_loss, ckpt = grads(True)
    assert math.isclose(plain_loss, ckpt_loss, rel_tol=1e-6)
    assert len(plain) == len(ckpt)
    for a, b in zip(plain, ckpt, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_fp16_autocast_with_grad_scaler(steps) -> None:
    agent = TrafficAgent.preset("tiny").cuda()
    window = [s.to("cuda") for s in steps]
    scaler = torch.amp.GradScaler("cuda")
    opt = torch.optim.AdamW(agent.phase_parameters(1), lr=1e-3)
    for _ in range(3):
        with torch.autocast("cuda", dtype=torch.float16):
            out = agent.predict(window, input_steps=3, horizon=2)
            loss = world_model_loss(agent.world_model, window, out).total
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    assert torch.isfinite(loss)
    with torch.autocast("cuda", dtype=torch.float16):
        pol = agent.policy(window[0])
    assert pol.logits.dtype == torch.float32 and torch.isfinite(pol.logits).all()


@pytest.mark.parametrize(
    "changes",
    [{"use_signal_state": False}, {"physics_prior": False}],
    ids=["no-signal", "no-prior"],
)
def test_world_model_variants(steps, mini, changes) -> None:
    import dataclasses

    from tj_models import TrafficAgentConfig

    base = TrafficAgentConfig.preset("tiny")
    agent = TrafficAgent(
        dataclasses.replace(base, world_model=dataclasses.replace(base.world_model, **changes))
    )
    window = [mini(s) for s in steps]
    if not agent.world_model.config.use_signal_state:  # the signal state is then not needed at all
        window = [dataclasses.replace(s, phase=None, time_in_phase=None) for s in window]
    out = agent.predict(window, input_steps=3, horizon=3)
    loss = world_model_loss(agent.world_model, window, out)
    loss.total.backward()
    assert torch.isfinite(loss.total) and len(out.steps) == 3
    unused = [n for n, p in agent.world_model.named_parameters() if p.grad is None]
    assert not unused, f"parameters without gradient (DDP would fail): {unused}"
