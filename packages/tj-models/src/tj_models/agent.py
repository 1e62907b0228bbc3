"""TrafficAgent: the four networks, what each training phase trains, and persistence.

Ownership: the ``WorldModel`` owns the ``RiskGNN`` as its ``encoder`` (``agent.gnn`` is the same
module), so ``DistributedDataParallel(agent.world_model)`` is the whole phase-1 model and the state
dict has no tied duplicates. The controller and shield read the same encoder's output.

| phase | trains | frozen (requires_grad False, eval mode) |
|---|---|---|
| 1 world-model pretraining | gnn, world_model | controller, shield |
| 2 safe RL | controller | gnn, world_model, shield |
| 3 constrained optimisation | controller, shield | gnn, world_model |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import torch
from torch import Tensor, nn

from tj_models.checkpoint import CheckpointError, read_checkpoint, write_checkpoint
from tj_models.config import TrafficAgentConfig
from tj_models.controller import Controller, ControllerOutput
from tj_models.gnn import GNNOutput, RiskGNN
from tj_models.shield import SafetyShield, ShieldedPolicy
from tj_models.world_model import WorldModel, WorldModelOutput

__all__ = ["COMPONENTS", "PHASE_COMPONENTS", "TrafficAgent"]

COMPONENTS = ("gnn", "world_model", "controller", "shield")
PHASE_COMPONENTS: dict[int, tuple[str, ...]] = {
    1: ("gnn", "world_model"),
    2: ("controller",),
    3: ("controller", "shield"),
}


class TrafficAgent(nn.Module):
    """RiskGNN + WorldModel + Controller + SafetyShield with phase-aware freezing."""

    def __init__(self, config: TrafficAgentConfig) -> None:
        super().__init__()
        if not isinstance(config, TrafficAgentConfig):
            raise TypeError(f"config must be a TrafficAgentConfig, got {type(config).__name__}")
        self.config = config
        gnn = RiskGNN(config.gnn)
        self.world_model = WorldModel(
            config.world_model, encoder=gnn, max_actions=config.max_actions
        )
        self.controller = Controller(
            config.controller, gnn=config.gnn, max_actions=config.max_actions
        )
        self.shield = SafetyShield(config.shield, gnn=config.gnn, max_actions=config.max_actions)
        self._frozen: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, config: TrafficAgentConfig | dict) -> TrafficAgent:
        if isinstance(config, dict):
            config = TrafficAgentConfig.from_dict(config)
        return cls(config)

    @classmethod
    def preset(cls, name: str, **kwargs: object) -> TrafficAgent:
        return cls(TrafficAgentConfig.preset(name, **kwargs))  # type: ignore[arg-type]

    @property
    def gnn(self) -> RiskGNN:
        return self.world_model.encoder

    # ------------------------------------------------------------------ parameters and phases
    def component_parameters(self, name: str) -> list[nn.Parameter]:
        """Parameters of one component; ``world_model`` excludes its encoder (the ``gnn``)."""
        if name == "gnn":
            return list(self.gnn.parameters())
        if name == "world_model":
            encoder = {id(p) for p in self.gnn.parameters()}
            return [p for p in self.world_model.parameters() if id(p) not in encoder]
        if name == "controller":
            return list(self.controller.parameters())
        if name == "shield":
            return list(self.shield.parameters())
        raise ValueError(f"unknown component {name!r}; expected one of {COMPONENTS}")

    def parameter_counts(self) -> dict[str, int]:
        counts = {n: sum(p.numel() for p in self.component_parameters(n)) for n in COMPONENTS}
        counts["total"] = sum(counts.values())
        return counts

    @staticmethod
    def _check_phase(phase: int) -> tuple[str, ...]:
        if phase not in PHASE_COMPONENTS:
            raise ValueError(
                f"unknown training phase {phase!r}; expected one of {sorted(PHASE_COMPONENTS)}"
            )
        return PHASE_COMPONENTS[phase]

    def phase_parameters(self, phase: int) -> list[nn.Parameter]:
        """The parameters training phase ``phase`` (1, 2 or 3) optimises."""
        return [p for name in self._check_phase(phase) for p in self.component_parameters(name)]

    def freeze_for_phase(self, phase: int) -> list[nn.Parameter]:
        """Make exactly ``phase_parameters(phase)`` trainable; frozen components go to eval mode
        (and stay there across ``train()``). Returns the trainable parameters."""
        trained = self._check_phase(phase)
        for name in COMPONENTS:
            for p in self.component_parameters(name):
                p.requires_grad_(name in trained)
        self._frozen = frozenset(n for n in COMPONENTS if n not in trained)
        self.train(self.training)
        return self.phase_parameters(phase)

    def unfreeze(self) -> None:
        for p in self.parameters():
            p.requires_grad_(True)
        self._frozen = frozenset()
        self.train(self.training)

    def train(self, mode: bool = True) -> TrafficAgent:
        super().train(mode)
        modules = {
            "gnn": self.gnn,
            "world_model": self.world_model,
            "controller": self.controller,
            "shield": self.shield,
        }
        for name in self._frozen:
            modules[name].eval()
        return self

    def set_activation_checkpointing(self, enabled: bool) -> None:
        """Recompute the world model's GNN layers in backward instead of storing activations."""
        self.world_model.config = replace(self.world_model.config, activation_checkpointing=enabled)
        self.config = replace(self.config, world_model=self.world_model.config)

    # ------------------------------------------------------------------ forward helpers
    def encode(self, graph: object) -> GNNOutput:
        return self.gnn(graph)

    def predict(
        self, window: Sequence[object], *, input_steps: int | None = None, horizon: int = 1
    ) -> WorldModelOutput:
        return self.world_model(window, input_steps=input_steps, horizon=horizon)

    def policy(
        self,
        graph: object,
        action_mask: Tensor | None = None,
        *,
        phase_movements: Tensor | None = None,
        movement_stats: Tensor | None = None,
    ) -> ControllerOutput:
        """Controller on the encoded graph (the two keyword inputs: ``Controller.forward``)."""
        return self.controller(
            self.encode(graph),
            action_mask,
            phase_movements=phase_movements,
            movement_stats=movement_stats,
        )

    def shielded_policy(self, threshold: float) -> ShieldedPolicy:
        """A ShieldedPolicy sharing this agent's controller and shield (no copy)."""
        return ShieldedPolicy(self.controller, self.shield, threshold=threshold)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> Path:
        """Write ``config.json`` + ``model.safetensors`` into ``directory`` (atomically)."""
        return write_checkpoint(directory, self.config.to_dict(), self.state_dict())

    @classmethod
    def load(
        cls, directory: str | Path, *, map_location: str | torch.device = "cpu"
    ) -> TrafficAgent:
        """Rebuild from ``config.json`` and load the weights (no pickle; checksum verified)."""
        config, state, path = read_checkpoint(directory, map_location=map_location)
        try:
            agent = cls(TrafficAgentConfig.from_dict(config))
        except ValueError as exc:
            raise CheckpointError(f"{path.parent / 'config.json'}: {exc}") from exc
        try:
            agent.load_state_dict(state, strict=True)
        except RuntimeError as exc:
            raise CheckpointError(f"{path}: weights do not fit the config: {exc}") from exc
        return agent.to(map_location)
