"""The loader suite's table: the seeds' safe / balanced / aggressive / extreme settings (workers x
prefetch, capped to this machine's cores; duplicates after capping dropped), each run two ways,
plus ``plan_loader``'s plan and ``autotune_loader``'s pick.

"seed style" is what the seeds wrote: ``DataLoader(MmapGraphDataset, shuffle=True)``, nothing
bounds the mapped pages. "tj" is the same workers x prefetch through ``build_loader`` on top of
the plan (chunk sampler, bounded open shards): tj-data's ``hand_plans``, the settings
``autotune_loader`` compares too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from tj_data import SEED_TABLE, LoaderPlan, MmapGraphDataset, build_loader, hand_plans

__all__ = ["Setting", "hand_settings", "planned_setting"]


@dataclass(frozen=True, kw_only=True)
class Setting:
    """One row: ``key`` names its figures (``table/<key>/...``), ``kind`` its style in the plot."""

    key: str
    label: str  # without the kind (the plot's marker shows it)
    kind: str  # "seed_style", "tj", "plan" or "autotune"
    workers: int
    prefetch: int | None
    make: Callable[[], Any]

    @property
    def hand(self) -> bool:
        """A hand setting of the seed table (what autotune is compared with)."""
        return self.kind in ("seed_style", "tj")


def hand_settings(store: Path, planned: LoaderPlan) -> list[Setting]:
    """Seed style and tj rows of tj-data's `hand_plans` (the seed table capped to this process's
    cores, duplicates dropped; its "no workers" plan is autotune's candidate, not a seed-table
    row)."""
    out: list[Setting] = []
    for hand_label, plan in hand_plans(planned).items():
        if not plan.num_workers:
            continue
        name = hand_label.split()[0]  # its seed-table name
        w, wc, pf = SEED_TABLE[name][0], plan.num_workers, plan.prefetch_factor
        label = f"{name} {w}x{pf}" + (f" -> {wc}x{pf}" if wc != w else "")

        def seed_style(wc: int = wc, pf: int | None = pf) -> DataLoader:
            ds = MmapGraphDataset(store)
            return DataLoader(ds, batch_size=planned.batch_size, shuffle=True, num_workers=wc,
                              prefetch_factor=pf, persistent_workers=True,
                              collate_fn=ds.collate_fn)  # fmt: skip

        def tj(plan: LoaderPlan = plan) -> DataLoader:
            return build_loader(MmapGraphDataset(store), plan)

        out.append(Setting(key=f"{name}/seed_style", label=label, kind="seed_style",
                           workers=wc, prefetch=pf, make=seed_style))  # fmt: skip
        out.append(Setting(key=f"{name}/tj", label=label, kind="tj", workers=wc,
                           prefetch=pf, make=tj))  # fmt: skip
    return out


def planned_setting(store: Path, plan: LoaderPlan, kind: str) -> Setting:
    """The row of a plan (``kind`` "plan" or "autotune") built with ``build_loader``."""
    name = "plan_loader" if kind == "plan" else "autotune_loader"
    w = f"{plan.num_workers}x{plan.prefetch_factor}" if plan.num_workers else "no workers"
    return Setting(key=kind, label=f"{name} ({w})",
                   kind=kind, workers=plan.num_workers, prefetch=plan.prefetch_factor,
                   make=lambda: build_loader(MmapGraphDataset(store), plan))  # fmt: skip
