"""World-model targets from a window and the loss, returned as named components.

Targets for horizon ``j`` (1-based) of a window with ``T`` input steps, for each vehicle of the
last input step ``T-1``:

* state and presence: ``j = 1`` uses that step's own ``y_next`` / ``y_mask`` (the recorded
  next-step labels); ``j > 1`` matches the vehicle by ``vehicle_id`` in step ``T-1+j`` and takes
  its ``x``; presence = the vehicle is there;
* risk: the vehicle's ``risk`` label in step ``T-1+j`` (masked where it is absent);
* aggregates: (vehicle count, queued count) per (graph, movement) of step ``T-1+j``, all of its
  vehicles, arrivals included.

So a horizon-``k`` loss needs a window of at least ``T + k`` steps. The RiskGNN's own risk head is
trained on every input step's ``risk`` label (component ``gnn_risk``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from tj_models.geometry import match_nodes
from tj_models.graph import InvalidGraphError
from tj_models.pooling import movement_aggregates
from tj_models.world_model import WorldModel, WorldModelOutput

__all__ = [
    "LossOutput",
    "StepTargets",
    "WorldModelLossConfig",
    "world_model_loss",
    "world_model_targets",
]


@dataclass(kw_only=True, frozen=True)
class WorldModelLossConfig:
    """Weights of the named components and of the horizons (``horizon_decay ** (j - 1)``)."""

    state_weight: float = 1.0
    presence_weight: float = 0.5
    risk_weight: float = 0.5
    aggregate_weight: float = 0.5
    gnn_risk_weight: float = 0.5
    risk_pos_weight: float = 1.0  # BCE pos_weight: risk labels are rare
    horizon_decay: float = 1.0
    huber_beta: float = 1.0  # state and aggregate errors, in normalised units

    def __post_init__(self) -> None:
        for name in (
            "state_weight",
            "presence_weight",
            "risk_weight",
            "aggregate_weight",
            "gnn_risk_weight",
        ):
            v = getattr(self, name)
            if not isinstance(v, int | float) or v < 0:
                raise ValueError(f"WorldModelLossConfig.{name} must be >= 0, got {v!r}")
        for name in ("risk_pos_weight", "horizon_decay", "huber_beta"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or not v > 0:
                raise ValueError(f"WorldModelLossConfig.{name} must be > 0, got {v!r}")


@dataclass(frozen=True, slots=True)
class StepTargets:
    state: Tensor  # [N, F] raw target features (rows with state_mask False are zeros)
    state_mask: Tensor  # [N] bool: vehicle present at this step
    risk: Tensor  # [N] float risk label (valid where state_mask)
    aggregates: Tensor  # [B, M, 2] (count, queued) per movement


@dataclass(frozen=True, slots=True)
class LossOutput:
    """``total`` (to backpropagate), unweighted ``components`` and detached ``metrics``."""

    total: Tensor
    components: dict[str, Tensor]
    metrics: dict[str, float]


def _tensor(step: object, name: str, index: int) -> Tensor:
    value = getattr(step, name, None)
    if not isinstance(value, Tensor):
        raise InvalidGraphError(f"window step {index} has no `{name}` tensor (needed as a target)")
    return value


def world_model_targets(
    model: WorldModel, window: Sequence[object], output: WorldModelOutput
) -> list[StepTargets]:
    """Targets for every horizon of ``output`` (see the module docstring for the contract)."""
    t, k = output.input_steps, output.horizon
    if len(window) < t + k:
        raise ValueError(
            f"a horizon-{k} loss needs the window's {t} input steps plus {k} target step(s): "
            f">= {t + k} steps, got {len(window)}"
        )
    gc = model.encoder.config
    last = output.inputs[-1]
    n, f = last.num_nodes, gc.node_features
    y_next = _tensor(window[t - 1], "y_next", t - 1)
    y_mask = _tensor(window[t - 1], "y_mask", t - 1)
    if y_next.shape != (n, f) or y_mask.shape != (n,):
        raise InvalidGraphError(
            f"window step {t - 1}: `y_next` must be [N={n}, {f}] and `y_mask` [N={n}], got "
            f"{tuple(y_next.shape)} / {tuple(y_mask.shape)}"
        )
    targets = []
    for j in range(1, k + 1):
        step = model.encoder.read(window[t - 1 + j], need_ids=True)
        if step.num_graphs != last.num_graphs:
            raise InvalidGraphError(
                f"window step {t - 1 + j} has {step.num_graphs} graphs, the inputs {last.num_graphs}"
            )
        assert (
            last.vehicle_id is not None
            and step.vehicle_id is not None
            and step.movement is not None
        )
        ids = torch.cat([last.vehicle_id, step.vehicle_id])
        key_base = int(ids.max()) + 1 if ids.numel() else 1
        idx = match_nodes(
            last.batch, last.vehicle_id, step.batch, step.vehicle_id, key_base=key_base
        )
        found = idx >= 0
        safe = idx.clamp(min=0)
        risk_all = _tensor(window[t - 1 + j], "risk", t - 1 + j).float()
        if step.num_nodes:
            risk = torch.where(found, risk_all[safe], torch.zeros_like(risk_all[safe]))
            matched_x = torch.where(found[:, None], step.x[safe], torch.zeros_like(step.x[safe]))
        else:
            risk = last.x.new_zeros(n)
            matched_x = last.x.new_zeros(n, f)
        if j == 1:
            state, mask = y_next.float(), y_mask.bool()
        else:
            state, mask = matched_x, found
        agg = movement_aggregates(
            step.x[:, gc.layout.speed],
            step.movement,
            step.batch,
            step.num_graphs,
            gc.num_movements,
            model.config.queue_speed,
        )
        targets.append(StepTargets(state=state, state_mask=mask, risk=risk, aggregates=agg))
    return targets


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    weight = mask.to(values.dtype)
    return (values * weight).sum() / weight.sum().clamp(min=1.0)


def world_model_loss(
    model: WorldModel,
    window: Sequence[object],
    output: WorldModelOutput,
    config: WorldModelLossConfig | None = None,
) -> LossOutput:
    """Weighted sum of ``state``, ``presence``, ``risk``, ``aggregate`` and ``gnn_risk``."""
    cfg = config or WorldModelLossConfig()
    targets = world_model_targets(model, window, output)
    scale = model.encoder.node_scaler.std
    count_scale = model.config.count_scale
    pos = torch.tensor(cfg.risk_pos_weight, device=scale.device)
    weights = torch.tensor(
        [cfg.horizon_decay**j for j in range(output.horizon)], device=scale.device
    )
    weights = weights / weights.sum()
    parts: dict[str, list[Tensor]] = {"state": [], "presence": [], "risk": [], "aggregate": []}
    metrics: dict[str, float] = {}
    layout = model.encoder.config.layout
    for j, (pred, tgt) in enumerate(zip(output.steps, targets, strict=True), start=1):
        valid = tgt.state_mask & pred.active
        err = F.smooth_l1_loss(
            pred.state / scale, tgt.state / scale, beta=cfg.huber_beta, reduction="none"
        )
        parts["state"].append(_masked_mean(err.sum(-1), valid))  # per vehicle: sum over features
        presence = F.binary_cross_entropy_with_logits(
            pred.presence_logit, tgt.state_mask.float(), reduction="none"
        )
        parts["presence"].append(_masked_mean(presence, pred.active))
        risk = F.binary_cross_entropy_with_logits(
            pred.risk_logit, tgt.risk, pos_weight=pos, reduction="none"
        )
        parts["risk"].append(_masked_mean(risk, valid))
        agg = F.smooth_l1_loss(
            pred.aggregates / count_scale, tgt.aggregates / count_scale, beta=cfg.huber_beta
        )
        parts["aggregate"].append(agg)
        with torch.no_grad():
            xy = [layout.rel_x, layout.rel_y]
            d2 = (pred.state[:, xy] - tgt.state[:, xy]).pow(2).sum(-1)
            n_valid = int(valid.sum())
            if n_valid:  # no metric rather than a misleading 0 when nothing can be scored
                metrics[f"position_rmse_m/h{j}"] = float((d2 * valid).sum() / n_valid) ** 0.5
    components = {name: (torch.stack(v) * weights).sum() for name, v in parts.items()}
    gnn = []
    for i, (logit, graph) in enumerate(zip(output.gnn_risk_logits, output.inputs, strict=True)):
        label = _tensor(window[i], "risk", i).float()
        if label.shape != (graph.num_nodes,):
            raise InvalidGraphError(
                f"window step {i}: `risk` must be [N={graph.num_nodes}], got {tuple(label.shape)}"
            )
        gnn.append(
            F.binary_cross_entropy_with_logits(logit, label, pos_weight=pos, reduction="sum")
        )
    n_nodes = sum(g.num_nodes for g in output.inputs)
    components["gnn_risk"] = torch.stack(gnn).sum() / max(n_nodes, 1)
    total = (
        cfg.state_weight * components["state"]
        + cfg.presence_weight * components["presence"]
        + cfg.risk_weight * components["risk"]
        + cfg.aggregate_weight * components["aggregate"]
        + cfg.gnn_risk_weight * components["gnn_risk"]
    )
    return LossOutput(total=total, components=components, metrics=metrics)
