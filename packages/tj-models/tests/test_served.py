"""Phase competition (``ControllerConfig.movement_stats``): each phase token reads the movements
its green serves, so what a phase does - not its index - drives its logit."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tj_models import Controller, InvalidGraphError, RiskGNN, ServedMovements, TrafficAgentConfig

M, A = 12, 4


def _models(seed: int = 0) -> tuple[RiskGNN, Controller]:
    torch.manual_seed(seed)
    cfg = TrafficAgentConfig.preset("tiny")
    gnn = RiskGNN(cfg.gnn).eval()
    ctrl = Controller(dataclasses.replace(cfg.controller, movement_stats=3), gnn=cfg.gnn,
                      max_actions=A).eval()  # fmt: skip
    return gnn, ctrl


def _inputs(b: int) -> tuple[torch.Tensor, torch.Tensor]:
    pm = torch.zeros(b, A, M)
    pm[:, 0, 0:3], pm[:, 0, 8:10] = 1, -1  # green 0 serves movements 0-2, feeds 8-9
    pm[:, 1, 3:6], pm[:, 1, 10] = 1, -1
    pm[:, 2, 6:8], pm[:, 2, 11] = 1, -1  # green 3 serves nothing (a padded action)
    stats = torch.rand(b, M, 3, generator=torch.Generator().manual_seed(1)) * 5
    return pm, stats


def test_missing_or_unexpected_inputs_are_errors(make_batch) -> None:
    gnn, ctrl = _models()
    batch = make_batch([5, 3])
    encoded = gnn(batch)
    with pytest.raises(InvalidGraphError, match="needs `phase_movements`"):
        ctrl(encoded)
    pm, stats = _inputs(2)
    plain = Controller(TrafficAgentConfig.preset("tiny").controller,
                       gnn=gnn.config, max_actions=A)  # fmt: skip
    with pytest.raises(InvalidGraphError, match="movement_stats is 0"):
        plain(encoded, phase_movements=pm, movement_stats=stats)
    with pytest.raises(InvalidGraphError, match="movement_stats"):
        ctrl(encoded, phase_movements=pm, movement_stats=stats[:, :, :2])


def test_a_phase_token_reads_only_what_its_green_serves(make_batch) -> None:
    """Changing the statistics of movements no green touches changes nothing; changing those of
    a movement green 1 serves changes green 1's logit."""
    gnn, ctrl = _models()
    batch = make_batch([6, 4])
    with torch.no_grad():
        encoded = gnn(batch)
        pm, stats = _inputs(2)
        pm[:, :, 7] = 0  # movement 7: served by no green
        base = ctrl.served(encoded.node.new_zeros(0, 32), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, dtype=torch.long), pm, stats)  # fmt: skip
        other = stats.clone()
        other[:, 7] += 100.0
        same = ctrl.served(encoded.node.new_zeros(0, 32), torch.zeros(0, dtype=torch.long),
                           torch.zeros(0, dtype=torch.long), pm, other)  # fmt: skip
        torch.testing.assert_close(base, same)
        served = stats.clone()
        served[:, 4] += 100.0  # a movement of green 1
        moved = ctrl.served(encoded.node.new_zeros(0, 32), torch.zeros(0, dtype=torch.long),
                            torch.zeros(0, dtype=torch.long), pm, served)  # fmt: skip
        changed = (moved - base).abs().amax(-1)  # [B, A]
        assert (changed[:, 1] > 1e-4).all() and (changed[:, [0, 2, 3]] < 1e-6).all()
        logits = ctrl(encoded, phase_movements=pm, movement_stats=stats).logits
        assert logits.shape == (2, A) and torch.isfinite(logits).all()


def test_vehicles_pool_into_the_phases_that_serve_their_movement() -> None:
    d = 8
    served = ServedMovements(d, 3, A)
    pm, stats = _inputs(1)
    u = torch.randn(3, d)
    batch = torch.zeros(3, dtype=torch.long)
    with torch.no_grad():
        base = served(u, batch, torch.tensor([0, 4, -1]), pm, stats)
        # the vehicle with movement -1 counts nowhere: changing its embedding changes nothing
        u2 = u.clone()
        u2[2] += 10
        torch.testing.assert_close(served(u2, batch, torch.tensor([0, 4, -1]), pm, stats), base)
        # moving vehicle 0 from a movement of green 0 to one of green 2 changes greens 0 and 2
        moved = served(u, batch, torch.tensor([6, 4, -1]), pm, stats)
        changed = (moved - base).abs().amax(-1)[0]
        assert changed[0] > 1e-4 and changed[2] > 1e-4
        assert changed[1] < 1e-6 and changed[3] < 1e-6
