"""SafetyShield (a learned per-action safety-cost critic) and ShieldedPolicy (rule mask + critic).

The shield predicts, for every candidate phase of every intersection, the expected safety cost of
choosing it now (trained on the env's cost signal with ``shield_cost_loss``). ``ShieldedPolicy``
combines the env's rule mask (min-green, feasibility) with a threshold on that cost: an allowed
action whose predicted cost exceeds the threshold is vetoed; when that would veto every allowed
action of an intersection, the allowed actions of minimum predicted cost are kept, so the policy
always has a choice and never overrides the env's rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tj_models.config import GNNConfig, ShieldConfig
from tj_models.controller import (
    Controller,
    ControllerOutput,
    check_signal,
    masked_logits,
    resolve_action_mask,
)
from tj_models.gnn import GNNOutput
from tj_models.graph import InvalidGraphError, check_finite
from tj_models.pooling import graph_pool, movement_pool

__all__ = ["SafetyShield", "ShieldedOutput", "ShieldedPolicy", "shield_cost_loss"]


class SafetyShield(nn.Module):
    """``forward(encoded: GNNOutput) -> [B, max_actions]`` expected safety cost per action."""

    def __init__(self, config: ShieldConfig, *, gnn: GNNConfig, max_actions: int) -> None:
        super().__init__()
        self.config, self.gnn_config, self.max_actions = config, gnn, max_actions
        d, m, dm, h, da = (
            gnn.hidden_dim,
            gnn.num_movements,
            config.movement_dim,
            config.hidden_dim,
            config.action_dim,
        )
        self.movement_proj = nn.Linear(d, dm)
        self.phase_embedding = nn.Embedding(max_actions + 1, da)  # row 0: no current phase
        state_in = 2 * d + m * dm + m + 2 + 1 + 2 + da
        self.state = nn.Sequential(
            nn.Linear(state_in, h), nn.GELU(), nn.Linear(h, h), nn.LayerNorm(h)
        )
        self.action_embedding = nn.Embedding(max_actions, da)
        layers: list[nn.Module] = [nn.Linear(h + da + 1, h), nn.GELU()]
        for _ in range(config.num_layers - 1):
            layers += [nn.Linear(h, h), nn.GELU()]
        self.critic = nn.Sequential(*layers, nn.Linear(h, 1))

    def forward(self, encoded: GNNOutput) -> Tensor:
        c, gc = self.config, self.gnn_config
        g = encoded.graph
        check_signal(g, self.max_actions, "SafetyShield")
        assert g.movement is not None and g.phase is not None and g.time_in_phase is not None
        b, m, a = g.num_graphs, gc.num_movements, self.max_actions
        h = encoded.node
        risk = torch.sigmoid(encoded.risk_logit.float())
        pooled = graph_pool(h, g.batch, b)
        mov = movement_pool(self.movement_proj(h), g.movement, g.batch, b, m)
        mov_risk = movement_pool(risk[:, None], g.movement, g.batch, b, m).squeeze(-1)
        risk_stats = graph_pool(risk[:, None], g.batch, b)  # mean and max p(risk)
        count = g.counts().float()[:, None] / c.count_scale
        tip = g.time_in_phase.clamp(min=0.0)
        time_feats = torch.stack(
            [tip / c.time_scale, torch.log1p(tip) / math.log1p(c.time_scale)], -1
        )
        parts = [
            pooled,
            mov.flatten(1),
            mov_risk,
            risk_stats,
            count,
            time_feats,
            self.phase_embedding(g.phase + 1),
        ]
        state = self.state(
            torch.cat([p.to(pooled.dtype) if p.is_floating_point() else p for p in parts], -1)
        )
        actions = self.action_embedding.weight[None].expand(b, a, -1)
        current = (torch.arange(a, device=h.device)[None] == g.phase[:, None]).to(state.dtype)
        inp = torch.cat(
            [state[:, None].expand(b, a, -1), actions.to(state.dtype), current[..., None]], -1
        )
        cost = self.critic(inp).squeeze(-1).float()
        if c.nonnegative:
            cost = F.softplus(cost)
        if c.debug:
            check_finite("SafetyShield cost", cost)
        return cost


def shield_cost_loss(
    cost: Tensor, actions: Tensor, targets: Tensor, weights: Tensor | None = None
) -> Tensor:
    """MSE between the predicted cost of the taken action and the observed (discounted) cost."""
    if cost.dim() != 2 or actions.shape != (cost.shape[0],) or targets.shape != (cost.shape[0],):
        raise ValueError(
            f"expected cost [B, A], actions [B], targets [B]; got {tuple(cost.shape)}, "
            f"{tuple(actions.shape)}, {tuple(targets.shape)}"
        )
    taken = cost.gather(1, actions.long()[:, None]).squeeze(1)
    err = (taken - targets.float()).pow(2)
    if weights is None:
        return err.mean()
    return (err * weights).sum() / weights.sum().clamp(min=1e-8)


@dataclass(frozen=True, slots=True)
class ShieldedOutput:
    logits: Tensor  # [B, A] controller logits masked by the final mask
    mask: Tensor  # [B, A] final mask: rule mask minus vetoed actions
    rule_mask: Tensor  # [B, A] the env's mask as given
    cost: Tensor  # [B, A] predicted expected safety cost
    vetoed: Tensor  # [B, A] allowed by the rules, removed by the cost threshold
    fallback: Tensor  # [B] every allowed action was over the threshold: min-cost ones kept
    controller: ControllerOutput


class ShieldedPolicy(nn.Module):
    """Controller logits masked by ``rule_mask & (shield cost <= threshold)`` (never empty)."""

    def __init__(self, controller: Controller, shield: SafetyShield, *, threshold: float) -> None:
        super().__init__()
        if not math.isfinite(threshold):
            raise ValueError(f"threshold must be finite, got {threshold}")
        if controller.max_actions != shield.max_actions:
            raise ValueError(
                f"controller has {controller.max_actions} actions, shield {shield.max_actions}"
            )
        self.controller, self.shield, self.threshold = controller, shield, float(threshold)

    def forward(
        self,
        encoded: GNNOutput,
        action_mask: Tensor | None = None,
        *,
        phase_movements: Tensor | None = None,
        movement_stats: Tensor | None = None,
    ) -> ShieldedOutput:
        out = self.controller(
            encoded, action_mask, phase_movements=phase_movements, movement_stats=movement_stats
        )
        cost = self.shield(encoded)
        rule = resolve_action_mask(action_mask, encoded.graph, self.controller.max_actions)
        with torch.no_grad():
            under = rule & (cost <= self.threshold)
            fallback = ~under.any(-1) & rule.any(-1)
            best = cost.masked_fill(~rule, math.inf).amin(-1, keepdim=True)
            cheapest = rule & (cost <= best)
            mask = torch.where(fallback[:, None], cheapest, under)
            if not rule.any(-1).all() and self.controller.config.debug:
                raise InvalidGraphError("`action_mask` has a row with no allowed action")
        logits = masked_logits(out.raw_logits, mask)
        return ShieldedOutput(
            logits=logits,
            mask=mask,
            rule_mask=rule,
            cost=cost,
            vetoed=rule & ~mask,
            fallback=fallback,
            controller=out,
        )
