"""`Augmenter`: vectorised, seeded augmentation of `GraphBatch`es, configured by field/column names.

Augmentations (`AugmentConfig`): position jitter (uniform +-metres on position columns; the edge
delta columns follow, with the snapshot convention dx = pos[edge_index[0]] - pos[edge_index[1]]),
speed noise (Gaussian sigma, clipped at `speed_min`), node feature masking (each entry with
probability `node_mask` set to `mask_value`), edge dropout (each edge with probability
`edge_dropout`) and time shift (a window's start moves by up to +-`time_shift` steps inside its
stream; applied by `WindowDataset` when this augmenter is one of its transforms).
Presets follow the seeds' phases: phase1 = all, phase2 = none, phase3 = time shift + speed noise.

Randomness comes from a `SeedContext` (seed, rank, epoch, worker, batch count): the same seed
gives the same augmentations, and workers, ranks and epochs differ. For windows
(`apply_window`), position jitter is drawn once per (window, id_field value), so a vehicle keeps
its offset through the window; the other augmentations are drawn per step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch

from tj_data.batch import GraphBatch
from tj_data.errors import SchemaMismatchError
from tj_data.schema import Schema
from tj_data.seeding import SeedContext

__all__ = ["AUGMENT_PRESETS", "PRESETS", "AugmentConfig", "Augmenter"]

Columns = Mapping[str, Sequence[str] | None]

PRESETS: dict[str, dict[str, Any]] = {
    "phase1": {
        "time_shift": 2,
        "speed_noise": 0.3,
        "position_jitter": 0.5,
        "edge_dropout": 0.1,
        "node_mask": 0.05,
    },
    "phase2": {},
    "phase3": {"time_shift": 2, "speed_noise": 0.3},
}
# the package-level name (tj_data.AUGMENT_PRESETS)
AUGMENT_PRESETS = PRESETS


def _cols(m: Columns) -> dict[str, tuple[str, ...] | None]:
    return {k: (None if v is None else tuple(v)) for k, v in m.items()}


@dataclass(kw_only=True, frozen=True)
class AugmentConfig:
    """Amounts (0 disables) and the fields/columns each augmentation touches."""

    time_shift: int = 0
    speed_noise: float = 0.0
    speed_min: float | None = 0.0
    position_jitter: float = 0.0
    edge_dropout: float = 0.0
    node_mask: float = 0.0
    mask_value: float = 0.0
    speed_columns: Columns = field(default_factory=lambda: {"x": ("speed",)})
    position_columns: Columns = field(default_factory=lambda: {"x": ("rel_x", "rel_y")})
    edge_delta_columns: Columns = field(default_factory=lambda: {"edge_attr": ("dx", "dy")})
    mask_columns: Columns = field(default_factory=lambda: {"x": None})
    id_field: str | None = "vehicle_id"

    def __post_init__(self) -> None:
        if self.time_shift < 0:
            raise ValueError(f"AugmentConfig.time_shift={self.time_shift}: expected >= 0")
        for name in ("speed_noise", "position_jitter"):
            if getattr(self, name) < 0:
                raise ValueError(f"AugmentConfig.{name}={getattr(self, name)}: expected >= 0")
        for name in ("edge_dropout", "node_mask"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"AugmentConfig.{name}={getattr(self, name)}: expected in [0, 1)")
        for name in ("speed_columns", "position_columns", "edge_delta_columns", "mask_columns"):
            object.__setattr__(self, name, _cols(getattr(self, name)))

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> AugmentConfig:
        """The seeds' per-phase choices ("phase1", "phase2", "phase3"), with overrides."""
        if name not in PRESETS:
            raise ValueError(f"augmentation preset {name!r} not in {sorted(PRESETS)}")
        return cls(**{**PRESETS[name], **overrides})

    @property
    def enabled(self) -> bool:
        return any(
            getattr(self, n) > 0
            for n in ("time_shift", "speed_noise", "position_jitter", "edge_dropout", "node_mask")
        )


class Augmenter:
    """Batch transform applying an `AugmentConfig` (see the module docstring).

    Args:
        config: what to apply; schema: the store schema (column names are resolved now, so a
            misnamed column fails here, not in a worker); seed: the augmentation seed.
    """

    def __init__(self, config: AugmentConfig, schema: Schema, *, seed: int = 0) -> None:
        self.config = config
        self.seeds = SeedContext(seed)
        c = config
        self._pos = self._resolve(schema, c.position_columns, "node", c.position_jitter > 0)
        self._delta = self._resolve(schema, c.edge_delta_columns, "edge", c.position_jitter > 0)
        self._speed = self._resolve(schema, c.speed_columns, "node", c.speed_noise > 0)
        self._mask = self._resolve(schema, c.mask_columns, "node", c.node_mask > 0)
        widths = {len(v) for v in (*self._pos.values(), *self._delta.values())}
        if len(widths) > 1:
            raise SchemaMismatchError(
                f"AugmentConfig: position columns {c.position_columns} and edge delta columns "
                f"{c.edge_delta_columns} must have the same number of columns"
            )
        if c.position_jitter > 0 and c.id_field is not None and c.id_field not in schema:
            raise SchemaMismatchError(
                f"AugmentConfig.id_field={c.id_field!r} is not a field of the store (set None to "
                "jitter positions independently per step)"
            )

    @staticmethod
    def _resolve(schema: Schema, cols: Columns, level: str, on: bool) -> dict[str, list[int]]:
        if not on:
            return {}
        out: dict[str, list[int]] = {}
        for name, names in cols.items():
            if name not in schema or schema[name].level != level:
                raise SchemaMismatchError(
                    f"AugmentConfig: {name!r} is not a {level}-level field of the store "
                    f"(fields: {list(schema.names)})"
                )
            spec = schema[name]
            width = int(np.prod(spec.shape, dtype=np.int64)) if spec.shape else 1
            if names is None:
                out[name] = list(range(width))
                continue
            have = spec.columns or tuple(str(i) for i in range(width))
            missing = [n for n in names if n not in have]
            if missing:
                raise SchemaMismatchError(
                    f"AugmentConfig: field {name!r} has no columns {missing} (columns: {list(have)})"
                )
            out[name] = [have.index(n) for n in names]
        return out

    # ----- seeding ----------------------------------------------------------------------
    @property
    def time_shift(self) -> int:
        return self.config.time_shift

    def set_epoch(self, epoch: int) -> None:
        self.seeds.set_epoch(epoch)

    def set_rank(self, rank: int) -> None:
        self.seeds.set_rank(rank)

    def shift_starts(self, pos: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Window start positions moved by a random offset in [-time_shift, time_shift], kept
        inside [lo, hi] (the valid starts of each window's stream)."""
        s = self.config.time_shift
        if s == 0 or len(pos) == 0:
            return pos
        d = self.seeds.rng(stream=1).integers(-s, s + 1, len(pos))
        return np.clip(pos + d, lo, hi)

    # ----- application ------------------------------------------------------------------
    def __call__(self, batch: GraphBatch) -> GraphBatch:
        return self.apply_window([batch])[0]

    def apply_window(
        self, steps: Sequence[GraphBatch], *, rng: np.random.Generator | None = None
    ) -> list[GraphBatch]:
        """Augment the T steps of a batch of windows (graph b of every step = window b).

        ``rng``: draw from this generator instead of the seed context, for callers that key the
        randomness themselves (e.g. by position in the epoch, so a resumed run draws the same).
        """
        if not self.config.enabled or not steps:
            return list(steps)
        rng = self.seeds.rng(stream=0) if rng is None else rng
        jitters = self._window_jitter(steps, rng)
        return [self._one(b, rng, j) for b, j in zip(steps, jitters, strict=True)]

    def _window_jitter(
        self, steps: Sequence[GraphBatch], rng: np.random.Generator
    ) -> list[np.ndarray | None]:
        c = self.config
        if not (c.position_jitter > 0 and self._pos):
            return [None] * len(steps)
        width = len(next(iter(self._pos.values())))
        idf = c.id_field
        if idf is None or idf not in steps[0].fields:
            return [
                rng.uniform(-c.position_jitter, c.position_jitter, (b.num_nodes, width))
                for b in steps
            ]
        ids = torch.cat([getattr(b, idf).reshape(-1).long().cpu() for b in steps])
        graphs = torch.cat([b.batch.cpu() for b in steps])
        lo = int(ids.min()) if ids.numel() else 0
        span = (int(ids.max()) - lo + 1) if ids.numel() else 1
        _, inv = torch.unique(graphs * span + (ids - lo), return_inverse=True)
        table = rng.uniform(
            -c.position_jitter, c.position_jitter, (int(inv.max()) + 1 if inv.numel() else 0, width)
        )
        per = inv.numpy()
        sizes = np.cumsum([0] + [b.num_nodes for b in steps])
        return [table[per[sizes[i] : sizes[i + 1]]] for i in range(len(steps))]

    def _one(
        self, batch: GraphBatch, rng: np.random.Generator, jitter: np.ndarray | None
    ) -> GraphBatch:
        c = self.config
        fields = dict(batch.fields)
        n = batch.num_nodes

        def tensor(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
            return torch.from_numpy(a).to(device=like.device, dtype=like.dtype)

        def target(name: str) -> torch.Tensor:
            t = fields[name]
            if not t.is_floating_point():
                raise SchemaMismatchError(
                    f"Augmenter: field {name!r} is {t.dtype}: dequantise it first"
                )
            return t.view(len(t), -1)

        if jitter is not None:
            for name, idx in self._pos.items():
                if name in fields:
                    x = target(name)
                    x[:, idx] += tensor(jitter, x)
            if self._delta and batch.num_edges:
                ei = batch.edge_index.cpu().numpy()
                dj = jitter[ei[0]] - jitter[ei[1]]
                for name, idx in self._delta.items():
                    if name in fields:
                        e = target(name)
                        e[:, idx] += tensor(dj, e)
        if c.speed_noise > 0:
            for name, idx in self._speed.items():
                if name in fields:
                    x = target(name)
                    x[:, idx] += tensor(rng.normal(0.0, c.speed_noise, (n, len(idx))), x)
                    if c.speed_min is not None:
                        x[:, idx] = x[:, idx].clamp_(min=c.speed_min)
        if c.node_mask > 0:
            for name, idx in self._mask.items():
                if name in fields:
                    x = target(name)
                    m = torch.from_numpy(rng.random((n, len(idx))) < c.node_mask).to(x.device)
                    sub = x[:, idx]
                    x[:, idx] = sub.masked_fill_(m, c.mask_value)
        out = replace(batch, fields=fields, meta={**batch.meta, "augmented": True})
        if c.edge_dropout > 0 and batch.num_edges:
            out = _drop_edges(out, rng.random(batch.num_edges) >= c.edge_dropout)
        return out


def _drop_edges(batch: GraphBatch, keep: np.ndarray) -> GraphBatch:
    """The batch with only the edges where `keep`; edge fields and edge_ptr follow."""
    k = torch.from_numpy(keep).to(batch.edge_index.device)
    counts = torch.diff(batch.edge_ptr)
    graph_of_edge = torch.repeat_interleave(torch.arange(len(counts), device=k.device), counts)
    new_counts = torch.bincount(graph_of_edge[k], minlength=len(counts))
    edge_ptr = torch.zeros_like(batch.edge_ptr)
    torch.cumsum(new_counts, 0, out=edge_ptr[1:])
    fields = {n: (t[k] if batch.levels.get(n) == "edge" else t) for n, t in batch.fields.items()}
    return replace(batch, edge_index=batch.edge_index[:, k], edge_ptr=edge_ptr, fields=fields)
