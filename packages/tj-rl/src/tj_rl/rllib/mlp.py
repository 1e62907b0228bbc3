"""The benchmark's baseline policy: an MLP on the per-light ``lanes`` and ``phase`` features, no
vehicle graph (RLlib ``TorchRLModule`` on the new API stack, ``ValueFunctionAPI``).

What the graph policy must at least match on held-out traffic (issue 16: "the vehicle graph must
earn its keep"). Inputs: ``log1p`` of the ``lanes`` rows (``LANE_FEATURES``: halting, occupancy,
summed waiting time, arrivals; padded rows zeroed by ``lane_mask``) and the ``phase`` features;
separate policy and value MLPs; ``action_mask`` masks the logits exactly as the graph module does
(tj-models' ``masked_logits``).
Shared by all lights of one layout (its inputs are lane rows: lights whose rows mean different
movements need the graph module's ``phase_lanes``).

Imports Ray and torch: ``tj_rl`` loads it only on first use of its names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import Tensor, nn

from tj_models import config_from_dict, config_to_dict, masked_logits
from tj_rl.rllib.module import SHARED_POLICY

__all__ = ["MLP_CONFIG_KEY", "LaneMLPConfig", "LaneMLPModule", "lane_mlp_spec"]

MLP_CONFIG_KEY = "tj_lane_mlp"


@dataclass(frozen=True, kw_only=True)
class LaneMLPConfig:
    """Hidden layer widths of the policy and value MLPs (the issue's calibration: 2 x 64)."""

    hidden: tuple[int, ...] = (64, 64)

    def __post_init__(self) -> None:
        hidden = tuple(self.hidden)
        if not hidden or any(not isinstance(h, int) or h < 1 for h in hidden):
            raise ValueError(f"LaneMLPConfig.hidden: {self.hidden!r}, expected ints >= 1")
        object.__setattr__(self, "hidden", hidden)

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LaneMLPConfig:
        return config_from_dict(cls, dict(data))


def _mlp(n_in: int, hidden: tuple[int, ...], n_out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(n_in, h), nn.Tanh()]
        n_in = h
    return nn.Sequential(*layers, nn.Linear(n_in, n_out))


class LaneMLPModule(TorchRLModule, ValueFunctionAPI):
    """MLP policy + value on ``lanes`` and ``phase`` (config under ``model_config[MLP_CONFIG_KEY]``)."""

    def setup(self) -> None:
        cfg = LaneMLPConfig.from_dict((self.model_config or {}).get(MLP_CONFIG_KEY, {}))
        space = self.observation_space
        lanes, phase = space["lanes"].shape, space["phase"].shape
        n_in = lanes[0] * lanes[1] + phase[0]
        self.pi = _mlp(n_in, cfg.hidden, int(self.action_space.n))
        self.vf = _mlp(n_in, cfg.hidden, 1)

    @staticmethod
    def features(obs: Mapping[str, Tensor]) -> Tensor:
        lanes = obs["lanes"].float().clamp(min=0).log1p() * obs["lane_mask"].unsqueeze(-1).float()
        return torch.cat([lanes.flatten(1), obs["phase"].float()], dim=-1)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        obs = batch[Columns.OBS]
        logits = masked_logits(self.pi(self.features(obs)), obs["action_mask"].bool())
        return {Columns.ACTION_DIST_INPUTS: logits}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Tensor:
        return self.vf(self.features(batch[Columns.OBS])).squeeze(-1)


def lane_mlp_spec(config: LaneMLPConfig | None = None) -> MultiRLModuleSpec:
    """One ``LaneMLPModule`` under ``SHARED_POLICY`` for all lights (as ``shared_module_spec``)."""
    config = config if config is not None else LaneMLPConfig()
    spec = RLModuleSpec(module_class=LaneMLPModule,
                        model_config={MLP_CONFIG_KEY: config.to_dict()})  # fmt: skip
    return MultiRLModuleSpec(rl_module_specs={SHARED_POLICY: spec})
