"""Controller: learned phase queries attend over vehicle embeddings, weighted by vehicle influence.

Each candidate phase (action) is a token: a learned query plus the signal state (current phase,
time in phase) and its place in program order after the current phase (``(j - current) mod``
the light's green count: without it a clone of a fixed cycle cannot tell which green comes next). Tokens cross-attend over the vehicles of their intersection with scores
``q.k / sqrt(d) + log(influence)``, i.e. attention proportional to ``influence * exp(q.k)``; the
influence of a vehicle is ``a * p(risk) + b * delay + softplus(mlp(h))`` with learned positive
``a, b`` (risk and delay contributions stay readable). Tokens then attend to each other. Outputs:
one logit per action (soft-capped, masked by ``action_mask``), a value and a cost value (phase 3).
With ``ControllerConfig.movement_stats > 0`` each token also reads what its green serves
(``served.py``: phase competition), so one controller fits intersections of different layouts.

Masking: a masked logit is set to ``MASK_FILL = -1e4``. Valid logits are soft-capped to
``(-cap, cap)`` with ``cap <= 1000``, so ``exp(MASK_FILL - max)`` underflows to exactly 0 in fp16,
bf16 and fp32, and the fill stays finite in fp16 (no ``-inf``, so no ``0 * inf = NaN`` in entropy
or KL). A row with no valid action becomes uniform over its actions (debug mode raises instead).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter, softmax

from tj_models.config import ControllerConfig, GNNConfig
from tj_models.gnn import GNNOutput
from tj_models.graph import GraphInput, InvalidGraphError, check_finite
from tj_models.served import ServedMovements

__all__ = [
    "MASK_FILL",
    "Controller",
    "ControllerOutput",
    "check_signal",
    "masked_logits",
    "resolve_action_mask",
]

MASK_FILL = -1.0e4


def check_signal(graph: GraphInput, max_actions: int, who: str) -> None:
    """Require ``phase`` in [-1, max_actions) and ``time_in_phase`` on the batch (one sync)."""
    if graph.phase is None or graph.time_in_phase is None:
        raise InvalidGraphError(f"{who} needs per-graph `phase` and `time_in_phase` in the batch")
    if graph.num_graphs and not bool(((graph.phase >= -1) & (graph.phase < max_actions)).all()):
        raise InvalidGraphError(f"`phase` must be in [-1, max_actions={max_actions})")


def resolve_action_mask(action_mask: Tensor | None, graph: GraphInput, max_actions: int) -> Tensor:
    """``[B, max_actions]`` bool: the given mask (narrower masks are padded with False), else
    ``arange(max_actions) < phase_count`` when the batch has ``phase_count``, else all True."""
    b = graph.num_graphs
    device = graph.x.device
    if action_mask is None:
        if graph.phase_count is not None:
            return torch.arange(max_actions, device=device)[None] < graph.phase_count[:, None]
        return torch.ones(b, max_actions, dtype=torch.bool, device=device)
    if action_mask.dim() != 2 or action_mask.shape[0] != b or action_mask.shape[1] > max_actions:
        raise InvalidGraphError(
            f"`action_mask` must have shape [B={b}, n_actions <= {max_actions}], got "
            f"{tuple(action_mask.shape)}"
        )
    mask = action_mask.to(device=device, dtype=torch.bool)
    if mask.shape[1] < max_actions:
        mask = F.pad(mask, (0, max_actions - mask.shape[1]), value=False)
    return mask


def masked_logits(logits: Tensor, mask: Tensor, *, debug: bool = False) -> Tensor:
    """fp32 logits with masked actions at ``MASK_FILL`` (exactly zero probability)."""
    if debug and not bool(mask.any(-1).all()):
        rows = (~mask.any(-1)).nonzero().flatten().tolist()
        raise InvalidGraphError(f"`action_mask` rows {rows} allow no action")
    return logits.float().masked_fill(~mask, MASK_FILL)


@dataclass(frozen=True, slots=True)
class ControllerOutput:
    logits: Tensor  # [B, A] fp32, masked
    raw_logits: Tensor  # [B, A] fp32, soft-capped, unmasked (ShieldedPolicy re-masks these)
    action_mask: Tensor  # [B, A] bool as applied
    value: Tensor  # [B]
    cost_value: Tensor  # [B]
    influence: Tensor  # [N] per-vehicle influence score (> 0)
    attention: Tensor  # [N, A] attention of each action over its vehicles (mean over heads)


def _value_head(d_in: int, hidden: int) -> nn.Sequential:
    return nn.Sequential(
        nn.Linear(d_in, hidden),
        nn.GELU(),
        nn.Linear(hidden, hidden // 2),
        nn.GELU(),
        nn.Linear(hidden // 2, 1),
    )


class _TokenLayer(nn.Module):
    """Influence-weighted cross-attention over vehicles, self-attention over tokens, FFN."""

    def __init__(self, d: int, heads: int, ffn_mult: int, dropout: float) -> None:
        super().__init__()
        self.heads, self.dh = heads, d // heads
        self.norm_q = nn.LayerNorm(d)
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.out = nn.Linear(d, d)
        self.norm_s = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, heads, dropout=dropout, batch_first=True)
        self.norm_f = nn.LayerNorm(d)
        self.ffn = nn.Sequential(nn.Linear(d, d * ffn_mult), nn.GELU(), nn.Linear(d * ffn_mult, d))

    def forward(
        self, tokens: Tensor, u: Tensor, log_infl: Tensor, batch: Tensor, token_mask: Tensor
    ) -> tuple[Tensor, Tensor]:
        b, a, d = tokens.shape
        q = self.q(self.norm_q(tokens)).view(b, a, self.heads, self.dh)
        k = self.k(u).view(-1, self.heads, self.dh)
        v = self.v(u).view(-1, self.heads, self.dh)
        scores = (q[batch] * k[:, None]).sum(-1).float() / math.sqrt(self.dh)  # [N, A, H]
        scores = scores + log_infl[:, None, None]
        alpha = softmax(scores, batch, num_nodes=b, dim=0)  # over the vehicles of each graph
        msg = alpha[..., None].to(v.dtype) * v[:, None]  # [N, A, H, dh]
        ctx = scatter(msg, batch, dim=0, dim_size=b, reduce="sum").reshape(b, a, d)
        tokens = tokens + self.out(ctx)
        x = self.norm_s(tokens)
        attended, _ = self.self_attn(x, x, x, key_padding_mask=~token_mask, need_weights=False)
        tokens = tokens + attended
        return tokens + self.ffn(self.norm_f(tokens)), alpha.mean(-1)


def _program_order(g: GraphInput, a: int) -> Tensor:
    """int64 [B, a]: 1 + (j - current) mod the light's green count (``phase_count``, else ``a``)
    for every action j; 0 where the graph has no current green."""
    phase = g.phase  # type: ignore[union-attr]
    count = g.phase_count.clamp(min=1) if g.phase_count is not None else torch.full_like(phase, a)
    j = torch.arange(a, device=phase.device)[None]
    offset = torch.remainder(j - phase[:, None], count[:, None]) + 1
    return torch.where(phase[:, None] >= 0, offset, torch.zeros_like(offset))


class Controller(nn.Module):
    """``forward(encoded: GNNOutput, action_mask) -> ControllerOutput`` (policy for phase 2/3)."""

    def __init__(self, config: ControllerConfig, *, gnn: GNNConfig, max_actions: int) -> None:
        super().__init__()
        self.config, self.gnn_config, self.max_actions = config, gnn, max_actions
        d = config.hidden_dim
        vin = gnn.hidden_dim + 3  # embedding, p(risk), delay, speed
        self.vehicle = nn.Sequential(
            nn.Linear(vin, 2 * d), nn.GELU(), nn.Linear(2 * d, d), nn.LayerNorm(d)
        )
        self.influence_mlp = nn.Sequential(nn.Linear(vin, d // 2), nn.GELU(), nn.Linear(d // 2, 1))
        self.log_risk_gain = nn.Parameter(torch.zeros(()))
        self.log_delay_gain = nn.Parameter(torch.zeros(()))
        self.queries = nn.Parameter(torch.randn(max_actions, d) * 0.02)
        self.phase_embedding = nn.Embedding(max_actions + 1, d)  # row 0: no current phase
        self.time_proj = nn.Linear(2, d)
        self.current_flag = nn.Parameter(torch.zeros(d))
        # each green's distance after the current one in program order (row 0: no current green);
        # zeros, so it draws no random numbers (a seed builds the same other weights as before)
        # and a state dict saved without it loads as exactly the controller it was
        self.order_embedding = nn.Parameter(torch.zeros(max_actions + 1, d))
        self.served = (
            ServedMovements(d, config.movement_stats, max_actions) if config.movement_stats else None
        )
        self.layers = nn.ModuleList(
            _TokenLayer(d, config.heads, config.ffn_mult, config.dropout)
            for _ in range(config.num_layers)
        )
        self.norm = nn.LayerNorm(d)
        self.logit_head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))
        self.value_head = _value_head(2 * d, config.value_hidden)
        self.cost_value_head = _value_head(2 * d, config.value_hidden)

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        # a controller saved before ``order_embedding`` (tj-models < 0.4.1) had none: zeros are
        # exactly that controller, so strict loads of old agents and checkpoints still work
        key = prefix + "order_embedding"
        if key not in state_dict:
            state_dict[key] = torch.zeros_like(self.order_embedding)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(
        self,
        encoded: GNNOutput,
        action_mask: Tensor | None = None,
        *,
        phase_movements: Tensor | None = None,
        movement_stats: Tensor | None = None,
    ) -> ControllerOutput:
        """Policy over ``max_actions`` phases for every graph of ``encoded``.

        Reads ``phase`` and ``time_in_phase`` from the encoded batch; ``action_mask`` ``[B, <=A]``
        (bool) defaults to the first ``phase_count`` actions when the batch has ``phase_count``.
        ``phase_movements`` [B, <=A, M] (signed) and ``movement_stats`` [B, M, k] are required
        exactly when the config's ``movement_stats`` is k > 0 (``served.py``).
        """
        c, layout = self.config, self.gnn_config.layout
        g = encoded.graph
        check_signal(g, self.max_actions, "Controller")
        b, a = g.num_graphs, self.max_actions
        mask = resolve_action_mask(action_mask, g, a)
        risk_p = torch.sigmoid(encoded.risk_logit.float())
        delay = (g.x[:, layout.waiting_time] / c.delay_scale).clamp(min=0.0)
        speed = g.x[:, layout.speed] / c.speed_scale
        feats = torch.cat([encoded.node, risk_p[:, None], delay[:, None], speed[:, None]], dim=-1)
        u = self.vehicle(feats)
        learned = F.softplus(self.influence_mlp(feats).float().squeeze(-1))
        influence = (
            self.log_risk_gain.exp() * risk_p + self.log_delay_gain.exp() * delay + learned + 1e-4
        )
        tip = g.time_in_phase.clamp(min=0.0)  # type: ignore[union-attr]
        time_feats = torch.stack(
            [tip / c.time_scale, torch.log1p(tip) / math.log1p(c.time_scale)], -1
        )
        state = self.phase_embedding(g.phase + 1) + self.time_proj(time_feats)  # type: ignore[operator]
        is_current = (torch.arange(a, device=mask.device)[None] == g.phase[:, None]).to(state.dtype)  # type: ignore[index]
        tokens = self.queries[None] + state[:, None] + is_current[..., None] * self.current_flag
        tokens = tokens + self.order_embedding[_program_order(g, a)].to(tokens.dtype)
        if self.served is not None:
            if phase_movements is None or movement_stats is None or g.movement is None:
                raise InvalidGraphError(
                    f"Controller(movement_stats={c.movement_stats}) needs `phase_movements`, "
                    "`movement_stats` and the batch's per-vehicle `movement`"
                )
            tokens = tokens + self.served(
                u, g.batch, g.movement, phase_movements, movement_stats
            ).to(tokens.dtype)
        elif phase_movements is not None or movement_stats is not None:
            raise InvalidGraphError(
                "Controller: phase_movements/movement_stats given but ControllerConfig."
                "movement_stats is 0 (the controller would ignore them)"
            )
        token_mask = mask | ~mask.any(-1, keepdim=True)  # a row with no valid action attends to all
        log_infl = influence.log()
        attention = u.new_zeros(u.shape[0], a)
        for layer in self.layers:
            tokens, attention = layer(tokens, u, log_infl, g.batch, token_mask)
        tokens = self.norm(tokens)
        cap = c.logit_cap
        raw = cap * torch.tanh(self.logit_head(tokens).squeeze(-1).float() / cap)
        logits = masked_logits(raw, mask, debug=c.debug)
        w = token_mask.to(tokens.dtype)[..., None]
        pooled_tokens = (tokens * w).sum(1) / w.sum(1)
        pooled_nodes = scatter(u, g.batch, dim=0, dim_size=b, reduce="mean")
        summary = torch.cat([pooled_tokens, pooled_nodes.to(pooled_tokens.dtype)], dim=-1)
        value = self.value_head(summary).squeeze(-1).float()
        cost_value = self.cost_value_head(summary).squeeze(-1).float()
        out = ControllerOutput(
            logits=logits,
            raw_logits=raw,
            action_mask=mask,
            value=value,
            cost_value=cost_value,
            influence=influence,
            attention=attention.float(),
        )
        if c.debug:
            for name in ("raw_logits", "value", "cost_value", "influence"):
                check_finite(f"Controller `{name}`", getattr(out, name))
        return out
