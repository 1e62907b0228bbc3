"""The trainer's configuration tree: what ``configs/hybrid.yaml`` may contain.

Shared sections (``run``, ``scenario``, ``model``, ``dist``, ``amp``, ``monitor``, ``memory``)
live in ``sections.py``; each phase has one section of its own (``phase1``, ``phase2``,
``phase3``). ``MOVED`` names
keys of earlier versions, so an old config fails with where the key lives now.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tj_hybrid.config.phase1 import Phase1Section
from tj_hybrid.config.phase2 import Phase2Section
from tj_hybrid.config.phase3 import Phase3Section
from tj_hybrid.config.sections import (
    AmpSection,
    DistSection,
    MemorySection,
    ModelSection,
    MonitorSection,
    RunSection,
    ScenarioSection,
)

__all__ = ["MOVED", "HybridConfig"]

# old dotted key -> where it lives now (tj-hybrid 0.1 -> 0.2)
MOVED: dict[str, str] = {
    "record.scenario": "scenario.path",
    "record.env": "scenario.env",
    "record": "phase1.record",
    "data": "phase1.data",
    "loader.ram_budget": "memory.budget",
    "loader": "phase1.loader",
}


@dataclass(kw_only=True)
class HybridConfig:
    """The whole trainer configuration (``configs/hybrid.yaml`` <- profile <- ``--set``)."""

    profile: str = "custom"  # set by the profile overlay; informational
    run: RunSection = field(default_factory=RunSection)
    scenario: ScenarioSection = field(default_factory=ScenarioSection)
    model: ModelSection = field(default_factory=ModelSection)
    dist: DistSection = field(default_factory=DistSection)
    amp: AmpSection = field(default_factory=AmpSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)
    memory: MemorySection = field(default_factory=MemorySection)
    phase1: Phase1Section = field(default_factory=Phase1Section)
    phase2: Phase2Section = field(default_factory=Phase2Section)
    phase3: Phase3Section = field(default_factory=Phase3Section)
