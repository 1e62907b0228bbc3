"""What phase 3 optimises: the controller and the shield's critic, on the frozen GNN's output.

``Learner`` is the module DDP wraps (only trained parameters: controller and shield); its forward
runs the one actor's heads (``tj_rl.control.Actor``: the collector's logits for the same weights)
and the shield's critic on an encoded micro-batch. ``micro_batch_loss`` is PPO-Lagrangian (tj-models' ``ppo``:
clipped surrogate on ``(A_r - lambda * A_c) / (1 + lambda)``, reward- and cost-value losses,
entropy) plus the shield's critic loss (predicted cost of the taken action against the observed
discounted cost), so the shield learns what the veto needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from torch import Tensor, nn

from tj_models import (
    Controller,
    GNNOutput,
    PPOLoss,
    SafetyShield,
    ppo_lagrangian_loss,
    shield_cost_loss,
)
from tj_rl.control import Actor, ActorOutput
from tj_rl.control.actor import fields_of

__all__ = ["Learner", "LossWeights", "StepLoss", "micro_batch_loss"]


class Learner(nn.Module):
    """Controller + shield (the phase-3 trainable parts) as one module for DDP."""

    def __init__(self, controller: Controller, shield: SafetyShield) -> None:
        super().__init__()
        self.controller, self.shield = controller, shield
        # heads only: the frozen encoder's output comes cached; the samples carry the final mask
        self.actor = Actor(None, controller)

    def forward(self, encoded: GNNOutput, batch: Any) -> tuple[ActorOutput, Tensor]:
        return self.actor.heads(encoded, fields_of(batch)), self.shield(encoded)


@dataclass(frozen=True, kw_only=True)
class LossWeights:
    clip: float
    vf_coeff: float
    cost_vf_coeff: float
    shield_coeff: float
    entropy: float


@dataclass(frozen=True, slots=True)
class StepLoss:
    total: Tensor
    ppo: PPOLoss
    shield: Tensor


def micro_batch_loss(model: nn.Module, encoded: GNNOutput, batch: Any, advantages: Tensor,
                     w: LossWeights) -> StepLoss:  # fmt: skip
    """The loss of one micro-batch (``advantages``: combined and normalised, [B])."""
    out, cost = model(encoded, batch)
    actions = batch.action.long()
    ppo = ppo_lagrangian_loss(
        out.logits, actions, batch.logp.float(), advantages,
        out.value, batch.returns.float(), out.cost_value, batch.cost_returns.float(),
        clip=w.clip, vf_coeff=w.vf_coeff, cost_vf_coeff=w.cost_vf_coeff,
        entropy_coeff=w.entropy,
    )  # fmt: skip
    shield = shield_cost_loss(cost, actions, batch.cost_returns.float())
    return StepLoss(total=ppo.total + w.shield_coeff * shield, ppo=ppo, shield=shield)
