"""RLlib ``TorchRLModule`` (new API stack) on the vehicle graph: tj-models' ``RiskGNN`` encoder and
Influence-Driven ``Controller`` (policy logits, value head, cost-value head).

One module is shared by all lights of a scenario: with ``EnvConfig(pad_to_scenario=True)`` every
light has the same observation and action space (``padding.py``). Each forward unpads the batch
into one graph batch (``unpad.py``), encodes it with the GNN and lets the controller score the
padded phases; ``action_mask`` (int8, read as ``.bool()``) masks the logits exactly (masked actions
get probability 0) without touching the input batch; that forward pass is the one ``Actor``'s
(``tj_rl.control.actor``), shared with ``AgentPolicy`` and phase 3. The GNN is frozen by default (the phase-2 row
of tj-models' ``PHASE_COMPONENTS``: no gradient, eval mode, run under ``no_grad``) and comes from a
phase-1 agent directory (``TrafficAgent.load``: checksum-verified safetensors) or random init.

Importing this module imports Ray and torch: ``tj_rl`` loads it only on first use of its names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.apis import ValueFunctionAPI
from ray.rllib.core.rl_module.multi_rl_module import MultiRLModuleSpec
from ray.rllib.core.rl_module.rl_module import RLModuleSpec
from ray.rllib.core.rl_module.torch import TorchRLModule
from torch import Tensor, nn

from tj_models import (
    PRESETS,
    Controller,
    ControllerConfig,
    RiskGNN,
    TrafficAgent,
    TrafficAgentConfig,
    config_from_dict,
    config_to_dict,
)
from tj_rl.control.actor import Actor, ActorOutput
from tj_rl.control.fit import check_features, check_spaces
from tj_rl.env.observation import LANE_FEATURES

__all__ = [
    "MODEL_CONFIG_KEY",
    "SHARED_POLICY",
    "GraphModuleConfig",
    "TrafficRLModule",
    "graph_module_spec",
    "shared_module_spec",
    "shared_policy_mapping",
]

SHARED_POLICY = "shared"  # module id of the policy all lights share
# RLlib merges its own keys (e.g. PPO's "vf_share_layers") into every module's model_config, so the
# module's configuration lives under one key of it and the rest is RLlib's.
MODEL_CONFIG_KEY = "tj_graph_module"


@dataclass(frozen=True, kw_only=True)
class GraphModuleConfig:
    """What ``TrafficRLModule`` builds (RLlib carries it as a plain dict under
    ``model_config[MODEL_CONFIG_KEY]``).

    ``preset``: tj-models size preset of the randomly initialised networks. ``gnn``: ``frozen``
    (phase 2 as designed) or ``finetune`` (trained with the controller). ``agent_dir``: a tj-models
    agent directory (phase 1's export) whose GNN weights and configuration are loaded; None: random
    init. ``controller``: the controller's configuration (None: the agent's, else the preset's).
    ``validate``: run tj-models' full input checks on every unpadded batch (one device sync).
    ``phase_inputs``: the controller's phase tokens read what each green serves (``phase_lanes``
    and the ``lanes`` rows: tj-models' ``ServedMovements``); needed to share one policy between
    lights whose greens serve different lanes, and what lets it learn fast on one light.
    ``load_controller``: also start from ``agent_dir``'s controller weights (a behaviour-cloned
    start, ``tj_rl.imitation``), not a freshly initialised controller.
    """

    preset: str = "tiny"
    gnn: Literal["frozen", "finetune"] = "frozen"
    agent_dir: str | None = None
    controller: ControllerConfig | None = None
    validate: bool = False
    phase_inputs: bool = True
    load_controller: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.load_controller, bool):
            raise ValueError(
                f"GraphModuleConfig.load_controller: {self.load_controller!r}, expected a bool"
            )
        if self.load_controller and self.agent_dir is None:
            raise ValueError("GraphModuleConfig.load_controller needs agent_dir (the clone)")
        if not isinstance(self.phase_inputs, bool):
            raise ValueError(f"GraphModuleConfig.phase_inputs: {self.phase_inputs!r}, expected a bool")
        if self.preset not in PRESETS:
            raise ValueError(
                f"GraphModuleConfig.preset: {self.preset!r}, expected one of {PRESETS}"
            )
        if self.gnn not in ("frozen", "finetune"):
            raise ValueError(
                f"GraphModuleConfig.gnn: {self.gnn!r}, expected 'frozen' or 'finetune'"
            )
        if self.agent_dir is not None:
            if not isinstance(self.agent_dir, str | Path) or not str(self.agent_dir):
                raise ValueError(
                    f"GraphModuleConfig.agent_dir: {self.agent_dir!r}, expected a directory path"
                )
            object.__setattr__(self, "agent_dir", str(self.agent_dir))
        if self.controller is not None and not isinstance(self.controller, ControllerConfig):
            raise ValueError(
                "GraphModuleConfig.controller: expected a tj_models.ControllerConfig or None, got "
                f"{type(self.controller).__name__}"
            )
        if not isinstance(self.validate, bool):
            raise ValueError(f"GraphModuleConfig.validate: {self.validate!r}, expected a bool")

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (RLlib's ``model_config``; stored in its checkpoints)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GraphModuleConfig:
        """Inverse of ``to_dict``; unknown keys are rejected with their dotted path."""
        return config_from_dict(cls, dict(data))


class TrafficRLModule(TorchRLModule, ValueFunctionAPI):
    """tj-models' GNN + Controller as an RLlib module (``GraphModuleConfig`` as a dict under
    ``model_config[MODEL_CONFIG_KEY]``; RLlib's own keys there are ignored).

    Outputs: ``action_dist_inputs`` (masked logits; RLlib's Categorical), and in ``forward_train``
    also ``embeddings`` (the value head's output of the same pass, which ``compute_values`` returns
    instead of running the networks again).
    """

    def setup(self) -> None:
        cfg = self.module_config = GraphModuleConfig.from_dict(
            (self.model_config or {}).get(MODEL_CONFIG_KEY, {})
        )
        n_actions, movements = check_spaces(self.observation_space, self.action_space)
        if cfg.agent_dir is not None:
            agent = TrafficAgent.load(cfg.agent_dir, map_location="cpu")
            gnn, base = agent.gnn, agent.config
            if movements > gnn.config.num_movements:
                raise ValueError(
                    f"GraphModuleConfig.agent_dir={cfg.agent_dir}: its GNN embeds "
                    f"{gnn.config.num_movements} movements, the env's observations have up to "
                    f"{movements} (lanes rows); set EnvConfig.max_lanes <= "
                    f"{gnn.config.num_movements} (rows beyond it are observed as movement -1)"
                )
            trained = agent.controller.state_dict() if cfg.load_controller else None
            del agent  # keep the encoder (and the controller's weights when asked)
        else:
            trained = None
            base = TrafficAgentConfig.preset(cfg.preset)
            gnn_cfg = base.gnn
            if movements > gnn_cfg.num_movements:  # the embedding grows with the lanes
                gnn_cfg = replace(gnn_cfg, num_movements=movements)
            gnn = RiskGNN(gnn_cfg)
        check_features(gnn.config, self.observation_space, "TrafficRLModule")
        self.gnn = gnn
        controller = cfg.controller or base.controller
        if cfg.phase_inputs and not controller.movement_stats:
            controller = replace(controller, movement_stats=len(LANE_FEATURES))
        elif not cfg.phase_inputs:
            controller = replace(controller, movement_stats=0)
        self.controller = Controller(controller, gnn=gnn.config, max_actions=n_actions)
        if cfg.agent_dir is not None and trained is not None:
            self.controller.load_state_dict(trained)  # strict: the clone's own networks
        self.frozen_gnn = cfg.gnn == "frozen"
        if self.frozen_gnn:
            self.gnn.requires_grad_(False)
            self.gnn.eval()
        # the one actor, over this module's own networks (a plain object: not registered twice)
        self.actor = Actor(self.gnn, self.controller, frozen_gnn=self.frozen_gnn,
                           validate=cfg.validate)  # fmt: skip
        self._no_mode_layers = not any(_mode_dependent(m) for m in self.modules())

    def train(self, mode: bool = True) -> TrafficRLModule:
        """As ``nn.Module.train``; a frozen GNN stays in eval mode (as in ``TrafficAgent``)."""
        super().train(mode)
        if getattr(self, "frozen_gnn", False):
            self.gnn.eval()
        return self

    # ------------------------------------------------------------------ forward passes
    def forward_exploration(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """RLlib's, without its eval/train flip around every sampling forward when no layer
        depends on the mode (the flip walks the module tree twice per env step: 22% of phase 2's
        sampling time measured on the tiny preset)."""
        if self._mode_free():
            return self._forward_exploration(batch, **kwargs)
        return super().forward_exploration(batch, **kwargs)

    def forward_inference(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        """As ``forward_exploration``: the flip is skipped when no layer depends on the mode."""
        if self._mode_free():
            return self._forward_inference(batch, **kwargs)
        return super().forward_inference(batch, **kwargs)

    def _mode_free(self) -> bool:
        """No dropout with p > 0 and no batch norm: train and eval mode compute the same."""
        return self._no_mode_layers

    def policy(self, obs: Mapping[str, Tensor]) -> ActorOutput:
        """The actor on a batch of padded observations (``batch[Columns.OBS]``)."""
        return self.actor.forward(obs)

    def _forward(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        return {Columns.ACTION_DIST_INPUTS: self.policy(batch[Columns.OBS]).logits}

    def _forward_train(self, batch: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        out = self.policy(batch[Columns.OBS])
        return {Columns.ACTION_DIST_INPUTS: out.logits, Columns.EMBEDDINGS: out.value}

    def compute_values(self, batch: dict[str, Any], embeddings: Any = None) -> Tensor:
        """Value estimates [B]: ``embeddings`` when ``forward_train`` gave them, else a pass."""
        if embeddings is not None:
            return embeddings
        return self.policy(batch[Columns.OBS]).value


def _mode_dependent(module: nn.Module) -> bool:
    """A layer whose output differs between train and eval mode."""
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return True
    if isinstance(module, nn.modules.dropout._DropoutNd | nn.Dropout):
        return module.p > 0
    if isinstance(module, nn.MultiheadAttention):
        return module.dropout > 0
    return False


# ---------------------------------------------------------------------- specs
def graph_module_spec(
    config: GraphModuleConfig | None = None,
    *,
    observation_space: gym.Space | None = None,
    action_space: gym.Space | None = None,
) -> RLModuleSpec:
    """``RLModuleSpec`` of ``TrafficRLModule`` (spaces None: RLlib takes them from the env)."""
    config = config if config is not None else GraphModuleConfig()
    if not isinstance(config, GraphModuleConfig):
        raise TypeError(f"expected a GraphModuleConfig, got {type(config).__name__}")
    return RLModuleSpec(
        module_class=TrafficRLModule,
        observation_space=observation_space,
        action_space=action_space,
        model_config={MODEL_CONFIG_KEY: config.to_dict()},
    )


def shared_module_spec(config: GraphModuleConfig | None = None) -> MultiRLModuleSpec:
    """One ``TrafficRLModule`` under ``SHARED_POLICY`` for all lights; pair it with
    ``multi_agent(policies={SHARED_POLICY}, policy_mapping_fn=shared_policy_mapping)``."""
    return MultiRLModuleSpec(rl_module_specs={SHARED_POLICY: graph_module_spec(config)})


def shared_policy_mapping(agent_id: Any, episode: Any = None, **kwargs: Any) -> str:
    """RLlib ``policy_mapping_fn``: every light -> ``SHARED_POLICY``."""
    return SHARED_POLICY
