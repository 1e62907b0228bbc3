"""What each candidate phase serves, as a token input: phase competition for the ``Controller``.

A learned query per action index cannot know what green ``a`` does at this intersection: the same
index serves different movements at different lights. ``ServedMovements`` gives every phase token
the state of the movements its green serves, from two sources:

- per-movement statistics (the caller's, e.g. halting vehicles, occupancy, summed waiting time of
  every movement, exact counts before any node cap): summed separately over the movements the green
  serves (``phase_movements > 0``: incoming lanes) and feeds (``< 0``: outgoing lanes), ``log1p``;
- the vehicles of the graph: the mean embedding of the vehicles on served and on fed movements.

``phase_movements`` [B, A', M] is signed (+1 served incoming, -1 fed outgoing, 0 otherwise), as in
max-pressure: served minus fed is the green's pressure. Vehicles with movement -1 count nowhere.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.utils import scatter

from tj_models.graph import InvalidGraphError

__all__ = ["ServedMovements"]


class ServedMovements(nn.Module):
    """``forward(u, batch, movement, phase_movements, movement_stats) -> [B, A, d]``."""

    def __init__(self, d: int, stats: int, max_actions: int) -> None:
        super().__init__()
        self.stats, self.max_actions = stats, max_actions
        self.stat_proj = nn.Sequential(nn.Linear(2 * stats, d), nn.GELU(), nn.Linear(d, d))
        self.vehicle_proj = nn.Linear(2 * d, d)

    def forward(
        self,
        u: Tensor,
        batch: Tensor,
        movement: Tensor,
        phase_movements: Tensor,
        movement_stats: Tensor,
    ) -> Tensor:
        b, a = movement_stats.shape[0], self.max_actions
        if phase_movements.dim() != 3 or phase_movements.shape[0] != b:
            raise InvalidGraphError(
                f"`phase_movements` must be [B={b}, A, M], got {tuple(phase_movements.shape)}"
            )
        m = phase_movements.shape[2]
        if movement_stats.shape[1:] != (m, self.stats):
            raise InvalidGraphError(
                f"`movement_stats` must be [B, M={m}, {self.stats}], got "
                f"{tuple(movement_stats.shape)}"
            )
        pm = phase_movements.to(u.dtype)
        if pm.shape[1] < a:
            pm = F.pad(pm, (0, 0, 0, a - pm.shape[1]))
        elif pm.shape[1] > a:
            raise InvalidGraphError(f"`phase_movements` has more than {a} actions")
        served, fed = pm.clamp(min=0), (-pm).clamp(min=0)  # [B, A, M]
        stats = movement_stats.to(u.dtype).clamp(min=0)
        stat_feats = torch.cat([served @ stats, fed @ stats], -1).log1p()  # [B, A, 2k]
        out = self.stat_proj(stat_feats)
        # each vehicle's weight for each action: its movement's entry in the action's row
        real = movement >= 0
        row = pm[batch, :, movement.clamp(0, m - 1)] * real[:, None].to(pm.dtype)  # [N, A]
        pooled = []
        for w in (row.clamp(min=0), (-row).clamp(min=0)):
            total = scatter(w[..., None] * u[:, None], batch, dim=0, dim_size=b, reduce="sum")
            count = scatter(w, batch, dim=0, dim_size=b, reduce="sum")  # [B, A]
            pooled.append(total / count.clamp(min=1.0)[..., None])
        return out + self.vehicle_proj(torch.cat(pooled, -1))
