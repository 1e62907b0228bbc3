"""The one actor: padded observations + masks -> action, log-prob, value, cost value and the mask
it used, for every caller that acts with a learned graph policy.

RLlib's ``TrafficRLModule`` (its logits), ``AgentPolicy`` (evaluation), phase 3's
``RolloutCollector`` (sampling) and phase 3's learner (``heads`` on the frozen encoder's cached
output) all go through ``Actor``, so the same weights and observations give the same logits and
the same actions everywhere (``tests/test_one_actor.py`` runs every caller on one batch).

How an action is chosen, in order:
1. ``graph``: the padded batch is unpadded into one graph batch (``unpad.py``);
2. ``encode``: tj-models' ``RiskGNN`` (under ``no_grad`` when frozen);
3. ``heads``: the ``Controller`` scores every padded phase (each green's token reads what it serves
   when the controller has phase inputs); masked actions get ``MASK_FILL`` (probability exactly 0);
   with a learned shield (``shield_threshold``), greens whose predicted safety cost exceeds the
   threshold are vetoed too (never all of them: ``tj_models.ShieldedPolicy``);
4. ``choose``: the masked argmax, or a draw from the masked softmax with the caller's generator.

A plain object, not an ``nn.Module``: it holds its owner's networks without registering them a
second time, so the owner's state dict and checkpoints keep their names. Imports torch and
tj-models, never Ray.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from tj_models import (
    MASK_FILL,
    Controller,
    ControllerOutput,
    GNNOutput,
    GraphInput,
    RiskGNN,
    SafetyShield,
    ShieldedPolicy,
    TrafficAgent,
)
from tj_rl.control.unpad import unpad_observations

__all__ = ["MASK_FILL", "PHASE_INPUTS", "Actor", "ActorOutput", "choose", "fields_of"]

# the fields the controller's phase competition reads besides the mask (``served.py``)
PHASE_INPUTS = ("lanes", "lane_mask", "phase_lanes")
# GraphInput fields that tj-models' read_graph checks when validation is on
_GRAPH_FIELDS = (
    *("x", "edge_index", "edge_attr", "batch", "ptr"),
    *("movement", "phase", "time_in_phase", "phase_count"),
)


@dataclass(frozen=True, slots=True)
class ActorOutput:
    """One decision for B lights: ``logits`` [B, A] masked by ``mask`` [B, A] (bool: the env's
    rule mask, minus the learned shield's vetoes when it acts), ``value`` and ``cost_value`` [B];
    ``action`` and ``logp`` [B] once chosen (``Actor.act``), else None."""

    logits: Tensor
    mask: Tensor
    value: Tensor
    cost_value: Tensor
    action: Tensor | None = None
    logp: Tensor | None = None


def choose(
    logits: Tensor, *, sample: bool, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """``(action [B] int64, log-prob [B])`` from masked logits: the argmax, or a draw from the
    softmax (``generator`` makes it reproducible). Masked logits hold ``MASK_FILL``, so a masked
    action has probability exactly 0 and is never drawn."""
    logp_all = torch.log_softmax(logits.float(), -1)
    if sample:
        action = torch.multinomial(logp_all.exp(), 1, generator=generator).squeeze(-1)
    else:
        action = logits.argmax(-1)
    return action, logp_all.gather(1, action[:, None]).squeeze(1)


def _phase_inputs(controller: Controller, fields: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The controller's phase-competition keywords: each green's token reads the lanes it serves
    (``phase_lanes``) and the lane rows (``lane_mask`` honoured); none without phase inputs. A
    controller made for fewer lane columns (an agent exported before the arrival columns: 3) reads
    the first ones, which have kept their meaning."""
    k = controller.config.movement_stats
    if not k:
        return {}
    lanes = fields["lanes"][..., :k].float() * fields["lane_mask"].unsqueeze(-1).float()
    return {"phase_movements": fields["phase_lanes"].float(), "movement_stats": lanes}


class Actor:
    """GNN encoder + controller (+ the learned shield's veto) as the one way to act.

    ``gnn`` may be None for callers that only run ``heads`` on an encoder output they computed
    (phase 3's learner reuses the frozen encoder's cached output). ``shield`` with a finite
    ``shield_threshold``: act behind its veto; ``shield_threshold`` None: the env's mask only.
    ``frozen_gnn``: run the encoder under ``no_grad``. ``validate``: tj-models' full input checks
    on every unpadded batch (one device sync).
    """

    def __init__(
        self,
        gnn: RiskGNN | None,
        controller: Controller,
        *,
        shield: SafetyShield | None = None,
        shield_threshold: float | None = None,
        frozen_gnn: bool = True,
        validate: bool = False,
    ) -> None:
        if shield_threshold is not None:
            if isinstance(shield_threshold, bool) or not math.isfinite(shield_threshold):
                raise ValueError(
                    f"Actor: shield_threshold={shield_threshold!r}, expected a finite number or None"
                )
            if shield is None:
                raise ValueError("Actor: shield_threshold needs the learned shield (shield=None)")
        self.gnn, self.controller = gnn, controller
        self.frozen_gnn, self.validate = bool(frozen_gnn), bool(validate)
        self.shielded = (
            ShieldedPolicy(controller, shield, threshold=float(shield_threshold))
            if shield is not None and shield_threshold is not None
            else None
        )

    @classmethod
    def from_agent(cls, agent: TrafficAgent, *, shield_threshold: float | None = None) -> Actor:
        """The actor of a tj-models agent (its GNN frozen, as phases 2 and 3 train it)."""
        return cls(
            agent.gnn, agent.controller, shield=agent.shield, shield_threshold=shield_threshold
        )

    # ------------------------------------------------------------------ steps 1-3
    def graph(self, obs: Mapping[str, Tensor]) -> GraphInput:
        """Step 1: the padded batch's graph (through tj-models' input checks when ``validate``)."""
        graph = unpad_observations(obs)
        if self.validate:
            if self.gnn is None:
                raise ValueError("Actor.graph(validate=True) needs the GNN")
            graph = self.gnn.read(SimpleNamespace(**{k: getattr(graph, k) for k in _GRAPH_FIELDS}))
        return graph

    def encode(self, graph: GraphInput) -> GNNOutput:
        """Step 2: the encoder's output (no gradient through a frozen encoder)."""
        if self.gnn is None:
            raise ValueError("Actor.encode needs the GNN (this actor was built for heads only)")
        with torch.no_grad() if self.frozen_gnn else contextlib.nullcontext():
            return self.gnn(graph)

    def heads(self, encoded: GNNOutput, fields: Mapping[str, Tensor]) -> ActorOutput:
        """Step 3: logits, values and the mask used, from an encoder output and the batch's
        ``action_mask`` (+ ``PHASE_INPUTS`` when the controller reads them); ``fields`` is a
        padded observation batch or a collated rollout batch's fields. Logits and mask have the
        width of ``action_mask`` (the env's actions; a controller may score more)."""
        mask = fields["action_mask"].bool()
        kwargs = _phase_inputs(self.controller, fields)
        if self.shielded is None:
            out: ControllerOutput = self.controller(encoded, mask, **kwargs)
            logits, final = out.logits, out.action_mask
        else:
            shielded = self.shielded(encoded, mask, **kwargs)
            out, logits, final = shielded.controller, shielded.logits, shielded.mask
        width = mask.shape[-1]
        return ActorOutput(
            logits=logits[:, :width], mask=final[:, :width], value=out.value,
            cost_value=out.cost_value,
        )  # fmt: skip

    def forward(self, obs: Mapping[str, Tensor]) -> ActorOutput:
        """Steps 1-3 on a batch of padded observations (tensors with a leading batch axis)."""
        return self.heads(self.encode(self.graph(obs)), obs)

    __call__ = forward

    # ------------------------------------------------------------------ step 4
    def act(
        self,
        obs: Mapping[str, Tensor],
        *,
        sample: bool = False,
        generator: torch.Generator | None = None,
    ) -> ActorOutput:
        """Steps 1-4 without gradients: the decision with ``action`` and ``logp`` filled in."""
        with torch.no_grad():
            out = self.forward(obs)
        return self.chosen(out, sample=sample, generator=generator)

    @staticmethod
    def chosen(
        out: ActorOutput, *, sample: bool, generator: torch.Generator | None = None
    ) -> ActorOutput:
        """``out`` with an action chosen from its logits (``choose``)."""
        action, logp = choose(out.logits, sample=sample, generator=generator)
        return ActorOutput(
            logits=out.logits, mask=out.mask, value=out.value, cost_value=out.cost_value,
            action=action, logp=logp,
        )  # fmt: skip


def fields_of(batch: Any) -> dict[str, Tensor]:
    """The fields ``Actor.heads`` reads, from an object with attributes (a collated
    ``tj_data.GraphBatch`` of rollout samples); absent phase inputs are left out."""
    names = ("action_mask", *PHASE_INPUTS)
    return {k: getattr(batch, k) for k in names if getattr(batch, k, None) is not None}
