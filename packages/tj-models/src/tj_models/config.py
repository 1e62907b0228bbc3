"""Typed, validated configurations of the four networks, the size presets and dict round trips.

Every config is a frozen ``@dataclass(kw_only=True)`` checked in ``__post_init__``; messages name the
field, the value and what is allowed. ``to_dict``/``from_dict`` give a JSON-able round trip that
rejects unknown keys with their full dotted path (the checkpoint's ``config.json`` uses it).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

__all__ = [
    "PRESETS",
    "ControllerConfig",
    "FeatureLayout",
    "GNNConfig",
    "RolloutConfig",
    "ShieldConfig",
    "TrafficAgentConfig",
    "WorldModelConfig",
    "config_from_dict",
    "config_to_dict",
]

PRESETS = ("tiny", "normal", "large")


def _positive(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be a positive int, got {value!r}")


def _positive_float(obj: object, *names: str) -> None:
    for name in names:
        value = getattr(obj, name)
        if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
            raise ValueError(f"{type(obj).__name__}.{name} must be a number > 0, got {value!r}")


def _fraction(obj: object, name: str) -> None:
    value = getattr(obj, name)
    if not isinstance(value, int | float) or not 0.0 <= value < 1.0:
        raise ValueError(f"{type(obj).__name__}.{name} must be in [0, 1), got {value!r}")


def _divisible(obj: object, dim: str, heads: str) -> None:
    if getattr(obj, dim) % getattr(obj, heads):
        raise ValueError(
            f"{type(obj).__name__}.{dim}={getattr(obj, dim)} must be divisible by "
            f"{heads}={getattr(obj, heads)}"
        )


@dataclass(kw_only=True, frozen=True)
class FeatureLayout:
    """Column of each named node feature in ``x`` (defaults: the traffic snapshot of ARCHITECTURE)."""

    rel_x: int = 0
    rel_y: int = 1
    speed: int = 2
    accel: int = 3
    heading_sin: int = 4
    heading_cos: int = 5
    dist_to_stop_line: int = 6
    waiting_time: int = 7
    length: int = 8

    def __post_init__(self) -> None:
        cols = dataclasses.astuple(self)
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise ValueError(f"FeatureLayout.{f.name} must be an int >= 0, got {v!r}")
        if len(set(cols)) != len(cols):
            raise ValueError(
                f"FeatureLayout columns must be distinct, got {dataclasses.asdict(self)}"
            )

    @property
    def max_column(self) -> int:
        return max(dataclasses.astuple(self))


@dataclass(kw_only=True, frozen=True)
class GNNConfig:
    """RiskGNN: the graph interface (feature counts, movement groups, layout) and the encoder."""

    node_features: int = 9
    edge_features: int = 4
    num_movements: int = 16
    layout: FeatureLayout = field(default_factory=FeatureLayout)
    hidden_dim: int = 256
    num_layers: int = 3
    heads: int = 4
    ffn_mult: int = 4
    dropout: float = 0.0
    debug: bool = False

    def __post_init__(self) -> None:
        _positive(self, "node_features", "edge_features", "num_movements", "hidden_dim")
        _positive(self, "num_layers", "heads", "ffn_mult")
        _divisible(self, "hidden_dim", "heads")
        _fraction(self, "dropout")
        if self.layout.max_column >= self.node_features:
            raise ValueError(
                f"GNNConfig.layout names column {self.layout.max_column} but node_features="
                f"{self.node_features}"
            )


@dataclass(kw_only=True, frozen=True)
class RolloutConfig:
    """How a predicted step is turned back into a graph for the next rollout step.

    The geometry must be the one the training snapshots were recorded with: the defaults are
    tj-rl's (``GraphConfig``: ``edge_radius``, ``k_nearest`` -> ``max_neighbors``,
    ``conflict_distance``; math heading), and a trainer passes tj-rl's values in.
    """

    edge_radius: float = 30.0  # m: vehicles at most this far apart are connected
    max_neighbors: int = 4  # incoming edges kept per vehicle (nearest first); 0 = no cap
    conflict_distance: float = 2.5  # m: closest approach below this = collision course (inv TTC)
    heading: Literal["sumo", "math"] = "math"  # math: 0 = +x, ccw (tj-rl); sumo: 0 = +y, clockwise
    presence_threshold: float = 0.5  # vehicles below this predicted presence leave the graph

    def __post_init__(self) -> None:
        _positive_float(self, "edge_radius", "conflict_distance")
        if isinstance(self.max_neighbors, bool) or not isinstance(self.max_neighbors, int):
            raise ValueError(
                f"RolloutConfig.max_neighbors must be an int, got {self.max_neighbors!r}"
            )
        if self.max_neighbors < 0:
            raise ValueError(f"RolloutConfig.max_neighbors must be >= 0, got {self.max_neighbors}")
        if self.heading not in ("sumo", "math"):
            raise ValueError(
                f"RolloutConfig.heading must be 'sumo' or 'math', got {self.heading!r}"
            )
        if not 0.0 < self.presence_threshold < 1.0:
            raise ValueError(
                f"RolloutConfig.presence_threshold must be in (0, 1), got {self.presence_threshold!r}"
            )


@dataclass(kw_only=True, frozen=True)
class WorldModelConfig:
    """WorldModel: step summaries, graph LSTM, per-vehicle track LSTM and the decoders."""

    summary_dim: int = 512
    lstm_hidden: int = 512
    lstm_layers: int = 2
    track_hidden: int = 256
    movement_dim: int = 64
    signal_dim: int = 32
    decoder_hidden: int = 512
    use_signal_state: bool = True  # read `phase` / `time_in_phase` of every step
    physics_prior: bool = True  # predict the residual on top of constant-velocity motion
    decision_interval: float = 5.0  # s between steps: initial value of the prior's learned step
    time_scale: float = 60.0  # s: time_in_phase is divided by this
    count_scale: float = 10.0  # vehicles: counts/queues are divided by this
    queue_speed: float = 0.1  # m/s: a vehicle slower than this is queued (SUMO's halting speed)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    activation_checkpointing: bool = False
    debug: bool = False

    def __post_init__(self) -> None:
        _positive(self, "summary_dim", "lstm_hidden", "lstm_layers", "track_hidden")
        _positive(self, "movement_dim", "signal_dim", "decoder_hidden")
        _positive_float(self, "time_scale", "count_scale", "queue_speed", "decision_interval")


@dataclass(kw_only=True, frozen=True)
class ControllerConfig:
    """Controller: influence-weighted phase-query attention, policy, value and cost-value heads."""

    hidden_dim: int = 256
    heads: int = 8
    num_layers: int = 2
    ffn_mult: int = 4
    value_hidden: int = 512
    logit_cap: float = 30.0  # logits are soft-capped to (-cap, cap) so masking stays exact
    delay_scale: float = 60.0  # s: waiting time is divided by this in the influence score
    speed_scale: float = 10.0  # m/s
    time_scale: float = 60.0  # s: time_in_phase is divided by this
    # Phase competition: > 0 makes every phase token also read what its green serves (the
    # caller's ``phase_movements`` [B, A, M] and per-movement statistics [B, M, movement_stats]);
    # 0: tokens know only their index and the signal state (one intersection layout).
    movement_stats: int = 0
    dropout: float = 0.0
    debug: bool = False

    def __post_init__(self) -> None:
        _positive(self, "hidden_dim", "heads", "num_layers", "ffn_mult", "value_hidden")
        if not isinstance(self.movement_stats, int) or self.movement_stats < 0:
            raise ValueError(
                f"ControllerConfig.movement_stats must be an int >= 0, got {self.movement_stats!r}"
            )
        _divisible(self, "hidden_dim", "heads")
        _positive_float(self, "delay_scale", "speed_scale", "time_scale")
        if not 0 < self.logit_cap <= 1000:
            raise ValueError(
                f"ControllerConfig.logit_cap must be in (0, 1000], got {self.logit_cap}"
            )
        _fraction(self, "dropout")


@dataclass(kw_only=True, frozen=True)
class ShieldConfig:
    """SafetyShield: per-action expected safety-cost critic."""

    hidden_dim: int = 512
    action_dim: int = 128
    movement_dim: int = 32
    num_layers: int = 2
    time_scale: float = 60.0  # s
    count_scale: float = 10.0  # vehicles
    nonnegative: bool = True  # softplus output: safety costs are >= 0
    debug: bool = False

    def __post_init__(self) -> None:
        _positive(self, "hidden_dim", "action_dim", "movement_dim", "num_layers")
        _positive_float(self, "time_scale", "count_scale")


@dataclass(kw_only=True, frozen=True)
class TrafficAgentConfig:
    """The four networks plus the action space shared by controller, shield and world model."""

    max_actions: int = 8  # largest number of green phases of any controlled intersection
    gnn: GNNConfig = field(default_factory=GNNConfig)
    world_model: WorldModelConfig = field(default_factory=WorldModelConfig)
    controller: ControllerConfig = field(default_factory=ControllerConfig)
    shield: ShieldConfig = field(default_factory=ShieldConfig)

    def __post_init__(self) -> None:
        _positive(self, "max_actions")

    @classmethod
    def preset(cls, name: str, *, max_actions: int = 8, debug: bool = False) -> TrafficAgentConfig:
        """``tiny`` (CPU tests, < 1 M params), ``normal`` (the issue's table) or ``large``."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; expected one of {PRESETS}")
        spec = _PRESET_SPECS[name]
        return cls(
            max_actions=max_actions,
            gnn=GNNConfig(**spec["gnn"], debug=debug),
            world_model=WorldModelConfig(**spec["world_model"], debug=debug),
            controller=ControllerConfig(**spec["controller"], debug=debug),
            shield=ShieldConfig(**spec["shield"], debug=debug),
        )

    def to_dict(self) -> dict[str, Any]:
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrafficAgentConfig:
        return config_from_dict(cls, data)


_PRESET_SPECS: dict[str, dict[str, dict[str, Any]]] = {
    "tiny": {
        "gnn": {"hidden_dim": 32, "num_layers": 2, "heads": 2, "ffn_mult": 2},
        "world_model": {
            "summary_dim": 64,
            "lstm_hidden": 64,
            "lstm_layers": 1,
            "track_hidden": 32,
            "movement_dim": 8,
            "signal_dim": 8,
            "decoder_hidden": 64,
        },
        "controller": {
            "hidden_dim": 32,
            "heads": 2,
            "num_layers": 1,
            "ffn_mult": 2,
            "value_hidden": 64,
        },
        "shield": {"hidden_dim": 64, "action_dim": 16, "movement_dim": 8, "num_layers": 2},
    },
    "normal": {
        "gnn": {"hidden_dim": 256, "num_layers": 3, "heads": 4, "ffn_mult": 4},
        "world_model": {
            "summary_dim": 512,
            "lstm_hidden": 512,
            "lstm_layers": 2,
            "track_hidden": 256,
            "movement_dim": 64,
            "signal_dim": 32,
            "decoder_hidden": 512,
        },
        "controller": {
            "hidden_dim": 256,
            "heads": 8,
            "num_layers": 2,
            "ffn_mult": 4,
            "value_hidden": 512,
        },
        "shield": {"hidden_dim": 512, "action_dim": 128, "movement_dim": 32, "num_layers": 2},
    },
    "large": {
        "gnn": {"hidden_dim": 384, "num_layers": 4, "heads": 8, "ffn_mult": 4},
        "world_model": {
            "summary_dim": 768,
            "lstm_hidden": 768,
            "lstm_layers": 2,
            "track_hidden": 384,
            "movement_dim": 96,
            "signal_dim": 48,
            "decoder_hidden": 768,
        },
        "controller": {
            "hidden_dim": 384,
            "heads": 8,
            "num_layers": 3,
            "ffn_mult": 4,
            "value_hidden": 768,
        },
        "shield": {"hidden_dim": 768, "action_dim": 192, "movement_dim": 48, "num_layers": 3},
    },
}

_C = TypeVar("_C")


def config_to_dict(config: Any) -> dict[str, Any]:
    """JSON-able nested dict of a config dataclass."""
    return dataclasses.asdict(config)


def _dataclass_type(annotation: Any) -> type | None:
    """The dataclass inside ``X`` or ``X | None`` annotations (None for plain fields)."""
    if dataclasses.is_dataclass(annotation):
        return annotation  # type: ignore[return-value]
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        inner = [a for a in typing.get_args(annotation) if dataclasses.is_dataclass(a)]
        return inner[0] if inner else None
    return None


def config_from_dict(cls: type[_C], data: Any, *, path: str = "") -> _C:
    """Build ``cls`` from a nested dict; unknown keys and bad values name their dotted path."""
    where = path or cls.__name__
    if not isinstance(data, dict):
        raise ValueError(f"{where}: expected a mapping, got {type(data).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(data) - names)
    if unknown:
        dotted = ", ".join(f"{path + '.' if path else ''}{k}" for k in unknown)
        raise ValueError(f"unknown config key(s): {dotted}; {where} accepts {sorted(names)}")
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        sub = _dataclass_type(hints[key])
        dotted = f"{path}.{key}" if path else key
        if sub is not None and isinstance(value, dict):
            kwargs[key] = config_from_dict(sub, value, path=dotted)
        else:
            kwargs[key] = tuple(value) if isinstance(value, list) else value
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: {exc}") from exc
