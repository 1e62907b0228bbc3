"""A real learning test: a tiny world model overfits a small fixed set of windows."""

from __future__ import annotations

import statistics

import torch

from tj_models import TrafficAgent, world_model_loss
from tj_models.synthetic import SyntheticTrafficConfig, collate_windows, synthetic_windows


def test_tiny_world_model_overfits_a_fixed_window_set() -> None:
    torch.manual_seed(0)
    windows = synthetic_windows(
        SyntheticTrafficConfig(steps=8, warmup_steps=10, arrival_rate=0.5),
        streams=4,
        window=6,
        stride=2,
        seed=7,
    )
    steps = collate_windows(
        windows[:8]
    )  # 8 streams, 4 input steps + 2 target steps, ~75 vehicles/step
    agent = TrafficAgent.preset("tiny")
    params = agent.freeze_for_phase(1)
    opt = torch.optim.Adam(params, lr=3e-3)
    history = []
    for _ in range(200):
        out = agent.predict(
            steps, input_steps=4, horizon=2
        )  # horizon 2: the rollout is trained too
        loss = world_model_loss(agent.world_model, steps, out)
        opt.zero_grad()
        loss.total.backward()
        opt.step()
        history.append(
            (loss.total.item(), loss.components["state"].item(), loss.metrics["position_rmse_m/h1"])
        )
    first = [statistics.mean(h[i] for h in history[:3]) for i in range(3)]
    last = [statistics.mean(h[i] for h in history[-10:]) for i in range(3)]
    assert last[0] <= first[0] / 10, f"total loss {first[0]:.4f} -> {last[0]:.4f}"
    assert last[1] <= first[1] / 10, f"state loss {first[1]:.4f} -> {last[1]:.4f}"
    assert last[2] <= first[2] / 3, f"position RMSE {first[2]:.2f} m -> {last[2]:.2f} m"
