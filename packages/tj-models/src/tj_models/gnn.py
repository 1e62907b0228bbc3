"""RiskGNN: edge-aware attention message passing over the vehicle graph, with a per-vehicle risk head.

Each layer is a pre-norm residual block around PyG's ``TransformerConv`` (multi-head attention whose
keys and values see the edge features: dx, dy, closing speed, inverse TTC) followed by a feed-forward
block. LayerNorm (per node) rather than BatchNorm keeps the network permutation-equivariant and
independent of batch composition, and empty graphs need no special case.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from torch_geometric.nn import TransformerConv

from tj_models.config import GNNConfig
from tj_models.graph import GraphInput, check_finite, read_graph

__all__ = ["DEFAULT_EDGE_SCALE", "DEFAULT_NODE_SCALE", "FeatureScaler", "GNNOutput", "RiskGNN"]

# Typical magnitudes of the snapshot features (m, m, m/s, m/s^2, 1, 1, m, s, m) and edge features
# (m, m, m/s, 1/s). Replace with dataset statistics through RiskGNN.set_feature_statistics.
DEFAULT_NODE_SCALE = (50.0, 50.0, 10.0, 3.0, 1.0, 1.0, 100.0, 60.0, 5.0)
DEFAULT_EDGE_SCALE = (50.0, 50.0, 10.0, 1.0)


class FeatureScaler(nn.Module):
    """``(x - mean) / std`` with the statistics stored as buffers (saved with the weights)."""

    def __init__(self, num_features: int, default_std: tuple[float, ...]) -> None:
        super().__init__()
        std = default_std if len(default_std) == num_features else (1.0,) * num_features
        self.register_buffer("mean", torch.zeros(num_features))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std

    @torch.no_grad()
    def set_statistics(self, mean: Tensor, std: Tensor, *, name: str) -> None:
        mean = torch.as_tensor(mean, dtype=torch.float32)
        std = torch.as_tensor(std, dtype=torch.float32)
        n = self.mean.shape[0]
        if mean.shape != (n,) or std.shape != (n,):
            raise ValueError(
                f"{name} statistics must have shape [{n}], got {tuple(mean.shape)}/{tuple(std.shape)}"
            )
        if not (torch.isfinite(mean).all() and torch.isfinite(std).all() and (std > 0).all()):
            raise ValueError(
                f"{name} statistics must be finite with std > 0, got std={std.tolist()}"
            )
        self.mean.copy_(mean)
        self.std.copy_(std)


class GraphBlock(nn.Module):
    """Pre-norm residual: ``h + attn(LN(h))`` then ``h + FFN(LN(h))``."""

    def __init__(self, config: GNNConfig) -> None:
        super().__init__()
        d = config.hidden_dim
        self.norm1 = nn.LayerNorm(d)
        self.conv = TransformerConv(
            d,
            d // config.heads,
            heads=config.heads,
            concat=True,
            dropout=config.dropout,
            edge_dim=config.edge_features,
            root_weight=True,
        )
        self.norm2 = nn.LayerNorm(d)
        self.ffn = nn.Sequential(
            nn.Linear(d, d * config.ffn_mult),
            nn.GELU(),
            nn.Dropout(config.dropout),
            nn.Linear(d * config.ffn_mult, d),
        )

    def forward(self, h: Tensor, edge_index: Tensor, edge_attr: Tensor) -> Tensor:
        h = h + self.conv(self.norm1(h), edge_index, edge_attr)
        return h + self.ffn(self.norm2(h))


@dataclass(frozen=True, slots=True)
class GNNOutput:
    """Node embeddings ``[N, D]``, per-vehicle risk logits ``[N]`` and the validated input graph."""

    node: Tensor
    risk_logit: Tensor
    graph: GraphInput


class RiskGNN(nn.Module):
    """Vehicle graph -> per-vehicle embeddings and risk logits (permutation-equivariant)."""

    def __init__(self, config: GNNConfig) -> None:
        super().__init__()
        self.config = config
        d = config.hidden_dim
        self.node_scaler = FeatureScaler(config.node_features, DEFAULT_NODE_SCALE)
        self.edge_scaler = FeatureScaler(config.edge_features, DEFAULT_EDGE_SCALE)
        self.input = nn.Linear(config.node_features, d)
        self.movement_embedding = nn.Embedding(config.num_movements + 1, d)  # row 0: no movement
        self.blocks = nn.ModuleList(GraphBlock(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(d)
        self.risk_head = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, 1))

    @property
    def out_dim(self) -> int:
        return self.config.hidden_dim

    def set_feature_statistics(
        self, node_mean: Tensor, node_std: Tensor, edge_mean: Tensor, edge_std: Tensor
    ) -> None:
        """Use dataset statistics (e.g. from a tj-data manifest) for input normalisation."""
        self.node_scaler.set_statistics(node_mean, node_std, name="node feature")
        self.edge_scaler.set_statistics(edge_mean, edge_std, name="edge feature")

    def read(self, graph: object, **kwargs: object) -> GraphInput:
        """Validate any PyG-named batch against this encoder's interface (see ``read_graph``)."""
        c = self.config
        return read_graph(
            graph,
            node_features=c.node_features,
            edge_features=c.edge_features,
            num_movements=c.num_movements,
            debug=c.debug,
            **kwargs,  # type: ignore[arg-type]
        )

    def forward(self, graph: object, *, checkpoint_layers: bool = False) -> GNNOutput:
        g = self.read(graph)
        h = self.input(self.node_scaler(g.x)) + self.movement_embedding(g.movement + 1)  # type: ignore[operator]
        edge_attr = self.edge_scaler(g.edge_attr)
        use_ckpt = checkpoint_layers and torch.is_grad_enabled() and h.requires_grad
        for block in self.blocks:
            if use_ckpt:
                h = checkpoint(block, h, g.edge_index, edge_attr, use_reentrant=False)
            else:
                h = block(h, g.edge_index, edge_attr)
        h = self.norm(h)
        risk = self.risk_head(h).squeeze(-1)
        if self.config.debug:
            check_finite("RiskGNN node embeddings", h)
            check_finite("RiskGNN risk logits", risk)
        return GNNOutput(node=h, risk_logit=risk, graph=g)
