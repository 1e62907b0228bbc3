"""WorldModel: a window of vehicle graphs -> the next traffic state, rolled out progressively.

Input contract (the trainer passes tj-data windows unchanged): ``window`` is a sequence of step
batches; graph ``b`` of every step is the same (episode, intersection) stream. The model reads the
first ``input_steps = T`` steps in full and, for a horizon ``k > 1``, only the signal state
(``phase``, ``time_in_phase``) of steps ``T .. T+k-2`` (the actions it is conditioned on).

Per step: the shared ``RiskGNN`` embeds the vehicles; a step summary (mean/max pools, per-movement
pools and counts, signal state) feeds a graph-level LSTM; each vehicle of the last input step is
followed back through the window by ``vehicle_id`` and its embeddings feed a per-vehicle track
LSTM. The decoders predict, for every vehicle of the last input step, the normalised state change,
the next-step risk logit and the presence logit, and per (graph, movement) the vehicle count and
queue. For horizon ``k > 1`` the prediction is fed back (``tj_models.feedback``) and both LSTMs
advance one step per horizon. LSTM math always runs in fp32, also inside autocast regions.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tj_models.config import WorldModelConfig
from tj_models.feedback import apply_delta, next_graph
from tj_models.geometry import match_nodes, velocity
from tj_models.gnn import RiskGNN
from tj_models.graph import GraphInput, InvalidGraphError, check_finite
from tj_models.pooling import graph_pool, movement_aggregates, movement_pool

__all__ = ["StepPrediction", "WorldModel", "WorldModelOutput", "fp32_lstm"]


@dataclass(frozen=True, slots=True)
class StepPrediction:
    """Prediction for one horizon step, for the nodes of the last input step."""

    state: Tensor  # [N, F] predicted raw features (x + delta, made physical)
    delta: Tensor  # [N, F] predicted change (prior + residual) / feature std, before the fix-ups
    risk_logit: Tensor  # [N] risk label of the vehicle at this step
    presence_logit: Tensor  # [N] vehicle still present at this step
    aggregates: Tensor  # [B, M, 2] predicted (vehicle count, queued count) per movement
    active: Tensor  # [N] bool: vehicle was part of this step's input graph


@dataclass(frozen=True, slots=True)
class WorldModelOutput:
    """Predictions for horizons ``1..horizon`` plus what the loss needs from the inputs."""

    steps: tuple[StepPrediction, ...]
    gnn_risk_logits: tuple[Tensor, ...]  # RiskGNN risk logits of every input step
    inputs: tuple[GraphInput, ...]  # the validated input steps
    input_steps: int
    horizon: int


def fp32_lstm(
    lstm: nn.LSTM, inputs: Tensor, state: tuple[Tensor, Tensor] | None = None
) -> tuple[Tensor, tuple[Tensor, Tensor]]:
    """Run ``lstm`` in fp32 with autocast disabled (recurrences drift in half precision)."""
    if inputs.shape[0] == 0:  # no sequence at all (e.g. every graph empty): cuDNN rejects batch 0
        n = inputs.shape[0]
        out = inputs.new_zeros(n, inputs.shape[1], lstm.hidden_size, dtype=torch.float32)
        zeros = inputs.new_zeros(lstm.num_layers, n, lstm.hidden_size, dtype=torch.float32)
        return out, (zeros, zeros)
    with torch.autocast(device_type=inputs.device.type, enabled=False):
        if state is not None:
            state = (state[0].float(), state[1].float())
        return lstm(inputs.float(), state)


def _mlp(sizes: Sequence[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.GELU())
    return nn.Sequential(*layers)


class WorldModel(nn.Module):
    """GNN encoder + graph/track LSTMs + decoders; ``forward(window, input_steps=T, horizon=k)``."""

    def __init__(self, config: WorldModelConfig, *, encoder: RiskGNN, max_actions: int) -> None:
        super().__init__()
        self.config = config
        self.max_actions = max_actions
        self.encoder = encoder
        g = encoder.config
        d, m, dm, s = g.hidden_dim, g.num_movements, config.movement_dim, config.summary_dim
        self.num_features = g.node_features
        self.movement_proj = nn.Linear(d, dm)
        signal_in = 0
        if config.use_signal_state:
            self.phase_embedding = nn.Embedding(max_actions + 1, config.signal_dim)  # row 0: none
            signal_in = config.signal_dim + 2
        summary_in = 2 * d + m * dm + 2 * m + 1 + signal_in
        self.summary = nn.Sequential(_mlp([summary_in, s, s]), nn.LayerNorm(s))
        self.graph_lstm = nn.LSTM(s, config.lstm_hidden, config.lstm_layers, batch_first=True)
        self.track_lstm = nn.LSTM(d + 1, config.track_hidden, 1, batch_first=True)
        h, dec = config.lstm_hidden, config.decoder_hidden
        f = g.node_features
        self.node_decoder = _mlp([d + f + config.track_hidden + h, dec, dec, f + 2])
        if (
            config.physics_prior
        ):  # constant-velocity prior: step length (s) learned from decision_interval
            self.log_step = nn.Parameter(torch.tensor(math.log(config.decision_interval)))
        with torch.no_grad():  # most vehicles are still there one step later: start near p=0.9
            self.node_decoder[-1].bias[g.node_features + 1] = 2.0
        self.movement_embedding = nn.Embedding(m, dm)
        self.movement_decoder = _mlp([2 * dm + h, dec // 2, 2])

    # ------------------------------------------------------------------ inputs
    def _read(self, step: object) -> GraphInput:
        return self.encoder.read(
            step,
            need_ids=True,
            need_signal=self.config.use_signal_state,
            max_actions=self.max_actions,
        )

    def _future_signal(self, step: object, num_graphs: int, index: int) -> tuple[Tensor, Tensor]:
        phase, tip = getattr(step, "phase", None), getattr(step, "time_in_phase", None)
        for name, t in (("phase", phase), ("time_in_phase", tip)):
            if not isinstance(t, Tensor) or t.shape != (num_graphs,):
                got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
                raise InvalidGraphError(
                    f"window step {index}: `{name}` must be a tensor of shape [B={num_graphs}] "
                    f"(the rollout is conditioned on the recorded signal state), got {got}"
                )
        phase = phase.long()  # type: ignore[union-attr]
        if num_graphs and not bool(((phase >= -1) & (phase < self.max_actions)).all()):
            raise InvalidGraphError(
                f"window step {index}: `phase` must be in [-1, max_actions={self.max_actions})"
            )
        return phase, tip.float()  # type: ignore[union-attr]

    # ------------------------------------------------------------------ pieces
    def _summary(self, g: GraphInput, h: Tensor, active: Tensor | None) -> tuple[Tensor, Tensor]:
        c, gc = self.config, self.encoder.config
        b, m = g.num_graphs, gc.num_movements
        assert g.movement is not None
        pooled = graph_pool(h, g.batch, b, active)
        mov = movement_pool(self.movement_proj(h), g.movement, g.batch, b, m, active)
        speed = g.x[:, gc.layout.speed]
        agg = movement_aggregates(speed, g.movement, g.batch, b, m, c.queue_speed, active)
        if active is None:
            count = g.counts().float()
        else:
            count = torch.zeros(b, device=h.device).index_add_(0, g.batch, active.float())
        parts = [
            pooled,
            mov.flatten(1),
            agg.flatten(1) / c.count_scale,
            (count / c.count_scale)[:, None],
        ]
        if c.use_signal_state:
            assert g.phase is not None and g.time_in_phase is not None
            tip = g.time_in_phase.clamp(min=0.0)
            parts += [
                self.phase_embedding(g.phase + 1),
                (tip / c.time_scale)[:, None],
                torch.log1p(tip)[:, None] / math.log1p(c.time_scale),
            ]
        return self.summary(torch.cat(parts, dim=-1)), mov

    def _track_inputs(self, graphs: Sequence[GraphInput], nodes: Sequence[Tensor]) -> Tensor:
        """``[N, T, D + 1]``: each last-step vehicle's embedding at every step (0 when absent)."""
        last = graphs[-1]
        assert last.vehicle_id is not None
        n, d = last.num_nodes, nodes[-1].shape[-1]
        maxima = [g.vehicle_id.max() for g in graphs if g.vehicle_id is not None and g.num_nodes]
        key_base = int(torch.stack(maxima).max()) + 1 if maxima else 1
        # matching the last step against itself rejects duplicate ids before they mislead the match
        match_nodes(last.batch, last.vehicle_id, last.batch, last.vehicle_id, key_base=key_base)
        seq = []
        for t, (g, h) in enumerate(zip(graphs, nodes, strict=True)):
            if t == len(graphs) - 1:
                idx = torch.arange(n, device=h.device)
            else:
                assert g.vehicle_id is not None
                idx = match_nodes(
                    last.batch, last.vehicle_id, g.batch, g.vehicle_id, key_base=key_base
                )
            present = idx >= 0
            if g.num_nodes:
                emb = h[idx.clamp(min=0)] * present[:, None].to(h.dtype)
            else:
                emb = h.new_zeros(n, d)
            seq.append(torch.cat([emb.float(), present.float()[:, None]], dim=-1))
        return torch.stack(seq, dim=1)

    def _decode(
        self, g: GraphInput, h: Tensor, mov: Tensor, track: Tensor, ctx: Tensor, active: Tensor
    ) -> StepPrediction:
        c, gc = self.config, self.encoder.config
        f, b, m = self.num_features, g.num_graphs, gc.num_movements
        scaler = self.encoder.node_scaler
        out = self.node_decoder(
            torch.cat([h.float(), scaler(g.x), track, ctx[g.batch]], dim=-1)
        ).float()
        change, risk, presence = out[:, :f] * scaler.std, out[:, f], out[:, f + 1]
        if c.physics_prior:
            change = change + self._constant_velocity(g.x)
        state = apply_delta(g.x, change, gc.layout)
        delta = change / scaler.std
        emb = self.movement_embedding.weight[None].expand(b, m, -1)
        mov_in = torch.cat([mov.float(), ctx[:, None].expand(b, m, ctx.shape[-1]), emb], dim=-1)
        agg = F.softplus(self.movement_decoder(mov_in).float()) * c.count_scale
        pred = StepPrediction(
            state=state,
            delta=delta,
            risk_logit=risk,
            presence_logit=presence,
            aggregates=agg,
            active=active,
        )
        if c.debug:
            for name in ("state", "delta", "risk_logit", "presence_logit", "aggregates"):
                check_finite(f"WorldModel prediction `{name}`", getattr(pred, name))
        return pred

    def _constant_velocity(self, x: Tensor) -> Tensor:
        """Raw change under constant velocity for one learned step: position and stop-line distance."""
        layout, heading = self.encoder.config.layout, self.config.rollout.heading
        step = self.log_step.exp()
        prior = torch.zeros_like(x)
        vel = velocity(x, layout, heading) * step
        prior = prior.index_copy(
            1, torch.tensor([layout.rel_x, layout.rel_y], device=x.device), vel
        )
        return prior.index_copy(
            1,
            torch.tensor([layout.dist_to_stop_line], device=x.device),
            -x[:, [layout.speed]] * step,
        )

    # ------------------------------------------------------------------ forward
    def forward(
        self, window: Sequence[object], *, input_steps: int | None = None, horizon: int = 1
    ) -> WorldModelOutput:
        """Predict horizons ``1..horizon`` for the vehicles of step ``input_steps - 1``."""
        steps = list(window)
        t = len(steps) if input_steps is None else input_steps
        if isinstance(t, bool) or not isinstance(t, int) or not 1 <= t <= len(steps):
            raise ValueError(f"input_steps must be in [1, {len(steps)}] (window length), got {t!r}")
        if isinstance(horizon, bool) or not isinstance(horizon, int) or horizon < 1:
            raise ValueError(f"horizon must be an int >= 1, got {horizon!r}")
        if self.config.use_signal_state and len(steps) < t + horizon - 1:
            raise ValueError(
                f"horizon {horizon} is conditioned on the signal state of {horizon - 1} future "
                f"step(s): the window needs >= {t + horizon - 1} steps, got {len(steps)}"
            )
        graphs = [self._read(s) for s in steps[:t]]
        b = graphs[0].num_graphs
        for i, g in enumerate(graphs):
            if g.num_graphs != b:
                raise InvalidGraphError(
                    f"window step {i} has {g.num_graphs} graphs, step 0 has {b}; every step of a "
                    "window batch must hold the same streams"
                )
        future = []
        if self.config.use_signal_state:
            future = [self._future_signal(steps[t + j], b, t + j) for j in range(horizon - 1)]
        ckpt = self.config.activation_checkpointing and self.training
        enc = [self.encoder(g, checkpoint_layers=ckpt) for g in graphs]
        summaries, movs = zip(
            *(self._summary(g, e.node, None) for g, e in zip(graphs, enc, strict=True)), strict=True
        )
        ctx_seq, gstate = fp32_lstm(self.graph_lstm, torch.stack(summaries, dim=1))
        track_seq, tstate = fp32_lstm(
            self.track_lstm, self._track_inputs(graphs, [e.node for e in enc])
        )
        last = graphs[-1]
        active = torch.ones(last.num_nodes, dtype=torch.bool, device=last.x.device)
        pred = self._decode(last, enc[-1].node, movs[-1], track_seq[:, -1], ctx_seq[:, -1], active)
        preds = [pred]
        g_prev = last
        threshold = self.config.rollout.presence_threshold
        for j in range(1, horizon):
            active = active & (torch.sigmoid(pred.presence_logit.detach()) >= threshold)
            phase, tip = future[j - 1] if future else (None, None)
            g_new = next_graph(
                g_prev,
                pred.state,
                active,
                phase,
                tip,
                self.encoder.config.layout,
                self.config.rollout,
            )
            e = self.encoder(g_new, checkpoint_layers=ckpt)
            s, mov = self._summary(g_new, e.node, active)
            ctx, gstate = fp32_lstm(self.graph_lstm, s[:, None], gstate)
            flag = active.float()[:, None]
            track, tstate = fp32_lstm(
                self.track_lstm, torch.cat([e.node.float(), flag], -1)[:, None], tstate
            )
            pred = self._decode(g_new, e.node, mov, track[:, -1], ctx[:, -1], active)
            preds.append(pred)
            g_prev = g_new
        return WorldModelOutput(
            steps=tuple(preds),
            gnn_risk_logits=tuple(e.risk_logit for e in enc),
            inputs=tuple(graphs),
            input_steps=t,
            horizon=horizon,
        )
