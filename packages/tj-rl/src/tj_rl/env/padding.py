"""Widths of each light's small observation arrays: its own sizes, or padded to common sizes so
that every light of a scenario has the same observation and action space (one shared policy).

``EnvConfig(pad_to_scenario=True)`` pads ``phase`` / ``action_mask`` to the scenario's largest
green-phase count P and ``lanes`` / ``lane_mask`` to its largest lane count L; ``max_phases`` /
``max_lanes`` set the widths explicitly (e.g. one policy for several scenarios). Padded actions are
masked 0 and padded lane rows are zero with ``lane_mask`` 0. Nothing is cut silently: a light with
more greens than ``max_phases`` is an error (its actions cannot be dropped without changing the
control problem); lane rows beyond ``max_lanes`` are dropped, counted per step in
``info["overflow_lanes"]`` (like ``overflow_nodes``), and vehicles on them get movement -1.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gymnasium import spaces

from tj_rl.env.config import EnvConfig
from tj_rl.env.observation import LANE_FEATURES, light_slices, observation_space
from tj_rl.env.shield import Decision, RuleShield
from tj_rl.env.topology import LightTopology

__all__ = ["ObservationLayout", "decide"]


def decide(shield: RuleShield, t: float, action: int) -> Decision:
    """The shield's decision; an action beyond the light's greens (a padded action, masked 0 in
    ``action_mask``) is never feasible: the shield's safe action applies, counted as a veto."""
    if action < shield.program.n_greens:
        return shield.decide(t, action)
    safe = shield.decide(t, shield.current)
    if not safe.vetoed:
        shield.vetoes += 1
    return Decision(requested=action, applied=safe.applied, vetoed=True, reason="padding")


@dataclass(frozen=True, kw_only=True)
class ObservationLayout:
    """Per-light widths of ``phase`` / ``action_mask`` (P) and ``lanes`` / ``lane_mask`` (L), and
    where each light's rows sit in the step's concatenated arrays."""

    phases: tuple[int, ...]  # P of each light (its greens, or the padded width)
    lanes: tuple[int, ...]  # L of each light (its lanes, or the padded width)
    own_lanes: tuple[int, ...]  # n_in + n_out of each light
    padded: bool
    slices: tuple[tuple[slice, slice, slice], ...]  # (phase, lanes, action_mask) per light
    lane_src: np.ndarray  # intp: rows of the unpadded lane array that are kept ...
    lane_dst: np.ndarray  # intp: ... and where they go in the padded one
    lane_mask: np.ndarray  # int8 [sum(lanes)]: template of the per-step lane_mask
    phase_lanes: tuple[np.ndarray, ...]  # int8 [P, L] per light: its static ``phase_lanes``

    @classmethod
    def of(cls, lights: Sequence[LightTopology], config: EnvConfig) -> ObservationLayout:
        """Own widths, or (``config.padded``) common widths; raises ``ValueError`` naming the
        light when one has more green phases than ``max_phases``."""
        greens = [lt.program.n_greens for lt in lights]
        own = [lt.n_in + lt.n_out for lt in lights]
        if config.padded:
            p = config.max_phases or max(greens, default=1)
            n_lanes = config.max_lanes or max(own, default=1)
            for lt, g in zip(lights, greens, strict=True):
                if g > p:
                    raise ValueError(
                        f"EnvConfig.max_phases={p}: traffic light {lt.tls_id!r} has {g} green "
                        "phases; its actions cannot be cut (raise max_phases or leave it None "
                        "for the scenario's maximum)"
                    )
            phases, lanes = [p] * len(lights), [n_lanes] * len(lights)
        else:
            phases, lanes = greens, own
        starts = np.cumsum([0, *lanes[:-1]]).astype(np.intp)
        own_starts = np.cumsum([0, *own[:-1]]).astype(np.intp)
        kept = [min(o, w) for o, w in zip(own, lanes, strict=True)]
        lane_src = np.concatenate(
            [s + np.arange(k, dtype=np.intp) for s, k in zip(own_starts, kept, strict=True)]
            or [np.zeros(0, np.intp)]
        )
        lane_dst = np.concatenate(
            [s + np.arange(k, dtype=np.intp) for s, k in zip(starts, kept, strict=True)]
            or [np.zeros(0, np.intp)]
        )
        lane_mask = np.zeros(sum(lanes), np.int8)
        lane_mask[lane_dst] = 1
        phase_lanes = []
        for lt, p_w, l_w in zip(lights, phases, lanes, strict=True):
            own_pl = lt.phase_lanes()[:, :l_w]  # rows beyond the width are dropped, as in lanes
            pl = np.zeros((p_w, l_w), np.int8)
            pl[: own_pl.shape[0], : own_pl.shape[1]] = own_pl
            phase_lanes.append(pl)
        return cls(
            phases=tuple(phases),
            lanes=tuple(lanes),
            own_lanes=tuple(own),
            padded=config.padded,
            slices=tuple(light_slices(phases, lanes)),
            lane_src=lane_src,
            lane_dst=lane_dst,
            lane_mask=lane_mask,
            phase_lanes=tuple(phase_lanes),
        )

    @property
    def overflow_lanes(self) -> tuple[int, ...]:
        """Lane rows of each light beyond its width (dropped from ``lanes``)."""
        return tuple(max(o - w, 0) for o, w in zip(self.own_lanes, self.lanes, strict=True))

    @property
    def truncates(self) -> bool:
        return any(self.overflow_lanes)

    def space(self, i: int, light: LightTopology, max_nodes: int, max_edges: int) -> spaces.Dict:
        return observation_space(
            light, max_nodes, max_edges, n_phases=self.phases[i], n_lanes=self.lanes[i]
        )

    def lane_rows(self, lane_feats: np.ndarray) -> np.ndarray:
        """The step's ``lanes`` rows [sum(lanes), 5] in this layout (``lane_feats``: every light's
        own rows concatenated; returned as is when nothing is padded or cut)."""
        if not self.padded:
            return lane_feats
        out = np.zeros((self.lane_mask.shape[0], len(LANE_FEATURES)), np.float32)
        out[self.lane_dst] = lane_feats[self.lane_src]
        return out

    def movement(self, movement: np.ndarray) -> np.ndarray:
        """Movement indices [lights, N] for the observation: rows beyond the lane width are -1
        (a new array then: the batch's own stays as the per-light graphs see it)."""
        if self.truncates:
            return np.where(movement >= np.asarray(self.lanes)[:, None], -1, movement)
        return movement
