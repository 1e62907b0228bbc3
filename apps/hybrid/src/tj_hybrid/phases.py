"""The phase registry: which phases exist, in what order, and what each starts from.

The runner knows no phase by number: it asks this registry. A ``PhaseSpec`` names the phase's
module, imported only when the phase runs (phase 1 pulls torch and tj-models; ``--help`` must
not). ``select_phases("2-3")`` picks by name, in registry order; a phase that is planned but not
built yet is refused with what it will be.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tj_hybrid.config.layering import ConfigError

if TYPE_CHECKING:
    from tj_hybrid.phase_api import Phase

__all__ = ["PLANNED", "REGISTRY", "PhaseSpec", "select_phases"]


@dataclass(frozen=True, kw_only=True)
class PhaseSpec:
    """One phase: its name on the command line, config section and run-dir folder, the phase
    whose exported agent it starts from, tj-models' freezing-table row, and its module."""

    name: str
    title: str
    section: str
    folder: str
    starts_from: str | None
    trains: int  # tj_models.PHASE_COMPONENTS key: what this phase optimises
    module: str  # defines ``PHASE``, an object following ``tj_hybrid.phase_api.Phase``
    ddp: bool = False  # trains with DDP ranks: runs in the rank itself under torchrun

    def load(self) -> Phase:
        return importlib.import_module(self.module).PHASE


REGISTRY: tuple[PhaseSpec, ...] = (
    PhaseSpec(
        name="1",
        title="world-model pretraining",
        section="phase1",
        folder="phase1",
        starts_from=None,
        trains=1,
        module="tj_hybrid.phase1.phase",
        ddp=True,
    ),
    PhaseSpec(
        name="2",
        title="safe RL with Ray RLlib PPO in SUMO",
        section="phase2",
        folder="phase2",
        starts_from="1",
        trains=2,
        module="tj_hybrid.phase2.phase",
    ),
    PhaseSpec(
        name="3",
        title="constrained optimisation (PPO-Lagrangian with DDP on streamed rollouts)",
        section="phase3",
        folder="phase3",
        starts_from="2",
        trains=3,
        module="tj_hybrid.phase3.phase",
        ddp=True,
    ),
)

# Phases announced but not built yet: refused with this description (none today).
PLANNED: dict[str, str] = {}


def _names() -> str:
    return ", ".join(s.name for s in REGISTRY)


def select_phases(text: str) -> tuple[PhaseSpec, ...]:
    """``all``, one name (``1``) or a range of names (``2-3``), in registry order."""
    names = [s.name for s in REGISTRY]
    text = text.strip()
    if text == "all":
        return REGISTRY
    first, sep, last = text.partition("-")
    wanted = [first, last] if sep else [first]
    for name in wanted:
        if name in PLANNED and name not in names:
            raise ConfigError(
                f"--phase {text}: phase {name} ({PLANNED[name]}) is not built yet; "
                f"available: {_names()} or all"
            )
        if name not in names:
            raise ConfigError(f"--phase {text}: no phase {name!r}; available: {_names()} or all")
    i, j = names.index(wanted[0]), names.index(wanted[-1])
    if j < i:
        raise ConfigError(f"--phase {text}: phase {wanted[-1]} comes before phase {wanted[0]}")
    return REGISTRY[i : j + 1]
